"""The shortcuts of a hybrid search's passes give what the full computation gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridkb.search.legs import Leg
from hybridkb.search.passes import Fusion, ranks_of

# Few distinct values, so ties (and a NaN now and then) are common.
SCORES = st.lists(st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.5, -1.0, float("nan")]), max_size=30)


def _fusion(scores: list[float]) -> Fusion:
    n = len(scores)
    keys = np.arange(n, dtype=np.int64)
    return Fusion(keys, keys, np.array(scores), np.arange(n), np.arange(n))


@settings(max_examples=300, deadline=None)
@given(SCORES, st.integers(1, 4))
def test_the_leading_candidates_are_the_first_of_the_ranking(scores: list[float], n: int) -> None:
    ranking = _fusion(scores).ranking  # computed, then read
    assert _fusion(scores).leading(n).tolist() == ranking[:n].tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=30, unique=True), st.data())
def test_ranks_of_a_leg_first_in_the_candidates_are_its_own_positions(
    keys: list[int], data: st.DataObject
) -> None:
    n = len(keys)
    leg = Leg(np.full(n, 7, np.int64), np.array(keys, np.int64), np.linspace(2, 1, n))
    extra = data.draw(st.integers(0, 10))
    top = np.array(
        data.draw(st.lists(st.integers(0, n + extra - 1), unique=True)) if n + extra else [],
        np.intp,
    )
    at = np.arange(n, dtype=np.intp)
    assert ranks_of(leg, at, top, identity=True) == ranks_of(leg, at, top)
    expected = {(7, keys[p]): (p + 1, float(leg.scores[p])) for p in top.tolist() if p < n}
    assert ranks_of(leg, at, top) == expected
