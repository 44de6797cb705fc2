"""A search's legs as arrays, and the helper thread that runs one beside another."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybridkb.search.legs import Helper, Leg, WayTimes, union

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


def test_a_kind_of_leg_tries_both_ways_then_takes_the_faster_and_now_and_then_the_other() -> None:
    times = WayTimes()
    ways = []
    for _ in range(2 * WayTimes.KEEP):  # unmeasured: the ways in turn, a thread first
        threaded = times.next_is_threaded()
        ways.append(threaded)
        times.add(threaded, 0.010 if threaded else 0.002)
    assert ways == [True, False] * WayTimes.KEEP
    chosen = [times.next_is_threaded() for _ in range(3 * WayTimes.EXPLORE_EVERY)]
    # The faster way (here the caller), and the slower one in one search of EXPLORE_EVERY.
    assert chosen.count(True) == 3
    assert times.next_is_threaded() is False
    for _ in range(WayTimes.KEEP):  # the thread became the faster way: it is taken again
        times.add(True, 0.001)
    assert times.next_is_threaded() is True


def test_a_way_is_judged_by_its_best_recent_span_not_by_one_slow_search() -> None:
    times = WayTimes()
    for threaded, seconds in [(True, 0.070), (True, 0.070), (True, 0.002)]:
        times.add(threaded, seconds)
    for _ in range(WayTimes.KEEP):
        times.add(False, 0.003)
    assert times.typical(True) == 0.002 and times.next_is_threaded() is True
    times.add(False, 0.0005)  # one fast search in the caller is one of its last three
    assert times.typical(False) == 0.0005


def test_the_helper_times_what_the_caller_waits_and_runs_a_leg_faster_there_in_the_caller() -> None:
    helper = Helper()
    thread_of: list[str] = []

    def leg() -> str:
        thread_of.append(threading.current_thread().name)
        return "done"

    job = helper.start(leg, "small")  # an unknown kind: a thread first
    time.sleep(0.02)  # the caller's own leg counts: it is the same either way
    assert job.result() == "done" and thread_of == ["hybridkb-search-leg"]
    assert helper.start(leg, "small").result() == "done"  # then the caller, to compare
    assert thread_of[-1] == threading.current_thread().name
    times = helper.kinds["small"]
    assert times.spans[True][0] >= 0.02 and len(times.spans[False]) == 1
    # Measured faster in the caller: the caller runs it, and only when it asks for the
    # result (after its own leg).
    times.spans[True].extend([1.0] * WayTimes.KEEP)
    times.spans[False].extend([1e-4] * WayTimes.KEEP)
    job = helper.start(leg, "small")
    assert job.thread is None and len(thread_of) == 2
    assert job.result() == "done" and thread_of[-1] == threading.current_thread().name
    # A kind measured faster in a thread keeps its thread.
    helper.kinds["slow"] = WayTimes()
    helper.kinds["slow"].spans[True].extend([1e-3] * WayTimes.KEEP)
    helper.kinds["slow"].spans[False].extend([1e-2] * WayTimes.KEEP)
    assert helper.start(leg, "slow").result() == "done"
    assert thread_of[-1] == "hybridkb-search-leg"


def test_a_leg_run_in_the_caller_raises_there_and_an_error_is_no_timing() -> None:
    helper = Helper()
    times = helper.kinds["k"] = WayTimes()
    times.spans[True].extend([1.0] * WayTimes.KEEP)  # threads cost a second here
    times.spans[False].extend([0.5] * WayTimes.KEEP)

    def fail() -> None:
        raise KeyError("boom")

    job = helper.start(fail, "k")
    assert job.thread is None
    with pytest.raises(KeyError, match="boom"):
        job.result()
    assert list(times.spans[False]) == [0.5] * WayTimes.KEEP
    assert helper.start(lambda: 7, "k").result() == 7
    assert min(times.spans[False]) < 0.5  # the quick call is its best recent span
