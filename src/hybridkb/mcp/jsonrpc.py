"""JSON-RPC 2.0 as ``hybridkb mcp`` reads and writes it on stdio: one message a line.

:func:`read_line` turns one line of hostile input into a :class:`Request`, a
:class:`Notification`, a :class:`Refusal` (the error to answer, with the id it goes
to) or nothing to answer; :func:`encode_line` writes one message back. The nesting of a
line is measured by a linear scan before it is parsed, and a message that cannot be
parsed still gets its error sent to the id leading it, where one does.

Its own module: these are pure functions of one line, with no session, thread or
tool in them; the session that reads the lines and runs the calls is
:class:`hybridkb.mcp.stdio.StdioServer`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..limits import MAX_ID_CHARS, MAX_JSON_DEPTH, json_depth

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_MESSAGE_DEPTH",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "Notification",
    "Refusal",
    "Request",
    "RequestId",
    "encode_line",
    "leading_id",
    "read_line",
    "request_key",
]

# Message, params and arguments around an argument value nested MAX_JSON_DEPTH deep.
MAX_MESSAGE_DEPTH = MAX_JSON_DEPTH + 3

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

RequestId = str | int
# The id of a message that cannot be parsed, if it leads the line as clients write it,
# so the caller waiting for that id gets its error instead of waiting forever.
_LEADING_ID = re.compile(
    r'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d{1,15}|"[^"\\]{0,256}")\s*[,}]'
)


@dataclass(frozen=True)
class Request:
    """A call to answer: its id, method and params (an object, ``{}`` when left out)."""

    ident: RequestId
    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Notification:
    """A message without an id: nothing is answered."""

    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Refusal:
    """A message refused: the error to send, to ``ident`` (None: the id is not known)."""

    ident: RequestId | None
    code: int
    message: str
    data: str | None = None


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def request_key(ident: RequestId) -> RequestId:
    """The id a call is kept under: "7" and 7 are one id for correlation, as in the SDK
    (a cancel may quote the id)."""
    if isinstance(ident, str) and re.fullmatch(r"-?\d{1,15}", ident):
        return int(ident)
    return ident


def leading_id(line: bytes) -> RequestId | None:
    """The id leading ``line`` as clients write it, read without parsing the message."""
    found = _LEADING_ID.match(line[:400].decode("utf-8", "replace"))
    if found is None:
        return None
    value: RequestId = json.loads(found.group(1))
    return value


def read_line(line: bytes) -> Request | Notification | Refusal | None:
    """One line of input as a message; None for a blank line and for what needs no
    answer (an answer to us, a notification whose params are no object)."""
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return Refusal(None, PARSE_ERROR, "Parse error", "the line is not UTF-8")
    # Counting brackets is C-fast; only a message with more of them than the depth
    # limit can nest too deeply, and only then is it scanned (linearly, no recursion).
    brackets = text.count("[") + text.count("{")
    if brackets > MAX_MESSAGE_DEPTH and json_depth(text, MAX_MESSAGE_DEPTH) > MAX_MESSAGE_DEPTH:
        return Refusal(
            leading_id(line),
            INVALID_REQUEST,
            "Invalid Request",
            f"nested more than {MAX_MESSAGE_DEPTH} levels deep; send a flatter message",
        )
    try:
        message = json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return Refusal(leading_id(line), PARSE_ERROR, "Parse error", detail[:200])
    return read_message(message)


def read_message(message: Any) -> Request | Notification | Refusal | None:
    """A parsed message checked as JSON-RPC 2.0 (see :func:`read_line`)."""
    if isinstance(message, list):
        return Refusal(
            None, INVALID_REQUEST, "Invalid Request", "batches are not supported; one per line"
        )
    if not isinstance(message, dict):
        return Refusal(None, INVALID_REQUEST, "Invalid Request", "not a JSON-RPC 2.0 object")
    ident = message.get("id")
    valid_id = (isinstance(ident, str) and len(ident) <= MAX_ID_CHARS) or (
        isinstance(ident, int) and not isinstance(ident, bool)
    )
    if message.get("jsonrpc") != "2.0":
        reason = 'not a JSON-RPC 2.0 object ("jsonrpc": "2.0")'
        return Refusal(ident if valid_id else None, INVALID_REQUEST, "Invalid Request", reason)
    method = message.get("method")
    if method is None and "id" in message and ("result" in message or "error" in message):
        return None  # an answer, but we send no requests
    if not isinstance(method, str) or ("id" in message and not valid_id):
        reason = "a request needs a method and an id that is text or a whole number"
        return Refusal(ident if valid_id else None, INVALID_REQUEST, "Invalid Request", reason)
    params = message.get("params")
    if "id" not in message:
        if isinstance(params, dict) or params is None:
            return Notification(method, params or {})
        return None
    assert isinstance(ident, (str, int))
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return Refusal(ident, INVALID_PARAMS, "Invalid params", "params must be an object")
    return Request(ident, method, params)


def encode_line(message: dict[str, Any]) -> bytes:
    """``message`` as one line of compact JSON, ending in a newline."""
    try:
        encoded = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a lone surrogate from the input goes back escaped
        encoded = json.dumps(message, separators=(",", ":")).encode()
    return encoded + b"\n"
