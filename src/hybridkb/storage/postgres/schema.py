"""PostgreSQL schema: names, per-collection tables and numbered migrations.

Layout:

* schema ``hybridkb`` holds the catalog: ``hybridkb_meta`` (schema version),
  ``hybridkb_workspaces`` and ``hybridkb_collections`` (one row per collection,
  also carrying the BM25 statistics N and total length, updated in the writing
  transaction);
* each workspace gets its own schema ``hkb_ws<N>`` (so grants and ``pg_dump -n``
  can keep workspaces apart), holding that workspace's collection tables
  ``c<id>_documents``, ``c<id>_chunks`` (text, JSONB metadata and the pgvector
  embedding with an HNSW cosine index) and ``c<id>_postings`` (term, key, tf,
  dl: BM25 computed in SQL with the same formula as the in-memory index; the
  primary key carries tf and dl, so scoring is an index-only scan once autovacuum
  has marked the pages visible: 2.6x faster on SciFact).

Identifiers come from integer ids only; display names never reach SQL text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..shared import check_schema_version
from .sources import create_source_tables

CATALOG_SCHEMA = "hybridkb"
SCHEMA_VERSION_KEY = "schema_version"
# pg_advisory_xact_lock key spaces (first int of the two-int form).
LOCK_MIGRATE = 0x686B6200  # "hkb\0"
LOCK_WORKSPACE = 0x686B6201
LOCK_INDEX = 0x686B6202  # (LOCK_INDEX, collection id): building its HNSW index

# analysis.py language code -> PostgreSQL text search configuration (for the
# per-collection full-text index beside the BM25 postings).
TEXT_CONFIGS: dict[str, str] = {
    "ar": "arabic", "ca": "catalan", "da": "danish", "de": "german", "el": "greek",
    "en": "english", "es": "spanish", "eu": "basque", "fi": "finnish", "fr": "french",
    "ga": "irish", "hi": "hindi", "hu": "hungarian", "hy": "armenian", "id": "indonesian",
    "it": "italian", "lt": "lithuanian", "nb": "norwegian", "ne": "nepali", "nl": "dutch",
    "nn": "norwegian", "no": "norwegian", "pt": "portuguese", "ro": "romanian",
    "ru": "russian", "sr": "serbian", "sv": "swedish", "ta": "tamil", "tr": "turkish",
    "yi": "yiddish",
}  # fmt: skip


def text_config(language: str) -> str:
    """The regconfig for a collection language ("auto"/unknown: 'simple', no stemming)."""
    return TEXT_CONFIGS.get(language.split("-")[0].split("_")[0].lower(), "simple")


def workspace_schema(workspace_id: int) -> str:
    if not isinstance(workspace_id, int) or workspace_id < 0:
        raise ValueError(f"bad workspace id {workspace_id!r}")
    return f"hkb_ws{workspace_id}"


def table_names(schema: str, collection_id: int) -> dict[str, str]:
    """The one place that names a collection's tables (schema-qualified)."""
    if not isinstance(collection_id, int) or collection_id < 0:
        raise ValueError(f"bad collection id {collection_id!r}")
    if not schema.startswith("hkb_ws") or not schema[6:].isdigit():
        raise ValueError(f"bad workspace schema {schema!r}")
    prefix = f"{schema}.c{collection_id}"
    return {
        "documents": f"{prefix}_documents",
        "chunks": f"{prefix}_chunks",
        "postings": f"{prefix}_postings",
    }


