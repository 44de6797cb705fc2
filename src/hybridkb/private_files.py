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
import functools
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .errors import ConfigError, NotPrivate

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
_MAX_LINKS = 40  # as the kernel's path walk (ELOOP past it)
_STRANGERS_FILE = "another user made it: have it removed (its owner or root)"


def _uid() -> int | None:
    """This user's id; None where there are no owners to compare (Windows)."""
    getuid = getattr(os, "getuid", None)
    return None if getuid is None else int(getuid())


@functools.lru_cache(maxsize=16)
def _own_private_group(uid: int, gid: int) -> bool:
    """Whether ``gid`` is user ``uid``'s private group: named after the user, their primary
    group, with no other member (the convention that comes with umask 002)."""
    try:
        import grp
        import pwd

        user = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):  # Windows, or a uid or gid with no name
        return False
    others = [m for m in group.gr_mem if m != user.pw_name]
    return gid == user.pw_gid and group.gr_name == user.pw_name and not others


def _loose(info: os.stat_result, forbidden: int) -> int:
    """The ``forbidden`` mode bits ``info`` has, group bits aside when its group is its
    owner's private group."""
    if _own_private_group(info.st_uid, info.st_gid):
        forbidden &= 0o007
    return info.st_mode & forbidden


# -- folders ---------------------------------------------------------------------------


def _above_problem(folder: Path) -> tuple[Path, str] | None:
    """The first folder (or link) above ``folder`` through which another user could swap
    ``folder`` for one of theirs, and why; None when every step is safe. Links are
    followed as the kernel would, each judged first; a step that does not exist yet is
    made by this user later, and ends the walk."""
    uid = _uid()
    if uid is None:
        return None
    absolute = Path(os.path.abspath(folder))
    current = Path(absolute.anchor)
    problem = _shared_folder_problem(os.lstat(current), uid)
    if problem is not None:
        return current, problem
    return _problem_below(current, list(absolute.parent.parts[1:]), uid)


def _problem_below(current: Path, todo: list[str], uid: int) -> tuple[Path, str] | None:
    """:func:`_above_problem` from ``current`` (a folder judged safe) down the names of
    ``todo``, a link's target taking the place of the link."""
    links = 0
    while todo:
        name = todo.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent  # current holds no link: its parent is the real one
            continue
        step = current / name
        try:
            info = os.lstat(step)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return step, f"cannot be read ({exc.strerror})"
        if stat.S_ISLNK(info.st_mode):
            links += 1
            followed = _follow_link(step, info, uid, links, current)
            if isinstance(followed, str):
                return step, followed
            current, parts = followed
            todo[:0] = parts
            continue
        problem = _shared_folder_problem(info, uid)
        if problem is not None:
            return step, problem
        current = step
    return None


def _follow_link(
    step: Path, info: os.stat_result, uid: int, links: int, current: Path
) -> tuple[Path, tuple[str, ...]] | str:
    """The ``links``-th link met, ``step`` in ``current``: where the walk goes on (the
    folder and the names to walk down from it), or why it may not be followed."""
    if info.st_uid not in (0, uid):
        return f"is a link another user owns (uid {info.st_uid})"
    if links > _MAX_LINKS:
        return "is one link too many (a loop?)"
    target = Path(os.readlink(step))
    if target.is_absolute():
        return Path(target.anchor), target.parts[1:]
    return current, target.parts


def _shared_folder_problem(info: os.stat_result, uid: int) -> str | None:
    """What lets another user rename entries of a folder above: owning it, or writing
    to it without the sticky bit."""
    if info.st_uid not in (0, uid):
        return f"belongs to another user (uid {info.st_uid})"
    if _loose(info, 0o022) and not info.st_mode & stat.S_ISVTX:
        return f"others may write to (mode {stat.S_IMODE(info.st_mode):04o}, not sticky)"
    return None


def _folder_finding(folder: Path, secret: bool, follow: bool) -> tuple[str, str] | None:
    """What makes ``folder`` unfit (see :func:`folder_problem`) and the remedy, or None."""
    try:
        info = os.stat(folder) if follow else os.lstat(folder)
    except FileNotFoundError:
        return "does not exist", "check that the folder above it can be written"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})", "check its permissions"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link", "remove it (hybridkb makes the folder itself)"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder", "remove it (hybridkb makes the folder itself)"
    uid = _uid()
    if uid is None:
        return None
    if info.st_uid != uid:
        return f"belongs to another user (uid {info.st_uid}, you are {uid})", _STRANGERS_FILE
    loose = _mode_finding(folder, info, secret)
    if loose is not None:
        return loose
    if follow:  # inside a folder that passed: the folders above were judged with it
        return None
    return _above_finding(folder)


def _mode_finding(folder: Path, info: os.stat_result, secret: bool) -> tuple[str, str] | None:
    """What the mode bits of ``folder`` (its stat ``info``) let other users do, and the
    chmod that stops it; None when they let them do nothing they should not."""
    loose = _loose(info, 0o077 if secret else 0o022)
    if not loose:
        return None
    if loose & 0o022:
        how = "is writable by other users"
    elif loose & 0o044:
        how = "is readable by other users"
    else:  # x alone: others can open the files inside by name
        how = "can be entered by other users"
    mode = stat.S_IMODE(info.st_mode)
    return f"{how} (mode {mode:04o})", f"run: chmod {'700' if secret else 'go-w'} {folder}"


def _above_finding(folder: Path) -> tuple[str, str] | None:
    found = _above_problem(folder)
    if found is None:
        return None
    step, how = found
    return (
        f"lies in {step}, which {how}",
        "another user could swap it for a folder of theirs: keep it in a folder of yours",
    )


