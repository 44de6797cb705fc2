"""The owner's listener: a thread serving the knowledge base on its endpoint (a Unix
socket, or a loopback TCP port where there are none: see endpoint.py).

Requests are JSON lines ``{"token", "workspace", "op", "args"}``; answers are
``{"ok": result}`` or ``{"error": {"type", "message"}}``. Each connection gets a
thread; the knowledge base is already safe to share between threads (one DuckDB
connection under a lock). Only the operations in ``OPERATIONS`` can be called.
A plain accept loop rather than socketserver: closing the socket ends it at once,
where socketserver's shutdown waits for its polling loop.

Files are sent as paths, never contents: client and owner are the same user on the
same machine, so the owner opens the file itself, confined to the owner's own
allowed folders (a client may not widen them; the client checked its own first).
"""

from __future__ import annotations

import hmac
import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridkb.serve.codec import MAX_MESSAGE_BYTES, decode, dumps, encode, error_payload
from hybridkb.serve.endpoint import (
    Transport,
    new_endpoint,
    remove_endpoint,
    write_endpoint,
)

__all__ = ["GRAPH_METHODS", "GRAPH_WRITES", "OPERATIONS", "OwnerServer"]

Operation = Callable[[Any, dict[str, Any]], Any]

# The Graph methods a client may call, by name (an allow-list: a request naming any
# other attribute is refused). add_extractor is not here: an extractor is code.
GRAPH_WRITES = frozenset(
    {"relate", "unrelate", "add_node", "add_nodes", "add_edges", "remove_node", "set_alias",
     "rebuild", "import_folder"}
)  # fmt: skip
GRAPH_METHODS = GRAPH_WRITES | frozenset(
    {"node", "has_node", "node_of_chunk", "chunks_of", "neighbors", "traverse", "find_paths",
     "shortest_path", "subgraph", "search", "stats", "aliases", "export", "export_folder"}
)  # fmt: skip


def _add(kb: Any, a: dict[str, Any]) -> Any:
    allowed = [str(p) for p in kb.settings.allowed_paths]
    return kb.collection(a["collection"]).add(
        a["paths"], metadata=a.get("metadata"), allowed_paths=allowed
    )


def _sync(kb: Any, a: dict[str, Any]) -> Any:
    # Confined like _add; sent as a plain dict (SyncReport.from_dict rebuilds it).
    allowed = [str(p) for p in kb.settings.allowed_paths]
    coll = kb.collection(a["collection"])
    busy = [str(p) for p in a.get("busy") or []]
    paths = None if a.get("paths") is None else [str(p) for p in a["paths"]]
    dry_run = bool(a.get("dry_run"))
    return coll.sync(dry_run=dry_run, allowed_paths=allowed, busy=busy, paths=paths).to_dict()


def _graph(kb: Any, a: dict[str, Any]) -> Any:
    method = str(a.get("method"))
    if method not in GRAPH_METHODS:
        from hybridkb.errors import ConfigError

        raise ConfigError(f"graph: {method!r} cannot be called through the owner")
    return getattr(kb.graph, method)(*decode(a.get("args") or []), **decode(a.get("kwargs") or {}))


_SQL_LIMITS = ("max_rows", "timeout", "max_bytes")  # what a caller in the owner may set too


def _sql(kb: Any, a: dict[str, Any]) -> Any:
    from hybridkb.sql_tool import run_sql  # pyarrow: imported when the first query comes

    limits = {k: v for k, v in (a.get("limits") or {}).items() if k in _SQL_LIMITS}
    return run_sql(kb, a["sql"], **limits).to_dict()


def _doctor(kb: Any, a: dict[str, Any]) -> Any:
    from hybridkb.maintenance import doctor

    return doctor(kb, a.get("name"), repair=bool(a.get("repair")))


def _reembed(kb: Any, a: dict[str, Any]) -> Any:
    from hybridkb.maintenance import reembed

    return reembed(kb, a["name"], model=a.get("model"), progress=False)


def _compact(kb: Any, a: dict[str, Any]) -> Any:
    from hybridkb.maintenance import compact

    return compact(kb)


def _copy(kb: Any, a: dict[str, Any]) -> Any:
    from hybridkb.copy import copy_to

    return copy_to(kb, str(a["to"]), workspace=a.get("workspace"))


