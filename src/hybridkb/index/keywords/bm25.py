"""BM25 ranking over :class:`~.postings.Postings`: one accumulation over the query's postings.

Scores are Okapi BM25 with Lucene's idf, ``ln(1 + (N - df + 0.5) / (df + 0.5))``,
times ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``; N, df and avgdl
always describe the live documents, and every score is computed in float64 in the
same operation order (terms in query order), so results are bit-identical whatever
path computed them (:func:`dense_scores` is the reference).

A top-k query adds every posting of its terms into one array indexed by row, in one
``np.bincount`` (a C loop that adds each row's contributions in the order given, so in
query order: the exact scores), and keeps the best with a sampled threshold
(``selection.py``) instead of partitioning every row. About 15 numpy calls per query
whatever its number of terms. It replaced a MaxScore loop (~8 numpy calls per term,
holding the GIL between them), which could skip little on the synthetic collections
of bench/search.py (SciFact's unigram distribution: a top document there holds many
query terms rather than a rare one): per query CPU p50 1.37 -> 0.40 ms at 100k chunks,
11.0 -> 8.2 ms at 1M (where the rare queries with 2M postings take ~40 ms against
MaxScore's ~15: memory-bound, see bench/README.md). That pass now runs one block of
rows at a time so its arrays stay in cache, and keeps the best rows block by block
(``blocks.py``: 1M p50 8.3 -> 4.5 ms, p95 26.6 -> 8.1 ms; 100k p50 0.93 -> 0.79 ms,
p95 4.3 -> 1.4 ms; bench/keyword_1m.py). A query whose postings are few beside the
rows adds them into a per-thread scratch array and reads back only the rows it touched.

Searches may run concurrently (each thread has its own scratch buffers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import ConfigError
from ..selection import at_least
from . import blocks
from .arrays import IntArray
from .postings import PostingList, Postings

FEW_ALLOWED = 16  # allowed keys under 1/16 of the rows are scored one by one
# A query with fewer postings than rows / SPARSE adds them into the scratch and reads back
# the rows it touched; more, and scoring every row in blocks (blocks.py) is cheaper.
# Measured (SciFact test queries, CPU): at 100k rows the scratch wins below rows / 8
# (0.35 against 0.6 ms at rows / 16 to rows / 8), at 1M rows the blocks win from rows / 32
# (the scratch no longer fits in cache): 8 keeps the smaller collections' choice.
SPARSE = 8
LOOKUP_DENSE = 12  # a list shorter than 12x the candidates is gathered, not bisected


def search(
    p: Postings, terms: Sequence[str], k: int, *, allowed: npt.ArrayLike | None = None
) -> list[tuple[int, float]]:
    """Rank live documents by BM25 against the query terms.

    Args:
        terms: Query terms (as from ``analysis.analyze_query``); repeats count once.
        k: Maximum number of hits.
        allowed: int64 keys that may be returned; None allows every key.

    Returns:
        Up to k ``(key, score)`` pairs, score descending, ties by key ascending.
        With ``allowed``, exactly ``min(k, allowed documents matching a term)``.

    Raises:
        ConfigError: k is negative.
    """
    if k < 0:
        raise ConfigError(f"k must be >= 0, got {k}")
    tids = p.term_ids(terms) if k and len(p) else []
    if not tids:
        return []
    keys = p.keys.data
    lists, weights = p.lists(tids), p.weights(tids)
    if allowed is None:
        rows, scores = best_rows(p, lists, weights, k)
        return top_k(keys[rows], scores, k)
    pool = p.rows_of(np.asarray(allowed, dtype=np.int64).ravel())
    if len(pool) * FEW_ALLOWED < p.keys.size:
        # Few allowed keys: score their rows directly.
        scores = exact(p, lists, weights, pool)
    else:
        scores = row_scores(p, lists, weights).take(pool)
    hit = at_least(scores, k, above=0.0)
    return top_k(keys[pool[hit]], scores[hit], k)


def best_rows(
    p: Postings, lists: list[PostingList], weights: list[float], k: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Live rows holding the k best scores (and every tie of the k-th), with their exact
    scores, unordered."""
    if sum(len(rows) for _, rows, _, _ in lists) * SPARSE >= p.keys.size:
        return blocks.best_rows(p, lists, weights, k)
    scratch, slots = p.scratch_for()
    rows, tf, weight = concatenated(lists, weights)
    np.add.at(scratch, rows, p.contrib(weight, rows, tf))  # in index order, as bincount
    try:
        rows = rows[first_seen(slots, rows)]
        scores = scratch.take(rows)
    finally:
        scratch.put(rows, 0.0)
    if p.dead:
        live = p.live.data.take(rows)
        rows, scores = rows[live], scores[live]
    best = at_least(scores, k)
    return rows[best], scores[best]


def row_scores(p: Postings, lists: list[PostingList], weights: list[float]) -> np.ndarray[Any, Any]:
    """Every row's exact score (0 for rows matching no term and for tombstones)."""
    return blocks.row_scores(p, lists, weights)


