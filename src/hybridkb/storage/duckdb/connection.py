"""Opening a DuckDB file, and DuckDB's errors as ours.

One process at a time may hold a DuckDB file for writing (DuckDB's own rule). A
second writer waits up to ``lock_timeout`` seconds and then gets
:class:`DatabaseLocked` naming the holder and what to do instead.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from ...errors import BackendError, DatabaseLocked, KBError
from ...locations import ensure_db_folder
from ...private_files import copy_to_new_file, temp_folder
from ..boundary import first_line
from ..shared import OPENED_READ_ONLY
from .beside import check_folders_beside, spill_folder

# Never download or load an extension behind our back: a URL such as sqlite:///x.db or a
# query naming an extension's function would fetch it from the network at run time.
NO_EXTENSIONS: dict[str, str | bool] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}

# A file this small whose checkpointed part holds no table may be one killed while it was
# created (see drop_creation_log); a bigger one is never probed.
CREATION_PROBE_BYTES = 1 << 20

# WAL bytes after which a commit checkpoints (DuckDB's default: 16 MB, ~6k chunks of
# 384-d vectors). A checkpoint rewrites the last row group (up to 122,880 rows, ~190 MB
# of 384-d vectors) of every table with a key index that was appended to, so at 16 MB a
# bulk load rewrote the same rows again and again: 100k chunks through the storage layer
# took 58 CPU-s, 20 at this threshold (about a row group of writes per checkpoint).
# A crash replays at most this much WAL at the next open (~10 s for 250 MB).
CHECKPOINT_THRESHOLD = "256MB"

# Compression DuckDB must not try on a writer's checkpoints. ALPRD is what it picks for
# embedding floats (full-entropy mantissas), and on them it costs more than it saves:
# 240k normalised 384-d vectors took 1,680 blocks with it, 1,460 without (stored plain),
# and a checkpoint of 120k of them about twice the CPU (bench/ingest_rate.py --case
# storage: the checkpoint every ~120k chunks was the write path's biggest cost at 1M).
# Chimp and Patas are its older float codecs; ALP (decimal-like values) stays.
DISABLED_COMPRESSION = "alprd,chimp,patas"

LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.+?) \(PID (\d+)\)")


def lock_holder(message: str) -> tuple[str, int] | None:
    """(program, pid) of the process DuckDB says holds the file, if it says."""
    found = LOCK_HOLDER.search(message)
    return (found.group(1), int(found.group(2))) if found else None


def is_lock_error(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


def checked_spill(path: str) -> tuple[str, Callable[[], None]]:
    """Before DuckDB reads anything of the file ``path`` (at every open, read-only
    included): its folder and the folders beside it pass their rules
    (``locations.ensure_db_folder``, ``beside.check_folders_beside``). Then DuckDB's spill
    folder, made private (``beside.spill_folder``), and what removes it at close.

    Raises:
        NotPrivate: the folder, or a file or folder beside the file, does not pass.
        ConfigError: the folder does not exist.
    """
    if path != ":memory:":
        ensure_db_folder(path)  # the per-user default folder is made; another must exist
        check_folders_beside(path)
    return spill_folder(path)


def open_duckdb(
    path: str, *, read_only: bool, lock_timeout: float, temp_directory: str
) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB file (checked, and its spill folder ``temp_directory`` made, by
    :func:`checked_spill`), waiting for another process's lock up to ``lock_timeout``."""
    deadline = time.monotonic() + lock_timeout
    delay = 0.05
    config = {**NO_EXTENSIONS, "temp_directory": temp_directory}
    retried = False
    while True:
        try:
            con = duckdb.connect(path, read_only=read_only, config=dict(config))
            # Its progress bar would land on stdout, inside the CLI's JSON.
            con.execute("SET enable_progress_bar = false")
            if not read_only:
                con.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
                con.execute(f"SET disabled_compression_methods = '{DISABLED_COMPRESSION}'")
            return con
        except duckdb.IOException as exc:
            text = str(exc)
            if not is_lock_error(exc):
                raise BackendError(f"{path}: cannot open the database ({first_line(exc)})") from exc
            if time.monotonic() >= deadline:
                holder = lock_holder(text)
                who = f"process {holder[1]} ({holder[0]})" if holder else "another process"
                raise DatabaseLocked.held_by(path, who, lock_timeout) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        except duckdb.Error as exc:
            if "replaying WAL" in str(exc):
                if not read_only and not retried and drop_creation_log(path):
                    retried = True
                    continue
                raise BackendError(unreplayable_wal(path, first_line(exc))) from exc
            raise BackendError(f"{path}: cannot open the database ({first_line(exc)})") from exc


