"""The largest values of a long score array, without partitioning all of it.

Both indexes end a search by keeping the best few of many scores (every row of a flat
vector scan, every document of a BM25 query). ``np.partition`` over the whole array
costs more than the scoring on some CPUs: numpy 2's AVX-512 build hands it to
x86-simd-sort, whose compress-stores AMD Zen 4 microcodes (measured there: 0.13 ms for
15k floats, 1 ms for 100k, against 0.03 and 0.18 ms with numpy's AVX-512 kernels
switched off; ~15 ms when most values tie). Partitioning a strided sample to find a
threshold, then only the values above it, does one cheap pass over the array and
partitions a few thousand values, on every CPU.
"""

from __future__ import annotations

import math

import numpy as np

# Values sampled to place the threshold; arrays up to a few times this are partitioned
# whole (a sample would be most of them).
SAMPLE = 2_048
# The threshold is aimed at this many times ``count`` values above it, so a sample that
# happens to overestimate the tail still leaves at least ``count``.
MARGIN = 3
# Smaller arrays (SciFact's 5k rows) of more than SMALL_STRIDE * SMALL_SAMPLE values, of
# which few are wanted, are cut on every SMALL_STRIDE-th value, then exactly among the
# values above the cut: the same answer as partitioning them all, from a quarter of them
# (AMD EPYC, numpy's AVX-512 build: the best 100 of 5,183 floats 33 -> ~12 us).
SMALL_STRIDE = 4
SMALL_SAMPLE = 256


def at_least(values: np.ndarray, count: int, *, above: float | None = None) -> np.ndarray:
    """Positions of the ``count`` largest values and of every value tied with the
    ``count``-th: a superset (unordered) of the top ``count``, usually under
    ``MARGIN * count`` plus a few, which the caller orders.

    Args:
        values: 1-d scores.
        count: How many of the largest are wanted (all of them when there are fewer).
        above: Only values strictly greater than this qualify (e.g. 0 for "matched").

    Returns:
        int64 positions into ``values``.
    """
    n = len(values)
    if above is not None:
        # Fewer qualifying values than wanted: all of them (one pass, no partition).
        qualify = values > above
        if count >= n or int(np.count_nonzero(qualify)) <= count:
            return np.flatnonzero(qualify)
    elif count >= n:
        return np.arange(n, dtype=np.int64)
    if count <= 0:
        return np.empty(0, np.int64)
    small = n <= MARGIN * SAMPLE
    if not small or (n >= SMALL_STRIDE * MARGIN * count and n > SMALL_STRIDE * SMALL_SAMPLE):
        sample = values[:: SMALL_STRIDE if small else n // SAMPLE]
        # The sample value with ~MARGIN * count of the array's values expected above it.
        over = min(len(sample) - 1, math.ceil(MARGIN * count * len(sample) / n))
        cut = np.partition(sample, len(sample) - 1 - over)[len(sample) - 1 - over]
        found = np.flatnonzero(values >= cut)
        if above is not None and cut <= above:
            found = found[values.take(found) > above]
        if len(found) >= count:
            if not small:
                return found
            # A small array gets the exact answer of the whole partition below, from
            # the few values above the cut (its callers order what they get).
            picked = values.take(found)
            kth = np.partition(picked, len(picked) - count)[len(picked) - count]
            exact: np.ndarray = found[picked >= kth]
            return exact
        # Fewer than count above the cut (values ordered against the stride): exact.
    kth = np.partition(values, n - count)[n - count]
    if above is not None and kth <= above:
        return np.flatnonzero(values > above)
    return np.flatnonzero(values >= kth)


def top(values: np.ndarray, count: int) -> np.ndarray:
    """Positions of exactly ``min(count, len(values))`` largest values (unordered; among
    values tied at the boundary, any)."""
    found = at_least(values, count)
    if len(found) <= count:
        return found
    picked = values.take(found)
    return found[np.argpartition(picked, len(found) - count)[len(found) - count :]]
