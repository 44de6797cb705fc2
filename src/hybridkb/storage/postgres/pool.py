"""A bounded set of connections one PostgreSQL store shares between its threads.

One connection behind a lock (as before) made every search of a process wait for the
one before it: an MCP server over HTTP, or the threads of a script, searched one at a
time. Here up to ``size`` statements run at once (``HYBRIDKB_PG_POOL_SIZE``), and no
more: a team's processes times their pool size stays within the server's
``max_connections``. Connections open when first needed and are reused; a thread that
already holds one (a read inside a write's transaction, a hook) gets the same one, so
it sees its own uncommitted rows and a pool of one cannot deadlock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ...errors import BackendError

DEFAULT_SIZE = 4
WAIT_S = 60.0  # for a free connection before the error says to raise the limit


class ConnectionPool:
    """At most ``size`` connections made by ``opener``; see the module docstring."""

    def __init__(self, opener: Callable[[], Any], size: int, wait_s: float | None = None) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"pool size must be a whole number >= 1, got {size!r}")
        self.size = size
        self._opener = opener
        self._wait_s = WAIT_S if wait_s is None else wait_s
        self._idle: list[Any] = []
        self._slots = threading.BoundedSemaphore(size)
        self._mutex = threading.Lock()
        self._local = threading.local()
        self._closed = False

    def held(self) -> bool:
        """Whether this thread is inside :meth:`connection` already."""
        return getattr(self._local, "con", None) is not None

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A connection for this thread until the block ends (the same one when nested).

        Raises:
            BackendError: the store is closed, or every connection stayed busy for
                ``wait_s`` seconds.
        """
        held = getattr(self._local, "con", None)
        if held is not None:
            yield held
            return
        if self._closed:
            raise BackendError("the knowledge base is closed; connect again")
        if not self._slots.acquire(timeout=self._wait_s):
            raise BackendError(
                f"all {self.size} PostgreSQL connections of this process stayed busy for "
                f"{self._wait_s:.0f} s; raise HYBRIDKB_PG_POOL_SIZE or lower the load"
            )
        con = None
        try:
            con = self._take()
            self._local.con = con
            yield con
        finally:
            self._local.con = None
            if con is not None:
                self._give_back(con)
            self._slots.release()

    def _take(self) -> Any:
        while True:
            with self._mutex:
                con = self._idle.pop() if self._idle else None
            if con is None:
                return self._opener()
            if not (con.closed or con.broken):
                return con
            con.close()

    def _give_back(self, con: Any) -> None:
        idle = con.info.transaction_status == 0  # psycopg.pq.TransactionStatus.IDLE
        with self._mutex:
            if not (self._closed or con.closed or con.broken) and idle:
                self._idle.append(con)
                return
            lost = con.broken
            stale = self._idle if lost else []  # a server restart broke the idle ones too
            if lost:
                self._idle = []
        for other in [con, *stale]:
            other.close()

    def close(self) -> None:
        """Close the idle connections now and the busy ones when they come back."""
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
        for con in idle:
            con.close()
