"""The folder half of the private-files rules: which folder may hold this user's private
files, and the walk above it (owners, sticky folders, links followed as the kernel would).

:mod:`hybridkb.private_files` states the threat and every rule, and is the one module
callers import these names from (it re-exports them). The folders are their own module
because the walk above a folder is half the rules and reads without the files' half;
the files' rules use :func:`current_uid` and :data:`STRANGERS_FILE` from here.
"""

from __future__ import annotations

import functools
import os
import stat
import tempfile
from pathlib import Path

from .errors import ConfigError, NotPrivate

__all__ = [
    "STRANGERS_FILE",
    "check_folder",
    "check_folder_beside",
    "current_uid",
    "folder_problem",
    "others_may_write",
    "private_folder",
    "temp_folder",
]

_MAX_LINKS = 40  # as the kernel's path walk (ELOOP past it)
STRANGERS_FILE = "another user made it: have it removed (its owner or root)"


def current_uid() -> int | None:
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


def _above_problem(folder: Path) -> tuple[Path, str] | None:
    """The first folder (or link) above ``folder`` through which another user could swap
    ``folder`` for one of theirs, and why; None when every step is safe. Links are
    followed as the kernel would, each judged first; a step that does not exist yet is
    made by this user later, and ends the walk."""
    uid = current_uid()
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
    uid = current_uid()
    if uid is None:
        return None
    if info.st_uid != uid:
        return f"belongs to another user (uid {info.st_uid}, you are {uid})", STRANGERS_FILE
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
    fit (the rule of :mod:`hybridkb.private_files`; ``secret``: no reading by others either)."""
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
    uid = current_uid()
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
    group (see :mod:`hybridkb.private_files`)."""
    if current_uid() is None:
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
