"""Rank fusion as pure functions: every backend ranks the same way.

Legs are ranked lists of ``(key, score)`` pairs, best first. Keys are any hashable
(the core uses ``(collection_id, chunk_key)``).

Each fusion also has an array form (``*_scores``): leg scores as arrays and each leg's
keys as positions in one list of every key (in order of first appearance), which is
what the search path holds; ranking those scores with :func:`order` gives the same
ranking as the list form.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np

Ranked = Sequence[tuple[Hashable, float]]


class Fused(NamedTuple):
    """One fused result: the candidate's key and its fused score."""

    key: Hashable
    score: float


def positions(legs: Sequence[Ranked]) -> tuple[list[Hashable], list[np.ndarray]]:
    """Every key once in order of first appearance, and each leg's keys as positions
    in that list."""
    seen: dict[Hashable, int] = {}
    for leg in legs:
        for key, _ in leg:
            if key not in seen:
                seen[key] = len(seen)
    at = seen.__getitem__
    found = [np.fromiter(map(at, [key for key, _ in leg]), np.intp, len(leg)) for leg in legs]
    return list(seen), found


def _values(leg: Ranked) -> np.ndarray:
    return np.fromiter((score for _, score in leg), np.float64, len(leg))


def _checked(
    n: int, weights: Sequence[float] | None, floors: Sequence[float | None] | None
) -> tuple[Sequence[float], Sequence[float | None]]:
    weights = weights or [1.0 / n] * n
    floors = floors or [None] * n
    if len(weights) != n or len(floors) != n:
        raise ValueError("one weight and one floor per leg")
    return weights, floors


def order(scores: np.ndarray, *ties: np.ndarray) -> np.ndarray:
    """Positions by score descending, then by each of ``ties`` ascending, then by
    position (first appearance)."""
    if not ties:
        return np.argsort(-scores, kind="stable")
    return np.lexsort((np.arange(len(scores)), *reversed(ties), -scores))


def _listed(keys: list[Hashable], scores: np.ndarray, ranking: np.ndarray) -> list[Fused]:
    return list(map(Fused, [keys[i] for i in ranking.tolist()], scores[ranking].tolist()))


# -- reciprocal rank ---------------------------------------------------------------


