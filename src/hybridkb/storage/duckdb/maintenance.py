"""Maintenance on a DuckDB store: integrity checks and repair, re-embedding, compaction.

Kept apart from duckdb.py so the hot path stays small. Every function takes the
open :class:`DuckDBStorage` and works under its lock.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from ...embedders import Embedder, recipe_of, validate_vectors
from ...errors import BackendError, ConfigError
from ...index.derived import snapshot_paths
from ...lifecycle import raise_if_stopped
from ...text.chunking import contextual_text
from ..base import CollectionHealth, CollectionRecord, Finding
from ..boundary import driver_errors, first_line
from .bulk import insert_vectors
from .connection import side_folder, translate
from .engine import Engine
from .memory import Derived
from .rows import bump_generation, delete_rows, key_list_sql
from .schema import (
    index_vector_keys,
    key_index_misses,
    missing_key_indexes,
    rebuild_key_indexes,
    table_names,
)
from .stream import drop_stale_stages, stale_stages

GRAPH_NODES = "hybridkb_graph_nodes"
COMPACT_ALIAS = "hkb_compact"  # the compacted copy while it is attached
# Rows per key-indexed table looked up through its index by doctor (newest and random).
KEY_INDEX_SAMPLE = 512
GRAPH_EDGES = "hybridkb_graph_edges"


def _table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
        ).fetchone()[0]  # type: ignore[index]
    )


@dataclass
class _TableProblems:
    """What the integrity queries found in a collection's tables (and what repair needs)."""

    orphan_chunks: list[tuple[Any, ...]]
    orphan_vectors: list[tuple[Any, ...]]
    bad_docs: list[str]  # with missing, extra, NaN or zero vectors
    graph_orphans: int
    stale_keys: int


def check_collection(
    engine: Engine, derived: Derived, coll: CollectionRecord, *, repair: bool
) -> CollectionHealth:
    """Tables vs each other, vs the derived indexes and the graph's provenance."""
    health = CollectionHealth(coll.name)
    with engine.lock:
        found = _table_problems(engine.con, coll)
    health.findings += _table_findings(found)
    index_problem = _check_indexes(engine, derived, coll)
    health.findings.append(
        Finding("derived_indexes", int(bool(index_problem)), index_problem or "in step")
    )
    staged = stale_stages(engine, coll.id)
    health.findings.append(
        Finding(
            "staged_leftovers",
            len(staged),
            "files staged by a streamed add that was killed (nothing reads them; repair deletes them): "
            + ", ".join(p.name for p in staged[:3]),
        )
    )
    if repair and not health.ok:
        if found.stale_keys:
            rebuild_indexes(engine, coll)
        if any(
            f.count for f in health.findings if f.check not in ("staged_leftovers", "key_indexes")
        ):
            _repair(
                engine,
                derived,
                coll,
                found.orphan_chunks,
                found.orphan_vectors,
                found.bad_docs,
                found.graph_orphans,
            )
        drop_stale_stages(engine, coll.id)
        for f in health.findings:
            f.repaired = f.count > 0
    return health