def _search_by_vector(kb: Any, a: dict[str, Any]) -> Any:
    import numpy as np

    return kb.collection(a["collection"]).search_by_vector(
        np.asarray(a["vector"], dtype=np.float32), k=a.get("k"), where=a.get("where")
    )


OPERATIONS: dict[str, Operation] = {
    "list_collections": lambda kb, a: kb.list_collections(),
    "collection_names": lambda kb, a: kb.collection_names(),
    "describe": lambda kb, a: kb.describe(a["name"]),
    "create_collection": lambda kb, a: kb.create_collection(a["name"], **a.get("options", {})).name,
    "collection": lambda kb, a: kb.collection(
        a["name"], create=bool(a.get("create")), model=a.get("model")
    ).name,
    "drop_collection": lambda kb, a: kb.drop_collection(a["name"]),
    "search": lambda kb, a: kb.search(
        a["query"], k=a.get("k"), mode=a.get("mode"), where=a.get("where"),
        collections=a.get("collections"), rerank=a.get("rerank"),
    ),
    "add": _add,
    "add_texts": lambda kb, a: kb.collection(a["collection"]).add_texts(
        a["texts"], a.get("metadatas"), a.get("ids")
    ),
    "delete": lambda kb, a: kb.collection(a["collection"]).delete(a["ids"]),
    "get": lambda kb, a: kb.collection(a["collection"]).get(a["document_id"]),
    "documents": lambda kb, a: kb.collection(a["collection"]).documents(
        limit=int(a.get("limit", 100)), offset=int(a.get("offset", 0))
    ),
    "count": lambda kb, a: kb.collection(a["collection"]).count(),
    "document_text": lambda kb, a: kb.collection(a["collection"]).document_text(
        a["document_id"]
    ),
    "graph": _graph,
    "sql": _sql,
    "doctor": _doctor,
    "reembed": _reembed,
    "compact": _compact,
    "copy": _copy,
    "search_by_vector": _search_by_vector,
    "sync": _sync,
    "remove_source": lambda kb, a: kb.collection(a["collection"]).remove_source(a["path"]),
}  # fmt: skip


class OwnerServer:
    """Serve ``kb`` (which holds the DuckDB file at ``db_path``) to other processes."""

    def __init__(self, kb: Any, db_path: str | Path, transport: Transport = "unix") -> None:
        self.kb = kb
        self.db_path = db_path
        self.endpoint, self._sock = new_endpoint(db_path, transport)
        self._workspaces: dict[str, Any] = {kb.workspace: kb}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="hybridkb-owner", daemon=True)
        self._thread.start()
        write_endpoint(db_path, self.endpoint)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed: the owner is shutting down
            if conn.family != getattr(socket, "AF_UNIX", None):
                # Answers go out at once, not after Nagle's wait (see endpoint.open_connection).
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(
                target=self._serve, args=(conn,), name="hybridkb-owner-call", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        """Answer one client's requests, one JSON line each, until it hangs up."""
        with conn, conn.makefile("rb") as reader:
            while True:
                line = reader.readline(MAX_MESSAGE_BYTES + 1)
                if not line:
                    return
                try:
                    conn.sendall(dumps(self.answer(line)))
                except OSError:
                    return  # the client went away mid-answer

    def _in(self, workspace: str) -> Any:
        with self._lock:
            if workspace not in self._workspaces:
                self._workspaces[workspace] = self.kb.in_workspace(workspace)
            return self._workspaces[workspace]

    def answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            token = str(request.get("token", ""))
            if not hmac.compare_digest(token.encode(), self.endpoint.token.encode()):
                from hybridkb.errors import AccessDenied

                raise AccessDenied("the token does not match this knowledge base's owner")
            operation = OPERATIONS.get(str(request.get("op")))
            if operation is None:
                from hybridkb.errors import ConfigError

                raise ConfigError(f"unknown operation {request.get('op')!r}")
            kb = self._in(str(request.get("workspace") or self.kb.workspace))
            return {"ok": encode(operation(kb, dict(request.get("args") or {})))}
        except Exception as exc:  # noqa: BLE001 - every failure is an answer, not a dead thread
            return {"error": error_payload(exc)}

    def close(self) -> None:
        remove_endpoint(self.db_path, self.endpoint)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._sock.close()
        self._thread.join(timeout=5)