def unreplayable_wal(path: str, cause: str) -> str:
    """What to do with a file whose write-ahead log DuckDB cannot replay.

    An older hybridkb migrated files in place, and a process killed between migration 4
    and its checkpoint left a log that DuckDB 1.5.5 cannot replay (storage/duckdb/
    upgrade.py migrates a copy now). The file itself is whole, as of its last checkpoint.
    """
    return (
        f"{path}: cannot open the database: DuckDB cannot replay its write-ahead log"
        f" ({cause}); move {path}.wal aside and open it again (the file is as of its last"
        " checkpoint; writes only in the log are lost)"
    )


def drop_creation_log(path: str) -> bool:
    """Delete the log of a file that was killed while hybridkb created it; True if it did.

    A new file gets its tables in place (upgrade.py: there is nothing in it to lose) and
    is checkpointed before anything else is written to it. So a file whose checkpointed
    part holds no table has nothing in its log but its own creation, which DuckDB 1.5.5
    may fail to replay (migration 4's ADD COLUMN): without the log it is a new file again.
    Only a small file is probed, through a copy of it without the log.
    """
    file = Path(path)
    try:
        if file.stat().st_size > CREATION_PROBE_BYTES:
            return False
        # In a new private folder, not beside the file: DuckDB opens the copy and its log
        # by name, and there another local user could have put a link or a FIFO first.
        with tempfile.TemporaryDirectory(prefix="hybridkb-probe-", dir=temp_folder()) as folder:
            probe = Path(folder, "probe.duckdb")
            copy_to_new_file(file, probe)
            con = duckdb.connect(str(probe), read_only=True, config=dict(NO_EXTENSIONS))
            try:
                found = con.execute("SELECT count(*) FROM duckdb_tables()").fetchone()
            finally:
                con.close()
        if found is None or found[0]:
            return False
        Path(f"{path}.wal").unlink(missing_ok=True)
    except (OSError, duckdb.Error):
        return False
    return True


def remove_database(path: Path) -> None:
    """Delete a DuckDB file that nobody has open, and its WAL (a half-written copy)."""
    for leftover in (path, path.with_name(path.name + ".wal")):
        leftover.unlink(missing_ok=True)


def side_folder(path: Path, purpose: str) -> Path:
    """A new folder (mode 0700) beside the database ``path``, named ``<name>.<purpose>``,
    to make a file from the database in (a compacted or a migrated copy) before it is
    renamed over ``path`` (the same file system). What a killed process left there is
    deleted first (:func:`clear_side_folder`).

    Why a folder: DuckDB creates a database and its log by name and follows links. A
    copy made beside the file under a fixed name let another local user who may write
    in that folder plant a link there between the old copy's removal and the new one's
    creation: the copy went into the attacker's file, and its rename put their link in
    place of the knowledge base. ``mkdir`` takes the name or fails, and nobody else can
    create anything in the folder it made.

    Raises:
        OSError: the name is taken by what this user cannot delete (another user's).
    """
    folder = path.with_name(f"{path.name}.{purpose}")
    clear_side_folder(folder)
    os.mkdir(folder, 0o700)
    return folder


def clear_side_folder(folder: Path) -> None:
    """Delete what a killed process of this user left at ``folder``: the side folder, or
    the side file (and its log) an older hybridkb made under that name. A link is
    removed, never followed; a folder of another user's is left (then ``mkdir`` fails).
    """
    Path(f"{folder}.wal").unlink(missing_ok=True)
    try:
        info = folder.lstat()
    except FileNotFoundError:
        return
    getuid = getattr(os, "getuid", None)  # Windows: no owners; the folder's ACL decides
    if not stat.S_ISDIR(info.st_mode):
        folder.unlink()
    elif getuid is None or info.st_uid == getuid():
        shutil.rmtree(folder)


def rollback(con: duckdb.DuckDBPyConnection, cause: BaseException) -> None:
    """Roll back after ``cause``; a ROLLBACK that fails too is noted on ``cause``, never
    raised in its place.

    A COMMIT that fails (a full disk) has ended the transaction already, so the
    ROLLBACK fails with "no transaction is active": raised, that message would replace
    the one saying what went wrong.
    """
    try:
        con.execute("ROLLBACK")
    except duckdb.Error as failed:
        cause.add_note(f"the rollback after it failed too: {failed}")


def translate(exc: BaseException) -> KBError | None:
    """A DuckDB error as a BackendError whose message says what to do; None if not DuckDB's."""
    if not isinstance(exc, duckdb.Error):
        return None
    text = first_line(exc)
    if "read-only mode" in text or "read only" in text.lower():
        return BackendError(OPENED_READ_ONLY)
    if isinstance(exc, duckdb.OutOfMemoryException):
        return BackendError(f"the database ran out of memory ({text}); free memory and retry")
    if isinstance(exc, duckdb.IOException):
        return BackendError(f"cannot read or write the database file ({text}); check disk and file")
    return BackendError(f"database error ({text})")
