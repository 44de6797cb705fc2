"""Rank fusion as pure functions: every backend ranks the same way.

Legs are ranked lists of ``(key, score)`` pairs, best first. Keys are any hashable
(the core uses ``(collection_id, chunk_key)``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

Ranked = Sequence[tuple[Hashable, float]]


@dataclass(frozen=True)
class Fused:
    key: Hashable
    score: float


def rrf(
    legs: Sequence[Ranked], *, k: int = 60, weights: Sequence[float] | None = None
) -> list[Fused]:
    """Reciprocal-rank fusion: ``sum_i w_i / (k + rank_i)`` with ranks from 1.

    Ties are broken by the best single-leg rank, then by first appearance, so the
    result is deterministic.
    """
    weights = weights or [1.0] * len(legs)
    if len(weights) != len(legs):
        raise ValueError("one weight per leg")
    scores: dict[Hashable, float] = {}
    best_rank: dict[Hashable, int] = {}
    order: dict[Hashable, int] = {}
    for leg, weight in zip(legs, weights, strict=True):
        for rank, (key, _score) in enumerate(leg, start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
            best_rank[key] = min(best_rank.get(key, rank), rank)
            order.setdefault(key, len(order))
    ranked = sorted(scores, key=lambda key: (-scores[key], best_rank[key], order[key]))
    return [Fused(key, scores[key]) for key in ranked]


def _minmax(leg: Ranked, floor: float | None = None) -> dict[Hashable, float]:
    if not leg:
        return {}
    values = [score for _, score in leg]
    low, high = min(values), max(values)
    if floor is not None:
        low = min(low, floor)
    span = high - low
    # A single-valued leg carries no ranking signal beyond membership: give it 1.0.
    return {key: ((score - low) / span if span > 0 else 1.0) for key, score in leg}


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
    weights = weights or [1.0 / len(legs)] * len(legs)
    floors = floors or [None] * len(legs)
    if len(weights) != len(legs) or len(floors) != len(legs):
        raise ValueError("one weight and one floor per leg")
    scores: dict[Hashable, float] = {}
    order: dict[Hashable, int] = {}
    for leg, weight, floor in zip(legs, weights, floors, strict=True):
        for key, norm in _minmax(leg, floor).items():
            scores[key] = scores.get(key, 0.0) + weight * norm
            order.setdefault(key, len(order))
    ranked = sorted(scores, key=lambda key: (-scores[key], order[key]))
    return [Fused(key, scores[key]) for key in ranked]


def _zscores(leg: Ranked, floor: float | None, missing: int) -> tuple[dict[Hashable, float], float]:
    """Standard scores of a leg's hits, and what a key missing from it gets.

    With a ``floor`` the leg is complete: the ``missing`` candidates it did not return
    are known to score the floor, and count in the mean and spread like the hits."""
    if not leg:
        return {}, 0.0
    values = [score for _, score in leg]
    if floor is not None:
        values += [floor] * missing
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    if sd == 0:
        return {key: 0.0 for key, _ in leg}, (-1.0 if floor is not None and missing else 0.0)
    z = {key: (score - mean) / sd for key, score in leg}
    low = (floor - mean) / sd if floor is not None else min(z.values())
    return z, min(low, min(z.values()))


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
    weights = weights or [1.0 / len(legs)] * len(legs)
    floors = floors or [None] * len(legs)
    if len(weights) != len(legs) or len(floors) != len(legs):
        raise ValueError("one weight and one floor per leg")
    order: dict[Hashable, int] = {}
    for leg in legs:
        for key, _ in leg:
            order.setdefault(key, len(order))
    # Every key starts from every leg's "missing" score; a leg that has it adds the rest.
    base = 0.0
    gains: list[tuple[float, dict[Hashable, float], float]] = []
    for leg, weight, floor in zip(legs, weights, floors, strict=True):
        z, low = _zscores(leg, floor, len(order) - len(leg))
        base += weight * low
        gains.append((weight, z, low))
    scores: dict[Hashable, float] = dict.fromkeys(order, base)
    for weight, z, low in gains:
        for key, value in z.items():
            scores[key] += weight * (value - low)
    ranked = sorted(scores, key=lambda key: (-scores[key], order[key]))
    return [Fused(key, 1.0 / (1.0 + math.exp(-scores[key]))) for key in ranked]


def ranks(leg: Ranked) -> dict[Hashable, tuple[int, float]]:
    """key -> (1-based rank, score) for one leg."""
    return {key: (rank, score) for rank, (key, score) in enumerate(leg, start=1)}