def _table_problems(con: duckdb.DuckDBPyConnection, coll: CollectionRecord) -> _TableProblems:
    """Run the integrity queries of one collection's tables (under the engine's lock)."""
    t = table_names(coll.id)

    def q(sql: str) -> list[tuple[Any, ...]]:
        return con.execute(sql).fetchall()

    orphan_chunks = q(
        f"SELECT key FROM {t['chunks']} c WHERE NOT EXISTS"
        f" (SELECT 1 FROM {t['documents']} d WHERE d.document_id = c.document_id)"
    )
    orphan_vectors = q(
        f"SELECT key FROM {t['vectors']} v WHERE NOT EXISTS (SELECT 1 FROM {t['chunks']} c WHERE c.key = v.key)"
    )
    missing_vectors = q(
        f"SELECT DISTINCT document_id FROM {t['chunks']} c WHERE NOT EXISTS"
        f" (SELECT 1 FROM {t['vectors']} v WHERE v.key = c.key)"
    )
    miscounted = q(
        f"SELECT d.document_id FROM {t['documents']} d LEFT JOIN (SELECT document_id, count(*) AS n"
        f" FROM {t['chunks']} GROUP BY document_id) c USING (document_id)"
        " WHERE coalesce(c.n, 0) <> d.chunk_count"
    )
    bad_vectors = q(
        f"SELECT DISTINCT c.document_id FROM {t['vectors']} v JOIN {t['chunks']} c USING (key)"
        " WHERE list_bool_or(list_transform(v.embedding, x -> x IS NULL OR isnan(x) OR isinf(x)))"
        " OR list_sum(list_transform(v.embedding, x -> coalesce(x * x, 0))) < 1e-12"
    )
    stale_keys = missing_key_indexes(con, coll.id) + key_index_misses(
        con, coll.id, KEY_INDEX_SAMPLE
    )
    graph_orphans = 0
    if _table_exists(con, GRAPH_NODES):
        graph_orphans = int(
            con.execute(
                f"SELECT count(*) FROM {GRAPH_NODES} g WHERE g.collection_id = ? AND g.document_id IS NOT NULL"
                f" AND NOT EXISTS (SELECT 1 FROM {t['documents']} d WHERE d.document_id = g.document_id)",
                [coll.id],
            ).fetchone()[0]  # type: ignore[index]
        )
    return _TableProblems(
        orphan_chunks,
        orphan_vectors,
        sorted({r[0] for r in missing_vectors + miscounted + bad_vectors}),
        graph_orphans,
        stale_keys,
    )


def _table_findings(found: _TableProblems) -> list[Finding]:
    """The findings of the table checks, in the order doctor reports them."""
    bad_docs = found.bad_docs
    return [
        Finding("orphan_chunks", len(found.orphan_chunks), "chunks whose document row is missing"),
        Finding("orphan_vectors", len(found.orphan_vectors), "vectors whose chunk is missing"),
        Finding(
            "incomplete_documents",
            len(bad_docs),
            "documents with missing, extra, NaN or zero vectors: "
            + ", ".join(bad_docs[:10])
            + ("" if not bad_docs else "; re-add them after repair"),
        ),
        Finding(
            "graph_orphans", found.graph_orphans, "graph nodes from documents that no longer exist"
        ),
        Finding(
            "key_indexes",
            found.stale_keys,
            "key indexes missing, or rows they do not find (a delete of such rows would"
            " invalidate the database; repair builds the indexes again)",
        ),
    ]


def _check_indexes(engine: Engine, derived: Derived, coll: CollectionRecord) -> str:
    t = table_names(coll.id)
    with engine.lock:
        keys = {int(r[0]) for r in engine.con.execute(f"SELECT key FROM {t['chunks']}").fetchall()}
        loaded = derived.indexes.get(coll.id)
        record = engine.record_by_id(coll.id)
    problems = []
    if loaded is not None:
        if len(loaded.keyword) != len(keys) or len(loaded.vector) != len(keys):
            problems.append("in-memory index size differs from the tables")
        elif any(k not in loaded.vector for k in list(keys)[:1000]):
            problems.append("in-memory vector index misses chunks")
    folder = engine.snapshot_dir
    if folder is not None and record is not None:
        meta_path = snapshot_paths(folder, coll.id)["meta"]
        if meta_path.exists():
            try:
                meta = json.loads(meta_path.read_text())
                if meta.get("generation") != record.generation:
                    problems.append("saved index snapshot is stale (will be rebuilt on next use)")
            except (OSError, ValueError):
                problems.append("saved index snapshot is unreadable")
    return "; ".join(problems)


