"""Stop signals inside ``stop_on_signals``: a stop that something swallowed on its way
still stops the next step of a long loop, and one a native layer turned into its own
error still ends the block as the stop."""

from __future__ import annotations

import itertools
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from stop_anywhere import every_step

from hybridkb.lifecycle import (
    Handoff,
    Stopped,
    join_background,
    map_in_threads,
    raise_if_stopped,
    read_ahead,
    start_background,
    stop_on_signals,
)


def test_a_swallowed_stop_is_raised_again_at_the_next_step() -> None:
    with pytest.raises(Stopped) as stopped, stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a call: the handler runs by now
        except Stopped:
            pass  # what a driver that checks signals itself and clears the error does
        raise_if_stopped()
    assert stopped.value.signum == signal.SIGTERM
    raise_if_stopped()  # the block is over: nothing is pending any more


def test_no_stop_no_raise() -> None:
    with stop_on_signals():
        raise_if_stopped()


def test_an_error_a_native_layer_made_of_the_stop_leaves_the_block_as_the_stop() -> None:
    """DuckDB's driver checks signals during a query and raises its own error instead of
    the handler's: ``hybridkb copy`` stopped while opening its destination exited 1 with
    a traceback ending in ``RuntimeError: Query interrupted``."""
    interrupted = RuntimeError("Query interrupted")
    with pytest.raises(Stopped) as stopped, stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a call: the handler runs by now
        except Stopped:
            raise interrupted from None  # what the driver does with it
    assert stopped.value.signum == signal.SIGTERM
    assert stopped.value.__cause__ is interrupted


def test_an_error_without_a_stop_leaves_the_block_as_it_is() -> None:
    with pytest.raises(RuntimeError, match="Query interrupted"), stop_on_signals():
        raise RuntimeError("Query interrupted")


def test_a_handoff_holds_at_most_its_depth_and_lets_a_waiting_producer_go() -> None:
    handoff: Handoff[int] = Handoff(2)
    handed: list[bool] = []
    producer = threading.Thread(target=lambda: handed.extend(handoff.put(i) for i in range(6)))
    producer.start()
    time.sleep(0.3)
    assert handed == [True, True] and producer.is_alive()  # the third waits for room
    assert [handoff.get(timeout=5) for _ in range(3)] == [0, 1, 2]
    time.sleep(0.3)
    assert handed == [True] * 5 and producer.is_alive()  # 3 and 4 in, 5 waits
    handoff.abandon()  # the consumer went away: the producer stops waiting
    producer.join(5)
    assert not producer.is_alive() and handed == [True] * 5 + [False]
    with pytest.raises(queue.Empty):
        Handoff[int](1).get(timeout=0.01)


# A stop landing in a finalizer (a generator closed by the collector) is printed and
# ignored, as a real signal's would be: expected here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_anywhere_in_a_consumer_never_wedges_the_producer() -> None:
    """queue.Queue wedged so: a stop landing just after its Condition took its lock left
    the lock held, and the producer's next put waited for ever."""
    producers: list[threading.Thread] = []  # those that ran

    def scenario() -> None:
        handoff: Handoff[int] = Handoff(1)

        def produce() -> None:
            producers.append(threading.current_thread())
            for i in range(4):
                handoff.put(i)

        try:
            threading.Thread(target=produce, daemon=True).start()
            for _ in range(4):
                handoff.get(timeout=5)
        finally:
            handoff.abandon()

    assert every_step(scenario) == []
    for producer in producers:
        producer.join(5)
    assert not [p for p in producers if p.is_alive()]


def test_the_exit_wait_passes_over_a_thread_that_never_started() -> None:
    """A stop landing inside Thread.start can leave a thread that never says it started;
    the wait at exit then raised RuntimeError ("cannot join thread before it is
    started") from an atexit callback, a traceback at the user."""
    never = threading.Thread(target=lambda: None)
    ran = start_background(lambda: time.sleep(0.05), "hybridkb-test")
    assert join_background([never, ran], 5) is True and not ran.is_alive()


def test_a_copy_reads_ahead_in_a_thread_that_ends_with_it() -> None:
    """The source is read a batch ahead (lifecycle.read_ahead): every item in order, the
    source's error raised in the copy, and no thread left once the copy ends, however
    it ends."""
    with read_ahead(iter(range(100)), 3, "reader") as items:
        assert list(items) == list(range(100))

    def failing() -> Iterator[int]:
        yield 1
        raise ValueError("source broke")

    with (
        pytest.raises(ValueError, match="source broke"),
        read_ahead(failing(), 3, "reader") as items,
    ):
        list(items)
    before = threading.active_count()
    with pytest.raises(KeyError), read_ahead(itertools.count(), 2, "reader") as items:
        assert next(items) == 0 and threading.active_count() == before + 1
        raise KeyError("a copy that stopped part-way")
    assert threading.active_count() == before


# A stop landing in a finalizer (a generator closed by the collector) is printed and
# ignored, as a real signal's would be: expected here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_anywhere_in_a_read_ahead_ends_it_and_its_reader() -> None:
    """A stop signal's exception can land anywhere the copy's thread runs Python, also
    inside a lock's ``with`` just after the lock was taken (the lock then stays held):
    queue.Queue's did, the reader waited for it for ever and `hybridkb copy` stopped by
    SIGTERM hung in CI. At every such point the block ends, and so does its reader."""
    readers: list[threading.Thread] = []

    def source() -> Iterator[int]:
        readers.append(threading.current_thread())
        yield from range(6)

    def scenario() -> None:
        with read_ahead(source(), 2, "reader") as items:
            for _ in items:
                pass

    assert every_step(scenario) == []
    deadline = time.monotonic() + 5
    while any(t.is_alive() for t in readers) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [t for t in readers if t.is_alive()]


def test_map_in_threads_keeps_order_and_raises_the_first_error() -> None:
    assert map_in_threads(lambda x: x * x, list(range(50)), 3, "worker") == [
        x * x for x in range(50)
    ]
    assert map_in_threads(lambda x: x, [], 2, "worker") == []

    def fails(x: int) -> int:
        if x == 7:
            raise ValueError("item 7 broke")
        return x

    before = threading.active_count()
    with pytest.raises(ValueError, match="item 7 broke"):
        map_in_threads(fails, list(range(20)), 2, "worker")
    assert threading.active_count() == before


# As above: a stop landing in a finalizer is printed and ignored.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_anywhere_in_map_in_threads_ends_its_threads_and_their_work() -> None:
    """ThreadPoolExecutor's futures wait on a Python-level Condition (a stop can leave
    its lock held, and the worker setting the result then waits for ever), and its exit
    runs every queued call first. Stopped anywhere, only calls already running finish."""
    workers: list[threading.Thread] = []
    late: list[int] = []  # calls that started after the call that ran them ended

    def scenario() -> None:
        ended = False

        def call(x: int) -> int:
            workers.append(threading.current_thread())
            if ended:
                late.append(x)
            time.sleep(0.002)
            return x

        try:
            map_in_threads(call, list(range(40)), 2, "worker")
        finally:
            ended = True

    assert every_step(scenario) == []
    for worker in workers:
        worker.join(5)
    assert late == []
    assert not [w for w in workers if w.is_alive()]
