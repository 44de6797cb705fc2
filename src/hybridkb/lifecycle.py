"""How a hybridkb process ends: background threads it waits for, and stop signals.

A daemon thread still inside native code (ONNX Runtime loading a model, DuckDB
reading an index) when the interpreter finalises can kill the process: C++ static
destructors run under it and abort with "terminate called without an active
exception" (SIGABRT, rc 134), and a writer that aborts leaves its last writes in
the WAL. So every background thread hybridkb starts is started here, and every
exit path waits for them (:func:`join_background`, and at exit for the rest),
for a bounded time: the longest is a first model load (~45 s to prepare ONNX on
a busy 2-core machine).

Long-lived processes (``hybridkb mcp``) are stopped by MCP hosts with SIGTERM, and
by a closed terminal with SIGHUP. :func:`stop_on_signals` turns both into
:class:`Stopped`, raised in the main thread like KeyboardInterrupt, so the same
``finally`` blocks run: calls in progress finish, the knowledge base closes
(DuckDB checkpoints) and the owner's endpoint file is removed; the CLI then exits
with 128 + the signal's number.

That exception can land anywhere the main thread runs Python, so threads that work for
a call (:func:`read_ahead`, :func:`map_in_threads`, :class:`Handoff`) wait on C-level
primitives only and end with the call, however it ends.
"""

from __future__ import annotations

import atexit
import queue
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Generic, TypeVar

__all__ = [
    "EXIT_WAIT_SECONDS",
    "STOP_SIGNALS",
    "Handoff",
    "map_in_threads",
    "read_ahead",
    "Stopped",
    "join_background",
    "own_process",
    "process_owned",
    "raise_if_stopped",
    "start_background",
    "stop_on_signals",
]

EXIT_WAIT_SECONDS = 120.0
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)

T = TypeVar("T")
R = TypeVar("R")

_RUNNING: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
# The stop signal received inside the current stop_on_signals block (at most one).
_REQUESTED: list[int] = []
_OWNED = threading.Event()


def own_process(owned: bool = True) -> None:
    """Say that a program owns this process (the CLI run as ``hybridkb``, ``hybridkb mcp``),
    or no longer does. Only then may a call start what outlives it: the int8 judge, a
    detached child process (hybridkb.embedders.judge). A library's calls leave the
    process as they found it: ``connect(serve=True)`` is how a program asks to serve."""
    if owned:
        _OWNED.set()
    else:
        _OWNED.clear()


def process_owned() -> bool:
    """Whether a program owns this process (:func:`own_process`)."""
    return _OWNED.is_set()


class Stopped(BaseException):
    """The process was asked to stop (SIGTERM, SIGHUP): unwind as for KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


def start_background(target: Callable[[], object], name: str) -> threading.Thread:
    """Start ``target`` in a daemon thread the process waits for before it exits."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    _RUNNING.add(thread)
    thread.start()
    return thread


