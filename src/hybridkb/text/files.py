"""Opening the files a user or an agent names: once, and race-free inside allowed folders.

Every file is opened exactly once; its hash and its text are both read from that
descriptor, so what is stored is what was hashed. When the caller confines reading
to allowed folders (the agent tools), the check and the open are one step: the
file is opened by walking its resolved path from the allowed folder, one component
at a time, each with ``O_NOFOLLOW`` relative to the directory opened before
(``dir_fd``). A component swapped for a symlink after the path was resolved fails
that open (``ELOOP``), so a link can never redirect the read outside.

Where the platform lacks ``dir_fd``/``O_NOFOLLOW`` (Windows), the file is opened by
its resolved path and the descriptor's identity (``st_dev``, ``st_ino``) is compared
with the resolved path's after the open, and the path is checked again; a swap
between the two fails the comparison.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import AccessDenied, ExtractionError
from ..normalize import display_name

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
# Opening beneath a folder descriptor needs dir_fd support for os.open.
CONFINED_OPEN = bool(_NOFOLLOW and _DIRECTORY) and os.open in os.supports_dir_fd


@dataclass
class OpenedFile:
    """A regular file opened for reading; ``stream`` reads the descriptor that was checked."""

    path: Path  # resolved; the document's identity
    name: str  # for messages
    stream: BinaryIO
    size: int
    mtime_ns: int = 0  # as opened: a sync compares it with the file's later stat

    def close(self) -> None:
        """Close the underlying stream."""
        self.stream.close()

    def __enter__(self) -> OpenedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def resolve(path: str | Path) -> Path:
    """``~`` expanded and every link resolved.

    Raises:
        ExtractionError: a symlink loop, a NUL byte, or a name the OS refuses.
    """
    raw = Path(path)
    name = display_name(raw)
    try:
        real = Path(os.path.realpath(raw.expanduser(), strict=False))
        # Non-strict realpath leaves a link it cannot resolve (a loop) in place.
        looped = os.path.islink(real)
    except (RuntimeError, OSError, ValueError) as exc:
        cause = "a symlink loop" if isinstance(exc, RuntimeError) else str(exc)
        raise ExtractionError(f"{name}: not a usable path ({cause}); check the path") from exc
    if looped:
        raise ExtractionError(f"{name}: not a usable path (a symlink loop); check the path")
    return real


def allowed_root(path: Path, allowed: Sequence[Path]) -> Path | None:
    """The allowed folder (resolved) that holds the resolved ``path``, if any."""
    for root in allowed:
        if path == root or path.is_relative_to(root):
            return root
    return None


def _not_regular(name: str) -> ExtractionError:
    # Reading a pipe blocks until someone writes to it; /dev/zero never ends.
    return ExtractionError(
        f"{name}: not a regular file (a pipe, socket or device); add a regular file"
    )


def _os_error(name: str, exc: OSError) -> ExtractionError:
    if isinstance(exc, FileNotFoundError):
        return ExtractionError(f"{name}: no such file or folder; check the path")
    if isinstance(exc, IsADirectoryError):
        return ExtractionError(f"{name}: is a folder, not a file; add the folder instead")
    if isinstance(exc, PermissionError):
        return ExtractionError(f"{name}: cannot read it (permission denied); check its permissions")
    return ExtractionError(f"{name}: cannot read it ({exc.strerror or exc}); check the file")


def _changed(name: str) -> AccessDenied:
    return AccessDenied(
        f"{name}: changed (a link appeared) while it was being added, so it was not read; "
        "add it again once it stops changing"
    )


def _open_beneath(root: Path, real: Path, name: str) -> int:
    """Open ``real`` by walking down from ``root`` without following any link."""
    parts = real.relative_to(root).parts
    if not parts:
        return os.open(root, os.O_RDONLY | _NONBLOCK | _CLOEXEC | _BINARY)
    dirfd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=dirfd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _changed(name) from exc
                raise
            os.close(dirfd)
            dirfd = nxt
        try:
            return os.open(parts[-1], os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _changed(name) from exc
            raise
    finally:
        os.close(dirfd)


def open_file(path: str | Path, *, within: Sequence[Path] | None = None) -> OpenedFile:
    """Open a regular file for reading, confined to ``within`` (resolved folders) if given.

    Raises:
        AccessDenied: the file is outside ``within``, or a link appeared while opening.
        ExtractionError: missing, unreadable, not a regular file, or not a usable path.
    """
    raw = Path(path)
    name = display_name(raw)
    real = resolve(raw)
    try:
        if within is None:
            fd = os.open(real, os.O_RDONLY | _NONBLOCK | _CLOEXEC | _BINARY)
        else:
            root = allowed_root(real, within)
            if root is None:
                raise AccessDenied(
                    f"{name}: outside the folders this tool may read; move the file there, or "
                    "ask the user to add its folder to HYBRIDKB_ALLOWED_PATHS"
                )
            if CONFINED_OPEN:
                fd = _open_beneath(root, real, name)
            else:  # pragma: no cover - Windows: open, then prove it is the file checked
                fd = os.open(real, os.O_RDONLY | _CLOEXEC | _BINARY)
                now = resolve(raw)
                opened, there = os.fstat(fd), os.stat(real)
                if now != real or (opened.st_dev, opened.st_ino) != (there.st_dev, there.st_ino):
                    os.close(fd)
                    raise _changed(name)
    except OSError as exc:
        raise _os_error(name, exc) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(name)
        if _NONBLOCK and hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # regular files ignore it; keep reads plain
        stream = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return OpenedFile(
        path=real, name=name, stream=stream, size=info.st_size, mtime_ns=info.st_mtime_ns
    )
