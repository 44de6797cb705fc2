"""``hybridkb mcp --http``: who may call the tools over HTTP.

Every request carries a bearer token (``Authorization: Bearer TOKEN``), on loopback
too: any local user can connect to a loopback port, and the tools read and write the
user's files (another user added a 0600 file with ``add_kb_documents`` and read it
back with ``search_kb``). The token is ``HYBRIDKB_MCP_TOKEN``, or the text of a file
given with ``--token-file`` that only its owner may read (see
:mod:`hybridkb.private_files`); with neither, one is made for this start and written
to ``mcp-http-PORT.token`` (0600) in this user's private runtime folder (the owner's
socket folder, :func:`hybridkb.serve.endpoint.runtime_folder`), whose path, never the
token, is said on stderr. Off loopback (``--host 0.0.0.0``) a token must be given:
a generated one would be a secret nobody on the other machine can read.

The gate checks every scope that carries requests (``http``, ``websocket``); lifespan
events pass, and any other kind is refused. On loopback the SDK's DNS-rebinding checks
(Host and Origin on an allow-list of loopback names) keep web pages out; off loopback
Host and Origin stay on an allow-list too: the bind address, this machine's name and
loopback, plus the names given with ``--allow-host``. Connections are bounded
(:mod:`hybridkb.mcp.http_guard`).

``hybridkb ui`` serves its pages with the same scheme (:class:`Door` says what differs:
the token's variable and file name, how a browser proves it, what is printed).
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import ipaddress
import json
import os
import secrets
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..private_files import read_private_file, write_private_file
from ..serve.endpoint import runtime_folder
from .http_guard import ConnectionGuard, guarded_protocol

__all__ = [
    "MCP_DOOR",
    "TOKEN_ENV",
    "Door",
    "TokenGate",
    "allowed_hosts",
    "is_loopback",
    "read_token",
    "serve_app",
    "token_path",
]

TOKEN_ENV = "HYBRIDKB_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
Gate = Callable[[App, str, ConnectionGuard], App]


def _announce_mcp(host: str, port: int, token: str, made: Path | None) -> None:
    where = (
        f"the token in {made} (new each start; set {TOKEN_ENV} or --token-file to keep one)"
        if made is not None
        else "the token given"
    )
    print(
        f"hybridkb mcp: serving http://{host}:{port}/mcp; clients send the header "
        f"'Authorization: Bearer TOKEN' with {where}",
        file=sys.stderr,
    )


def _bearer_gate(app: App, token: str, guard: ConnectionGuard) -> App:
    return TokenGate(app, token, guard)


@dataclass(frozen=True)
class Door:
    """One HTTP server that takes this module's token scheme: what differs between them.

    Attributes:
        program: How its messages start (``hybridkb mcp``).
        token_env: The variable that gives a token.
        token_name: A generated token goes to ``<token_name>-PORT.token``.
        port_option: The option that names the port, for messages.
        how_clients_prove: What a client must send, for the refusal off loopback.
        gate: Wraps the app so that every request proves the token to the guard.
        announce: Says where it serves, once the socket is bound and the token written
            (``made``: the file of a generated token, else None).
    """

    program: str
    token_env: str
    token_name: str
    port_option: str
    how_clients_prove: str
    gate: Gate
    announce: Callable[[str, int, str, Path | None], None]


MCP_DOOR = Door(
    program="hybridkb mcp",
    token_env=TOKEN_ENV,
    token_name="mcp-http",
    port_option="--http",
    how_clients_prove="clients must send 'Authorization: Bearer TOKEN'",
    gate=_bearer_gate,
    announce=_announce_mcp,
)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(host: str, token_file: Path | None, door: Door | None = None) -> str | None:
    """The bearer token given (``--token-file``, else the door's variable,
    ``HYBRIDKB_MCP_TOKEN`` by default), or None on loopback when none is
    (:func:`serve_app` then makes one).

    Raises:
        ConfigError: an untrustworthy token file (a link, a FIFO, another user's, one
            others may read), a short token, or none given off loopback.
    """
    door = door or MCP_DOOR
    token: str | None = None
    if token_file is not None:
        token = read_private_file(token_file, named=f"--token-file {token_file}").strip()
    elif os.environ.get(door.token_env):
        token = os.environ[door.token_env].strip()
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        what = "MCP" if door is MCP_DOOR else door.program
        raise ConfigError(
            f"the {what} token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
        )
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"--host {host} is reachable from other machines: set {door.token_env} or pass "
            f"--token-file PATH (mode 0600) so that {door.how_clients_prove}, or serve on "
            "--host 127.0.0.1"
        )
    return token


def allowed_hosts(host: str, extra: Iterable[str] = ()) -> list[str]:
    """Host header values accepted (``name:*`` patterns) for a server bound to ``host``."""
    names = [*_LOOPBACK_NAMES, *extra]
    if host not in ("0.0.0.0", "::", ""):
        names.append(f"[{host}]" if ":" in host else host)
    machine = socket.gethostname()
    names.append(machine)
    try:
        names.append(socket.gethostbyname(machine))
    except OSError:
        pass  # no address for the name: it is not reachable by it either
    unique = list(dict.fromkeys(names))
    return [f"{name}:*" for name in unique] + unique


_UNAUTHORIZED = json.dumps(
    {"error": "unauthorized", "error_description": "send Authorization: Bearer TOKEN"}
).encode()


class TokenGate:
    """ASGI middleware: a request (HTTP or WebSocket) without ``Authorization: Bearer
    <token>`` is refused (401; a WebSocket is closed before it is accepted); lifespan
    events pass; any other scope type is refused. A request that carries the token
    proves its connection to ``guard``."""

    def __init__(self, app: App, token: str, guard: ConnectionGuard | None = None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            await self.app(scope, receive, send)
            return
        if kind not in ("http", "websocket"):
            return  # an ASGI server's new kind of request: nothing passes unchecked
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if not hmac.compare_digest(given, self.expected):
            await (_refuse_http(send) if kind == "http" else _refuse_websocket(receive, send))
            return
        if self.guard is not None:
            self.guard.prove(scope.get("client"))
        await self.app(scope, receive, send)


async def _refuse_http(send: Send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="hybridkb"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": _UNAUTHORIZED})


async def _refuse_websocket(receive: Receive, send: Send) -> None:
    await receive()  # websocket.connect; closing before accepting refuses the handshake
    await send({"type": "websocket.close", "code": 1008})  # policy violation


def token_path(port: int, door: Door | None = None) -> Path:
    """Where a token made for one start of ``hybridkb mcp --http PORT`` (or another
    door's server on PORT) is written."""
    if hasattr(os, "getuid"):
        folder = runtime_folder()  # the owner's private folder, with its checks
    else:  # Windows: the user's own temporary folder, private through its ACL
        folder = Path(tempfile.gettempdir()) / "hybridkb"
        folder.mkdir(exist_ok=True)
    return folder / f"{(door or MCP_DOOR).token_name}-{port}.token"


def _listen(host: str, port: int, port_option: str) -> socket.socket:
    """The listening socket, bound before any token file is written (a second server
    on a taken port must not replace the first one's token)."""
    try:
        families = [info[0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
        family = socket.AF_INET if socket.AF_INET in families else families[0]  # localhost
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"{port_option} {port}: the port is in use (another server?); pick another port"
            ) from None
        raise ConfigError(f"--host {host} {port_option} {port}: {exc.strerror or exc}") from None


def serve_app(
    app: App, *, host: str, port: int, token: str | None, door: Door | None = None
) -> None:
    """Serve ``app`` at ``host:port`` until stopped: every request must carry ``token``
    (one made for this start when None) as ``door`` says (MCP's bearer header by
    default), connections are bounded. SIGINT, SIGTERM and SIGHUP shut it down
    gracefully, then reach the caller's handlers.

    Raises:
        ConfigError: the port is taken, or the address cannot be bound.
    """
    import uvicorn

    door = door or MCP_DOOR
    listener = _listen(host, port, door.port_option)
    made: Path | None = None
    try:
        if token is None:
            token, made = secrets.token_urlsafe(32), token_path(port, door)
            try:
                write_private_file(made, token + "\n")
            except OSError as exc:
                raise ConfigError(
                    f"{made}: cannot write this start's token there ({exc.strerror or exc}); "
                    f"set {door.token_env} or pass --token-file PATH"
                ) from None
        door.announce(host, port, token, made)
        guard = ConnectionGuard()
        # ws="none": the tools need no WebSocket, and an upgrade would hand the connection
        # to a protocol the guard does not see. proxy_headers=False: scope["client"] is the
        # real peer, which the guard keys connections by (no X-Forwarded-For from loopback).
        # backlog: asyncio accepts up to this many connections in one go before the guard
        # sees any (2,048 by default: past the descriptor limit in one burst). http="h11":
        # "auto" parses with httptools wherever that optional extra is installed, which
        # reads requests differently from what the gate and guard were tested with.
        config = uvicorn.Config(
            door.gate(app, token, guard), log_level="warning", ws="none", proxy_headers=False,
            backlog=guard.max_unproven, http="h11",
        )  # fmt: skip
        config.load()
        config.http_protocol_class = guarded_protocol(config.http_protocol_class, guard)
        _run(uvicorn.Server(config), listener, guard)
    finally:
        listener.close()
        if made is not None:
            _remove_token(made, token)


def _run(server: Any, listener: socket.socket, guard: ConnectionGuard) -> None:
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again for the
    # caller's handler (lifecycle.stop_on_signals); SIGHUP is made to take the same path.
    hangup = getattr(signal, "SIGHUP", None)
    if threading.current_thread() is not threading.main_thread():
        hangup = None  # signals are the main thread's to handle
    previous = signal.signal(hangup, server.handle_exit) if hangup is not None else None

    async def serve() -> None:
        asyncio.get_running_loop().set_exception_handler(guard.exception_handler)
        await server.serve(sockets=[listener])

    try:
        with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
            runner.run(serve())
    finally:
        if hangup is not None:
            signal.signal(hangup, previous)


def _remove_token(path: Path, token: str | None) -> None:
    try:
        if read_private_file(path, named=str(path)).strip() == token:
            path.unlink()
    except (ConfigError, OSError):
        pass  # replaced or gone: not ours to remove
