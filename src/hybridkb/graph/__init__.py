"""Knowledge graph of a workspace, kept in the same store as the chunks.

``attach_graph(engine)`` registers one write hook per storage object (so graph rows are
written and pruned in the same transaction as each document) and returns the local
graph of ``engine.workspace`` (:class:`~hybridkb.graph.api.LocalGraph`); users reach
it through the :class:`hybridkb.graph_handle.Graph` handle, ``kb.graph``::

    kb = hybridkb.connect("kb.duckdb")
    hit = kb.search("depreciation of cars")[0]
    kb.graph.neighbors(hit.chunk_id)
    kb.graph.find_paths(hit.document_node, "ent:itaa-1997")
    kb.graph.search("instant asset write-off", strategy="parallel")
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from ..errors import GraphError
from ..lazy import lazy_names
from .model import (
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

if TYPE_CHECKING:
    from .api import LocalGraph
    from .extract import Entity, EntityExtractor, RuleExtractor
    from .host import Host
    from .store import GraphStore

# The result types above are light (dataclasses) and travel in every served answer
# (serve/codec.py imports them); the graph itself (queries, in-memory graph, Arrow) is
# imported on first use, so a process that never touches the graph never pays for it.
__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "Entity": "extract",
        "EntityExtractor": "extract",
        "RuleExtractor": "extract",
    },
)
del lazy_names  # the helper is no public name of the package

__all__ = [
    "ContextItem",
    "Edge",
    "Entity",
    "EntityExtractor",
    "GraphError",
    "GraphSearchResult",
    "GraphSearchResults",
    "Neighbor",
    "NeighborsResult",
    "Node",
    "Path",
    "PathsResult",
    "RuleExtractor",
    "Subgraph",
    "TraverseResult",
    "attach_graph",
]

_STORES: weakref.WeakKeyDictionary[Any, GraphStore | None] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def graph_store(storage: Any) -> GraphStore | None:
    """The one GraphStore of a storage object, created (and its hook registered) once."""
    from .store import GraphStore

    with _LOCK:
        if storage in _STORES:
            return _STORES[storage]
        sql = storage.graph_sql
        store = None
        if sql is not None:
            store = GraphStore(storage, sql)
            store.setup()
            storage.hooks.append(store.hook)
        _STORES[storage] = store
        return store


def attach_graph(kb: Host) -> LocalGraph:
    """Register the graph write hook on ``kb.storage`` (once) and return ``kb``'s graph."""
    from .api import LocalGraph

    store = graph_store(kb.storage)
    if store is None:
        raise GraphError(
            f"the knowledge graph is not available on the {kb.storage.capabilities.name} backend"
        )
    return LocalGraph(kb, store)
