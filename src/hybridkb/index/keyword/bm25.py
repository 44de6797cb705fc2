"""BM25 ranking over :class:`~.postings.Postings`: exhaustive, MaxScore-pruned, filtered.

Scores are Okapi BM25 with Lucene's idf, ``ln(1 + (N - df + 0.5) / (df + 0.5))``,
times ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``; N, df and avgdl
always describe the live documents, and every score is computed in float64 in the
same operation order (terms in query order), so results are bit-identical whatever
path computed them. A top-k query is pruned (MaxScore, see :func:`search_pruned`):
the long lists of common terms are only probed for candidates found in the others,
using per-list score bounds cached per base; the exact top k is the same as scoring
every posting (:func:`dense_scores`, kept as the reference).

Searches may run concurrently (each thread has its own scratch buffers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import ConfigError
from .arrays import IntArray, distinct
from .postings import PostingList, Postings

FEW_ALLOWED = 16  # allowed keys under 1/16 of the rows are looked up one by one
# Pruned top-k (see search_pruned): queries with fewer postings than this are
# scored exhaustively; above it, the exact scores of a few documents from the
# strongest lists give the first threshold.
PRUNE_MIN = 32_768
SEED = 8_192  # postings of the strongest lists that seed the threshold
SEED_DOCS = 4  # of their documents, the best SEED_DOCS * k are scored exactly
# Bounds are inflated and thresholds deflated by this much, so rounding in the
# pruning arithmetic (which adds terms in another order) can never drop a hit.
SLACK = 1e-9
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
    tids = p.term_ids(terms) if k and p.row_of else []
    if not tids:
        return []
    keys = p.keys.data
    if allowed is None:
        rows, scores = search_pruned(p, tids, k)
        return top_k(keys[rows], scores, k)
    pool = np.asarray(allowed, dtype=np.int64).ravel()
    if len(pool) * FEW_ALLOWED < p.keys.size:
        # Few allowed keys: score their rows (live ones only) directly.
        found = map(p.row_of.get, pool.tolist())
        rows = distinct(np.fromiter((r for r in found if r is not None), np.int64))
        scores = exact(p, p.lists(tids), p.weights(tids), rows)
        hit = scores > 0
        return top_k(keys[rows[hit]], scores[hit], k)
    live = p.live.data if p.dead else None
    rows, scores = accumulate(p, p.lists(tids), p.weights(tids), live, 0.0)
    ok = np.isin(keys[rows], pool)
    return top_k(keys[rows[ok]], scores[ok], k)


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
    pos = np.searchsorted(rows, cand)
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


def bound(
    p: Postings, tid: int, rows: np.ndarray[Any, Any], tf16: np.ndarray[Any, Any], in_base: bool
) -> float:
    """Upper bound of tf / (tf + norm) over one posting list, at today's avgdl.

    A base list's maximum is computed once per base and kept with the avgdl of
    that moment. ``tf / (tf + k1 (1 - b) + k1 b dl / avgdl)`` grows by at most the
    factor avgdl' / avgdl when avgdl grows to avgdl', and never grows when avgdl
    shrinks; removed rows only lower the true maximum. Tail lists are small and
    computed each time.
    """
    avgdl = p.total_len / len(p.row_of)
    if not in_base:
        return float(p.contrib(1.0, rows, tf16).max()) if len(rows) else 0.0
    found = p.bounds.get(tid)
    if found is None:
        found = p.bounds[tid] = (float(p.contrib(1.0, rows, tf16).max()), avgdl)
    peak, then = found
    return peak * max(1.0, avgdl / then)


def search_pruned(
    p: Postings, tids: list[int], k: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Rows and exact scores of a superset of the top k (ties included).

    MaxScore: with lists ordered by their score bound, a document found only in
    the lists whose bounds add up to less than the current k-th best score cannot
    make the top k, so those lists are never scanned; they are only probed for
    the candidates the other lists produced, and candidates whose partial score
    plus the bounds still to come falls below the threshold are dropped. The
    first threshold comes from the exact scores of the documents in the
    strongest (usually rarest) lists. Survivors are rescored exactly.
    """
    weights = p.weights(tids)
    lists = p.lists(tids)
    live = p.live.data if p.dead else None
    if sum(len(rows) for _, rows, _, _ in lists) < PRUNE_MIN:
        return search_all(p, lists, weights, live)
    bounds = [
        weights[j] * bound(p, tids[j], rows, tf16, in_base) * (1 + SLACK)
        for j, rows, tf16, in_base in lists
    ]
    order = sorted(range(len(lists)), key=lambda i: -bounds[i])
    rest = np.zeros(len(order) + 1)  # rest[i]: bound sum of the lists from order[i] on
    rest[:-1] = np.cumsum([bounds[i] for i in order][::-1])[::-1]

    scratch, _ = p.scratch_for()
    added: list[PostingList] = []  # lists summed into the scratch so far, in bound order
    try:
        # Threshold: exact scores of the documents that score best on the
        # strongest lists (any k documents' scores bound the k-th best from below).
        size = 0
        for i in order:
            added.append(add_into(p, scratch, lists[i], weights))
            size += len(lists[i][1])
            if size >= max(SEED, k):
                break
        cand = distinct(np.concatenate([rows for _, rows, _, _ in added]))
        if live is not None:
            cand = cand[live.take(cand)]
        if len(cand) > SEED_DOCS * k:
            best = np.argpartition(-scratch.take(cand), SEED_DOCS * k)[: SEED_DOCS * k]
            cand = np.sort(cand[best])
        theta = kth(exact(p, lists, weights, cand), k) * (1 - SLACK)
        # The lists scanned whole: those whose bounds, with the stronger ones', reach
        # theta (and the seed lists, already summed).
        essential = max(len(added), int(np.count_nonzero(rest[:-1] >= theta)))
        step = essential
        if essential < len(lists):
            for i in order[len(added) : essential]:
                added.append(add_into(p, scratch, lists[i], weights))
            if dense(p, added):
                # Candidates are many: probe the strongest other list on the dense
                # sums in place, rows still able to reach theta only, before
                # listing any candidate.
                j, rows, tf16, _ = item = lists[order[step]]
                sums = scratch.take(rows)
                hit = np.flatnonzero(sums >= theta - rest[step])
                found = rows.take(hit)
                scratch.put(found, sums.take(hit) + p.contrib(weights[j], found, tf16.take(hit)))
                added.append(item)
                step += 1
            # A document scoring less than theta minus the bounds of the other
            # lists cannot reach theta: drop it now.
            cand = matches(p, scratch, added, live, theta - rest[step])
            acc = scratch.take(cand)
    finally:
        clear(p, scratch, added)
    if essential == len(lists):
        return accumulate(p, lists, weights, live, 0.0)

    # Probe the other lists for the candidates only, pruning as bounds shrink.
    first = step
    for step, i in enumerate(order[first:], start=first):
        theta = max(theta, kth(acc, k) * (1 - SLACK))
        keep = acc >= theta - rest[step]
        cand, acc = cand[keep], acc[keep]
        if len(cand) <= k:
            break
        j, rows, tf16, _ = lists[i]
        at, pos = find(p, rows, cand)
        acc[at] += p.contrib(weights[j], rows.take(pos), tf16.take(pos))
    else:
        theta = max(theta, kth(acc, k) * (1 - SLACK))
        keep = acc >= theta
        cand = cand[keep]
    return cand, exact(p, lists, weights, cand)


