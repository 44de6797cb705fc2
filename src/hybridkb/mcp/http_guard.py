"""``hybridkb mcp --http`` keeps its descriptors: no stranger can make it run out.

Threat: any local process may connect to a loopback port, token or not. A connection
that never finishes its headers is never answered, and uvicorn counts only requests
whose headers arrived (``limit_concurrency``), so ~1,100 of them took every
descriptor at the usual limit of 1,024. The failed ``accept`` was then logged through
a handler that needed a descriptor itself (to import a module), and that second
error ended the server (exit 1).

Rule, as for the owner's listener (``serve/server.py``): a connection is *unproven*
until a request on it carried the token (the TokenGate says so). At most
``max_unproven`` unproven connections are kept (a new one evicts the oldest), each
for at most ``UNPROVEN_SECONDS``; all connections together stay within
``max_connections``, a quarter of the descriptor limit (the store, the model, the
indexes and the owner's own listener need the rest), past which a new one is answered
``503`` and closed. An ``accept`` that fails for want of descriptors evicts the oldest
stranger and is said in one plain line, written without opening anything; the loop
goes on (asyncio retries the accept a second later).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["ConnectionGuard", "UNPROVEN_SECONDS", "connection_budget", "guarded_protocol"]

UNPROVEN_SECONDS = 30.0  # a client sends its first request at once
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: 39\r\n\r\nhybridkb mcp: too many connections now\n"
)
_SAY_EVERY_SECONDS = 60.0


def connection_budget() -> int:
    """Connections the HTTP server keeps at once: a quarter of the descriptor limit."""
    if sys.platform == "win32":
        return 256
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(16, min(1024, soft // 4))


def _key(peer: Any) -> Hashable | None:
    """A TCP connection's peer as uvicorn puts it in ``scope["client"]``."""
    if isinstance(peer, list | tuple) and len(peer) >= 2:
        return (str(peer[0]), int(peer[1]))
    return None


def _say(line: str) -> None:
    # os.write: no buffer, no lock, no file to open (the descriptors may be gone).
    try:
        os.write(2, line.encode("utf-8", "replace") + b"\n")
    except OSError:
        pass


class ConnectionGuard:
    """Which connections are open, which proved the token, and who goes when full."""

    def __init__(self, max_connections: int | None = None) -> None:
        self.max_connections = max_connections or connection_budget()
        self.max_unproven = max(4, self.max_connections // 4)
        self._unproven: OrderedDict[Hashable, tuple[asyncio.Transport, Any]] = OrderedDict()
        self._proven: dict[Hashable, asyncio.Transport] = {}
        self._said = -_SAY_EVERY_SECONDS

    def admit(self, transport: asyncio.BaseTransport) -> Hashable | None:
        """Register a new connection (its key), or shed it (None: answered 503, closed)."""
        key = _key(transport.get_extra_info("peername")) or transport
        if len(self._unproven) >= self.max_unproven:
            self.evict_oldest()
        if not isinstance(transport, asyncio.Transport):
            transport.close()  # not a stream connection: nothing of ours
            return None
        if len(self._unproven) + len(self._proven) >= self.max_connections:
            transport.write(_BUSY)
            transport.close()
            return None
        timer = asyncio.get_running_loop().call_later(
            UNPROVEN_SECONDS, self._expire, key, transport
        )
        self._unproven[key] = (transport, timer)
        return key

    def prove(self, client: Any) -> None:
        """A request from ``client`` (``scope["client"]``) carried the token."""
        key = _key(client)
        if key is not None and (entry := self._unproven.pop(key, None)) is not None:
            transport, timer = entry
            timer.cancel()
            self._proven[key] = transport

    def forget(self, key: Hashable, transport: asyncio.BaseTransport) -> None:
        """The connection closed."""
        entry = self._unproven.get(key)
        if entry is not None and entry[0] is transport:
            del self._unproven[key]
            entry[1].cancel()
        if self._proven.get(key) is transport:
            del self._proven[key]

    def evict_oldest(self) -> None:
        """Close the connection that has waited longest without proving the token."""
        if self._unproven:
            _, (transport, timer) = self._unproven.popitem(last=False)
            timer.cancel()
            transport.abort()  # connection_lost follows, and forgets nothing more

    def _expire(self, key: Hashable, transport: asyncio.Transport) -> None:
        entry = self._unproven.get(key)
        if entry is not None and entry[0] is transport:
            del self._unproven[key]
            transport.abort()

    def exception_handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The event loop's: out of descriptors is one line (and a stranger less), never
        a traceback whose logging may itself fail; nothing ends the loop."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_DESCRIPTORS:
            self.evict_oldest()
            now = time.monotonic()
            if now - self._said >= _SAY_EVERY_SECONDS:
                self._said = now
                _say(
                    f"hybridkb mcp: out of file descriptors ({exc.strerror}); new connections "
                    "wait, the oldest unproven ones are closed"
                )
            return
        try:
            loop.default_exception_handler(context)
        except (OSError, ImportError):  # logging needed a descriptor too: say it plainly
            _say(f"hybridkb mcp: {context.get('message', 'error in the event loop')}")


def _no_delay(transport: asyncio.BaseTransport) -> None:
    """Send small writes at once. asyncio does so only for sockets made with
    ``IPPROTO_TCP``; ours come from ``socket.create_server`` (protocol 0), and an answer
    written as headers then body waited for the client's delayed ACK: ~45 ms a request
    on a kept-alive connection."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # closed already: nothing to send


class _GuardedConnection(asyncio.Protocol):
    """One connection of :func:`guarded_protocol`: the inner protocol hears of it only
    once ``_guard`` admitted it, and nothing more after that was refused."""

    _guard: ConnectionGuard
    _make_inner: Callable[..., asyncio.Protocol]

    def __init__(self, **kwargs: Any) -> None:
        self.inner = self._make_inner(**kwargs)
        self.key: Hashable | None = None
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        _no_delay(transport)
        self.key = self._guard.admit(transport)
        if self.key is not None:
            self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.key is not None and self.transport is not None:
            self._guard.forget(self.key, self.transport)
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.key is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.key is not None else None

    def pause_writing(self) -> None:
        if self.key is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.key is not None:
            self.inner.resume_writing()


def guarded_protocol(
    protocol: Callable[..., asyncio.Protocol], guard: ConnectionGuard
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol factory with every connection admitted by ``guard``."""

    class Guarded(_GuardedConnection):
        _guard = guard
        _make_inner = staticmethod(protocol)

    return Guarded