def _repair(
    engine: Engine,
    derived: Derived,
    coll: CollectionRecord,
    orphan_chunks: list[tuple[Any, ...]],
    orphan_vectors: list[tuple[Any, ...]],
    bad_docs: list[str],
    graph_orphans: int,
) -> None:
    t = table_names(coll.id)

    def fix(con: duckdb.DuckDBPyConnection) -> None:
        keys = [int(r[0]) for r in orphan_chunks] + [int(r[0]) for r in orphan_vectors]
        if keys:
            in_keys, params = key_list_sql(keys)
            con.execute(f"DELETE FROM {t['chunks']} WHERE key IN {in_keys}", params)
            con.execute(f"DELETE FROM {t['vectors']} WHERE key IN {in_keys}", params)
        if bad_docs:
            delete_rows(con, coll, bad_docs)
        if graph_orphans:
            docs = f"(SELECT document_id FROM {t['documents']})"
            con.execute(
                f"DELETE FROM {GRAPH_EDGES} WHERE collection_id = ? AND document_id IS NOT NULL"
                f" AND document_id NOT IN {docs}",
                [coll.id],
            )
            con.execute(
                f"DELETE FROM {GRAPH_NODES} WHERE collection_id = ? AND document_id IS NOT NULL"
                f" AND document_id NOT IN {docs}",
                [coll.id],
            )
        bump_generation(con, coll)

    engine.transaction(fix)
    invalidate_indexes(engine, derived, coll)


def rebuild_indexes(engine: Engine, coll: CollectionRecord) -> None:
    """Build the key indexes again and write them to the file at once."""
    with engine.lock:
        rebuild_key_indexes(engine.con, coll.id)
        # Not left in the WAL: DuckDB 1.5.5 has failed to replay index DDL (duckdb#22044).
        engine.con.execute("CHECKPOINT")


def invalidate_indexes(engine: Engine, derived: Derived, coll: CollectionRecord) -> None:
    """Forget in-memory and saved indexes: the next search rebuilds them from the tables."""
    derived.discard(coll)  # memory, the snapshot and the rows file


