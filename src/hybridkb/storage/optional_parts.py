"""The optional parts of a store: graph tables, maintenance, re-embedding, hybrid search.

A backend declares what it lacks by leaving one of these ``None`` on its
:class:`~hybridkb.storage.base.Storage` (``graph_sql``, ``maintenance``,
``reembedding``, ``hybrid``). Each part is a small protocol with the records it
moves (graph rows, integrity findings, fusion settings and fused hits); they live
apart from the core protocol (``base.py``, which re-exports them) because a caller
uses each one alone, after testing it is there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..text.filters import Filter
from .columns import Table
from .contract_records import ChunkRecord, CollectionRecord, Connection

if TYPE_CHECKING:
    from ..embedders import Embedder


# -- the graph's tables ------------------------------------------------------------------


@dataclass
class NodeRow:
    """A graph node as stored (``chunk_id`` is its provenance inside a document)."""

    id: str
    type: str
    properties: dict[str, Any] = field(default_factory=dict)
    chunk_id: str = ""


@dataclass
class EdgeRow:
    """A graph edge as stored."""

    source: str
    target: str
    type: str
    weight: float = 1.0
    properties: dict[str, Any] = field(default_factory=dict)
    chunk_id: str = ""


# json.dumps with options builds an encoder per call: a third of a small dict's time,
# and the graph writes ~11 of them a chunk.
_PROPS_JSON = json.JSONEncoder(ensure_ascii=False, default=str)


def dump_props(props: dict[str, Any] | None) -> str | None:
    """Node/edge properties as stored JSON text (None for none)."""
    return _PROPS_JSON.encode(props) if props else None


def load_props(text: str | None) -> dict[str, Any] | None:
    """Stored JSON properties back as a dict (None for none or anything but an object)."""
    if not text or text == "{}":
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else None


class GraphSQL(Protocol):
    """A backend's graph tables. ``con`` is the connection inside the caller's transaction
    (from :meth:`Storage.transaction` or a write hook); one graph per workspace.

    Rows from a document carry ``collection_id > 0`` and its ``document_id``; rows a user
    made through the API carry ``collection_id = 0``. Every write bumps the workspace's
    graph version in the same transaction, so an in-memory copy can tell it is current.
    """

    def ensure_schema(self, con: Connection) -> None:
        """Create the graph tables if they are missing (idempotent)."""
        ...

    def has_schema(self, con: Connection) -> bool:
        """Whether the graph tables exist (a read-only store cannot create them)."""
        ...

    def version(self, con: Connection, workspace: str) -> int:
        """The workspace's graph version (0 before the first write)."""
        ...

    def bump(self, con: Connection, workspace: str) -> tuple[int, int]:
        """Increment the version; return (before, after)."""
        ...

    def insert_nodes(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        document_id: str,
        rows: Sequence[NodeRow],
    ) -> None:
        """Insert one document's nodes (no delete first: see :meth:`replace_documents`)."""
        ...

    def insert_edges(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        document_id: str,
        rows: Sequence[EdgeRow],
    ) -> None:
        """Insert one document's edges (no delete first: see :meth:`replace_documents`)."""
        ...

    def replace_documents(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        document_ids: Sequence[str],
        nodes: Sequence[NodeRow] = (),
        edges: Sequence[EdgeRow] = (),
    ) -> None:
        """Delete the rows of these documents, then insert the given rows (for the first)."""
        ...

    def replace_documents_many(
        self,
        con: Connection,
        workspace: str,
        collection_id: int,
        per_doc: Sequence[tuple[str, Sequence[NodeRow], Sequence[EdgeRow]]],
        *,
        fresh: frozenset[str] = frozenset(),
    ) -> None:
        """Delete the rows of these documents and insert the given ones; user edges on
        nodes that lost their last row go too. ``fresh``: documents known to have no rows
        (new to the store), inserted without looking for old ones."""
        ...

    def drop_collection(self, con: Connection, workspace: str, collection_id: int) -> None:
        """Delete every row that came from the collection's documents (user rows stay)."""
        ...

    def upsert_user_nodes(self, con: Connection, workspace: str, rows: Sequence[NodeRow]) -> None:
        """Insert user nodes (``collection_id = 0``), replacing those with the same id."""
        ...

    def upsert_user_edges(self, con: Connection, workspace: str, rows: Sequence[EdgeRow]) -> None:
        """Insert user edges, replacing those with the same source, target and type."""
        ...

    def delete_user_edge(
        self, con: Connection, workspace: str, source: str, target: str, etype: str
    ) -> int:
        """Delete the user edge source -(etype)-> target; return how many rows went."""
        ...

    def delete_user_node(self, con: Connection, workspace: str, node_id: str) -> int:
        """Delete the user node ``node_id`` (and the user edges on it when no row of the node
        is left); return how many node rows went."""
        ...

    def load(self, con: Connection, workspace: str) -> tuple[int, Table, Table]:
        """(version, nodes, edges): nodes of ``columns.GRAPH_NODES`` (id, type, properties,
        collection_id, document_id), edges of ``columns.GRAPH_EDGES`` (source, target,
        type, weight, properties, collection_id, document_id)."""
        ...

    def fingerprints(self, con: Connection, workspace: str) -> dict[str, str]:
        """Each document's graph rows as one fingerprint, keyed ``collection_id:document_id``
        (``0:`` for the rows a user made): which rows changed between two calls."""
        ...

    def load_of(self, con: Connection, workspace: str, keys: Sequence[str]) -> tuple[Table, Table]:
        """The rows of :meth:`load` whose ``collection_id:document_id`` is one of ``keys``."""
        ...

    def edges_at(self, con: Connection, workspace: str, node_id: str) -> list[tuple[str, str, str]]:
        """(source, target, type) of the edge rows that touch ``node_id``, in the order
        :meth:`load` reads them."""
        ...

    def rows_among(
        self, con: Connection, workspace: str, node_ids: Sequence[str]
    ) -> tuple[Table, Table]:
        """The rows of :meth:`load` of some nodes, in the order :meth:`load` reads them:
        their node rows, and the edge rows that join two of them."""
        ...

    def rows_of_collection(
        self, con: Connection, workspace: str, collection_id: int
    ) -> tuple[Table, Table]:
        """One collection's rows for copying: nodes of ``columns.COLLECTION_NODES`` (id,
        type, properties, document_id, chunk_id), edges of ``columns.COLLECTION_EDGES``
        (source, target, type, weight, properties, document_id, chunk_id)."""
        ...

    def find_collection(self, con: Connection, workspace: str, name: str) -> int | None:
        """A collection's id by name inside the caller's transaction (for graph links)."""
        ...

    def aliases(self, con: Connection, workspace: str) -> dict[str, str]:
        """The workspace's alias table: normalised alias -> canonical entity name."""
        ...

    def set_alias(self, con: Connection, workspace: str, alias: str, canonical: str | None) -> None:
        """Set (or with ``canonical`` None remove) one alias of the workspace."""
        ...