def rrf_scores(
    at: Sequence[np.ndarray], size: int, *, k: int = 60, weights: Sequence[float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """RRF scores of ``size`` keys, and each key's best single-leg rank (the tie-break)."""
    weights = weights or [1.0] * len(at)
    if len(weights) != len(at):
        raise ValueError("one weight per leg")
    scores = np.zeros(size)
    best_rank = np.full(size, np.iinfo(np.int64).max, np.int64)
    for pos, weight in zip(at, weights, strict=True):
        ranks = np.arange(1, len(pos) + 1, dtype=np.int64)
        # ufunc.at adds in index order: each key's sum runs leg by leg, as a loop would.
        np.add.at(scores, pos, weight / (k + ranks))
        np.minimum.at(best_rank, pos, ranks)
    return scores, best_rank


def rrf(
    legs: Sequence[Ranked], *, k: int = 60, weights: Sequence[float] | None = None
) -> list[Fused]:
    """Reciprocal-rank fusion: ``sum_i w_i / (k + rank_i)`` with ranks from 1.

    Ties are broken by the best single-leg rank, then by first appearance, so the
    result is deterministic.
    """
    keys, at = positions(legs)
    scores, best_rank = rrf_scores(at, len(keys), k=k, weights=weights)
    return _listed(keys, scores, order(scores, best_rank))


# -- min-max -------------------------------------------------------------------------


def _minmax(values: np.ndarray, floor: float | None = None) -> np.ndarray:
    low, high = float(values.min()), float(values.max())
    if floor is not None:
        low = min(low, floor)
    span = high - low
    # A single-valued leg carries no ranking signal beyond membership: give it 1.0.
    return (values - low) / span if span > 0 else np.ones_like(values)


def weighted_scores(
    values: Sequence[np.ndarray],
    at: Sequence[np.ndarray],
    size: int,
    *,
    weights: Sequence[float] | None = None,
    floors: Sequence[float | None] | None = None,
) -> np.ndarray:
    """Min-max fused scores of ``size`` keys (see :func:`weighted`)."""
    weights, floors = _checked(len(values), weights, floors)
    scores = np.zeros(size)
    for leg, pos, weight, floor in zip(values, at, weights, floors, strict=True):
        if len(leg):
            # A key repeated within a leg counts once, with its last score (as a dict would).
            scores[pos] += weight * _minmax(leg, floor)
    return scores


def weighted(
    legs: Sequence[Ranked],
    *,
    weights: Sequence[float] | None = None,
    floors: Sequence[float | None] | None = None,
) -> list[Fused]:
    """Convex combination of min-max normalised leg scores (missing from a leg = 0).

    ``floors`` gives, per leg, the score anything left out of it has, when that is
    known: a keyword leg that was not cut off at the candidate depth holds every
    match, and everything else scores 0. Normalising from that floor rather than from
    the leg's last hit keeps a near-tie a near-tie: with only two keyword hits, min-max
    would map the second to 0 however close it was to the first.
    """
    keys, at = positions(legs)
    scores = weighted_scores(
        [_values(leg) for leg in legs], at, len(keys), weights=weights, floors=floors
    )
    return _listed(keys, scores, order(scores))


# -- standard scores -------------------------------------------------------------------


def _zscores(values: np.ndarray, floor: float | None, missing: int) -> tuple[np.ndarray, float]:
    """Standard scores of a leg's hits, and what a key missing from it gets.

    With a ``floor`` the leg is complete: the ``missing`` candidates it did not return
    are known to score the floor, and count in the mean and spread like the hits."""
    extra = missing if floor is not None else 0
    pad = floor if floor is not None else 0.0
    count = len(values) + extra
    # The ufuncs' reductions are what .sum() and .min() run, without their Python layer
    # (a search runs this four times on ~100 values).
    mean = (float(np.add.reduce(values)) + pad * extra) / count
    sd = (
        (float(np.add.reduce(np.square(values - mean))) + extra * (pad - mean) ** 2) / count
    ) ** 0.5
    if sd == 0:
        return np.zeros_like(values), (-1.0 if floor is not None and missing else 0.0)
    z = (values - mean) / sd
    lowest = float(np.minimum.reduce(z))
    low = (floor - mean) / sd if floor is not None else lowest
    return z, min(low, lowest)


def zscore_scores(
    values: Sequence[np.ndarray],
    at: Sequence[np.ndarray],
    size: int,
    *,
    weights: Sequence[float] | None = None,
    floors: Sequence[float | None] | None = None,
) -> np.ndarray:
    """Z-score fused scores of ``size`` keys before the logistic squash (see :func:`zscore`;
    :func:`logistic` gives the scores it reports)."""
    weights, floors = _checked(len(values), weights, floors)
    parts = [
        standard_scores(leg, floor, size - len(leg)) if len(leg) else None
        for leg, floor in zip(values, floors, strict=True)
    ]
    return zscore_sum(parts, at, size, weights)


def standard_scores(
    values: np.ndarray, floor: float | None, missing: int
) -> tuple[np.ndarray, float]:
    """A leg's part of :func:`zscore_scores`: its hits' standard scores and what a key
    missing from it gets (without a ``floor``, ``missing`` changes neither)."""
    return _zscores(values, floor, missing)


def zscore_sum(
    parts: Sequence[tuple[np.ndarray, float] | None],
    at: Sequence[np.ndarray],
    size: int,
    weights: Sequence[float],
) -> np.ndarray:
    """:func:`zscore_scores` from each leg's :func:`standard_scores` (None: an empty leg)."""
    # Every key starts from every leg's "missing" score; a leg that has it adds the rest.
    base = 0.0
    gains: list[tuple[np.ndarray, np.ndarray]] = []
    for part, pos, weight in zip(parts, at, weights, strict=True):
        if part is None:
            continue
        z, low = part
        base += weight * low
        gains.append((pos, weight * (z - low)))
    scores = np.full(size, base)
    for pos, gain in gains:
        scores[pos] += gain  # a key repeated within a leg counts once (its last score)
    return scores


def logistic(scores: np.ndarray) -> np.ndarray:
    """Squash to (0, 1), keeping the order."""
    squashed: np.ndarray = 1.0 / (1.0 + np.exp(-scores))
    return squashed


def zscore(
    legs: Sequence[Ranked],
    *,
    weights: Sequence[float] | None = None,
    floors: Sequence[float | None] | None = None,
) -> list[Fused]:
    """Convex combination of standard scores (z = (score - mean) / sd per leg), squashed
    to (0, 1) by the logistic function so fused scores read like the other fusions'
    (the order is that of the z-scores).

    A key a leg did not return gets that leg's lowest z (it ranked below everything
    the leg returned), or, for a leg known to be complete (a ``floor``, see
    :func:`weighted`), the z of the floor, with the floor counted for every such key:
    in a small collection two near-tied keyword hits then stay near-tied instead of
    sitting one standard deviation either side of their mean. SciFact train nDCG@10
    0.7457 vs 0.7425 for min-max (bench/quality.py --sweep).
    """
    keys, at = positions(legs)
    scores = zscore_scores(
        [_values(leg) for leg in legs], at, len(keys), weights=weights, floors=floors
    )
    return _listed(keys, logistic(scores), order(scores))


def ranks(leg: Ranked) -> dict[Hashable, tuple[int, float]]:
    """key -> (1-based rank, score) for one leg."""
    return {key: (rank, score) for rank, (key, score) in enumerate(leg, start=1)}
