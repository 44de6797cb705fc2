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

The two sides strictly alternate, so each line is read with plain ``recv`` calls
(no buffered reader that could swallow the first request).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
from typing import Any

from hybridkb.errors import AccessDenied

__all__ = ["LINE_BYTES", "OwnerNotProven", "client_handshake", "owner_handshake"]

LINE_BYTES = 1024  # a handshake line is ~150 bytes
_VERSION = "hybridkb-serve-2"
_NONCE_HEX = 32


class OwnerNotProven(ConnectionError):
    """The process at the endpoint's address did not prove it holds the token."""


def _proof(token: str, role: str, client_nonce: str, owner_nonce: str) -> str:
    message = f"{_VERSION}\0{role}\0{client_nonce}\0{owner_nonce}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


def _read_line(sock: socket.socket) -> dict[str, Any]:
    """One JSON object of at most LINE_BYTES, ending the peer's turn."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(LINE_BYTES + 1 - len(data))
        if not chunk:
            raise ConnectionError("the connection closed during the handshake")
        data += chunk
        if len(data) > LINE_BYTES or b"\n" in data[:-1]:
            raise ConnectionError("the handshake line is too long, or not one line")
    found = json.loads(data)
    if not isinstance(found, dict):
        raise ConnectionError("the handshake line is not an object")
    return found


def _nonce(value: Any) -> str:
    text = str(value or "")
    if len(text) != _NONCE_HEX or any(c not in "0123456789abcdef" for c in text):
        raise ConnectionError("the handshake nonce is malformed")
    return text


def client_handshake(sock: socket.socket, token: str) -> None:
    """Prove the owner first, then this client (OwnerNotProven, AccessDenied)."""
    client_nonce = secrets.token_hex(_NONCE_HEX // 2)
    _send(sock, {"hello": _VERSION, "nonce": client_nonce})
    try:
        challenge = _read_line(sock)
        owner_nonce = _nonce(challenge.get("nonce"))
    except (ConnectionError, ValueError) as exc:
        raise OwnerNotProven(f"the owner did not prove itself ({exc})") from None
    expected = _proof(token, "owner", client_nonce, owner_nonce)
    if not hmac.compare_digest(str(challenge.get("proof", "")), expected):
        raise OwnerNotProven(
            "the process at the endpoint's address did not prove it holds this knowledge "
            "base's token; nothing was sent to it"
        )
    _send(sock, {"proof": _proof(token, "client", client_nonce, owner_nonce)})
    verdict = _read_line(sock)
    if verdict.get("ok") is not True:
        raise AccessDenied("the token does not match this knowledge base's owner")


def owner_handshake(sock: socket.socket, token: str) -> bool:
    """Answer a client's nonce and check its proof; False (told, then closed) if wrong."""
    hello = _read_line(sock)
    if hello.get("hello") != _VERSION:
        raise ConnectionError("not a hybridkb client of this version")
    client_nonce = _nonce(hello.get("nonce"))
    owner_nonce = secrets.token_hex(_NONCE_HEX // 2)
    _send(sock, {"nonce": owner_nonce, "proof": _proof(token, "owner", client_nonce, owner_nonce)})
    answer = _read_line(sock)
    expected = _proof(token, "client", client_nonce, owner_nonce)
    if not hmac.compare_digest(str(answer.get("proof", "")), expected):
        _send(sock, {"error": {"type": "AccessDenied", "message": "token does not match"}})
        return False
    _send(sock, {"ok": True})
    return True