def search_all(
    p: Postings, lists: list[PostingList], weights: list[float], live: np.ndarray[Any, Any] | None
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Score every posting, terms in query order (so the sums are exact)."""
    return accumulate(p, lists, weights, live, 0.0)


def accumulate(
    p: Postings,
    lists: list[PostingList],
    weights: list[float],
    live: np.ndarray[Any, Any] | None,
    cutoff: float,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Sum the lists' contributions per row; return sorted rows above cutoff.

    Rows are live, matched by at least one list, and scored at least ``cutoff``.
    Each row's sum follows the order of ``lists`` (``ufunc.at`` adds in index
    order), so in query order the sums are the exact scores.
    """
    scratch, _ = p.scratch_for()
    try:
        for item in lists:
            add_into(p, scratch, item, weights)
        cand = matches(p, scratch, lists, live, cutoff)
        return cand, scratch.take(cand)
    finally:
        clear(p, scratch, lists)


def add_into(
    p: Postings, scratch: np.ndarray[Any, Any], item: PostingList, weights: list[float]
) -> PostingList:
    """Add one posting list's BM25 contributions (term weight ``weights[j]``) into
    ``scratch``, indexed by row; returns the list."""
    j, rows, tf16, _ = item
    np.add.at(scratch, rows, p.contrib(weights[j], rows, tf16))
    return item


def dense(p: Postings, lists: list[PostingList]) -> bool:
    """Whether one pass over all rows beats sorting the lists' rows."""
    return sum(len(rows) for _, rows, _, _ in lists) * 8 >= p.keys.size


def matches(
    p: Postings,
    scratch: np.ndarray[Any, Any],
    lists: list[PostingList],
    live: np.ndarray[Any, Any] | None,
    cutoff: float,
) -> np.ndarray[Any, Any]:
    """Sorted live rows of the lists whose sum in the scratch is at least cutoff."""
    if dense(p, lists):
        sums = scratch[: p.keys.size]
        hit = sums >= cutoff if cutoff > 0 else sums > 0
        if live is not None:
            hit &= live[: p.keys.size]
        return np.flatnonzero(hit)
    cand = distinct(np.concatenate([rows for _, rows, _, _ in lists]))
    if live is not None:
        cand = cand[live.take(cand)]
    if cutoff > 0:
        cand = cand[scratch.take(cand) >= cutoff]
    return cand


def clear(p: Postings, scratch: np.ndarray[Any, Any], lists: list[PostingList]) -> None:
    """Zero the scratch again where the lists' rows summed into it."""
    if dense(p, lists):
        scratch[: p.keys.size] = 0.0
    else:
        for _, rows, _, _ in lists:
            scratch.put(rows, 0.0)


def dense_scores(p: Postings, tids: list[int]) -> np.ndarray[Any, Any]:
    """Dense BM25 scores per row (tombstones included) for known term ids.

    Every posting, one dense array: the reference the pruned search is tested
    and benchmarked against (tests/test_keyword_index.py, bench/index_scale.py).
    """
    norms = p.norms()
    # float64 throughout: the Postgres backend computes the same scores in SQL
    # and the two must agree to 1e-6.
    scores = np.zeros(p.keys.size)
    n_docs = len(p.row_of)
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


# -- persistence ------------------------------------------------------------


def kth(values: np.ndarray[Any, Any], k: int) -> float:
    """The k-th largest value (0.0 when there are fewer than k)."""
    if len(values) < k:
        return 0.0
    return float(np.partition(values, len(values) - k)[len(values) - k])


def top_k(keys: IntArray, scores: np.ndarray[Any, Any], k: int) -> list[tuple[int, float]]:
    """The k best (key, score) pairs: score descending, then key ascending."""
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        # Keep every tie of the k-th score so the key tie-break is global.
        near = scores >= kth
        keys, scores = keys[near], scores[near]
    order = np.lexsort((keys, -scores))[:k]
    return list(zip(keys[order].tolist(), scores[order].tolist(), strict=False))
