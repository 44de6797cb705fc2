"""Where hybridkb keeps the knowledge base when nobody says, and the check that a named
DuckDB file's folder exists.

MCP hosts spawn ``hybridkb mcp`` with no environment and the working folder ``/``, so
a default relative to the working folder (``./hybridkb.duckdb``, the old one) landed
at the filesystem root, or failed where the root is read-only (macOS). The default is
the platform's per-user data folder instead, the same for the CLI and the MCP server so
that a terminal and an assistant share one knowledge base:

- Linux: ``$XDG_DATA_HOME/hybridkb`` (``~/.local/share/hybridkb``)
- macOS: ``~/Library/Application Support/hybridkb``
- Windows: ``%LOCALAPPDATA%\\hybridkb``

Only that folder is created for the user (mode 0700: the knowledge base holds their
documents). A ``--db`` or ``HYBRIDKB_DB`` in a folder that does not exist is most
likely a typo in a client's config, which used to create that folder and an empty
database in silence; it is refused instead.

**Private folders are checked, not assumed.** ``XDG_DATA_HOME`` or ``XDG_CACHE_HOME`` may
point at a folder other users can write (containers, CI): another user could make
``.../hybridkb`` first, open to all, and then read the knowledge base or swap the ONNX
graph the next process loads. So every folder hybridkb makes or trusts (the data folder,
the cache folder and the folders in it, the sockets' runtime folder) passes the one rule
of :mod:`hybridkb.private_files` (its own, its user's alone, nothing above it in another
user's hands), or is refused in one line naming the folder and the fix.

Files hybridkb makes in its folders are 0600. DuckDB creates its database file, and
its WAL again after every checkpoint, with the mode the process umask allows, so while
a file is open for writing the umask is tightened (:func:`hold_file_mode`): in the data
folder to 0600; for a file the user named (``--db``), the user's umask decides for a
new file, and the files DuckDB adds beside an existing one (WAL, a compacted copy) are
never more open than that file is.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from .errors import ConfigError, NotPrivate
from .private_files import check_beside, others_may_write, private_folder

APP_NAME = "hybridkb"
DEFAULT_DB_NAME = "hybridkb.duckdb"

__all__ = [
    "APP_NAME",
    "DEFAULT_DB_NAME",
    "default_db",
    "ensure_db_folder",
    "hold_file_mode",
    "user_data_folder",
]

DATA_FIX = "or name another file with --db or HYBRIDKB_DB"
CACHE_FIX = "or set HYBRIDKB_CACHE_DIR to a folder of your own"


def user_data_folder() -> Path:
    """The per-user data folder of hybridkb on this platform (not created here)."""
    from platformdirs import user_data_dir  # only when the default is needed

    return Path(user_data_dir(APP_NAME, appauthor=False))


def default_db() -> str:
    """The knowledge base file used when no ``--db``, ``HYBRIDKB_DB`` or `.env` names one."""
    return str(user_data_folder() / DEFAULT_DB_NAME)


def ensure_db_folder(path: str, named_by: str = "--db or HYBRIDKB_DB") -> None:
    """Make sure the DuckDB file ``path`` may be opened from its folder, before DuckDB
    opens it (for reading or writing).

    The per-user data folder is created (0700), or checked when it exists (see the
    module docstring); any other missing folder is refused, and so is a folder other
    users may write to (a group's, or everyone's like ``/tmp``, sticky or not): DuckDB
    replays whatever ``<db>.wal`` it finds, and hybridkb loads the index snapshots of
    ``<db>.hkbidx``, so whoever can make names beside the file decides what it says. The
    write-ahead log must also be one that whoever may write the file made
    (:func:`~hybridkb.private_files.check_beside`: one left from before the folder was
    closed).

    Raises:
        NotPrivate: the per-user data folder is a link, another user's, or open to others;
            the folder of ``path`` may be written by others; or another user's log lies
            beside the file.
        ConfigError: the folder of ``path`` does not exist (or is not a folder).
    """
    file = Path(path).expanduser().absolute()
    folder = file.parent
    if folder == user_data_folder().absolute():
        private_folder(folder, secret=True, fix=DATA_FIX)
    elif not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError(
            f"{path}: the folder {folder} {what}; fix the path in {named_by}, "
            f"or create the folder first"
        )
    # The folder named, and the real file's if it is a link: hybridkb's folders go there.
    for each in dict.fromkeys([folder, Path(os.path.realpath(file)).parent]):
        if (how := others_may_write(each)) is not None:
            raise NotPrivate(
                f"{path}: its folder {each} {how}, so other users can put files beside it "
                f"that DuckDB and hybridkb read with it; move it into a folder only you can "
                f"write, e.g. {user_data_folder()}"
            )
    check_beside(file, [file.with_name(file.name + ".wal")], remedy=_FOREIGN_LOG)


_FOREIGN_LOG = (
    "it is not a log this knowledge base wrote: have it removed (its owner or root) before "
    "opening the file, or keep the knowledge base in a folder of yours"
)


# -- the mode of the files DuckDB makes --------------------------------------------------

_umask_lock = threading.Lock()
_umask_holds: list[int] = []
_umask_found = 0o022


def _tightened(bits: int) -> Callable[[], None]:
    """Add ``bits`` to the umask until the returned function is called; the last release
    restores the umask the first hold found (until then the umask stays as tight as every
    hold asked)."""
    global _umask_found
    if not bits:
        return lambda: None
    with _umask_lock:
        current = os.umask(0o077)  # set to the tightest first: never looser, not even now
        if not _umask_holds:
            _umask_found = current
        _umask_holds.append(bits)
        os.umask(current | bits)
    done = threading.Event()

    def release() -> None:
        with _umask_lock:
            if done.is_set():
                return
            done.set()
            _umask_holds.remove(bits)
            if not _umask_holds:
                os.umask(_umask_found)

    return release


def hold_file_mode(path: str) -> Callable[[], None]:
    """Tighten the process umask for the DuckDB file ``path`` (``:memory:``: none) opened
    for writing, until the
    returned function is called (the last call restores the umask found by the first).

    DuckDB has no mode option: it creates the file, and the WAL again after every
    checkpoint, as the umask allows. In the per-user data folder every file is 0600 (and
    an existing file or WAL more open than that, from an older version, is made 0600);
    beside a file the user named, DuckDB's files are never more open than that file;
    a new file the user named gets what their umask gives.
    """
    if path == ":memory:" or os.name == "nt":
        return lambda: None
    file = Path(path).absolute()
    if file.parent == user_data_folder().absolute():
        for existing in (file, file.with_name(file.name + ".wal")):
            try:
                info = existing.lstat()
                if stat.S_ISREG(info.st_mode) and info.st_mode & 0o077:
                    existing.chmod(0o600)
            except OSError:
                continue
        return _tightened(0o077)
    try:
        mode = file.stat().st_mode
    except OSError:
        return lambda: None
    return _tightened(0o077 & ~mode)
