"""Rank fusion as pure functions: every backend ranks the same way.

Legs are ranked lists of ``(key, score)`` pairs, best first. Keys are any hashable
(the core uses ``(collection_id, chunk_key)``).
"""

from __future__ import annotations

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


def _zscores(leg: Ranked, floor: float | None) -> tuple[dict[Hashable, float], float]:
    """Standard scores of a leg's hits, and what a key missing from it gets."""
    if not leg:
        return {}, 0.0
    values = [score for _, score in leg]
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    z = {key: ((score - mean) / sd if sd > 0 else 0.0) for key, score in leg}
    low = min(z.values())
    if floor is not None:
        low = min(low, (floor - mean) / sd if sd > 0 else low - 1.0)
    return z, low


def zscore(
    legs: Sequence[Ranked],
    *,
    weights: Sequence[float] | None = None,
    floors: Sequence[float | None] | None = None,
) -> list[Fused]:
    """Convex combination of standard scores (z = (score - mean) / sd per leg).

    A key a leg did not return gets that leg's lowest z (it ranked below everything
    the leg returned), or, with a known ``floor`` (see :func:`weighted`), the z of
    that floor. A leg's scores count by how far they stand from its mean, in its own
    spread, rather than by where they sit between its best and its last hit.
    SciFact train nDCG@10 0.7484 vs 0.7443 for min-max (bench/quality.py --sweep).
    """
    weights = weights or [1.0 / len(legs)] * len(legs)
    floors = floors or [None] * len(legs)
    if len(weights) != len(legs) or len(floors) != len(legs):
        raise ValueError("one weight and one floor per leg")
    # Every key starts from every leg's "missing" score; a leg that has it adds the rest.
    base = 0.0
    gains: list[tuple[float, dict[Hashable, float], float]] = []
    for leg, weight, floor in zip(legs, weights, floors, strict=True):
        z, low = _zscores(leg, floor)
        base += weight * low
        gains.append((weight, z, low))
    scores: dict[Hashable, float] = {}
    order: dict[Hashable, int] = {}
    for weight, z, low in gains:
        for key, value in z.items():
            scores[key] = scores.get(key, base) + weight * (value - low)
            order.setdefault(key, len(order))
    ranked = sorted(scores, key=lambda key: (-scores[key], order[key]))
    return [Fused(key, scores[key]) for key in ranked]


def ranks(leg: Ranked) -> dict[Hashable, tuple[int, float]]:
    """key -> (1-based rank, score) for one leg."""
    return {key: (rank, score) for rank, (key, score) in enumerate(leg, start=1)}
