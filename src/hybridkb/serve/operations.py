"""What the owner runs for a client: one typed handler per served operation, and where
each member of the API declaration (hybridkb.api) goes through an owner.

``OPERATIONS`` maps a request's ``op`` to a handler over the owner's own
:class:`~hybridkb.kb.KnowledgeBase`. ``SERVED_AS``, ``IN_CLIENT`` and ``REFUSED``
together name every method of :class:`~hybridkb.api.KnowledgeBaseAPI`,
:class:`~hybridkb.api.CollectionAPI` and :class:`~hybridkb.api.GraphAPI` exactly once
(tests/test_api_contract.py checks it, so a method added to the declaration must be
placed here), and ``RemoteKnowledgeBase`` is checked against the declaration by mypy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hybridkb.errors import ConfigError
from hybridkb.kb import KnowledgeBase
from hybridkb.serve.codec import decode

__all__ = [
    "GRAPH_METHODS",
    "GRAPH_WRITES",
    "IN_CLIENT",
    "OPERATIONS",
    "REFUSED",
    "SERVED_AS",
    "Operation",
    "is_write",
]

Operation = Callable[[KnowledgeBase, dict[str, Any]], Any]

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

_WRITES = frozenset(
    {"create_collection", "drop_collection", "add", "add_texts", "delete", "reembed", "compact",
     "remove_source"}
)  # fmt: skip


def is_write(op: str, args: Mapping[str, Any]) -> bool:
    """Whether the served operation ``op`` with ``args`` changes the store."""
    if op == "graph":
        return args.get("method") in GRAPH_WRITES
    return (
        op in _WRITES
        or bool(args.get("create"))
        or (op == "doctor" and bool(args.get("repair")))
        or (op == "sync" and not args.get("dry_run"))
    )


def _add(kb: KnowledgeBase, a: dict[str, Any]) -> Any:
    # The caller's confinement, never the owner's: None (a person's add) reads any file
    # this user may read, a list (an agent's folders) is kept exactly.
    allowed = a.get("allowed_paths")
    return kb.collection(a["collection"]).add(
        a["paths"],
        metadata=a.get("metadata"),
        allowed_paths=None if allowed is None else [str(p) for p in allowed],
    )


def _sync(kb: KnowledgeBase, a: dict[str, Any]) -> Any:
    # Confined like _add (the caller's folders, never the owner's); sent as a plain dict
    # (SyncReport.from_dict rebuilds it).
    allowed = a.get("allowed_paths")
    return (
        kb.collection(a["collection"])
        .sync(
            dry_run=bool(a.get("dry_run")),
            allowed_paths=None if allowed is None else [str(p) for p in allowed],
            busy=[str(p) for p in a.get("busy") or []],
            paths=None if a.get("paths") is None else [str(p) for p in a["paths"]],
        )
        .to_dict()
    )


def _graph(kb: KnowledgeBase, a: dict[str, Any]) -> Any:
    method = str(a.get("method"))
    if method not in GRAPH_METHODS:
        raise ConfigError(f"graph: {method!r} cannot be called through the owner")
    return getattr(kb.graph, method)(*decode(a.get("args") or []), **decode(a.get("kwargs") or {}))


_SQL_LIMITS = ("max_rows", "timeout", "max_bytes")  # what a caller in the owner may set too


def _sql(kb: KnowledgeBase, a: dict[str, Any]) -> Any:
    limits = {k: v for k, v in (a.get("limits") or {}).items() if k in _SQL_LIMITS}
    return kb.sql(a["sql"], **limits).to_dict()


def _search_by_vector(kb: KnowledgeBase, a: dict[str, Any]) -> Any:
    return kb.collection(a["collection"]).search_by_vector(
        np.asarray(a["vector"], dtype=np.float32), k=a.get("k"), where=a.get("where")
    )


OPERATIONS: dict[str, Operation] = {
    "list_collections": lambda kb, a: kb.list_collections(),
    "collection_names": lambda kb, a: kb.collection_names(),
    "describe": lambda kb, a: kb.describe(a["name"]),
    "record": lambda kb, a: kb.record(a["name"]),
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
    "chunks": lambda kb, a: kb.collection(a["collection"]).chunks(a["document_id"]),
    "documents": lambda kb, a: kb.collection(a["collection"]).documents(
        limit=int(a.get("limit", 100)), offset=int(a.get("offset", 0))
    ),
    "count": lambda kb, a: kb.collection(a["collection"]).count(),
    "document_text": lambda kb, a: kb.collection(a["collection"]).document_text(
        a["document_id"]
    ),
    "search_by_vector": _search_by_vector,
    "graph": _graph,
    "sql": _sql,
    "doctor": lambda kb, a: kb.doctor(a.get("name"), repair=bool(a.get("repair"))),
    "reembed": lambda kb, a: kb.reembed(a["name"], model=a.get("model"), progress=False),
    "compact": lambda kb, a: kb.compact(),
    "copy": lambda kb, a: kb.copy_to(str(a["to"]), workspace=a.get("workspace")),
    "sync": _sync,
    "remove_source": lambda kb, a: kb.collection(a["collection"]).remove_source(a["path"]),
}  # fmt: skip

# Each member of the declaration, by "<Protocol>.<member>", and the operation that
# serves it (its handler is in OPERATIONS).
SERVED_AS: dict[str, str] = {
    "KnowledgeBaseAPI.create_collection": "create_collection",
    "KnowledgeBaseAPI.collection": "collection",
    "KnowledgeBaseAPI.record": "record",
    "KnowledgeBaseAPI.list_collections": "list_collections",
    "KnowledgeBaseAPI.collection_names": "collection_names",
    "KnowledgeBaseAPI.describe": "describe",
    "KnowledgeBaseAPI.drop_collection": "drop_collection",
    "KnowledgeBaseAPI.search": "search",
    "KnowledgeBaseAPI.graph": "graph",
    "KnowledgeBaseAPI.doctor": "doctor",
    "KnowledgeBaseAPI.reembed": "reembed",
    "KnowledgeBaseAPI.compact": "compact",
    "KnowledgeBaseAPI.copy_to": "copy",
    "KnowledgeBaseAPI.sql": "sql",
    "CollectionAPI.record": "record",
    "CollectionAPI.add": "add",
    "CollectionAPI.add_texts": "add_texts",
    "CollectionAPI.search": "search",
    "CollectionAPI.delete": "delete",
    "CollectionAPI.get": "get",
    "CollectionAPI.chunks": "chunks",
    "CollectionAPI.document_text": "document_text",
    "CollectionAPI.search_by_vector": "search_by_vector",
    "CollectionAPI.documents": "documents",
    "CollectionAPI.describe": "describe",
    "CollectionAPI.count": "count",
    "CollectionAPI.drop": "drop_collection",
    "CollectionAPI.sync": "sync",
    "CollectionAPI.sources": "describe",
    "CollectionAPI.remove_source": "remove_source",
    **{f"GraphAPI.{method}": "graph" for method in GRAPH_METHODS},
}

# Members a client answers itself, and why no owner is needed.
IN_CLIENT: dict[str, str] = {
    "KnowledgeBaseAPI.close": "closes this client's connection (and what it took over)",
    "KnowledgeBaseAPI.__enter__": "the client itself",
    "KnowledgeBaseAPI.__exit__": "closes the client",
    "KnowledgeBaseAPI.__getitem__": "a lazy handle: nothing is read until it is used",
    "KnowledgeBaseAPI.in_workspace": "a client for another workspace; calls name it",
    "KnowledgeBaseAPI.with_embedder": "the embedder stays here; the owner asks it for vectors",
    "KnowledgeBaseAPI.embedder": "loads a model in the caller (e.g. for search_by_vector)",
    "KnowledgeBaseAPI.embedder_for": "loads a collection's model in the caller",
    "KnowledgeBaseAPI.embedding_cache": "a client embeds nothing to cache (None)",
    "KnowledgeBaseAPI.reranker": "the owner reranks with its own settings (None here)",
    "KnowledgeBaseAPI.prepare_search": "the owner holds the models and indexes: no-op",
    "KnowledgeBaseAPI.warm_up": "the owner holds the models: no-op",
    "CollectionAPI.kb": "the client it came from",
}

# Members refused through an owner, and why: code cannot cross processes.
REFUSED: dict[str, str] = {
    "KnowledgeBaseAPI.with_reranker": "a reranker is a model object; set HYBRIDKB_RERANKER "
    "where the owner runs",
    "GraphAPI.add_extractor": "an extractor is code; add it where the owner runs",
}
