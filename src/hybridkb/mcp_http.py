"""``hybridkb mcp --http``: who may call the tools over HTTP.

On a loopback address only this machine can connect, and the SDK's DNS-rebinding
checks (Host and Origin on an allow-list of loopback names) keep web pages out. Any
other bind address (``--host 0.0.0.0``) is reachable from the network, so the server
then refuses to start without a bearer token, and checks it on every request: from
``HYBRIDKB_MCP_TOKEN`` or a file given with ``--token-file`` that only its owner may
read (mode 0600). Host and Origin stay on an allow-list there too: the bind address,
this machine's name and loopback, plus the names given with ``--allow-host``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import socket
import stat
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["TOKEN_ENV", "TokenGate", "allowed_hosts", "is_loopback", "read_token"]

TOKEN_ENV = "HYBRIDKB_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(host: str, token_file: Path | None) -> str | None:
    """The bearer token clients must send: required off loopback (ConfigError without)."""
    token: str | None = None
    if token_file is not None:
        try:
            info = token_file.stat()
            if stat.S_IMODE(info.st_mode) & 0o077:
                raise ConfigError(
                    f"--token-file {token_file}: others may read it (mode "
                    f"{stat.S_IMODE(info.st_mode):o}); run chmod 600 {token_file}"
                )
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"--token-file {token_file}: {exc.strerror}") from None
    elif os.environ.get(TOKEN_ENV):
        token = os.environ[TOKEN_ENV].strip()
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"the MCP token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
        )
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"--host {host} is reachable from other machines: set {TOKEN_ENV} or pass "
            "--token-file PATH (mode 0600) so that clients must send 'Authorization: Bearer "
            "TOKEN', or serve on --host 127.0.0.1"
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


class TokenGate:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer <token>`` gets 401."""

    def __init__(self, app: App, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = json.dumps(
                    {
                        "error": "unauthorized",
                        "error_description": "send Authorization: Bearer TOKEN",
                    }
                ).encode()
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
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
