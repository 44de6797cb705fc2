"""Other local users, for tests of what hybridkb trusts on a shared machine.

Tests run as root in CI, so "another user" is a forked child that drops to uid 65534
(nobody) before it touches anything, and "this user, without root's powers" is a process
that kept uid 0 but dropped every capability (so the kernel's checks apply to it as to
any user: it cannot read nobody's 0600 file, nor rename over nobody's file in a sticky
folder it does not own). The helpers run only as root; tests that use them skip elsewhere.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = [
    "NOBODY",
    "THIRD",
    "as_nobody",
    "as_root",
    "made_by_nobody",
    "shared_folder",
    "unprivileged",
]

NOBODY = 65534  # the other user
THIRD = 65533  # a user who is neither: the owner of a shared folder, as root owns /tmp

as_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="plays other users (needs root)"
)


def as_nobody(action: Callable[[], object]) -> None:
    """Run ``action`` in a child process as nobody (umask 0, as careless as it gets)."""
    with warnings.catch_warnings():  # the child only makes system calls, then exits
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.umask(0)
            action()
            code = 0
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0, "nobody's action failed"


def made_by_nobody(folder: Path, mode: int = 0o777) -> None:
    """``folder`` (and any missing folder above it) made first by nobody, as they would."""
    as_nobody(lambda: os.makedirs(folder, mode))
    assert folder.stat().st_uid == NOBODY


@contextmanager
def shared_folder(owner: int = 0, mode: int = 0o1777) -> Iterator[Path]:
    """A folder every user may write to (by default like /tmp: root's, sticky), outside
    pytest's own folders (private to this user) so that other users can reach it."""
    folder = Path(tempfile.mkdtemp(prefix="hkb-shared-", dir="/tmp"))
    os.chown(folder, owner, owner)
    folder.chmod(mode)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_PR_CAPBSET_DROP = 24
_CAPABILITY_VERSION_3 = 0x20080522


def drop_capabilities() -> None:
    """Give up every capability, for this process and what it executes (uid 0 stays)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):  # the bounding set: nothing comes back at the next execve
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def unprivileged(*argv: str) -> list[str]:
    """A command line that runs ``argv`` as this user without root's powers."""
    return [sys.executable, __file__, *argv]


if __name__ == "__main__":  # pragma: no cover - the wrapper of `unprivileged`
    drop_capabilities()
    os.execv(sys.argv[1], sys.argv[1:])
