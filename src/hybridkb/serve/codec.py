"""JSON for what crosses the socket: results as tagged dataclasses, errors by name.

Only the result types listed here are rebuilt, and only KBError subclasses named
in hybridkb.errors are raised again: a message can never make a client run code or
build an object it did not expect.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np

from hybridkb import errors
from hybridkb.graph.model import (
    ContextItem,
    Edge,
    GraphSearchResult,
    GraphSearchResults,
    Neighbor,
    NeighborsResult,
    Node,
    Path,
    PathsResult,
    Subgraph,
    TraverseResult,
)
from hybridkb.results import (
    AddReport,
    CollectionInfo,
    DeleteReport,
    FailedFile,
    FileResult,
    Hit,
    MovedFile,
    RemovedFile,
    SkippedFile,
    SyncReport,
)
from hybridkb.sql.tool import SQLResult
from hybridkb.storage.base import (
    ChunkRecord,
    CollectionHealth,
    CollectionRecord,
    DocumentRecord,
    Finding,
)

__all__ = ["decode", "encode", "error_from", "error_payload", "MAX_MESSAGE_BYTES"]

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # one request or answer (a big add_texts batch)
_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        AddReport,
        ChunkRecord,
        CollectionInfo,
        CollectionRecord,
        DeleteReport,
        DocumentRecord,
        FailedFile,
        FileResult,
        Hit,
        MovedFile,
        RemovedFile,
        SkippedFile,
        SyncReport,
        # maintenance and SQL
        CollectionHealth,
        Finding,
        SQLResult,
        # the knowledge graph
        ContextItem,
        Edge,
        GraphSearchResult,
        GraphSearchResults,
        Neighbor,
        NeighborsResult,
        Node,
        Path,
        PathsResult,
        Subgraph,
        TraverseResult,
    )
}


# Types whose fields hold only JSON values (no dataclasses): copied, not walked, which
# keeps a search answer's encoding well under a millisecond.
_FLAT = frozenset(
    {
        "ChunkRecord",
        "CollectionInfo",
        "CollectionRecord",
        "DeleteReport",
        "DocumentRecord",
        "Edge",
        "FailedFile",
        "FileResult",
        "Finding",
        "Hit",
        "MovedFile",
        "Node",
        "RemovedFile",
        "SkippedFile",
    }
)
# Fields whose items are tuples (JSON has only lists): rebuilt as tuples.
_TUPLE_ITEMS = {"SQLResult": "rows"}
_FIELDS: dict[str, tuple[str, ...]] = {
    name: tuple(f.name for f in dataclasses.fields(cls)) for name, cls in _TYPES.items()
}


def encode(value: Any) -> Any:
    """A JSON-ready form of ``value``: listed dataclasses become {"__type__": ...}."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if name not in _TYPES:
            raise TypeError(f"{name} cannot cross the socket")
        if name in _FLAT:
            fields = {field: getattr(value, field) for field in _FIELDS[name]}
        else:
            fields = {field: encode(getattr(value, field)) for field in _FIELDS[name]}
        return {"__type__": name, "fields": fields}
    if isinstance(value, Mapping):  # a caller's metadata may be any mapping
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)  # a file the owner wrote (graph export): same machine, same user
    if isinstance(value, np.ndarray):
        return value.tolist()  # a caller's query vector
    return value


def decode(value: Any) -> Any:
    """A JSON value back as Python: tagged objects rebuilt as the dataclass they name (only
    those this module lists: KeyError for any other), containers decoded recursively."""
    if isinstance(value, dict):
        if "__type__" in value:
            name = value["__type__"]
            cls = _TYPES[name]  # KeyError: not a type we rebuild
            fields = value["fields"]
            if name in _FLAT:
                return cls(**fields)
            found = {k: decode(v) for k, v in fields.items()}
            if name in _TUPLE_ITEMS:
                found[_TUPLE_ITEMS[name]] = [tuple(v) for v in found[_TUPLE_ITEMS[name]]]
            return cls(**found)
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def dumps(message: dict[str, Any]) -> bytes:
    """One message as a line of JSON (UTF-8, newline-terminated)."""
    try:
        return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    except UnicodeEncodeError:
        # A lone surrogate (in a request, or an undecodable file name in an answer) goes
        # escaped: the other side gets the same string and its checks answer for it; a
        # request that cannot be sent must not look like an owner that went away.
        return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def error_payload(exc: BaseException) -> dict[str, str]:
    """An exception as it crosses the socket: a KBError by class name and message; any other
    as a BackendError saying the owner failed (its traceback stays with the owner)."""
    if isinstance(exc, errors.KBError):
        return {"type": type(exc).__name__, "message": str(exc)}
    return {
        "type": "BackendError",
        "message": f"the process serving the knowledge base failed ({type(exc).__name__}: {exc})",
    }


def error_from(payload: dict[str, Any]) -> errors.KBError:
    """The KBError a payload names, rebuilt with its message; an unknown or non-KBError name
    becomes BackendError, so a message can never make the client build another class."""
    cls = getattr(errors, str(payload.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.KBError)):
        cls = errors.BackendError
    return cls(str(payload.get("message", "")))
