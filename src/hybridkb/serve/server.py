"""The owner's listener: a thread serving the knowledge base on its endpoint (a Unix
socket, or a loopback TCP port where there are none: see endpoint.py).

A connection first passes the handshake (handshake.py: both sides prove the token,
short lines, a deadline); then requests are JSON lines ``{"id", "workspace", "op",
"args"}`` and answers ``{"ok": result}`` or ``{"error": {"type", "message"}}``. Each
connection gets a thread; the engine is already safe to share between threads (one
DuckDB connection under a lock). Only the flat calls of ``hybridkb.serve.wire.WIRE``
can be called, each with the arguments its declaration takes. A plain accept loop rather than socketserver: closing the socket ends
it at once, where socketserver's shutdown waits for its polling loop.

The accept loop never stops while the owner holds the file: at most
``MAX_UNPROVEN`` connections may be in their handshake (the oldest is dropped for a
new one), a handshake has ``HANDSHAKE_SECONDS``, proven connections are bounded by
the process's descriptor limit and dropped after ``IDLE_SECONDS`` of silence (the
client reconnects), and running out of descriptors pauses accepting, never ends it.

A write's answer is kept by its request id for a while: a client that lost the
answer (its connection broke) and sends the same request again gets the first
answer, not a second run (``CollectionExists`` for its own create).

Files are sent as paths, with the caller's confinement: the owner reads them inside
the folders the caller passed as ``allowed_paths`` (the agent tools' folders), or
any file when the caller passed none (a person's ``hybridkb add``), exactly as the
caller's own process would have. Client and owner are the same user on the same
machine (the socket folder is private, the token file 0600), so the owner may read
what the caller may read; its own allowed folders are for its own agent tools.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from hybridkb.errors import ConfigError
from hybridkb.local import LocalEngine
from hybridkb.serve.codec import (
    MAX_MESSAGE_BYTES,
    decode,
    dumps,
    encode,
    error_from,
    error_payload,
)
from hybridkb.serve.embedding import Ask, ClientEmbedder
from hybridkb.serve.endpoint import (
    Transport,
    new_endpoint,
    remove_endpoint,
    resolve_transport,
    write_endpoint,
)
from hybridkb.serve.handshake import owner_handshake
from hybridkb.serve.wire import WIRE, is_write

__all__ = ["OwnerServer", "serve_owned"]

MAX_UNPROVEN = 32  # connections still in their handshake
HANDSHAKE_SECONDS = 5.0
IDLE_SECONDS = 300.0
_REMEMBERED_ANSWERS = 512  # writes whose answers a retrying client may ask for again
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _descriptor_budget() -> int:
    """Proven connections this owner keeps at once: half its descriptor limit (the
    store, the model and the indexes need the rest)."""
    if sys.platform == "win32":
        return 256
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(8, min(1024, soft // 2 - MAX_UNPROVEN))


def serve_owned(engine: LocalEngine, db_path: str) -> None:
    """Make ``engine`` (which holds ``db_path`` for writing) serve other processes until it
    closes. Only a process that asked to serve calls this (``connect(serve=True)``: the
    CLI, ``hybridkb mcp``, ``watch``), never a library's plain ``connect``.

    Raises:
        ConfigError: it cannot listen or publish its endpoint; ``engine`` is closed then
            (the file free again, nothing left listening), and the error is the reason.
    """
    try:
        server = OwnerServer(engine, db_path, resolve_transport(engine.settings.serve_transport))
    except BaseException:
        with contextlib.suppress(Exception):  # the reason above is the one to tell
            engine.close()
        raise

    def stop() -> None:
        if server in _SERVERS:
            _SERVERS.remove(server)
        server.close()

    engine.on_close.append(stop)
    _remove_on_sigterm(server)


_SERVERS: list[OwnerServer] = []


def _remove_on_sigterm(server: OwnerServer) -> None:
    """An owner stopped by SIGTERM removes its endpoint file (no client is sent to a
    dead owner's address). Only where nobody else handles SIGTERM: a program with its
    own handler (the MCP server) closes its knowledge base there, which does the same."""
    _SERVERS.append(server)
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def stop(signum: int, frame: object) -> None:
        for each in list(_SERVERS):
            each.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # then die of it, as before

    signal.signal(signal.SIGTERM, stop)


class OwnerServer:
    """Serve ``engine`` (which holds the DuckDB file at ``db_path``) to other processes."""

    def __init__(
        self, engine: LocalEngine, db_path: str | Path, transport: Transport = "unix"
    ) -> None:
        self.engine = engine
        self.db_path = db_path
        self.endpoint, self._sock = new_endpoint(db_path, transport)
        self._workspaces: dict[str, LocalEngine] = {engine.workspace: engine}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        # Connections in their handshake, oldest first: a new one evicts the oldest.
        self._unproven: OrderedDict[socket.socket, None] = OrderedDict()
        self._proven = 0
        self._budget = _descriptor_budget()
        # Answers of recent writes by request id, and the writes running now.
        self._answers: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._running: dict[str, threading.Event] = {}
        try:  # published before the accept thread starts: a failure leaves nothing running
            write_endpoint(db_path, self.endpoint)
        except BaseException:
            self._close_listener()
            raise
        self._thread = threading.Thread(target=self._accept, name="hybridkb-owner", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError as exc:
                if self._closed.is_set() or exc.errno in (errno.EBADF, errno.EINVAL):
                    return  # closed: the owner is shutting down
                if exc.errno in _OUT_OF_DESCRIPTORS:
                    self._evict_oldest()  # free one, and let timeouts free more
                time.sleep(0.05)
                continue
            with self._lock:
                if len(self._unproven) >= MAX_UNPROVEN:
                    self._evict_oldest_locked()
                self._unproven[conn] = None
            try:
                threading.Thread(
                    target=self._serve, args=(conn,), name="hybridkb-owner-call", daemon=True
                ).start()
            except RuntimeError:  # no thread to spare: this caller retries
                self._forget(conn)
                conn.close()

    def _evict_oldest(self) -> None:
        with self._lock:
            self._evict_oldest_locked()

    def _evict_oldest_locked(self) -> None:
        if self._unproven:
            oldest, _ = self._unproven.popitem(last=False)
            try:
                oldest.shutdown(socket.SHUT_RDWR)  # its thread wakes, and closes it
            except OSError:
                pass

    def _forget(self, conn: socket.socket) -> None:
        with self._lock:
            self._unproven.pop(conn, None)

    def _prove(self, conn: socket.socket) -> bool:
        try:
            conn.settimeout(HANDSHAKE_SECONDS)
            proven = owner_handshake(conn, self.endpoint.token)
        except (OSError, ValueError):
            return False
        finally:
            self._forget(conn)
        if not proven:
            return False
        with self._lock:
            if self._proven >= self._budget:
                return False  # the caller sees a closed connection and tries again
            self._proven += 1
        return True

    def _serve(self, conn: socket.socket) -> None:
        """Prove the caller, then answer its requests, one JSON line each, until it
        hangs up or stays silent for IDLE_SECONDS."""
        with conn:
            if not self._prove(conn):
                return
            try:
                if conn.family != getattr(socket, "AF_UNIX", None):
                    # Answers go out at once, not after Nagle's wait (endpoint.open_connection).
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(IDLE_SECONDS)
                with conn.makefile("rb") as reader:

                    def ask(question: dict[str, Any]) -> Any:
                        # A question to the caller mid-call (its own embedder's vectors).
                        conn.sendall(dumps({"ask": question}))
                        reply = json.loads(reader.readline(MAX_MESSAGE_BYTES + 1) or b"{}")
                        if "error" in reply:
                            raise error_from(reply["error"])
                        return reply.get("vectors")

                    while True:
                        line = reader.readline(MAX_MESSAGE_BYTES + 1)
                        if not line:
                            return
                        conn.sendall(dumps(self.answer(line, ask)))
            except OSError:
                return  # the client went away, or was silent too long
            finally:
                with self._lock:
                    self._proven -= 1

    def _in(self, workspace: str) -> LocalEngine:
        with self._lock:
            if workspace not in self._workspaces:
                self._workspaces[workspace] = self.engine.in_workspace(workspace)
            return self._workspaces[workspace]

    def answer(self, line: bytes, ask: Ask | None = None) -> dict[str, Any]:
        """The answer to one request line of a proven caller."""
        try:
            request = json.loads(line)
            op = str(request.get("op"))
            args = dict(request.get("args") or {})
            request_id = str(request.get("id") or "")
        except Exception as exc:  # noqa: BLE001 - a malformed line is an answer too
            return {"error": error_payload(exc)}
        if not request_id or not is_write(op, args):
            return self._run(request, op, args, ask)
        while True:
            with self._lock:
                if request_id in self._answers:
                    return self._answers[request_id]  # a retry of a write already run
                running = self._running.get(request_id)
                if running is None:
                    self._running[request_id] = threading.Event()
                    break
            running.wait()  # the same write, still running for a connection that broke
        try:
            found = self._run(request, op, args, ask)
            with self._lock:
                self._answers[request_id] = found
                while len(self._answers) > _REMEMBERED_ANSWERS:
                    self._answers.popitem(last=False)
            return found
        finally:
            with self._lock:
                self._running.pop(request_id).set()

    def _run(
        self, request: dict[str, Any], op: str, args: dict[str, Any], ask: Ask | None
    ) -> dict[str, Any]:
        try:
            call = WIRE.get(op)
            if call is None:
                raise ConfigError(f"{op!r} cannot be called through the owner")
            arguments = call.incoming(decode(args))
            engine = self._in(str(request.get("workspace") or self.engine.workspace))
            for model_id, dim in dict(request.get("embedders") or {}).items():
                if ask is not None:  # the caller's own models, asked over this connection
                    engine = engine.with_embedder(ClientEmbedder(str(model_id), int(dim), ask))
            return {"ok": encode(call.target(engine)(**arguments))}
        except Exception as exc:  # noqa: BLE001 - every failure is an answer, not a dead thread
            return {"error": error_payload(exc)}

    def close(self) -> None:
        """Stop serving: withdraw the endpoint first (no new client finds it), wake and close
        the listening socket, and wait up to 5 s for the accept thread."""
        self._closed.set()
        remove_endpoint(self.db_path, self.endpoint)
        self._close_listener()
        self._thread.join(timeout=5)

    def _close_listener(self) -> None:
        """Close the listening socket (waking a blocked accept()) and remove its file."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if self.endpoint.path:
            Path(self.endpoint.path).unlink(missing_ok=True)