def create_collection_tables(
    cur: Any, schema: str, collection_id: int, dim: int, config: str
) -> None:
    t = table_names(schema, collection_id)
    bare = f"c{collection_id}"
    if config not in TEXT_CONFIGS.values() and config != "simple":
        raise ValueError(f"bad text search configuration {config!r}")
    cur.execute(
        f"""CREATE TABLE {t["documents"]} (
            document_id TEXT PRIMARY KEY,
            path TEXT,
            filename TEXT,
            source TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            signature TEXT NOT NULL,
            metadata JSONB NOT NULL DEFAULT '{{}}',
            language TEXT,
            bytes BIGINT,
            chunk_count INTEGER,
            added_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )"""
    )
    # The vector right after the key: both are fixed-width and never NULL, so a scan
    # finds it at a fixed offset instead of stepping over a dozen text columns first
    # (the exact scan of a SciFact-sized collection spent a fifth of its time there).
    cur.execute(
        f"""CREATE TABLE {t["chunks"]} (
            key BIGINT PRIMARY KEY,
            embedding vector({int(dim)}) NOT NULL,
            chunk_id TEXT NOT NULL,
            document_id TEXT NOT NULL,
            chunk_index INTEGER NOT NULL,
            text TEXT NOT NULL,
            page INTEGER,
            section TEXT,
            char_start INTEGER,
            char_end INTEGER,
            content_hash TEXT,
            language TEXT,
            terms TEXT[] NOT NULL,
            metadata JSONB NOT NULL DEFAULT '{{}}',
            filename TEXT,
            path TEXT,
            added_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )"""
    )
    # MAIN keeps the vector in the row (text is compressed or moved out first), so
    # an exact scan reads no TOAST pages: 3x faster on SciFact-sized collections.
    cur.execute(f"ALTER TABLE {t['chunks']} ALTER COLUMN embedding SET STORAGE MAIN")
    cur.execute(f"CREATE INDEX {bare}_chunks_doc ON {t['chunks']} (document_id)")
    # No HNSW index yet: below search.EXACT_SCAN_ROWS chunks every search scans exactly,
    # and keeping the graph up to date was the dearest part of an insert. The write
    # that takes the collection past it builds one (build_vector_index).
    # The collection's language decides stemming for ad-hoc full-text SQL
    # (`to_tsvector(<config>, text) @@ ...`); ranking itself uses the postings.
    cur.execute(
        f"CREATE INDEX {bare}_chunks_fts ON {t['chunks']}"
        f" USING gin (to_tsvector('{config}'::regconfig, text))"
    )
    cur.execute(
        f"""CREATE TABLE {t["postings"]} (
            term TEXT NOT NULL,
            key BIGINT NOT NULL,
            tf INTEGER NOT NULL,
            dl INTEGER NOT NULL,
            PRIMARY KEY (term, key) INCLUDE (tf, dl)
        )"""
    )


def build_vector_index(con: Any, schema: str, collection_id: int) -> bool:
    """Build the collection's HNSW index with CREATE INDEX CONCURRENTLY (writers go on
    meanwhile) unless it is valid or another process is building it; True once valid.

    A build killed half-way leaves an invalid index: it is dropped and built again. Only
    the builder holds the collection's session advisory lock, so "invalid and unlocked"
    means dead. ``con`` is in autocommit, outside any transaction.
    """
    name, bare = f"{schema}.c{collection_id}_chunks_hnsw", f"c{collection_id}_chunks_hnsw"
    chunks = table_names(schema, collection_id)["chunks"]
    if not con.execute(
        "SELECT pg_try_advisory_lock(%s, %s)", [LOCK_INDEX, collection_id]
    ).fetchone()[0]:
        return False  # another process is building it
    try:
        row = con.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name]
        ).fetchone()
        if row is not None and row[0]:
            return True
        if row is not None:
            con.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        con.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {bare} ON {chunks}"
            " USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
        )
        return True
    finally:
        con.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_INDEX, collection_id])


def drop_collection_tables(cur: Any, schema: str, collection_id: int) -> None:
    for name in table_names(schema, collection_id).values():
        cur.execute(f"DROP TABLE IF EXISTS {name}")