def concatenated(
    lists: list[PostingList], weights: list[float]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The lists' rows, tfs and term weights, one entry per posting, in query order."""
    rows = np.concatenate([item[1] for item in lists])
    tf = np.concatenate([item[2] for item in lists])
    weight = np.repeat(
        np.asarray([weights[j] for j, _, _, _ in lists]), [len(item[1]) for item in lists]
    )
    return rows, tf, weight


def first_seen(slots: np.ndarray[Any, Any], rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Positions of the first occurrence of each distinct row in ``rows`` (through the
    zeroed per-row ``slots``, left zeroed): no sort, which numpy runs on AVX-512 at a
    few times its cost elsewhere (``selection.py``)."""
    order = np.arange(1, len(rows) + 1, dtype=np.int32)
    slots.put(rows[::-1], order[::-1])  # later puts win: each row keeps its first position
    try:
        return np.flatnonzero(slots.take(rows) == order)
    finally:
        slots.put(rows, 0)


def find(
    p: Postings, rows: np.ndarray[Any, Any], cand: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Where the sorted candidate rows occur in one sorted posting list.

    Returns (indexes into ``cand``, indexes into ``rows``) of the common rows.
    """
    if not len(rows) or not len(cand):
        empty = np.empty(0, np.int64)
        return empty, empty
    if len(rows) < LOOKUP_DENSE * len(cand):
        # Gather a slot map: O(len(rows)) with sequential access.
        _, slots = p.scratch_for()
        slots.put(cand, np.arange(1, len(cand) + 1, dtype=np.int32))
        try:
            got = slots.take(rows)
        finally:
            slots.put(cand, 0)
        at = np.flatnonzero(got)
        return got[at].astype(np.int64) - 1, at
    # cand in the list's dtype: a mixed-dtype searchsorted copies the whole list first.
    pos = np.searchsorted(rows, cand.astype(rows.dtype, copy=False))
    np.minimum(pos, len(rows) - 1, out=pos)
    hit = np.flatnonzero(rows.take(pos) == cand)
    return hit, pos[hit]


def exact(
    p: Postings, lists: list[PostingList], weights: list[float], cand: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Exact BM25 scores of sorted candidate rows, terms added in query order."""
    scores = np.zeros(len(cand))
    term = np.zeros(len(cand))
    previous = -1
    for j, rows, tf16, _ in lists:
        if j != previous and previous >= 0:
            scores += term  # a term's lists hold disjoint rows: one value per row
            term[:] = 0.0
        previous = j
        at, pos = find(p, rows, cand)
        if len(at):
            term[at] = p.contrib(weights[j], rows.take(pos), tf16.take(pos))
    if previous >= 0:
        scores += term
    return scores


def dense_scores(p: Postings, tids: list[int]) -> np.ndarray[Any, Any]:
    """Dense BM25 scores per row (tombstones included) for known term ids.

    Every posting, one term at a time: the reference the search is tested and
    benchmarked against (tests/index/test_keyword_index.py, bench/index_scale.py).
    """
    norms = p.norms()
    # float64 throughout: the Postgres backend computes the same scores in SQL
    # and the two must agree to 1e-6.
    scores = np.zeros(p.keys.size)
    n_docs = len(p)
    df = p.df.data
    for tid in tids:
        d = int(df[tid])
        weight = math.log1p((n_docs - d + 0.5) / (d + 0.5)) * (p.k1 + 1.0)
        for rows, tf16 in p.postings(tid):
            # weight * tf / (tf + norm), in place; take/put beat fancy indexing.
            tf = tf16.astype(np.float64)
            denom = norms.take(rows)
            denom += tf
            np.divide(tf, denom, out=tf)
            tf *= weight
            acc = scores.take(rows)
            acc += tf
            scores.put(rows, acc)  # rows of one term are distinct, so no lost adds
    return scores


def matching(p: Postings, terms: Sequence[str]) -> IntArray:
    """Return the keys of live documents containing at least one of the terms.

    Args:
        terms: Query terms.

    Returns:
        Sorted int64 keys.
    """
    tids = p.term_ids(terms)
    hit = np.zeros(p.keys.size, np.bool_)
    for tid in tids:
        for rows, _ in p.postings(tid):
            hit[rows] = True
    hit &= p.live.view()
    return np.sort(p.keys.view()[hit])


def top_k(keys: IntArray, scores: np.ndarray[Any, Any], k: int) -> list[tuple[int, float]]:
    """The k best (key, score) pairs: score descending, then key ascending."""
    if len(scores) > k:
        # Every tie of the k-th score is kept, so the key tie-break is global.
        near = at_least(scores, k)
        keys, scores = keys[near], scores[near]
    order = np.lexsort((keys, -scores))[:k]
    return list(zip(keys[order].tolist(), scores[order].tolist(), strict=False))
