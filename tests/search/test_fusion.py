"""Fusion is pure: ranks in, ranks out, no database."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybridkb.search.fusion import (
    Fused,
    logistic,
    order,
    positions,
    ranks,
    rrf,
    rrf_scores,
    weighted,
    weighted_scores,
    zscore,
    zscore_scores,
)


def _pairs(fused: list[Fused]) -> list[tuple[int, float]]:
    """(key, score) of a fusion of int-keyed legs (a Fused key may be any hashable)."""
    pairs = []
    for f in fused:
        assert isinstance(f.key, int), f.key
        pairs.append((f.key, f.score))
    return pairs


def test_rrf_scores_are_reciprocal_ranks() -> None:
    fused = rrf([[("a", 9.0), ("b", 5.0)], [("b", 0.9), ("c", 0.1)]], k=60)
    scores = {f.key: f.score for f in fused}
    assert scores["b"] == 1 / 62 + 1 / 61
    assert scores["a"] == 1 / 61 and scores["c"] == 1 / 62
    assert [f.key for f in fused] == ["b", "a", "c"]


def test_rrf_ties_break_by_best_rank_then_first_seen() -> None:
    fused = rrf([[("x", 1.0)], [("y", 1.0)]])
    assert [f.key for f in fused] == ["x", "y"]


def test_weighted_normalises_each_leg() -> None:
    fused = weighted([[("a", 10.0), ("b", 0.0)], [("b", 0.8), ("a", 0.2)]], weights=[0.5, 0.5])
    assert {f.key: f.score for f in fused} == {"a": 0.5, "b": 0.5}


def test_a_floor_keeps_a_near_tie_a_near_tie() -> None:
    # Two keyword hits almost equal (the demo's "tax" vs "depreciation" chunks), the
    # vector leg preferring the second: min-max zeroes the second keyword hit and the
    # first wins; normalised from the known floor 0 the second wins, as it should.
    keyword = [("heading", 1.233), ("answer", 1.165)]
    vector = [("answer", 0.570), ("other", 0.494), ("heading", 0.291), ("invoice", 0.231)]
    plain = weighted([keyword, vector])
    floored = weighted([keyword, vector], floors=[0.0, None])
    assert plain[0].key == "heading"
    assert floored[0].key == "answer"
    assert {f.key: round(f.score, 3) for f in floored}["answer"] == round(
        0.5 * 1.165 / 1.233 + 0.5, 3
    )


def test_a_floor_above_the_scores_changes_nothing() -> None:
    leg = [("a", 10.0), ("b", 5.0)]
    assert weighted([leg], floors=[7.0]) == weighted([leg])


def _logistic(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_zscore_standardises_each_leg_and_a_missing_key_gets_the_lowest() -> None:
    kw = [("a", 9.0), ("b", 6.0), ("c", 3.0)]  # z: 1.22, 0, -1.22
    vec = [("c", 0.9), ("d", 0.5)]  # z: 1, -1
    scores = {f.key: f.score for f in zscore([kw, vec])}
    z = 3 / (6**0.5)
    assert scores["a"] == pytest.approx(_logistic(0.5 * z + 0.5 * -1))  # missing from vec
    assert scores["c"] == pytest.approx(_logistic(0.5 * -z + 0.5 * 1))
    assert scores["d"] == pytest.approx(_logistic(0.5 * -z + 0.5 * -1))
    assert [f.key for f in zscore([kw, vec])] == ["a", "c", "b", "d"]
    assert all(0 < s < 1 for s in scores.values())


def test_a_complete_leg_counts_its_non_matches_so_a_near_tie_stays_near() -> None:
    # The demo's case: two keyword hits of four chunks (the others match no term), the
    # better keyword hit weaker in the vector leg. Counting the two non-matches at 0 keeps
    # 1.64 vs 1.18 close, and the passage both legs like wins.
    kw = [("notes", 1.64), ("itaa", 1.18)]
    vec = [("itaa", 0.57), ("p2", 0.494), ("notes", 0.31), ("invoice", 0.231)]
    fused = zscore([kw, vec], floors=[0.0, None])
    assert [f.key for f in fused][:2] == ["itaa", "notes"]
    unfloored = zscore([kw, vec])  # without knowing the leg is complete: +-1 apart
    assert [f.key for f in unfloored][0] == "notes"
    with pytest.raises(ValueError, match="one weight and one floor per leg"):
        zscore([kw, vec], floors=[0.0])


legs = st.lists(
    st.lists(
        st.tuples(st.integers(0, 30), st.floats(0, 100)), max_size=20, unique_by=lambda t: t[0]
    ).map(lambda leg: sorted(leg, key=lambda t: -t[1])),
    min_size=1,
    max_size=3,
)


@given(legs)
def test_rrf_keeps_every_key_once_in_descending_order(legs_: list[list[tuple[int, float]]]) -> None:
    fused = rrf(legs_)
    keys = [k for k, _ in _pairs(fused)]
    assert sorted(keys) == sorted({k for leg in legs_ for k, _ in leg})
    assert all(a.score >= b.score for a, b in zip(fused, fused[1:], strict=False))


@given(legs)
def test_a_single_leg_keeps_its_order(legs_: list[list[tuple[int, float]]]) -> None:
    leg = legs_[0]
    assert [f.key for f in rrf([leg])] == [k for k, _ in leg]
    assert ranks(leg) == {k: (i + 1, s) for i, (k, s) in enumerate(leg)}


@given(legs)
def test_zscore_keeps_every_key_once_in_descending_order(
    legs_: list[list[tuple[int, float]]],
) -> None:
    fused = zscore(legs_)
    assert sorted(k for k, _ in _pairs(fused)) == sorted({k for leg in legs_ for k, _ in leg})
    assert all(a.score >= b.score for a, b in zip(fused, fused[1:], strict=False))


# -- the array forms against the per-key reference -----------------------------------
# The fusions used to be per-key Python loops; they are now done on arrays. These are
# those loops, kept as the reference the array forms must match.


def _ref_rrf(legs_: list[list[tuple[int, float]]], k: int = 60) -> list[tuple[int, float]]:
    scores: dict[int, float] = {}
    best_rank: dict[int, int] = {}
    order: dict[int, int] = {}
    for leg in legs_:
        for rank, (key, _score) in enumerate(leg, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            best_rank[key] = min(best_rank.get(key, rank), rank)
            order.setdefault(key, len(order))
    ranked = sorted(scores, key=lambda key: (-scores[key], best_rank[key], order[key]))
    return [(key, scores[key]) for key in ranked]


def _ref_weighted(
    legs_: list[list[tuple[int, float]]], floors: list[float | None]
) -> list[tuple[int, float]]:
    weight = 1.0 / len(legs_)
    scores: dict[int, float] = {}
    order: dict[int, int] = {}
    for leg, floor in zip(legs_, floors, strict=True):
        if not leg:
            continue
        values = [s for _, s in leg]
        low, high = min(values), max(values)
        if floor is not None:
            low = min(low, floor)
        span = high - low
        norm = {key: ((s - low) / span if span > 0 else 1.0) for key, s in leg}
        for key, value in norm.items():
            scores[key] = scores.get(key, 0.0) + weight * value
            order.setdefault(key, len(order))
    ranked = sorted(scores, key=lambda key: (-scores[key], order[key]))
    return [(key, scores[key]) for key in ranked]


def _ref_zscore(
    legs_: list[list[tuple[int, float]]], floors: list[float | None]
) -> list[tuple[int, float]]:
    weight = 1.0 / len(legs_)
    order: dict[int, int] = {}
    for leg in legs_:
        for key, _ in leg:
            order.setdefault(key, len(order))
    base = 0.0
    gains = []
    for leg, floor in zip(legs_, floors, strict=True):
        if not leg:
            continue
        values = [s for _, s in leg]
        missing = len(order) - len(leg)
        if floor is not None:
            values += [floor] * missing
        mean = sum(values) / len(values)
        sd = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
        if sd == 0:
            z = {key: 0.0 for key, _ in leg}
            low = -1.0 if floor is not None and missing else 0.0
        else:
            z = {key: (s - mean) / sd for key, s in leg}
            low = min((floor - mean) / sd if floor is not None else min(z.values()), *z.values())
        base += weight * low
        gains.append((z, low))
    scores = dict.fromkeys(order, base)
    for z, low in gains:
        for key, value in z.items():
            scores[key] += weight * (value - low)
    ranked = sorted(scores, key=lambda key: (-scores[key], order[key]))
    return [(key, 1.0 / (1.0 + math.exp(-scores[key]))) for key in ranked]


def _same_ranking(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    """Same keys in the same order, scores equal to rounding; keys whose reference scores
    tie to rounding may swap (summation order differs in the last bits)."""
    assert sorted(k for k, _ in got) == sorted(k for k, _ in want)
    ref = dict(want)
    for (key, score), (want_key, want_score) in zip(got, want, strict=True):
        assert score == pytest.approx(ref[key], rel=1e-9, abs=1e-12)
        if key != want_key:
            assert ref[key] == pytest.approx(want_score, rel=1e-9, abs=1e-12)


scored_legs = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, 30), st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.25, 7.0]) | st.floats(0, 100)
        ),
        max_size=20,
        unique_by=lambda t: t[0],
    ).map(lambda leg: sorted(leg, key=lambda t: -t[1])),
    min_size=1,
    max_size=3,
)
floor_choices = st.sampled_from([None, 0.0])


@given(scored_legs, st.data())
def test_the_array_forms_rank_as_the_per_key_loops_did(
    legs_: list[list[tuple[int, float]]], data: st.DataObject
) -> None:
    floors = [data.draw(floor_choices) for _ in legs_]
    # Keyword scores are never below the floor of 0 that a search gives the keyword leg.
    _same_ranking(_pairs(zscore(legs_, floors=floors)), _ref_zscore(legs_, floors))
    _same_ranking(_pairs(weighted(legs_, floors=floors)), _ref_weighted(legs_, floors))
    assert [(f.key, f.score) for f in rrf(legs_)] == _ref_rrf(legs_)


@given(scored_legs)
def test_scores_on_positions_equal_the_listed_fusion(legs_: list[list[tuple[int, float]]]) -> None:
    keys, at = positions(legs_)
    values = [np.array([s for _, s in leg]) for leg in legs_]
    raw = zscore_scores(values, at, len(keys))
    assert [keys[i] for i in order(raw)] == [f.key for f in zscore(legs_)]
    assert logistic(raw)[order(raw)].tolist() == [f.score for f in zscore(legs_)]
    scores, best_rank = rrf_scores(at, len(keys))
    assert [keys[i] for i in order(scores, best_rank)] == [f.key for f in rrf(legs_)]
    mixed = weighted_scores(values, at, len(keys))
    assert [keys[i] for i in order(mixed)] == [f.key for f in weighted(legs_)]


def test_fused_entries_read_as_key_and_score() -> None:
    top = zscore([[("a", 2.0), ("b", 1.0)]])[0]
    assert (top.key, top.score) == top == ("a", top.score)
