"""A lock that a background thread holds in turns, letting waiting callers go first."""

from __future__ import annotations

import threading
import time
from collections import deque
from types import TracebackType

# How often a thread stepping aside looks whether the callers it let go are through.
STEP_ASIDE_POLL_SECONDS = 0.0005


class CourteousLock:
    """A re-entrant lock whose background holder steps aside for waiting callers.

    The deferred graph's builder (``vector_build.py``) holds the vector index's lock for a
    batch of inserts (~0.1 s) at a time and wants it again right after letting go. A lock
    goes to whoever asks first, and the builder asked again before the caller it woke could
    run, so a write waited through several batches: 300k chunks through ``add_texts``
    spent 35 s of 159 waiting for this lock, 0.12 s a call. ``with lock:`` is a caller's
    turn (one uncontended acquire when nobody holds it); between batches the builder calls
    :meth:`step_aside`, which returns once every caller that was waiting has had the lock.

    Callers count themselves in a deque (one C call to enter, one to leave) rather than
    under a ``threading.Condition``: a stop signal's exception can land just after such a
    Python-level wrapper took its lock and leave it held (``lifecycle.py``). At worst it
    lands between a caller's count and its ``try`` and leaves one stale entry; the builder
    then steps aside for its whole timeout each batch, slower but never stuck.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._waiting: deque[None] = deque()  # an entry per caller blocked in __enter__

    def __enter__(self) -> CourteousLock:
        if self._lock.acquire(blocking=False):  # free, or already this thread's
            return self
        self._waiting.append(None)
        try:
            self._lock.acquire()
        finally:
            self._waiting.pop()
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
        return len(self._waiting)

    def step_aside(self, timeout: float) -> None:
        """Return once no caller is waiting for the lock (at most ``timeout`` seconds);
        called without holding it, between a background thread's turns."""
        deadline = time.monotonic() + timeout
        while self._waiting and time.monotonic() < deadline:
            time.sleep(STEP_ASIDE_POLL_SECONDS)
