"""DuckDB schema: table names and numbered migrations.

Table names are derived from the collection's integer id only; user text (display
names) never reaches an identifier (a quote in a table name breaks the fts pragma).
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from ..shared import check_schema_version
from .connection import rollback

SCHEMA_VERSION_KEY = "schema_version"
# A collection's sources and file states (storage/duckdb/sources.py), keyed by its id.
SOURCES = "hybridkb_sources"
FILE_STATES = "hybridkb_file_states"


def table_names(collection_id: int) -> dict[str, str]:
    """The one place that names a collection's tables."""
    if not isinstance(collection_id, int) or collection_id < 0:
        raise ValueError(f"bad collection id {collection_id!r}")
    prefix = f"kb_c{collection_id}"
    return {
        "documents": f"{prefix}_documents",
        "chunks": f"{prefix}_chunks",
        "vectors": f"{prefix}_vectors",
    }


def create_collection_tables(con: duckdb.DuckDBPyConnection, collection_id: int, dim: int) -> None:
    t = table_names(collection_id)
    con.execute(
        f"""CREATE TABLE {t["documents"]} (
            document_id VARCHAR PRIMARY KEY,
            path VARCHAR,
            filename VARCHAR,
            source VARCHAR NOT NULL,
            content_hash VARCHAR NOT NULL,
            signature VARCHAR NOT NULL,
            metadata JSON,
            language VARCHAR,
            bytes BIGINT,
            chunk_count INTEGER,
            added_at TIMESTAMPTZ DEFAULT current_timestamp
        )"""
    )
    con.execute(
        f"""CREATE TABLE {t["chunks"]} (
            key BIGINT NOT NULL,
            chunk_id VARCHAR NOT NULL,
            document_id VARCHAR NOT NULL,
            chunk_index INTEGER NOT NULL,
            text VARCHAR NOT NULL,
            page INTEGER,
            section VARCHAR,
            char_start INTEGER,
            char_end INTEGER,
            content_hash VARCHAR,
            language VARCHAR,
            terms VARCHAR[],
            metadata JSON,
            filename VARCHAR,
            path VARCHAR,
            added_at TIMESTAMPTZ
        )"""
    )
    con.execute(
        f"CREATE TABLE {t['vectors']} (key BIGINT NOT NULL, embedding FLOAT[{int(dim)}] NOT NULL)"
    )
    _index_chunk_keys(con, collection_id)
    index_vector_keys(con, collection_id)


def _index_chunk_keys(con: duckdb.DuckDBPyConnection, collection_id: int) -> None:
    # Hits are fetched by key: an ART index makes that 4x faster than a scan (measured
    # 2.1 ms vs 8.6 ms for 10 of 15k SciFact chunks).
    t = table_names(collection_id)
    con.execute(f"CREATE INDEX IF NOT EXISTS {t['chunks']}_key ON {t['chunks']} (key)")


def index_vector_keys(con: duckdb.DuckDBPyConnection, collection_id: int) -> None:
    # Exact re-ranking fetches candidates' float32 vectors by key (50 of 100k: 80 ms as a
    # scan, a few ms through the index).
    t = table_names(collection_id)
    con.execute(f"CREATE INDEX IF NOT EXISTS {t['vectors']}_key ON {t['vectors']} (key)")


# The tables whose ``key`` column has an explicit index (primary-key and unique
# constraints are bound eagerly by DuckDB and were not hit by duckdb/duckdb#23848).
KEY_INDEXED = ("chunks", "vectors")


def rebuild_key_indexes(con: duckdb.DuckDBPyConnection, collection_id: int) -> None:
    """Drop and build the key indexes again from their tables (repairs a stale index).

    Each statement commits on its own: DuckDB 1.5.5 aborts the process ("pure virtual
    method called") when a stale index is dropped and made again in one transaction. A
    kill between the two leaves an index missing, which doctor reports and repairs.
    """
    t = table_names(collection_id)
    for kind in KEY_INDEXED:
        con.execute(f"DROP INDEX IF EXISTS {t[kind]}_key")
    _index_chunk_keys(con, collection_id)
    index_vector_keys(con, collection_id)


def missing_key_indexes(con: duckdb.DuckDBPyConnection, collection_id: int) -> int:
    """How many of the collection's key indexes do not exist."""
    t = table_names(collection_id)
    wanted = [f"{t[kind]}_key" for kind in KEY_INDEXED]
    found = con.execute(
        "SELECT count(*) FROM duckdb_indexes() WHERE index_name IN (?, ?)", wanted
    ).fetchone()
    return len(wanted) - int(found[0] if found else 0)


def key_index_misses(con: duckdb.DuckDBPyConnection, collection_id: int, sample: int) -> int:
    """Rows of the key-indexed tables that a lookup through the index does not find.

    Checks the newest ``sample`` rows of each table (the rows a dead writer's WAL
    replayed, which a stale index lacks) and ``sample`` more drawn at random. A lookup
    by equality on a constant goes through the index; the keys are our own integers.
    """
    misses = 0
    for kind in KEY_INDEXED:
        table = table_names(collection_id)[kind]
        keys = {
            int(r[0])
            for r in con.execute(
                f"SELECT key FROM {table} ORDER BY rowid DESC LIMIT {int(sample)}"
            ).fetchall()
        }
        keys |= {
            int(r[0])
            for r in con.execute(
                f"SELECT key FROM {table} USING SAMPLE reservoir({int(sample)} ROWS)"
            ).fetchall()
        }
        for key in keys:
            found = con.execute(f"SELECT count(*) FROM {table} WHERE key = {key}").fetchone()
            misses += int(not found or not found[0])
    return misses


