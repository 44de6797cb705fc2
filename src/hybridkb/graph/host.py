"""What the graph needs from the knowledge base it belongs to.

:class:`hybridkb.local.LocalEngine` satisfies :class:`Host`; the graph depends on this
protocol rather than on the engine's module, so ``local.py -> graph`` is the only
direction of import between them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ..embedders import Embedder
from ..results import Hit
from ..settings import Settings
from ..storage.base import CollectionRecord, Storage
from .model import Subgraph
from .queries import MemGraph
from .store import GraphStore


class Host(Protocol):
    """A knowledge base bound to one workspace."""

    storage: Storage
    settings: Settings
    workspace: str

    def record(self, name: str) -> CollectionRecord:
        """A collection's catalog record (CollectionNotFound if there is none)."""
        ...

    def collection(self, name: str, *, create: bool = ..., model: str | None = ...) -> str:
        """A collection's name, checked (``create=True`` makes it when missing)."""
        ...

    def embedder_for(self, coll: CollectionRecord) -> Embedder:
        """The collection's own model, checked against its dimension."""
        ...

    def search(
        self,
        query: str,
        *,
        k: int | None = ...,
        mode: str | None = ...,
        where: Mapping[str, Any] | str | None = ...,
        collections: Iterable[str] | None = ...,
    ) -> list[Hit]:
        """A hybrid search over ``collections`` (graph search seeds from it)."""
        ...


class GraphView(Protocol):
    """One workspace's graph as the search and import/export modules use it (what
    :class:`hybridkb.graph.api.LocalGraph` offers them)."""

    kb: Host
    store: GraphStore
    workspace: str

    def memgraph(self) -> MemGraph:
        """The workspace's in-memory graph, current as of the last commit."""
        ...

    def subgraph(
        self,
        node: str,
        *,
        edge_types: Any = ...,
        max_depth: int = ...,
        node_limit: int = ...,
        edge_limit: int = ...,
        direction: str = ...,
    ) -> Subgraph:
        """The nodes within ``max_depth`` hops of ``node`` and the edges among them."""
        ...
