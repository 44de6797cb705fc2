"""Maintenance verbs over a knowledge base: doctor, re-embed, compact.

They run where the backend offers them (``Storage.maintenance``, and
``Storage.reembedding`` for reembed); elsewhere they refuse with a message saying
so. ``doctor(kb, ...)`` is ``kb.doctor(...)``: on a client of another process
(hybridkb.serve) that process runs it; the ``*_here`` functions are what a knowledge
base that opened the store runs.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .ingest import signature
from .kb import KnowledgeBase, check_name
from .storage.base import CollectionHealth, Maintenance

if TYPE_CHECKING:
    from .api import KnowledgeBaseAPI


def _maintenance(kb: KnowledgeBase, verb: str) -> Maintenance:
    found = kb.storage.maintenance
    if found is None:
        raise ConfigError(
            f"{verb}: the {kb.storage.capabilities.name} backend does not offer it; "
            "it runs on the embedded DuckDB and the PostgreSQL backends"
        )
    return found


def doctor(
    kb: KnowledgeBaseAPI, name: str | None = None, *, repair: bool = False
) -> list[CollectionHealth]:
    """Check one or every collection of the workspace; ``repair=True`` fixes what it finds."""
    return kb.doctor(name, repair=repair)


def reembed(
    kb: KnowledgeBaseAPI, name: str, *, model: str | None = None, progress: bool = True
) -> dict[str, Any]:
    """Re-embed a collection with ``model`` (default: its own) and switch over atomically."""
    return kb.reembed(name, model=model, progress=progress)


def compact(kb: KnowledgeBaseAPI) -> dict[str, int]:
    """Reclaim space left by deletes and re-ingests."""
    return kb.compact()


def doctor_here(
    kb: KnowledgeBase, name: str | None = None, *, repair: bool = False
) -> list[CollectionHealth]:
    """:func:`doctor` in the process that opened the store."""
    tools = _maintenance(kb, "doctor")
    records = [kb.record(check_name(name))] if name else kb.storage.list_collections(kb.workspace)
    return [tools.check(r, repair=repair) for r in records]


def reembed_here(
    kb: KnowledgeBase, name: str, *, model: str | None = None, progress: bool = True
) -> dict[str, Any]:
    """:func:`reembed` in the process that opened the store."""
    tools = kb.storage.reembedding
    if tools is None:
        raise ConfigError(
            f"reembed: the {kb.storage.capabilities.name} backend does not offer it yet; copy "
            "the knowledge base to a DuckDB file (hybridkb copy --to kb.duckdb), reembed "
            "there, and copy it to a new database"
        )
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

    target_sig = signature(
        type(record)(**{**record.__dict__, "model": embedder.model_id, "dim": embedder.dim})
    )
    try:
        count = tools.reembed(record, embedder, signature=target_sig, progress=tick)
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


def compact_here(kb: KnowledgeBase) -> dict[str, int]:
    """:func:`compact` in the process that opened the store."""
    return _maintenance(kb, "compact").compact()
