"""Both ends of a connection prove they know the owner's token before anything else.

The token itself never crosses the connection. The client sends a fresh nonce; the
owner answers with its own nonce and an HMAC of both under the token (role
"owner"); only then does the client answer with its HMAC (role "client") and, once
accepted, send requests. So:

- a process that took over a dead owner's loopback port (TCP) cannot answer the
  client's nonce: the client learns it is not the owner and sends it nothing;
- a caller without the token is refused after two short lines: the owner reads at
  most ``LINE_BYTES`` per line, under a deadline, before a caller has proved
  anything (no 256 MB request is parsed from a stranger).

The deadline is for the whole handshake, not for each ``recv``: the socket's timeout
when a handshake starts is the time it has in all. Per ``recv``, a stranger sending one
byte every 4.9 s (under a 5 s timeout) held one of the owner's handshake slots for
~80 minutes.

The two sides strictly alternate, so each line is read with plain ``recv`` calls
(no buffered reader that could swallow the first request).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import time
from typing import Any

from hybridkb.errors import AccessDenied, KBError
from hybridkb.limits import parse_json

__all__ = ["LINE_BYTES", "OwnerNotProven", "client_handshake", "owner_handshake"]

LINE_BYTES = 1024  # a handshake line is ~150 bytes
_VERSION = "hybridkb-serve-3"  # 3: the wire is the engine protocol (issue 33)
_NONCE_HEX = 32


class OwnerNotProven(ConnectionError):
    """The process at the endpoint's address did not prove it holds the token."""


def _proof(token: str, role: str, client_nonce: str, owner_nonce: str) -> str:
    message = f"{_VERSION}\0{role}\0{client_nonce}\0{owner_nonce}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


class _Deadline:
    """The socket's timeout, when the handshake starts, spent over the whole handshake."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        seconds = sock.gettimeout()
        self.end = None if seconds is None else time.monotonic() + seconds

    def arm(self) -> socket.socket:
        """The socket, its timeout set to what is left (TimeoutError when nothing is)."""
        if self.end is not None:
            left = self.end - time.monotonic()
            if left <= 0:
                raise TimeoutError("the handshake took too long")
            self.sock.settimeout(left)
        return self.sock


def _send(deadline: _Deadline, message: dict[str, Any]) -> None:
    deadline.arm().sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


def _read_line(deadline: _Deadline) -> dict[str, Any]:
    """One JSON object of at most LINE_BYTES, ending the peer's turn."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = deadline.arm().recv(LINE_BYTES + 1 - len(data))
        if not chunk:
            raise ConnectionError("the connection closed during the handshake")
        data += chunk
        if len(data) > LINE_BYTES or b"\n" in data[:-1]:
            raise ConnectionError("the handshake line is too long, or not one line")
    try:
        # The rule of every JSON text from outside: a line within LINE_BYTES can still
        # nest a thousand arrays, and json.loads then raises RecursionError.
        found = parse_json(data.decode("utf-8"), what="line", max_chars=LINE_BYTES, max_depth=1)
    except (KBError, UnicodeDecodeError) as exc:
        raise ConnectionError(f"the handshake {exc}") from None
    if not isinstance(found, dict):
        raise ConnectionError("the handshake line is not an object")
    return found


def _nonce(value: Any) -> str:
    text = str(value or "")
    if len(text) != _NONCE_HEX or any(c not in "0123456789abcdef" for c in text):
        raise ConnectionError("the handshake nonce is malformed")
    return text


def client_handshake(sock: socket.socket, token: str) -> None:
    """Prove the owner first, then this client (OwnerNotProven, AccessDenied), within the
    socket's timeout in all."""
    deadline = _Deadline(sock)
    client_nonce = secrets.token_hex(_NONCE_HEX // 2)
    _send(deadline, {"hello": _VERSION, "nonce": client_nonce})
    try:
        challenge = _read_line(deadline)
        owner_nonce = _nonce(challenge.get("nonce"))
    except (ConnectionError, ValueError) as exc:
        raise OwnerNotProven(f"the owner did not prove itself ({exc})") from None
    expected = _proof(token, "owner", client_nonce, owner_nonce)
    if not hmac.compare_digest(str(challenge.get("proof", "")), expected):
        raise OwnerNotProven(
            "the process at the endpoint's address did not prove it holds this knowledge "
            "base's token; nothing was sent to it"
        )
    _send(deadline, {"proof": _proof(token, "client", client_nonce, owner_nonce)})
    verdict = _read_line(deadline)
    if verdict.get("ok") is not True:
        raise AccessDenied("the token does not match this knowledge base's owner")


def owner_handshake(sock: socket.socket, token: str) -> bool:
    """Answer a client's nonce and check its proof, within the socket's timeout in all;
    False (told, then closed) if wrong."""
    deadline = _Deadline(sock)
    hello = _read_line(deadline)
    if hello.get("hello") != _VERSION:
        raise ConnectionError("not a hybridkb client of this version")
    client_nonce = _nonce(hello.get("nonce"))
    owner_nonce = secrets.token_hex(_NONCE_HEX // 2)
    _send(
        deadline, {"nonce": owner_nonce, "proof": _proof(token, "owner", client_nonce, owner_nonce)}
    )
    answer = _read_line(deadline)
    expected = _proof(token, "client", client_nonce, owner_nonce)
    if not hmac.compare_digest(str(answer.get("proof", "")), expected):
        _send(deadline, {"error": {"type": "AccessDenied", "message": "token does not match"}})
        return False
    _send(deadline, {"ok": True})
    return True