def _m1_catalog(cur: Any) -> None:
    cur.execute(
        """CREATE TABLE IF NOT EXISTS hybridkb.hybridkb_workspaces (
            id SERIAL PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )"""
    )
    cur.execute(
        """CREATE TABLE IF NOT EXISTS hybridkb.hybridkb_collections (
            id BIGSERIAL PRIMARY KEY,
            workspace TEXT NOT NULL,
            workspace_id INTEGER NOT NULL REFERENCES hybridkb.hybridkb_workspaces (id),
            name TEXT NOT NULL,
            model TEXT NOT NULL,
            dim INTEGER NOT NULL,
            chunking JSONB NOT NULL,
            language TEXT NOT NULL,
            text_config TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            generation BIGINT NOT NULL DEFAULT 0,
            n_chunks BIGINT NOT NULL DEFAULT 0,
            total_len BIGINT NOT NULL DEFAULT 0,
            UNIQUE (workspace, name)
        )"""
    )


def _m2_inline_vectors(cur: Any) -> None:
    """Existing collections keep new vectors in the row (see create_collection_tables)."""
    cur.execute(
        "SELECT c.id, w.id FROM hybridkb.hybridkb_collections c"
        " JOIN hybridkb.hybridkb_workspaces w ON w.id = c.workspace_id"
    )
    for collection_id, workspace_id in cur.fetchall():
        t = table_names(workspace_schema(int(workspace_id)), int(collection_id))
        cur.execute(f"ALTER TABLE {t['chunks']} ALTER COLUMN embedding SET STORAGE MAIN")


# Append only: each entry moves the schema one version forward. A step that
# changes per-collection tables must loop over hybridkb_collections itself.
def _m3_embedding_recipe(cur: Any) -> None:
    # NULL for existing collections: float32 vectors made by sentence-transformers.
    cur.execute(
        "ALTER TABLE hybridkb.hybridkb_collections ADD COLUMN IF NOT EXISTS embedding JSONB"
    )


def _m4_sources_and_file_states(cur: Any) -> None:
    # What each collection was added from and each file's size/mtime/hash when read.
    create_source_tables(cur)


def _m5_source_synced_at(cur: Any) -> None:
    # When an add or a sync last walked each source whole (NULL: not since this column).
    cur.execute(
        "ALTER TABLE hybridkb.hybridkb_sources ADD COLUMN IF NOT EXISTS synced_at TIMESTAMPTZ"
    )


MIGRATIONS: list[Callable[[Any], None]] = [
    _m1_catalog,
    _m2_inline_vectors,
    _m3_embedding_recipe,
    _m4_sources_and_file_states,
    _m5_source_synced_at,
]


def current_version(cur: Any) -> int:
    cur.execute("SELECT to_regclass('hybridkb.hybridkb_meta') IS NOT NULL")
    if not cur.fetchone()[0]:
        return 0
    cur.execute("SELECT value FROM hybridkb.hybridkb_meta WHERE key = %s", [SCHEMA_VERSION_KEY])
    row = cur.fetchone()
    return int(row[0]) if row else 0


def migrate(conn: Any) -> int:
    """Apply pending migrations in one transaction under an advisory lock; return the version.

    Concurrent first connections serialise on the lock, so each step runs once.
    """
    with conn.cursor() as cur:
        version = current_version(cur)
    check_schema_version(version, len(MIGRATIONS))
    if version == len(MIGRATIONS):
        return version
    # A session lock taken outside the transaction: a transaction that began before
    # another process committed its DDL can keep stale catalog caches and trip
    # over "already exists" even with IF NOT EXISTS.
    conn.execute("SELECT pg_advisory_lock(%s, 0)", [LOCK_MIGRATE])
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("CREATE SCHEMA IF NOT EXISTS hybridkb")
            cur.execute(
                "CREATE TABLE IF NOT EXISTS hybridkb.hybridkb_meta"
                " (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            version = current_version(cur)  # another process may have migrated meanwhile
            for step in MIGRATIONS[version:]:
                step(cur)
            cur.execute(
                "INSERT INTO hybridkb.hybridkb_meta (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [SCHEMA_VERSION_KEY, str(len(MIGRATIONS))],
            )
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, 0)", [LOCK_MIGRATE])
    return len(MIGRATIONS)
