"""A lock that a background thread holds in turns, letting waiting callers go first."""

from __future__ import annotations

import threading
from types import TracebackType


class CourteousLock:
    """A re-entrant lock whose background holder steps aside for waiting callers.

    The deferred graph's builder (``vector_build.py``) holds the vector index's lock for a
    batch of inserts (~0.1 s) at a time and wants it again right after letting go. A lock
    goes to whoever asks first, and the builder asked again before the caller it woke could
    run, so a write waited through several batches: 300k chunks through ``add_texts``
    spent 35 s of 159 waiting for this lock, 0.12 s a call. ``with lock:`` is a caller's
    turn (one uncontended acquire when nobody holds it); between batches the builder calls
    :meth:`step_aside`, which returns once every caller that was waiting has had the lock.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._waiting = 0  # callers blocked in __enter__, counted under _turns
        self._turns = threading.Condition(threading.Lock())

    def __enter__(self) -> CourteousLock:
        if self._lock.acquire(blocking=False):  # free, or already this thread's
            return self
        with self._turns:
            self._waiting += 1
        try:
            self._lock.acquire()
        finally:
            with self._turns:
                self._waiting -= 1
                if not self._waiting:
                    self._turns.notify_all()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._lock.release()

    @property
    def waiting(self) -> int:
        """Callers blocked waiting for the lock now."""
        return self._waiting

    def step_aside(self, timeout: float) -> None:
        """Return once no caller is waiting for the lock (at most ``timeout`` seconds);
        called without holding it, between a background thread's turns."""
        with self._turns:
            self._turns.wait_for(lambda: not self._waiting, timeout)
