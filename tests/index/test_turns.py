"""The vector index's lock: its background builder lets waiting callers go first."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from hybridkb.index import turns
from hybridkb.index.turns import CourteousLock


def _builder(lock: CourteousLock, order: list[str], batches: int) -> threading.Thread:
    """A thread that holds ``lock`` for ``batches`` turns, stepping aside between them;
    its first turn lasts until a caller waits."""

    def run() -> None:
        for turn in range(batches):
            with lock:
                order.append(f"batch {turn}")
                deadline = time.monotonic() + 10
                while turn == 0 and not lock.waiting and time.monotonic() < deadline:
                    time.sleep(0.001)
                time.sleep(0.005)
            lock.step_aside(10.0)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_caller_waiting_through_a_turn_goes_before_the_next() -> None:
    lock = CourteousLock()
    order: list[str] = []
    builder = _builder(lock, order, batches=20)
    while not order:
        time.sleep(0.001)
    with lock:  # blocks: batch 0 holds the lock until this call waits
        order.append("caller")
    builder.join()
    assert order[:3] == ["batch 0", "caller", "batch 1"]
    assert lock.waiting == 0


def test_the_lock_is_reentrant_and_stepping_aside_without_waiters_returns_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lock = CourteousLock()
    with lock, lock:  # a search inside a write of the same thread
        pass

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"stepped aside for {seconds} s with nobody waiting")

    # The module's own clock, not the process's: other threads may sleep meanwhile.
    monkeypatch.setattr(turns, "time", SimpleNamespace(monotonic=time.monotonic, sleep=no_sleep))
    lock.step_aside(5.0)
    monkeypatch.undo()
    done: list[bool] = []

    def take() -> None:
        with lock:
            done.append(True)

    other = threading.Thread(target=take, daemon=True)
    other.start()
    other.join(timeout=5)
    assert done == [True]  # released as often as it was taken