def drop_collection_tables(con: duckdb.DuckDBPyConnection, collection_id: int) -> None:
    for name in table_names(collection_id).values():
        con.execute(f"DROP TABLE IF EXISTS {name}")


def _m1_catalog(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE SEQUENCE IF NOT EXISTS hybridkb_collection_ids START 1")
    con.execute(
        """CREATE TABLE IF NOT EXISTS hybridkb_collections (
            id INTEGER PRIMARY KEY,
            workspace VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            model VARCHAR NOT NULL,
            dim INTEGER NOT NULL,
            chunking JSON NOT NULL,
            language VARCHAR NOT NULL,
            created_at TIMESTAMPTZ DEFAULT current_timestamp,
            updated_at TIMESTAMPTZ DEFAULT current_timestamp,
            generation BIGINT DEFAULT 0,
            UNIQUE (workspace, name)
        )"""
    )


def _m2_chunk_key_indexes(con: duckdb.DuckDBPyConnection) -> None:
    for (cid,) in con.execute("SELECT id FROM hybridkb_collections").fetchall():
        _index_chunk_keys(con, int(cid))


def _m3_vector_key_indexes(con: duckdb.DuckDBPyConnection) -> None:
    for (cid,) in con.execute("SELECT id FROM hybridkb_collections").fetchall():
        index_vector_keys(con, int(cid))


def _m4_embedding_recipe(con: duckdb.DuckDBPyConnection) -> None:
    # NULL for existing collections: float32 vectors made by sentence-transformers.
    con.execute("ALTER TABLE hybridkb_collections ADD COLUMN IF NOT EXISTS embedding JSON")


def _m5_rebuild_key_indexes(con: duckdb.DuckDBPyConnection) -> None:
    # Files written before the checkpoint at open (Engine.settle) may hold key indexes
    # that lost rows replayed from a dead writer's WAL; building them again repairs them.
    for (cid,) in con.execute("SELECT id FROM hybridkb_collections").fetchall():
        rebuild_key_indexes(con, int(cid))


def _m6_sources_and_file_states(con: duckdb.DuckDBPyConnection) -> None:
    # What each collection was added from, and each file's size/mtime/hash when it was
    # read: a sync compares the disk with these and opens only files that changed.
    con.execute(
        f"""CREATE TABLE IF NOT EXISTS {SOURCES} (
            collection_id INTEGER NOT NULL,
            path VARCHAR NOT NULL,
            options JSON NOT NULL,
            added_at TIMESTAMPTZ DEFAULT current_timestamp,
            PRIMARY KEY (collection_id, path)
        )"""
    )
    con.execute(
        f"""CREATE TABLE IF NOT EXISTS {FILE_STATES} (
            collection_id INTEGER NOT NULL,
            document_id VARCHAR NOT NULL,
            path VARCHAR NOT NULL,
            size BIGINT NOT NULL,
            mtime_ns BIGINT NOT NULL,
            content_hash VARCHAR NOT NULL,
            PRIMARY KEY (collection_id, document_id)
        )"""
    )


def _m7_source_synced_at(con: duckdb.DuckDBPyConnection) -> None:
    # When an add or a sync last walked each source whole (NULL: not since this column).
    con.execute(f"ALTER TABLE {SOURCES} ADD COLUMN IF NOT EXISTS synced_at TIMESTAMPTZ")


# Append only: each entry moves the schema one version forward.
MIGRATIONS: list[Callable[[duckdb.DuckDBPyConnection], None]] = [
    _m1_catalog,
    _m2_chunk_key_indexes,
    _m3_vector_key_indexes,
    _m4_embedding_recipe,
    _m5_rebuild_key_indexes,
    _m6_sources_and_file_states,
    _m7_source_synced_at,
]
OWN_COMMITS = {_m5_rebuild_key_indexes}  # index DDL that must not share a transaction


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Run pending migrations, each with its version bump in one transaction (but those
    in OWN_COMMITS, whose statements commit one by one); return the schema version."""
    con.execute("CREATE TABLE IF NOT EXISTS hybridkb_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    row = con.execute(
        "SELECT value FROM hybridkb_meta WHERE key = ?", [SCHEMA_VERSION_KEY]
    ).fetchone()
    version = int(row[0]) if row else 0
    check_schema_version(version, len(MIGRATIONS))
    if version == len(MIGRATIONS):
        return version
    for number in range(version + 1, len(MIGRATIONS) + 1):
        step = MIGRATIONS[number - 1]
        own = step in OWN_COMMITS
        if not own:
            con.execute("BEGIN TRANSACTION")
        try:
            step(con)
            con.execute(
                "INSERT OR REPLACE INTO hybridkb_meta VALUES (?, ?)",
                [SCHEMA_VERSION_KEY, str(number)],
            )
            if not own:
                con.execute("COMMIT")
        except BaseException as exc:
            if not own:
                rollback(con, exc)
            raise
    # Schema changes go into the file now, not the WAL: DuckDB 1.5.5 fails to replay an
    # ALTER TABLE ... ADD COLUMN from the WAL after a crash ("GetDefaultDatabase with no
    # default database set"). A file is migrated as a copy (upgrade.py), so a kill before
    # this checkpoint loses the copy only.
    con.execute("CHECKPOINT")
    return len(MIGRATIONS)
