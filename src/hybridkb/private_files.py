"""Private files and the folders that hold them: the one set of rules for everything
hybridkb keeps for one user (the knowledge base in the data folder; the cache's ONNX
graphs, tokenizer, int8 verdicts, embedding cache and language-model copy; the owner's
sockets and endpoint files; the bearer tokens of ``hybridkb mcp --http``; the page pictures
``hybridkb ui`` caches).

Threat: another local user who can write such a file, or a folder on its way, reads the
user's documents or changes what the user's processes load. ``XDG_DATA_HOME`` or
``XDG_CACHE_HOME`` may point into a shared folder (containers, CI), where that user makes
``.../hybridkb`` first, open to all; or into a folder of theirs, where they swap the
user's folder for one of their own once it has been checked (a server then opened its
embedding cache, and DuckDB its WAL, again by path: theirs). In a shared folder they
leave a symlink, a FIFO (whoever opens it blocks), or a file of their own where hybridkb
is about to read or write one. Checking a path (``stat``) follows the link, says nothing
of the owner and opens the FIFO afterwards anyway.

**Folders** (:func:`folder_problem`, :func:`check_folder`, :func:`private_folder`): a
folder, not a link (unless ``follow``: a link found inside a folder that passed, which
only its owner could have put there), owned by this user, that no other user may write
to, nor read when ``secret`` (the data and runtime folders); and every folder above it
root's or this user's, none of them writable by others unless sticky (like ``/tmp``,
where nobody can rename what is not theirs), every link on the way root's or this
user's. Group bits are not held against a folder whose group is the user's own private
group (the "user private group" convention, where the umask is 002 and every folder is
group-writable by default): nobody else is in that group. Anything else is refused in
one line naming the folder and the fix (:class:`~hybridkb.errors.NotPrivate`).

**Files read** (:func:`read_private_file`: tokens, endpoint files): opened once, without
following a final link and without blocking (``O_NOFOLLOW | O_NONBLOCK``), then judged by
the opened descriptor (``fstat``), never the path again: a regular file, owned by this
user, no bits for group or others, at most ``max_bytes`` (read no further).

**Files written** (:func:`write_private_file`): under a random temporary name created
``O_EXCL`` with mode 0600, then renamed into place, so a reader never sees half of it and
nobody can take the temporary name first; a name another user's file holds (a sticky
folder forbids renaming over it) is refused in one line. **Files made in place**
(:func:`private_file`, the embedding cache that SQLite opens by path): created 0600 with
``O_EXCL``, or checked when there (this user's regular file, made 0600 if more open).
**Files read with another** (:func:`check_beside`: a database's write-ahead log, replayed
into it at every open): a regular file made by someone who may write that file itself.

Where there are no owners or mode bits (Windows), the folder's ACL decides, as for every
file in a user's profile: only the link and type checks hold.
A copy made from a file (:func:`copy_to_new_file`, the probe of a DuckDB file) is
created as a new file the same way (``O_EXCL | O_NOFOLLOW``, 0600).
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from .errors import ConfigError, NotPrivate
from .private_folders import (
    STRANGERS_FILE,
    check_folder,
    check_folder_beside,
    current_uid,
    folder_problem,
    others_may_write,
    private_folder,
    temp_folder,
)

__all__ = [
    "check_beside",
    "check_folder_beside",
    "check_folder",
    "copy_to_new_file",
    "folder_problem",
    "others_may_write",
    "private_file",
    "private_folder",
    "read_private_file",
    "temp_folder",
    "write_private_file",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_LINK_ERRNOS = (errno.ELOOP, getattr(errno, "EMLINK", errno.ELOOP))  # FreeBSD says EMLINK


def _file_problem(info: os.stat_result, max_bytes: int) -> str | None:
    """What makes an opened file untrustworthy, or None."""
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file (a pipe, socket, device or folder); give a regular file"
    uid = current_uid()
    if uid is not None:
        if info.st_uid != uid:
            return f"owned by uid {info.st_uid}, not by you (uid {uid}); use a file of your own"
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:  # a file has no reason to be its group's, private or not
            return f"others may read or change it (mode {mode:o}); run chmod 600 on it"
    if info.st_size > max_bytes:
        return f"{info.st_size} bytes, more than the {max_bytes} expected; check the file"
    return None


def read_private_file(path: Path, *, named: str, max_bytes: int = 4096) -> str:
    """The text of ``path`` if only this user may read and change it (see the module).

    Args:
        path: The file.
        named: How the message names it (``--token-file /x``).
        max_bytes: The most the file may hold.

    Raises:
        ConfigError: one line naming the file, what is wrong and the fix.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    except OSError as exc:
        if exc.errno in _LINK_ERRNOS and _NOFOLLOW:
            raise ConfigError(f"{named}: is a symbolic link; give the file itself") from None
        raise ConfigError(f"{named}: {exc.strerror or exc}") from None
    try:
        problem = _file_problem(os.fstat(fd), max_bytes)
        if problem is not None:
            raise ConfigError(f"{named}: {problem}")
        data = os.read(fd, max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"{named}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew after the fstat
        raise ConfigError(f"{named}: more than the {max_bytes} bytes expected; check the file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{named}: not UTF-8 text; check the file") from None


def write_private_file(path: Path, text: str | bytes) -> None:
    """Write ``text`` (UTF-8, or bytes as they are) to ``path`` readable only by this user
    (0600), all at once: a temporary file of a random name created beside it, then
    renamed over it.

    Raises:
        NotPrivate: another user's file holds the name (in a sticky shared folder).
        OSError: the folder cannot be written.
    """
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = _create_new(temp, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode("utf-8") if isinstance(text, str) else text)
        os.replace(temp, path)
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        if isinstance(exc, OSError):  # e.g. EPERM: a sticky folder, another user's file
            _refuse_strangers(path)
        raise


def _refuse_strangers(path: Path) -> None:
    """Refuse in one line if another user's file (or link) holds ``path``'s name."""
    uid = current_uid()
    try:
        owner = os.lstat(path).st_uid
    except OSError:
        return
    if uid is not None and owner != uid:
        raise NotPrivate(
            f"{path} belongs to another user (uid {owner}, you are {uid}); {STRANGERS_FILE}"
        ) from None


def _beside_problem(file: Path, companion: Path) -> str | None:
    """What makes ``companion`` untrustworthy as a file read together with ``file`` (see
    :func:`check_beside`), or None (also when there is none)."""
    try:
        info = os.lstat(companion)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return "is a link or not a regular file"
    uid = current_uid()
    if uid is None or info.st_uid == uid:
        return None
    try:
        main = os.stat(file)
    except OSError:  # a companion without its file: only ours would do
        main = None
    if main is not None and (
        info.st_uid == main.st_uid
        or main.st_mode & 0o002
        or (main.st_mode & 0o020 and info.st_gid == main.st_gid)
    ):
        return None  # made by someone who may write the file itself
    return f"belongs to another user (uid {info.st_uid}), who may not write {file}"


def check_beside(file: Path, companions: Sequence[Path], *, remedy: str) -> None:
    """Refuse the ``companions`` of ``file`` (files read together with it: DuckDB replays
    ``<db>.wal`` into the database at every open) unless each is a regular file made by a
    user who may write ``file`` itself: this user, its owner, its group when that group
    may write it. In a sticky shared folder another user cannot replace ``file``, but can
    make a companion's name first whenever it is free (a log after every checkpoint).

    Raises:
        NotPrivate: one line naming the companion, what is wrong and ``remedy``.
    """
    for companion in companions:
        problem = _beside_problem(file, companion)
        if problem is not None:
            raise NotPrivate(f"{companion} {problem}; {remedy}")


def private_file(path: Path, *, remedy: str, companions: Sequence[str] = ()) -> None:
    """Make ``path`` an empty file only this user may read (0600) before something opens
    it by path (SQLite gives its WAL and shared-memory files the database file's mode),
    or check the one there and the ``companions`` beside it (suffixes: ``-wal``): this
    user's regular files, made 0600 if an older version left them more open.

    Raises:
        NotPrivate: a link, or another user's file, where one should be; ``remedy`` says
            what to do.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600))
        return
    except FileExistsError:
        pass
    uid = current_uid()
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode) or (uid is not None and info.st_uid != uid):
        raise NotPrivate(f"{path}: not a file of this user's; {remedy}")
    for file in (path, *(path.with_name(path.name + suffix) for suffix in companions)):
        if file != path and _beside_problem(path, file) is not None:
            raise NotPrivate(f"{file}: not a file of this user's; {remedy}")
        if file.exists() and file.lstat().st_mode & 0o077:
            file.chmod(0o600)


def copy_to_new_file(source: Path, target: Path, *, mode: int = 0o600) -> None:
    """Copy ``source`` into ``target``, a file this call creates with ``mode``: whatever
    is at that name already (a leftover, or a file, link or FIFO another user put there)
    is refused with FileExistsError, never written through or waited on.

    Raises:
        OSError: ``target`` exists, or a file cannot be read or written.
    """
    fd = _create_new(target, mode)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)


def _create_new(path: Path, mode: int) -> int:
    """A descriptor for writing ``path``, a new file (``O_EXCL``: an existing name, a link
    included, fails; ``O_NOFOLLOW`` for the systems where a dangling link did not)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)
