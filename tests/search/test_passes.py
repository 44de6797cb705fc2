"""The shortcuts of a hybrid search's passes give what the full computation gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridkb.index.quantized import ranked
from hybridkb.results import RankedHits
from hybridkb.search.legs import Leg
from hybridkb.search.passes import Fusion, ranks_of

# Few distinct values, so ties (and a NaN now and then) are common.
SCORES_F32 = [0.0, 0.5, 0.25, -0.125, 1.0, float("nan")]
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


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.sampled_from(SCORES_F32)), max_size=40),
    st.integers(1, 50),
    st.integers(1, 50),
)
def test_an_index_leg_keeps_its_arrays_and_order(
    pairs: list[tuple[int, float]], k: int, limit: int
) -> None:
    """A leg from the index's ranked list (its arrays kept) is the leg built from its
    pairs, and merging it alone cuts it where sorting it again would."""
    keys = np.array(sorted({key for key, _ in pairs}), np.int64)
    scores = np.array([dict(pairs)[key] for key in keys.tolist()], np.float32)
    found = ranked(keys, scores, k)
    plain = list(found)
    assert isinstance(found, RankedHits) and found == plain
    fast, slow = Leg.of(3, found), Leg.of(3, plain)
    for a, b in ((fast, slow), (Leg.merged([fast], limit), Leg.merged([slow], limit))):
        assert a.cids.tolist() == b.cids.tolist() and a.keys.tolist() == b.keys.tolist()
        assert a.scores.tobytes() == b.scores.tobytes()  # NaN included
        assert a.keys.dtype == b.keys.dtype and a.scores.dtype == b.scores.dtype


def test_an_index_leg_reads_as_a_list_of_pairs() -> None:
    found = ranked(np.array([5, 3, 9], np.int64), np.array([0.5, 0.75, 0.5], np.float32), 3)
    assert dict(found) == {3: 0.75, 5: 0.5, 9: 0.5}
    assert found == [(3, 0.75), (5, 0.5), (9, 0.5)] and list(found) == found
