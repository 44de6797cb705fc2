"""Search orchestration: legs per collection, fusion across them, hits with citations.

Backends only rank; this module embeds the query once per model, asks each
collection for its legs, fuses them with ``hybridkb.search.fusion`` (the two passes of
a hybrid search, with vector feedback between them, in ``passes.py``) and dresses the
winners as :class:`Hit` records. A hybrid search runs its vector legs in a thread of
its own (``legs.py``) beside its keyword legs, and holds the candidates as arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ..embedders import Embedder, cache_key
from ..errors import ConfigError
from ..limits import MAX_K, MAX_QUERY_CHARS
from ..results import SEARCH_MODES, Hit
from ..settings import Settings
from ..storage.base import (
    ChunkRecord,
    CollectionRecord,
    FusionSpec,
    HybridSearch,
    Storage,
    document_node_id,
)
from ..text.analysis import analyze_query
from ..text.filters import Filter, parse_filter
from . import fusion, passes
from .legs import HELPER, Key, Leg
from .rerank import Reranker, rerank_hits

MODES = SEARCH_MODES
__all__ = ["MODES", "Key", "Target", "feedback_leg", "hits_for", "run_search", "search_by_vector"]


@dataclass
class Target:
    """One collection to search: its record, its embedder, and the languages its keyword
    analysis uses for the query."""

    coll: CollectionRecord
    embedder: Embedder
    languages: Sequence[str]


def check_query(query: str, k: int, mode: str) -> None:
    """Refuse an empty or over-long query, a ``k`` outside 1..``MAX_K``, or an unknown mode.

    Raises:
        ConfigError: Naming the argument and its bounds.
    """
    if not isinstance(query, str) or not query.strip():
        raise ConfigError("query: empty; pass the words or question to search for")
    if len(query) > MAX_QUERY_CHARS:
        raise ConfigError(
            f"query: {len(query):,} characters is too long (limit {MAX_QUERY_CHARS:,}); shorten it"
        )
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise ConfigError(f"k: must be a whole number from 1 to {MAX_K}, got {k!r}")
    if mode not in MODES:
        raise ConfigError(f"mode: unknown mode {mode!r}; use one of {', '.join(MODES)}")


def feedback_leg(
    storage: Storage,
    targets: Sequence[Target],
    qvecs: Mapping[str, np.ndarray],
    candidates: Sequence[tuple[Key, float]],
    best: Sequence[fusion.Fused],
    weight: float,
    depth: int,
    *,
    chunks: int = 1,
) -> list[tuple[Key, float]]:
    """The vector leg again after Rocchio feedback: each model's query vector (``qvecs``,
    keyed by the targets' embedders' :func:`cache_key`: model and recipe) moved
    ``weight`` towards the mean of its ``chunks`` best first-pass chunks (``best``:
    the fused ranking), and every candidate of either leg scored by its cosine with
    the moved query.

    Re-scoring the candidates rather than searching again gave the same quality
    (SciFact train nDCG@10 0.7506 vs 0.7505) at a fraction of the cost; 0.4 was
    chosen on train (0.2: 0.7483, 0.6: 0.7496; more feedback chunks did worse)."""
    pairs = list(dict.fromkeys(key for key, _ in candidates))
    cids = np.fromiter((cid for cid, _ in pairs), np.int64, len(pairs))
    keys = np.fromiter((key for _, key in pairs), np.int64, len(pairs))
    at = {key: i for i, key in enumerate(pairs)}
    ranking = np.fromiter((at[cast(Key, f.key)] for f in best if cast(Key, f.key) in at), np.intp)
    moved, _ = passes.feedback(
        storage, targets, qvecs, cids, keys, passes.Listed(ranking), weight, depth, chunks
    )
    return moved.pairs()


def _vector_legs(
    storage: Storage,
    targets: Sequence[Target],
    query: str,
    mode: str,
    depth: int,
    flt: Filter | None,
) -> tuple[dict[str, np.ndarray], list[Leg]]:
    """The query embedded once per model and recipe (:func:`cache_key`: an int8 and a
    float32 collection of one model each get their own), and the vector (or filter) leg
    of each target."""
    qvecs: dict[str, np.ndarray] = {}
    legs: list[Leg] = []
    if mode == "keyword":
        return qvecs, legs
    for t in targets:
        own = cache_key(t.embedder)
        if own not in qvecs:
            qvecs[own] = t.embedder.embed_query(query)
        qvec = qvecs[own]
        if mode == "filter":
            terms = analyze_query(query, t.languages)
            found = storage.filter_search(t.coll, terms, qvec, depth, flt)
        else:
            found = storage.vector_search(t.coll, qvec, depth, flt)
        legs.append(Leg.of(t.coll.id, found))
    return qvecs, legs


def run_search(
    storage: Storage,
    targets: Sequence[Target],
    query: str,
    *,
    k: int,
    mode: str,
    where: Mapping[str, Any] | str | None,
    settings: Settings,
    reranker: Reranker | None = None,
) -> list[Hit]:
    """Rank chunks of ``targets`` for ``query``; with a ``reranker``, the first
    ``settings.rerank_depth`` (at least ``k``) are re-scored by it and ``k`` kept."""
    check_query(query, k, mode)
    flt: Filter | None = parse_filter(where)
    if not targets:
        return []
    wanted = k
    if reranker is not None:
        k = max(k, settings.rerank_depth)
    depth = max(settings.candidates, k) if mode == "hybrid" else k
    if mode == "hybrid" and len(targets) == 1 and storage.hybrid is not None:
        hits = _store_hybrid(storage, storage.hybrid, targets[0], query, k, depth, flt, settings)
        return hits if reranker is None else rerank_hits(reranker, query, hits, wanted)

    def keyword_legs() -> list[Leg]:
        return [
            Leg.of(
                t.coll.id,
                storage.keyword_search(t.coll, analyze_query(query, t.languages), depth, flt),
            )
            for t in targets
        ]

    # A hybrid search embeds the query and searches the vectors in a thread of its own
    # while this one runs the keyword legs (query analysis included): ONNX Runtime and
    # the vector index release the GIL, so the two legs overlap on two cores, and the
    # keyword legs keep this thread's analysers and score buffers (per thread: a fresh
    # thread would build them again for every search). Where that side is measured to
    # finish sooner here than in a thread (a cached query vector, a small collection),
    # this thread runs it after the keyword legs instead (legs.Helper).
    def vector_side() -> tuple[dict[str, np.ndarray], list[Leg]]:
        return _vector_legs(storage, targets, query, mode, depth, flt)

    # The vector side's cost depends on the collections and where their query vectors
    # come from (a model, a cache): the helper learns it per such kind.
    kind = (id(storage), *((t.coll.id, id(t.embedder)) for t in targets))
    pending = HELPER.start(vector_side, kind) if mode == "hybrid" else None
    try:
        keyword = keyword_legs() if mode in ("hybrid", "keyword") else []
    except BaseException:
        if pending is not None:
            pending.wait()  # no leg outlives its search; this error is the one raised
        raise
    qvecs, vector_legs = pending.result() if pending is not None else vector_side()
    kw = Leg.merged(keyword, depth)
    vec = Leg.merged(vector_legs, depth)
    if mode == "hybrid":
        ranked, kw_ranks, vec_ranks = passes.hybrid_ranking(
            storage, targets, qvecs, kw, vec, k, depth, settings
        )
    else:
        leg = kw if mode == "keyword" else vec
        ranked = leg.pairs(range(min(k, len(leg))))
        only = {key: (rank, score) for rank, (key, score) in enumerate(ranked, start=1)}
        kw_ranks, vec_ranks = (only, {}) if mode == "keyword" else ({}, only)
    hits = hits_for(storage, targets, ranked, kw_ranks, vec_ranks, mode)
    return hits if reranker is None else rerank_hits(reranker, query, hits, wanted)


def _store_hybrid(
    storage: Storage,
    hybrid: HybridSearch,
    target: Target,
    query: str,
    k: int,
    depth: int,
    flt: Filter | None,
    settings: Settings,
) -> list[Hit]:
    """A one-collection hybrid search the store runs whole (``Storage.hybrid``): the same
    legs, fusion and feedback as :func:`_hybrid`, in one round trip."""
    found = hybrid.hybrid_search(
        target.coll,
        analyze_query(query, target.languages),
        target.embedder.embed_query(query),
        k=k,
        depth=depth,
        where=flt,
        fusion=FusionSpec(settings.fusion, settings.rrf_k, settings.vector_feedback),
    )
    cid = target.coll.id
    ranked = [((cid, h.chunk.key), h.score) for h in found]
    kw = {(cid, h.chunk.key): h.keyword for h in found if h.keyword is not None}
    vec = {(cid, h.chunk.key): h.vector for h in found if h.vector is not None}
    rows = {cid: {h.chunk.key: h.chunk for h in found}}
    return hits_for(storage, [target], ranked, kw, vec, "hybrid", rows=rows)


def hits_for(
    storage: Storage,
    targets: Sequence[Target],
    ranked: list[tuple[Any, float]],
    kw_ranks: dict[Any, tuple[int, float]],
    vec_ranks: dict[Any, tuple[int, float]],
    mode: str,
    rows: Mapping[int, Mapping[int, ChunkRecord]] | None = None,
) -> list[Hit]:
    """Dress ranked (collection id, chunk key) pairs as cited hits, in rank order (their
    ``rows`` by collection id and key, fetched here unless given)."""
    by_id = {t.coll.id: t.coll for t in targets}
    if rows is None:
        wanted: dict[int, list[int]] = {}
        for (cid, key), _ in ranked:
            wanted.setdefault(cid, []).append(key)
        rows = {cid: storage.fetch_chunks(by_id[cid], keys) for cid, keys in wanted.items()}
    hits: list[Hit] = []
    for (cid, key), score in ranked:
        row = rows[cid].get(key)
        if row is None:  # deleted between ranking and fetching
            continue
        coll = by_id[cid]
        kwr, vr = kw_ranks.get((cid, key)), vec_ranks.get((cid, key))
        # One display: the user's keys first, a built-in one overwriting its value in place.
        metadata = {
            **row.metadata,
            "filename": row.filename,
            "path": row.path,
            "document_id": row.document_id,
            "page": row.page,
            "section": row.section,
            "chunk_index": row.chunk_index,
            "char_start": row.char_start,
            "char_end": row.char_end,
            "content_hash": row.content_hash,
            "added_at": row.added_at,
            "language": row.language,
        }
        hits.append(
            Hit(
                rank=len(hits) + 1,
                score=float(score),
                text=row.text,
                collection=coll.name,
                document_id=row.document_id,
                chunk_id=row.chunk_id,
                filename=row.filename,
                page=row.page,
                section=row.section,
                metadata=metadata,
                scores={
                    "bm25": float(kwr[1]) if kwr else None,
                    "bm25_rank": kwr[0] if kwr else None,
                    "vector": float(vr[1]) if vr else None,
                    "vector_rank": vr[0] if vr else None,
                    "fused": float(score) if mode == "hybrid" else None,
                    "rerank": None,
                },
                document_node=document_node_id(cid, row.document_id),
            )
        )
    return hits


def search_by_vector(
    storage: Storage,
    target: Target,
    vector: np.ndarray,
    *,
    k: int,
    where: Mapping[str, Any] | str | None,
) -> list[Hit]:
    """Nearest chunks to a query vector the caller embedded (vector mode, no query text)."""
    check_query("(vector)", k, "vector")
    vec = np.asarray(vector, dtype=np.float32).reshape(-1)
    if vec.shape != (target.coll.dim,) or not np.isfinite(vec).all():
        raise ConfigError(
            f"vector: expected {target.coll.dim} finite numbers (the collection's dimension), "
            f"got shape {tuple(vec.shape)}"
        )
    norm = float(np.linalg.norm(vec))
    if norm == 0.0:
        raise ConfigError("vector: all zeros; pass the embedding of a query")
    cid = target.coll.id
    ranked = [
        ((cid, key), s)
        for key, s in storage.vector_search(target.coll, vec / norm, k, parse_filter(where))
    ]
    return hits_for(storage, [target], ranked, {}, fusion.ranks(ranked), "vector")
