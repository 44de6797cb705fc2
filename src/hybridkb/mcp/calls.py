"""The tool calls a stdio session has in progress: at most so many, an id used once at a
time, a cancel that keeps a call from starting or drops its answer.

:class:`PendingCalls` is the book :class:`hybridkb.mcp.stdio.StdioServer` keeps of them
(the reading thread admits and cancels, the worker threads start and finish), under
one lock. Its own module: the counting is the part of the session whose rules a
flooding or cancelling client tests, and it needs no thread, stream or tool to read.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

from .jsonrpc import RequestId

__all__ = ["PendingCalls", "Refused"]

# Why a call was not admitted: its id is in use, too many calls, too many SQL calls.
Refused = Literal["taken", "busy", "sql_busy"]


@dataclass
class _Call:
    cancelled: bool = False


class PendingCalls:
    """The calls running or waiting, by request key (:func:`hybridkb.mcp.jsonrpc.request_key`).

    Args:
        max_calls: Calls in progress at once; more are refused until some finish.
        max_sql_calls: Of those, calls of the SQL tool.
    """

    def __init__(self, *, max_calls: int, max_sql_calls: int) -> None:
        self._max_calls = max_calls
        self._max_sql_calls = max_sql_calls
        self._calls: dict[RequestId, _Call] = {}
        self._lock = threading.Lock()
        self._sql_calls = 0  # running or waiting, under _lock

    def admit(self, key: RequestId, *, sql: bool) -> Refused | None:
        """Book the call ``key`` (``sql``: of the SQL tool); None when booked, else why
        not: the id is taken, then too many calls, then too many SQL calls."""
        with self._lock:
            busy = len(self._calls) >= self._max_calls
            taken = key in self._calls
            sql_busy = sql and self._sql_calls >= self._max_sql_calls
            if not busy and not taken and not sql_busy:
                self._calls[key] = _Call()
                self._sql_calls += sql
        if taken:
            return "taken"
        if busy:
            return "busy"
        return "sql_busy" if sql_busy else None

    def cancel(self, key: RequestId) -> None:
        """Mark the call ``key`` cancelled, if it is in progress."""
        with self._lock:
            call = self._calls.get(key)
            if call is not None:
                call.cancelled = True

    def may_start(self, key: RequestId) -> bool:
        """Whether the call ``key`` is booked and not cancelled."""
        with self._lock:
            call = self._calls.get(key)
            return call is not None and not call.cancelled

    def finish(self, key: RequestId, *, sql: bool) -> bool:
        """Take the call ``key`` off the book; whether its answer is to be sent (it was
        booked and not cancelled)."""
        with self._lock:
            call = self._calls.pop(key, None)
            self._sql_calls -= sql
        return call is not None and not call.cancelled
