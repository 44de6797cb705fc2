"""A search's legs as arrays, and the helper thread that runs one beside another."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybridkb.search.legs import Helper, Leg, union

entries = st.lists(st.tuples(st.integers(1, 2), st.integers(0, 12), st.floats(0, 10)), max_size=25)


def _leg(items: list[tuple[int, int, float]]) -> Leg:
    return Leg(
        np.array([c for c, _, _ in items], np.int64),
        np.array([k for _, k, _ in items], np.int64),
        np.array([s for _, _, s in items], np.float64),
    )


@given(st.lists(entries, min_size=1, max_size=3), st.booleans())
def test_union_lists_every_pair_once_in_order_of_first_appearance(
    legs: list[list[tuple[int, int, float]]], one_collection: bool
) -> None:
    if one_collection:
        legs = [[(1, k, s) for _, k, s in leg] for leg in legs]
    cids, keys, at = union(*(_leg(leg) for leg in legs))
    seen: dict[tuple[int, int], int] = {}
    for leg in legs:
        for c, k, _ in leg:
            seen.setdefault((c, k), len(seen))
    assert list(zip(cids.tolist(), keys.tolist(), strict=True)) == list(seen)
    for leg, where in zip(legs, at, strict=True):
        assert where.tolist() == [seen[(c, k)] for c, k, _ in leg]


@given(entries, st.integers(0, 30))
def test_merged_keeps_the_best_by_score_then_collection_then_key(
    items: list[tuple[int, int, float]], limit: int
) -> None:
    half = len(items) // 2
    merged = Leg.merged([_leg(items[:half]), _leg(items[half:])], limit)
    want = sorted(items, key=lambda t: (-t[2], t[0], t[1]))[:limit]
    assert merged.pairs() == [((c, k), s) for c, k, s in want]
    assert merged.pairs(range(min(2, len(want)))) == [((c, k), s) for c, k, s in want[:2]]


def test_the_helper_runs_a_call_in_its_own_thread_and_hands_back_its_value() -> None:
    helper = Helper()
    names: list[str] = []

    def work() -> int:
        names.append(threading.current_thread().name)
        return 42

    job = helper.start(work)
    assert job.result() == 42
    assert names == ["hybridkb-search-leg"]
    again = helper.start(lambda: threading.current_thread().name)
    assert again.result() == "hybridkb-search-leg"  # free again once the caller woke


def test_concurrent_legs_never_wait_for_each_other_and_leave_no_thread() -> None:
    helper = Helper()
    release = threading.Event()
    first = helper.start(release.wait)
    second = helper.start(lambda: threading.current_thread().name)
    assert second.result() == "hybridkb-search-leg"  # not queued behind the first
    release.set()
    assert first.result() is True
    # A leg's thread has ended once its search has the result: a library's search
    # leaves the process with the threads it had (issue 33).
    assert not [t for t in threading.enumerate() if t.name == "hybridkb-search-leg"]


def test_the_helper_raises_the_call_s_error_in_the_caller() -> None:
    helper = Helper()

    def fail() -> None:
        raise KeyError("boom")

    job = helper.start(fail)
    with pytest.raises(KeyError, match="boom"):
        job.result()
    assert helper.start(lambda: 1).result() == 1  # and keeps serving


def test_a_leg_cheaper_than_a_thread_runs_in_the_caller_when_asked_for() -> None:
    helper = Helper()
    thread_of: list[str] = []

    def leg() -> str:
        thread_of.append(threading.current_thread().name)
        return "done"

    assert helper.start(leg, "small").result() == "done"  # unknown kind: a thread
    assert thread_of == ["hybridkb-search-leg"]
    assert helper.start_cost.value is not None and helper.leg_cost["small"].value is not None
    # Measured as cheaper than starting (and joining) a thread: the caller runs it, and
    # only when it asks for the result (after its own leg).
    helper.start_cost.value, helper.leg_cost["small"].value = 1e-3, 1e-4
    job = helper.start(leg, "small")
    assert len(thread_of) == 1 and job.thread is None
    assert job.result() == "done" and thread_of[-1] == threading.current_thread().name
    # A kind that costs more than a thread keeps its thread.
    helper.leg_cost["slow"] = type(helper.start_cost)()
    helper.leg_cost["slow"].value = 1e-2
    assert helper.start(leg, "slow").result() == "done"
    assert thread_of[-1] == "hybridkb-search-leg"


def test_a_leg_run_in_the_caller_still_learns_its_cost_and_raises_there() -> None:
    helper = Helper()
    helper.start_cost.value = 1.0  # threads cost a second here: every known leg is cheaper
    helper.leg_cost["k"] = type(helper.start_cost)()
    helper.leg_cost["k"].value = 0.5

    def fail() -> None:
        raise KeyError("boom")

    job = helper.start(fail, "k")
    with pytest.raises(KeyError, match="boom"):
        job.result()
    assert helper.start(lambda: 7, "k").result() == 7
    value = helper.leg_cost["k"].value
    assert value is not None and value < 0.5  # the quick call pulled the average down