def folder_problem(folder: Path, *, secret: bool, follow: bool = False) -> str | None:
    """What makes ``folder`` unfit to hold this user's private files, or None when it is
    fit (the rule of the module docstring; ``secret``: no reading by others either)."""
    finding = _folder_finding(folder, secret, follow)
    return None if finding is None else finding[0]


def check_folder(folder: Path, *, secret: bool, fix: str, follow: bool = False) -> None:
    """Refuse ``folder`` unless :func:`folder_problem` finds nothing; ``fix`` is the
    alternative the message offers (e.g. "or set HYBRIDKB_CACHE_DIR to ...").

    Raises:
        NotPrivate: one line naming the folder, what is wrong and the fix.
    """
    finding = _folder_finding(folder, secret, follow)
    if finding is not None:
        problem, remedy = finding
        raise NotPrivate(f"{folder} {problem}; {remedy}, {fix}")


def private_folder(folder: Path, *, secret: bool, fix: str, within: Path | None = None) -> Path:
    """``folder``, made (0700) where missing and checked (:func:`check_folder`) where not:
    with ``within``, every folder from ``within`` down to ``folder`` (the cache folder and
    the folders inside it), else ``folder`` alone. Nothing is made in a place another
    user could swap. Returns ``folder``.

    Raises:
        NotPrivate: a folder on the way that does not pass.
    """
    chain = [folder]
    if within is not None:
        if within != folder and within not in folder.parents:
            raise ValueError(f"{folder} is not inside {within}")
        while chain[-1] != within:
            chain.append(chain[-1].parent)
    for depth, step in enumerate(reversed(chain)):
        if depth == 0 and not os.path.lexists(step):  # nothing made where another could swap it
            if (above := _above_finding(step)) is not None:
                raise NotPrivate(f"{step} {above[0]}; {above[1]}, {fix}")
        try:
            if depth == 0:  # e.g. ~/.cache: not ours to judge
                step.parent.mkdir(parents=True, exist_ok=True)
            step.mkdir(mode=0o700)  # the umask can only narrow it
        except OSError:
            pass  # there already (or cannot be made): judged below
        # Below the first folder, a link can only be its owner's: follow it, judge the target.
        check_folder(step, secret=secret, fix=fix, follow=depth > 0)
    return folder


def check_folder_beside(file: Path, folder: Path, *, fix: str) -> None:
    """Refuse ``folder``, one kept beside ``file`` (a database's index snapshots, staged
    parts, spilled pages), unless it passes the rule of every folder hybridkb makes
    (:func:`check_folder`; others may read it, whose files are as open as ``file``) or,
    not this user's, is a folder of the user who owns ``file`` that nobody else may
    write (a knowledge base of theirs, opened to read). Nothing there passes.

    Raises:
        NotPrivate: one line naming the folder, what is wrong and the fix.
    """
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return
    except OSError:
        info = None  # check_folder says why
    uid = _uid()
    if info is not None and uid is not None and info.st_uid != uid and stat.S_ISDIR(info.st_mode):
        try:
            owner: int | None = os.stat(file).st_uid
        except OSError:
            owner = None
        if info.st_uid == owner and not _loose(info, 0o022):
            return
    check_folder(folder, secret=False, fix=fix)


def temp_folder() -> Path:
    """The system's folder for temporary files, chosen as :mod:`tempfile` would choose it
    (``tempfile.tempdir``, ``TMPDIR``/``TEMP``/``TMP``, then ``/tmp``, ``/var/tmp``,
    ``/usr/tmp``) but without its probe: ``gettempdir`` writes a file in each candidate,
    and on a full disk finds none ("No usable temporary directory", a traceback). A
    folder this user may write to and enter is taken; nothing is written here.

    Raises:
        ConfigError: no candidate is such a folder.
    """
    if tempfile.tempdir:  # set by the program: its choice, as for tempfile
        return Path(tempfile.tempdir)
    names = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
    names += ["/tmp", "/var/tmp", "/usr/tmp"] if os.name != "nt" else []
    for name in names:
        if name and os.path.isdir(name) and os.access(name, os.W_OK | os.X_OK):
            return Path(name).absolute()
    raise ConfigError(
        "no folder for temporary files can be written (TMPDIR, /tmp, /var/tmp); set "
        "XDG_RUNTIME_DIR or TMPDIR to a folder of yours"
    )


def others_may_write(folder: Path) -> str | None:
    """How users other than ``folder``'s owner (and root) may make, remove or rename
    entries in ``folder`` (its group, or everyone), or None when none may. The sticky bit
    does not count: it stops them renaming or removing what is not theirs, not making new
    names beside it (a database's log, its index folder), which is what a file read with
    its neighbours needs kept out. Group bits are not held against the owner's private
    group (see the module)."""
    if _uid() is None:
        return None
    try:
        info = os.stat(folder)
    except OSError:
        return None  # whoever opens something there says what is wrong
    loose = _loose(info, 0o022)
    if not loose:
        return None
    who = "every user" if loose & 0o002 else f"its group (gid {info.st_gid})"
    sticky = ", sticky" if info.st_mode & stat.S_ISVTX else ""
    return f"can be written by {who} (mode {stat.S_IMODE(info.st_mode):04o}{sticky})"


# -- files -----------------------------------------------------------------------------


def _file_problem(info: os.stat_result, max_bytes: int) -> str | None:
    """What makes an opened file untrustworthy, or None."""
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file (a pipe, socket, device or folder); give a regular file"
    uid = _uid()
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
    uid = _uid()
    try:
        owner = os.lstat(path).st_uid
    except OSError:
        return
    if uid is not None and owner != uid:
        raise NotPrivate(
            f"{path} belongs to another user (uid {owner}, you are {uid}); {_STRANGERS_FILE}"
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
    uid = _uid()
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
    uid = _uid()
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
