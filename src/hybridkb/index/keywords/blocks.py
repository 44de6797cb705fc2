"""Exact BM25 scores of every row, computed one block of rows at a time.

A query with many postings (more than rows / ``bm25.SPARSE``) scores every row. Done
in one pass per step over all its postings (concatenate, gather the length norms,
divide, ``np.bincount`` into an array of every row), each step walks the whole norm
and score arrays (8 bytes a row each, 16 MB at 1M rows) once per query term, from
memory (at 1M chunks, of a 15.7 ms mean query: contributions 6.9 ms, bincount 3.3,
the top k of every row 3.9; load ~5). Here the rows are cut into
blocks (``BLOCK_BYTES``); each block gathers the slice of every posting list that
falls in it (rows ascend within a list, so one ``searchsorted`` per list cuts them
all), and its norms, scores and temporaries stay in the CPU cache. The best rows are
kept block by block above a running threshold (the k-th best score so far, a lower
bound of the final k-th), so no array of every row is made either.

The arithmetic is the one of ``Postings.contrib`` and the additions are in the same
order (query order within each row), so the scores are bit-identical to the
unblocked pass and to ``bm25.dense_scores``. The block's arrays live in per-thread
buffers. Measured with bench/keyword_1m.py (SciFact test queries, depth 100, thread CPU
per query, old and new code in two processes paired query by query, 5 rounds, AMD EPYC
with AVX-512, load 4-5 on 2 cores): 1M chunks p50 8.3 -> 4.5 ms, p95 26.6 -> 8.1 ms,
max 170 -> 12 ms; 100k chunks p50 0.93 -> 0.79 ms, p95 4.3 -> 1.4 ms; hits identical.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..selection import at_least
from .postings import PostingList, Postings

# Bytes a block's arrays may take: a row brings its norm and score (8 bytes each), a
# posting ~40 bytes (its row and tf read, int64 row, float64 tf and denominator, its
# share of the bincount). 8 MB: a core's L2 (1-2 MB on current x86 servers) and its
# share of L3 (4 MB a core on AMD EPYC). Measured there (SciFact test queries, CPU per
# query, solo processes, load 4-8): 1M rows p50 4.9 / 4.5-5.6 / 4.4-4.6 / 4.9 / 5.6-6.9
# ms at 2 / 4 / 8 / 16 / 32 MB; 100k rows 0.59 / 0.55 / 0.47 / 0.48 ms at 2 / 4 / 8 / 16.
BLOCK_BYTES = 8 << 20
ROW_BYTES = 16
POSTING_BYTES = 40
# Running candidates are cut back to the k best (and ties) once they exceed this many
# times k.
KEEP = 4

Array = np.ndarray[Any, Any]


class Blocks:
    """The query's posting lists cut at block edges: ``cuts[i][b]`` is where list i's
    rows of block b start."""

    def __init__(self, p: Postings, lists: list[PostingList], weights: list[float]) -> None:
        n = p.keys.size
        need = n * ROW_BYTES + sum(len(rows) for _, rows, _, _ in lists) * POSTING_BYTES
        count = max(1, min(n, -(-need // BLOCK_BYTES)))
        self.edges: list[int] = [n * b // count for b in range(count + 1)]
        bounds = np.asarray(self.edges, dtype=np.int64)
        # The edges in each list's own dtype: a mixed-dtype searchsorted first copies the
        # whole list to the common type (50 us a list, against 1 us).
        self.cuts = [
            np.searchsorted(rows, bounds.astype(rows.dtype)).tolist()
            if count > 1
            else [0, len(rows)]
            for _, rows, _, _ in lists
        ]
        self.lists = lists
        self.weights = [weights[j] for j, _, _, _ in lists]
        self.norms = p.norms()
        self.live = p.live.view() if p.dead else None
        most = max(sum(cut[b + 1] - cut[b] for cut in self.cuts) for b in range(count))
        self.work = work_buffers(p, most)

    def __len__(self) -> int:
        return len(self.edges) - 1

    def scores(self, b: int) -> Array:
        """Exact scores of rows ``edges[b]`` to ``edges[b + 1]`` (0 for rows matching no
        term and for tombstones)."""
        lo, hi = self.edges[b], self.edges[b + 1]
        rows, tfs, counts = [], [], []
        for (_, list_rows, list_tf, _), cut in zip(self.lists, self.cuts, strict=True):
            start, end = cut[b], cut[b + 1]
            rows.append(list_rows[start:end])
            tfs.append(list_tf[start:end])
            counts.append(end - start)
        # Into this thread's buffers, straight in the types used next: one int64 copy of
        # the rows serves the gather and the bincount (each would convert int32), float
        # tfs spare the ufuncs' casting loops (8 % of a query at 1M), and no array is
        # allocated per block (freeing blocks of a few hundred KB made glibc hand the
        # heap back and fault it in again: ~400 page faults a query at 100k rows).
        size = sum(counts)
        local = np.concatenate(rows, out=self.work[0][:size])
        if lo:
            local -= lo
        # Postings.contrib's operations on this block's norms: weight * tf / (tf + norm).
        contrib = np.concatenate(tfs, out=self.work[1][:size])
        denom = self.norms[lo:hi].take(local, out=self.work[2][:size], mode="clip")  # unbuffered
        denom += contrib
        np.divide(contrib, denom, out=contrib)
        start = 0
        for weight, count in zip(self.weights, counts, strict=True):
            contrib[start : start + count] *= weight
            start += count
        scores = np.bincount(local, weights=contrib, minlength=hi - lo)
        if self.live is not None:
            np.multiply(scores, self.live[lo:hi], out=scores)  # tombstones score 0
        return scores


def work_buffers(p: Postings, size: int) -> tuple[Array, Array, Array]:
    """This thread's int64, float64 and float64 work arrays of at least ``size``."""
    work: tuple[Array, Array, Array] | None = getattr(p.buffers, "block_work", None)
    if work is None or len(work[0]) < size:
        grown = max(size, 0 if work is None else len(work[0]) * 5 // 4)
        work = (np.empty(grown, np.intp), np.empty(grown), np.empty(grown))
        p.buffers.block_work = work
    return work


def row_scores(p: Postings, lists: list[PostingList], weights: list[float]) -> Array:
    """Every row's exact score (0 for rows matching no term and for tombstones)."""
    blocks = Blocks(p, lists, weights)
    out = np.empty(p.keys.size)
    for b in range(len(blocks)):
        out[blocks.edges[b] : blocks.edges[b + 1]] = blocks.scores(b)
    return out


def best_rows(
    p: Postings, lists: list[PostingList], weights: list[float], k: int
) -> tuple[Array, Array]:
    """Live rows holding the k best scores above 0 (and every tie of the k-th; maybe a
    few more), with their exact scores, unordered."""
    blocks = Blocks(p, lists, weights)
    rows: list[Array] = []
    scores: list[Array] = []
    kept = 0
    floor = 0.0  # rows must score above it: 0, then just under the k-th best so far
    for b in range(len(blocks)):
        block = blocks.scores(b)
        # The first block keeps its own best (a sampled cut), not every row above 0. Asked
        # for KEEP * k, the cut sits on several sampled values: asked for k, it sat on 1-3
        # and sometimes let fewer than k through, and at_least's exact fallback then
        # partitions the whole block, mostly zeros (9 ms for a 250k-row block at 1M; the
        # unblocked pass took 160-180 ms so on 4 of the 300 SciFact test queries).
        if floor == 0.0:
            hit = at_least(block, KEEP * k, above=0.0)
        else:
            hit = np.flatnonzero(block > floor)
        rows.append(hit + blocks.edges[b])
        scores.append(block.take(hit))
        kept += len(hit)
        if kept > KEEP * k and b + 1 < len(blocks):  # after the last, top_k does it
            best, value = np.concatenate(rows), np.concatenate(scores)
            near = at_least(value, k)  # a sampled cut: no partition of every value
            best, value = best[near], value[near]
            kth = float(np.partition(value, len(value) - k)[len(value) - k])
            keep = np.flatnonzero(value >= kth)
            rows, scores, kept = [best[keep]], [value[keep]], len(keep)
            # The final k-th best is at least this one: rows under it cannot make it,
            # rows tied with it still may (scores are > 0, so the float below is > 0).
            floor = float(np.nextafter(kth, 0.0))
    if not rows:
        empty = np.empty(0, np.int64)
        return empty, np.empty(0)
    return np.concatenate(rows), np.concatenate(scores)