def join_background(threads: Iterable[threading.Thread], timeout: float) -> bool:
    """Wait for ``threads`` (at most ``timeout`` seconds in all); True if all ended.
    A thread whose start a stop signal interrupted may never say it started (its
    start's own Condition can stay locked): it never runs, and join would raise."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        if thread is not threading.current_thread() and thread.is_alive():
            thread.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in threads if t is not threading.current_thread())


@atexit.register
def _wait_for_background() -> None:
    # atexit runs before the interpreter finalises and before C++ destructors run.
    join_background(list(_RUNNING), EXIT_WAIT_SECONDS)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Stopped` in the main thread
    (once: a second signal while stopping is ignored, so the clean-up is not cut short).

    An error that leaves the block after a stop signal arrived leaves it as that stop
    (:class:`Stopped`, the error its cause): a native layer that checks signals itself
    turns the handler's exception into its own (DuckDB: ``RuntimeError: Query
    interrupted``, raised from a schema migration's COMMIT when a copy was stopped while
    opening its destination), and the process is stopping either way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            _REQUESTED.append(signum)
            raise Stopped(signum)

    previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS}
    try:
        yield
    except Exception as exc:
        if stopping and _REQUESTED:
            raise Stopped(_REQUESTED[0]) from exc
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if stopping:
            _REQUESTED.clear()


def raise_if_stopped() -> None:
    """Raise :class:`Stopped` if a stop signal arrived in the current
    :func:`stop_on_signals` block. A long loop calls this between steps: the handler's
    exception is raised wherever the main thread runs Python next, and a native layer
    that checks signals itself (a database driver between the tasks of a query) may
    swallow it; the loop then still stops at its next step."""
    if _REQUESTED:
        raise Stopped(_REQUESTED[0])


class Handoff(Generic[T]):
    """A bounded queue from a thread to the main thread that a stop signal cannot wedge.

    ``queue.Queue`` guards itself with ``threading.Condition``, whose ``__enter__`` is
    Python: a stop signal's exception raised there, just after the lock was taken and
    before the ``with`` holds it, leaves the lock held for ever (2 of 2,000 stops in a
    stress test), and the other thread's next ``put`` waits for it for ever (``hybridkb
    copy`` stopped by SIGTERM hung so in CI). Here both directions are
    ``queue.SimpleQueue``, written in C and safe against that: the items, and the room
    for them (one token per free place). The producer waits for room in steps, so a
    consumer that went away (:meth:`abandon`, a plain flag: setting an Event takes a
    lock too) never holds it."""

    STEP_SECONDS = 0.05

    def __init__(self, depth: int) -> None:
        self._items: queue.SimpleQueue[T] = queue.SimpleQueue()
        self._room: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(max(1, depth)):
            self._room.put(None)
        self.abandoned = False

    def put(self, item: T) -> bool:
        """Hand ``item`` over once there is room; False (not handed) if abandoned first."""
        while not self.abandoned:
            try:
                self._room.get(timeout=self.STEP_SECONDS)
            except queue.Empty:
                continue
            self._items.put(item)
            return True
        return False

    def get(self, timeout: float | None = None) -> T:
        """The next item (``queue.Empty`` after ``timeout`` seconds without one)."""
        item = self._items.get(timeout=timeout)
        self._room.put(None)
        return item

    def abandon(self) -> None:
        """The consumer takes nothing more: a waiting :meth:`put` gives up."""
        self.abandoned = True


# Threads that end with the call that needs them. A stop signal's exception can land
# anywhere the main thread runs Python, also just after a Python-level lock wrapper
# (threading.Condition, so queue.Queue and concurrent.futures) took its lock: that lock
# then stays held, and a thread that needs it next waits for ever, and so does whoever
# joins it (ThreadPoolExecutor's exit waits for every queued task too). These wait on
# C-level primitives only: Handoff's SimpleQueues and Thread.join.


@contextmanager
def read_ahead(items: Iterable[T], depth: int, name: str) -> Iterator[Iterator[T]]:
    """``items`` in order, read by a thread of their own (``name``) up to ``depth``
    ahead of the caller; an error reading them is raised where the next item is taken.
    The thread ends with the block, however it ends: a copy leaves no read of its
    source running when it closes it, an add no file being parsed."""
    handoff: Handoff[tuple[bool, Any]] = Handoff(depth)
    thread = threading.Thread(target=_read_into, args=(items, handoff), name=name, daemon=True)
    try:
        yield _taken(handoff, thread)
    finally:
        handoff.abandon()
        # Not alive: never started, or a stop interrupted its start before the thread
        # said it runs; it then finds the hand-over abandoned before its first read.
        if thread.is_alive():
            thread.join()


def _taken(handoff: Handoff[tuple[bool, Any]], reader: threading.Thread) -> Iterator[Any]:
    """The items as the reader hands them over, then its error or the end. The reader
    starts at the first item asked for, inside the caller's block: a stop landing as
    the block opens (before ``with`` holds it, so nothing ends it) leaves no thread."""
    reader.start()
    while True:
        last, value = handoff.get()
        if last:
            if value is not None:
                raise value
            return
        yield value


def _read_into(items: Iterable[Any], handoff: Handoff[tuple[bool, Any]]) -> None:
    """The reader thread: each item, then (True, None) or (True, the error), until the
    consumer abandons the hand-over (looked at before each read)."""
    end = object()
    try:
        source = iter(items)
        while not handoff.abandoned:
            item = next(source, end)
            if item is end:
                handoff.put((True, None))
                return
            if not handoff.put((False, item)):
                return
    except BaseException as exc:  # noqa: BLE001 - raised in the caller
        handoff.put((True, exc))


def map_in_threads(fn: Callable[[T], R], items: list[T], workers: int, name: str) -> list[R]:
    """``[fn(x) for x in items]``, ``workers`` threads (``name``) taking the next item as
    each is free, started and joined here; the first error is raised. Stopped part-way
    (an exception in the caller's join), the threads take no more items and are waited
    for: only calls already running finish."""
    results: list[Any] = [None] * len(items)
    errors: list[BaseException] = []
    todo = iter(range(len(items)))  # next() of a range iterator is one C call: shared safely
    abandoned = False

    def work() -> None:
        try:
            for i in todo:
                if abandoned or errors:
                    return
                results[i] = fn(items[i])
        except BaseException as exc:  # noqa: BLE001 - raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=work, name=name, daemon=True) for _ in range(workers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        abandoned = True
        for thread in threads:
            if thread.is_alive():
                thread.join()
    if errors:
        raise errors[0]
    return results
