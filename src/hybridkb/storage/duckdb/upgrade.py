"""Bringing a DuckDB file to the current schema all at once, and reading older ones as they are.

DuckDB 1.5.5 cannot replay some schema changes from its WAL: ``ALTER TABLE ... ADD
COLUMN`` (migration 4) fails with "GetDefaultDatabase with no default database set",
index DDL with duckdb#22044. A process killed after such a commit and before the next
checkpoint left a file that no process could open again, ``doctor --repair`` included.
So a file is never migrated in place: the migrations run on a copy in a private folder
beside it (connection.side_folder), which is checkpointed and closed and then renamed
over the file. A kill at any moment leaves the old file whole (and a copy that the next
writer deletes) or the new one whole. A new
file, with nothing in it yet, gets its tables in place; if it is killed before its first
checkpoint, the next writer drops the log it cannot replay and creates them again.

A file opened read-only is not migrated (it cannot be): the engine reads the catalog of
every older version (``Engine.catalog``), so ``list``, ``search``, ``describe``, ``copy``
and a read-only server read it as it is.
"""

from __future__ import annotations

import os
import shutil
from contextlib import suppress
from pathlib import Path

import duckdb

from ...errors import BackendError
from ...private_files import copy_to_new_file
from ..boundary import first_line
from ..shared import check_schema_version
from .connection import clear_side_folder, open_duckdb, side_folder
from .engine import Engine
from .schema import MIGRATIONS, SCHEMA_VERSION_KEY, migrate

MIGRATING = "migrating"  # the side folder the copy is migrated in: <file>.migrating


def stored_version(con: duckdb.DuckDBPyConnection) -> int:
    """The schema version a file records; 0 for a file that hybridkb never wrote."""
    found = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'hybridkb_meta'"
    ).fetchone()
    if not found or not found[0]:
        return 0
    row = con.execute(
        "SELECT value FROM hybridkb_meta WHERE key = ?", [SCHEMA_VERSION_KEY]
    ).fetchone()
    return int(row[0]) if row else 0


def upgrade(engine: Engine) -> int:
    """Migrate the engine's file to the current schema, all or nothing; return the version.

    Raises:
        BackendError: the file is newer than this hybridkb, or the copy could not be
            written (a full disk: the file is left as it was).
    """
    with engine.lock:
        version = stored_version(engine.con)
        check_schema_version(version, len(MIGRATIONS))
        path = Path(engine.path).expanduser().resolve() if engine.persistent else None
        if version == len(MIGRATIONS):
            if path is not None:  # a migration killed after its rename left its folder
                with suppress(OSError):
                    clear_side_folder(path.with_name(f"{path.name}.{MIGRATING}"))
            return version
        if path is None or _is_new(engine.con):
            # Nothing in it to lose: migrated in place (a copy costs ~0.1 s at every
            # creation). A kill before the final checkpoint leaves a new file whose log
            # the next writer drops (connection.drop_creation_log).
            return migrate(engine.con)
        _migrate_copy(engine, path, version)
    return len(MIGRATIONS)


def _migrate_copy(engine: Engine, path: Path, version: int) -> None:
    """Migrate a copy of ``path`` in its side folder, then rename it over ``path``."""
    folder = None
    try:
        # A migration killed before left a copy that is not to be trusted: deleted.
        folder = side_folder(path, MIGRATING)
        side = folder / "copy.duckdb"
        # Engine.settle checkpointed: the WAL is empty. The copy keeps the file's mode.
        copy_to_new_file(path, side, mode=path.stat().st_mode & 0o777)
        con = open_duckdb(  # spills into the side folder: private, removed after
            str(side), read_only=False, lock_timeout=0, temp_directory=str(folder / "spill")
        )
        try:
            migrate(con)  # ends with a CHECKPOINT: nothing of it stays in a WAL
        finally:
            con.close()
        _sync(side)
        engine.reopen(lambda: _swap(side, path))
    except (duckdb.Error, OSError) as exc:
        raise BackendError(
            f"{path}: cannot bring the database from schema {version} to"
            f" {len(MIGRATIONS)} ({first_line(exc)}); the file is unchanged (it is"
            " migrated as a copy beside it: if the disk is full, free space there)"
            " and opening it again retries"
        ) from exc
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _is_new(con: duckdb.DuckDBPyConnection) -> bool:
    """A file with no table at all: one being created."""
    found = con.execute("SELECT count(*) FROM duckdb_tables()").fetchone()
    return not (found and found[0])


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _swap(side: Path, path: Path) -> None:
    os.replace(side, path)
    if hasattr(os, "O_DIRECTORY"):  # the rename itself reaches the disk
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