# -- maintenance -------------------------------------------------------------------------


@dataclass
class Finding:
    """One integrity check of a collection and what it found."""

    check: str
    count: int
    detail: str
    repaired: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data (for the CLI's --json and the MCP tools)."""
        return {
            "check": self.check,
            "count": self.count,
            "detail": self.detail,
            "repaired": self.repaired,
        }


@dataclass
class CollectionHealth:
    """What :meth:`Maintenance.check` found in one collection."""

    collection: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every finding counts zero problems or was repaired."""
        return all(f.count == 0 or f.repaired for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the collection, ``ok``, and only the findings with problems."""
        return {
            "collection": self.collection,
            "ok": self.ok,
            "problems": [f.to_dict() for f in self.findings if f.count],
        }


class Maintenance(Protocol):
    """Housekeeping a backend may offer (``Storage.maintenance``; None where it does not)."""

    def check(self, coll: CollectionRecord, *, repair: bool) -> CollectionHealth:
        """Tables vs each other, vs the derived indexes and the graph; repair if asked."""
        ...

    def compact(self) -> dict[str, int]:
        """Rewrite the store without dead space; return sizes before/after in bytes."""
        ...


class Reembedding(Protocol):
    """Re-embedding in place, which a backend may offer (``Storage.reembedding``; None
    where it does not)."""

    def reembed(
        self,
        coll: CollectionRecord,
        embedder: Embedder,
        *,
        signature: str,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Re-embed every chunk into a side table and switch over atomically; return the
        number of chunks. Searches keep working meanwhile."""
        ...


@dataclass(frozen=True)
class FusionSpec:
    """How a hybrid search fuses its legs (the settings ``fusion``, ``rrf_k`` and
    ``vector_feedback``), handed to a store that fuses them itself."""

    method: str  # "zscore" | "weighted" | "rrf"
    rrf_k: int
    feedback: float  # Rocchio weight towards the best first-pass chunk; 0 = off


@dataclass(frozen=True)
class StoreHit:
    """One winner of a store's own hybrid search: its chunk, fused score, and (rank,
    score) in each leg (None where the leg did not return it; the vector leg is the one
    after feedback, as the core reports it)."""

    chunk: ChunkRecord
    score: float
    keyword: tuple[int, float] | None
    vector: tuple[int, float] | None


class HybridSearch(Protocol):
    """A whole hybrid search of one collection inside the store, in one round trip, which
    a backend may offer (``Storage.hybrid``; None where it does not): both legs, the
    core's fusion (:mod:`hybridkb.search.fusion`, floors and tie-breaks included) and vector
    feedback, and the winners' rows. It must rank as the core does with the store's
    own legs; the core uses it for hybrid searches of a single collection."""

    def hybrid_search(
        self,
        coll: CollectionRecord,
        terms: Sequence[str],
        query: np.ndarray,
        *,
        k: int,
        depth: int,
        where: Filter | None,
        fusion: FusionSpec,
    ) -> list[StoreHit]:
        """The fused top ``k`` of legs ``depth`` deep (BM25 of ``terms``, cosine to
        ``query``), best first."""
        ...
