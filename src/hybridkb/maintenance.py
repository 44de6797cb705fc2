"""Maintenance verbs over a knowledge base: doctor, re-embed, compact."""

from __future__ import annotations

import sys
from typing import Any

from .errors import ConfigError
from .ingest import signature
from .kb import KnowledgeBase, check_name
from .storage.duckdb import DuckDBStorage
from .storage.duckdb_maintenance import (
    CollectionHealth,
    check_collection,
    compact_database,
    reembed_collection,
)


def _duckdb(kb: KnowledgeBase, verb: str) -> DuckDBStorage:
    if not isinstance(kb.storage, DuckDBStorage):
        raise ConfigError(f"{verb}: only the embedded DuckDB backend supports this yet")
    return kb.storage


def doctor(
    kb: KnowledgeBase, name: str | None = None, *, repair: bool = False
) -> list[CollectionHealth]:
    """Check one or every collection of the workspace; ``repair=True`` fixes what it finds."""
    storage = _duckdb(kb, "doctor")
    records = [kb.record(check_name(name))] if name else storage.list_collections(kb.workspace)
    return [check_collection(storage, r, repair=repair) for r in records]


def reembed(
    kb: KnowledgeBase, name: str, *, model: str | None = None, progress: bool = True
) -> dict[str, Any]:
    """Re-embed a collection with ``model`` (default: its own) and switch over atomically."""
    storage = _duckdb(kb, "reembed")
    record = kb.record(check_name(name))
    embedder = kb.embedder(model or record.model)
    bar: Any = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=0, unit="chunk", file=sys.stderr, leave=False)

    def tick(done: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = done
            bar.refresh()

    target = record
    target_sig = signature(
        type(record)(**{**record.__dict__, "model": embedder.model_id, "dim": embedder.dim})
    )
    try:
        count = reembed_collection(storage, target, embedder, signature=target_sig, progress=tick)
    finally:
        if bar is not None:
            bar.close()
    return {
        "collection": record.name,
        "model": embedder.model_id,
        "dim": embedder.dim,
        "chunks": count,
        "previous_model": record.model,
    }


def compact(kb: KnowledgeBase) -> dict[str, int]:
    """Reclaim space left by deletes and re-ingests."""
    return compact_database(_duckdb(kb, "compact"))