def reembed_collection(
    engine: Engine,
    derived: Derived,
    coll: CollectionRecord,
    embedder: Embedder,
    *,
    signature: str,
    batch: int = 256,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Embed every chunk again into a side table, then switch over in one transaction.

    Searches keep using the old vectors until the switch; chunks added or deleted
    meanwhile are caught up inside the switching transaction.
    """
    t = table_names(coll.id)
    side = f"{t['vectors']}_next"
    dim = int(embedder.dim)
    con = engine.con
    with engine.lock:
        con.execute(f"DROP TABLE IF EXISTS {side}")
        con.execute(f"CREATE TABLE {side} (key BIGINT NOT NULL, embedding FLOAT[{dim}] NOT NULL)")
        (total,) = con.execute(f"SELECT count(*) FROM {t['chunks']}").fetchone()  # type: ignore[misc]

    def pending(c: duckdb.DuckDBPyConnection, limit: int) -> list[tuple[Any, ...]]:
        return c.execute(
            f"SELECT key, text, section FROM {t['chunks']} c WHERE NOT EXISTS"
            f" (SELECT 1 FROM {side} s WHERE s.key = c.key) ORDER BY key LIMIT ?",
            [limit],
        ).fetchall()

    def insert(c: duckdb.DuckDBPyConnection, rows: list[tuple[Any, ...]]) -> None:
        # Embedded as at ingest: the section before the text.
        texts = [contextual_text(r[2], r[1]) for r in rows]
        vectors = validate_vectors(embedder.embed_documents(texts), dim)
        insert_vectors(c, side, [int(r[0]) for r in rows], vectors)

    done = 0
    while True:
        # A stop the driver swallowed (DuckDB takes SIGINT/SIGTERM's interrupt for its
        # query's) still ends the re-embedding here, before the switch: the old vectors stay.
        raise_if_stopped()
        with engine.lock:
            rows = pending(con, batch)
        if not rows:
            break
        engine.transaction(functools.partial(insert, rows=rows))
        done += len(rows)
        if progress is not None:
            progress(done, int(total))

    def switch(c: duckdb.DuckDBPyConnection) -> None:
        while rows := pending(c, batch):
            insert(c, rows)
        c.execute(f"DELETE FROM {side} WHERE key NOT IN (SELECT key FROM {t['chunks']})")
        c.execute(f"DROP TABLE {t['vectors']}")
        c.execute(f"ALTER TABLE {side} RENAME TO {t['vectors']}")
        index_vector_keys(c, coll.id)
        c.execute(
            "UPDATE hybridkb_collections SET model = ?, dim = ?, embedding = ? WHERE id = ?",
            [embedder.model_id, dim, json.dumps(recipe_of(embedder).to_dict()), coll.id],
        )
        c.execute(f"UPDATE {t['documents']} SET signature = ?", [signature])
        bump_generation(c, coll)

    engine.transaction(switch)
    invalidate_indexes(engine, derived, coll)
    return done


def compact_database(engine: Engine, derived: Derived) -> dict[str, int]:
    """Rewrite the file without dead space (DuckDB does not shrink files in place).

    The copy is written in a private folder beside the file (connection.side_folder) and
    renamed over it. If anything fails (a full disk), the copy is detached and deleted
    and the file is as it was, so the next compact (the automatic one at close, a
    server's for all its clients) starts afresh.
    """
    if engine.path == ":memory:" or engine.read_only:
        raise ConfigError("compact: needs a database file opened for writing")
    path = Path(engine.path).expanduser().resolve()
    with engine.lock:
        engine.con.execute("CHECKPOINT")
        before = path.stat().st_size
        folder = None
        try:
            folder = side_folder(path, "compact")  # a killed compact's is deleted first
            tmp = folder / "copy.duckdb"
            _write_copy(engine.con, tmp)
            derived.rows.stop()
            derived.save()
            engine.reopen(lambda: os.replace(tmp, path))
        except BaseException as exc:
            _detach_copy(engine.con, exc)
            if isinstance(exc, (duckdb.Error, OSError)):
                raise BackendError(
                    f"{path}: compaction failed ({first_line(exc)}); the database is unchanged"
                ) from exc
            raise
        finally:
            if folder is not None:  # nothing left once the copy has replaced the file
                shutil.rmtree(folder, ignore_errors=True)
        derived.clear()
        engine.con.execute("DELETE FROM hybridkb_meta WHERE key = 'dead_chunks'")
        after = path.stat().st_size
    return {"bytes_before": before, "bytes_after": after}


def _write_copy(con: duckdb.DuckDBPyConnection, tmp: Path) -> None:
    """Copy the open database into a new file ``tmp``."""
    (current,) = con.execute("SELECT current_database()").fetchone()  # type: ignore[misc]
    quoted = str(tmp).replace("'", "''")
    con.execute(f"ATTACH '{quoted}' AS {COMPACT_ALIAS}")
    con.execute(f'COPY FROM DATABASE "{current}" TO {COMPACT_ALIAS}')
    con.execute(f"DETACH {COMPACT_ALIAS}")


def _detach_copy(con: duckdb.DuckDBPyConnection, cause: BaseException) -> None:
    """Detach the copy if it is still attached (a failure noted on ``cause``, not raised):
    attached, it would make every later compact of this process fail."""
    try:
        con.execute(f"DETACH DATABASE IF EXISTS {COMPACT_ALIAS}")
    except duckdb.Error as failed:
        cause.add_note(f"detaching the copy failed too: {failed}")


@driver_errors(translate)
class DuckDBMaintenance:
    """The :class:`~hybridkb.storage.base.Maintenance` of a DuckDB store."""

    def __init__(self, engine: Engine, derived: Derived) -> None:
        self.engine = engine
        self.derived = derived

    def check(self, coll: CollectionRecord, *, repair: bool) -> CollectionHealth:
        return check_collection(self.engine, self.derived, coll, repair=repair)

    def reembed(
        self,
        coll: CollectionRecord,
        embedder: Embedder,
        *,
        signature: str,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        return reembed_collection(
            self.engine, self.derived, coll, embedder, signature=signature, progress=progress
        )

    def compact(self) -> dict[str, int]:
        return compact_database(self.engine, self.derived)
