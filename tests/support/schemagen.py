"""DuckDB files of older schema versions, as an older hybridkb left them (for migration tests).

A file is made with today's hybridkb and taken back step by step: each migration's
change undone, newest first, and the stored version set. The collections' own tables
were the same in every version; only the catalog, the key indexes and the sources'
tables changed:

    6  sources and file states        (tables hybridkb_sources, hybridkb_file_states)
    5  key indexes built again        (no change to undo)
    4  embedding recipe               (column hybridkb_collections.embedding)
    3  vector key indexes             (index kb_c<id>_vectors_key)
    2  chunk key indexes              (index kb_c<id>_chunks_key)

The change is made on a copy that is checkpointed, closed and renamed over the file, so
a test process killed while it takes a file back leaves the file as it was.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb

from hybridkb.storage.duckdb.schema import FILE_STATES, SOURCES, table_names


def stored_version(db: Path) -> int:
    """The schema version a file records (read-only: the file is not changed)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT value FROM hybridkb_meta WHERE key = 'schema_version'").fetchone()
        assert row is not None, f"{db}: no schema version"
        return int(row[0])
    finally:
        con.close()


def _take_back(con: duckdb.DuckDBPyConnection, version: int) -> None:
    ids = [int(r[0]) for r in con.execute("SELECT id FROM hybridkb_collections").fetchall()]
    if version < 6:
        con.execute(f"DROP TABLE IF EXISTS {SOURCES}")
        con.execute(f"DROP TABLE IF EXISTS {FILE_STATES}")
    if version < 4:
        con.execute("ALTER TABLE hybridkb_collections DROP COLUMN IF EXISTS embedding")
    for cid in ids:
        t = table_names(cid)
        if version < 3:
            con.execute(f"DROP INDEX IF EXISTS {t['vectors']}_key")
        if version < 2:
            con.execute(f"DROP INDEX IF EXISTS {t['chunks']}_key")
    con.execute("UPDATE hybridkb_meta SET value = ? WHERE key = 'schema_version'", [str(version)])


def old_schema_file(db: Path, version: int) -> None:
    """Take the (closed) DuckDB file ``db`` back to schema ``version`` (1 to 6)."""
    assert 1 <= version <= 6, version
    assert not Path(str(db) + ".wal").exists(), f"{db}: close it first (its WAL is not empty)"
    side = db.with_name(db.name + ".old-schema")
    for stale in (side, Path(f"{side}.wal")):  # left by a test process killed in here
        stale.unlink(missing_ok=True)
    shutil.copyfile(db, side)
    con = duckdb.connect(str(side))
    try:
        _take_back(con, version)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    os.replace(side, db)
