"""Maintenance verbs over a knowledge base: doctor, re-embed, compact.

They run where the backend offers them (``Storage.maintenance``); elsewhere they
refuse with a message saying so. On a client of another process (hybridkb.serve)
they run in that process, which holds the file.
"""

from __future__ import annotations

import sys
from typing import Any

from .errors import ConfigError
from .ingest import signature
from .kb import KnowledgeBase, check_name
from .storage.base import CollectionHealth, Maintenance


def _maintenance(kb: KnowledgeBase, verb: str) -> Maintenance:
    found = kb.storage.maintenance if kb.storage.capabilities.maintenance else None
    if found is None:
        raise ConfigError(
            f"{verb}: the {kb.storage.capabilities.name} backend does not offer it; "
            "it runs on the embedded DuckDB and the PostgreSQL backends"
        )
    return found


def doctor(
    kb: KnowledgeBase, name: str | None = None, *, repair: bool = False
) -> list[CollectionHealth]:
    """Check one or every collection of the workspace; ``repair=True`` fixes what it finds."""
    if kb.is_client:
        return list(kb.call("doctor", name=name, repair=repair))
    tools = _maintenance(kb, "doctor")
    records = [kb.record(check_name(name))] if name else kb.storage.list_collections(kb.workspace)
    return [tools.check(r, repair=repair) for r in records]


def reembed(
    kb: KnowledgeBase, name: str, *, model: str | None = None, progress: bool = True
) -> dict[str, Any]:
    """Re-embed a collection with ``model`` (default: its own) and switch over atomically."""
    if kb.is_client:  # the owner embeds (with no progress bar here)
        return dict(kb.call("reembed", name=name, model=model))
    tools = _maintenance(kb, "reembed")
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


def compact(kb: KnowledgeBase) -> dict[str, int]:
    """Reclaim space left by deletes and re-ingests."""
    if kb.is_client:
        return dict(kb.call("compact"))
    return _maintenance(kb, "compact").compact()
