"""The storage contract: the protocol both backends implement and the records it moves.

This module is the whole contract between the core and a backend. Backends return
ranked ``(chunk_key, score)`` lists; fusion happens in the core (``hybridkb.fusion``)
so every backend ranks the same way. Differences between backends are data: the
flags of :class:`Capabilities` (how the store behaves), and the optional parts
(:attr:`Storage.graph_sql`, :attr:`Storage.maintenance`, :attr:`Storage.reembedding`,
:attr:`Storage.hybrid`):
objects that are ``None`` where a backend lacks them, the one way a backend says it
lacks something. Callers test those, never a backend's class or name, and never
probe with ``hasattr``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from ..filters import Filter
from .columns import Table

if TYPE_CHECKING:
    from ..embedders import Embedder

Ranked = list[tuple[int, float]]
T = TypeVar("T")


@dataclass(frozen=True)
class Capabilities:
    """How a store behaves, as data callers test (never the backend's class or name).

    What a backend may lack is not a flag here but an optional part of :class:`Storage`
    (``graph_sql``, ``maintenance``, ``reembedding``, ``hybrid``), None where it is absent.
    """

    name: str  # "duckdb" | "postgres": for messages and reports only
    persistent: bool  # False for :memory:


@dataclass
class CollectionRecord:
    """A collection's catalog row: what every add and search of it must use.

    ``id`` is unique in the store and names the collection's tables; ``model``, ``dim``,
    ``chunking`` and ``language`` are fixed at creation (``reembed`` changes the model);
    ``generation`` grows with every write to the collection, so ``(id, generation)`` keys
    a cache that can never serve stale data.
    """

    id: int
    workspace: str
    name: str
    model: str
    dim: int
    chunking: dict[str, Any]
    language: str
    created_at: str | None = None
    updated_at: str | None = None
    generation: int = 0
    # How the collection's vectors were computed (hybridkb.embedders.recipe.Recipe as a
    # dict): backend and precision. Empty for collections made before it was recorded
    # (those are float32, made by sentence-transformers).
    recipe: dict[str, Any] = field(default_factory=dict)


@dataclass
class DocumentRecord:
    """A document's catalog row (one per file or added text; its text lives in its chunks).

    ``document_id`` is unique within the collection; ``chunk_count`` is the number of
    chunks stored for the current ``content_hash``.
    """

    document_id: str
    path: str | None
    filename: str | None
    source: str  # "file" | "text"
    content_hash: str  # file bytes (files) or text (add_texts)
    signature: str  # chunking settings + model: a change re-ingests
    metadata: dict[str, Any] = field(default_factory=dict)
    language: str = "und"
    bytes: int = 0
    chunk_count: int = 0
    added_at: str | None = None


@dataclass
class SourceRecord:
    """A folder or file named in an add, remembered so a sync can walk it again."""

    path: str  # resolved absolute path
    recursive: bool = True  # a folder's subfolders too
    types: list[str] | None = None  # extensions to keep (".pdf"); None: every supported one
    metadata: dict[str, Any] = field(default_factory=dict)  # given to new files' documents
    added_at: str | None = None
    synced_at: str | None = None  # when an add or sync last walked it whole (None: never)
    # st_dev of the root and of the folder above it when it was added (None: not recorded)
    device: int | None = None
    parent_device: int | None = None

    @property
    def mount_point(self) -> bool:
        """Whether the root was a mount point (a drive, a share) when it was added: its
        device differed from its parent's. Unmounted, it shows as the empty folder below."""
        return self.device is not None and self.device != self.parent_device


@dataclass
class FileState:
    """What a file looked like when its document was last read: a sync that finds the
    same size and modification time trusts the stored content without opening it."""

    document_id: str
    path: str
    size: int
    mtime_ns: int
    content_hash: str


@dataclass(slots=True)  # many live at once (ingest batches, the row cache)
class ChunkRecord:
    """One stored chunk: its text, where it sits in its document, and what filters see.

    ``key`` is ``chunk_key(chunk_id)``, the integer the derived indexes rank by;
    ``char_start``/``char_end`` are offsets into the document text; ``terms`` are the
    analysed keywords the BM25 index holds; ``metadata`` is the user's, the built-in fields
    being the other attributes.
    """

    key: int
    chunk_id: str
    document_id: str
    chunk_index: int
    text: str
    page: int | None
    section: str | None
    char_start: int
    char_end: int
    content_hash: str
    language: str
    terms: list[str]
    metadata: dict[str, Any]
    filename: str | None
    path: str | None
    added_at: str | None = None


@dataclass
class PutItem:
    """One document to write with its chunks and their vectors (row i for chunk i)."""

    document: DocumentRecord
    chunks: Sequence[ChunkRecord]
    vectors: np.ndarray


@dataclass
class CollectionStats:
    """Counts of one collection: documents, chunks, languages seen, bytes of source, last write."""

    documents: int
    chunks: int
    languages: list[str]
    bytes: int
    updated_at: str | None


def make_chunk_id(collection_id: int, document_id: str, content_hash: str, index: int) -> str:
    """Deterministic id, unique across the database (the graph uses it as a node id).

    16 hex digits of a 63-bit hash: the int value is the key derived indexes use.
    """
    raw = f"{collection_id}\x00{document_id}\x00{content_hash}\x00{index}".encode()
    value = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big") & ((1 << 63) - 1)
    return f"{value:016x}"


def chunk_key(chunk_id: str) -> int:
    """The integer key derived indexes use: the chunk's 16-hex-digit id as a number (< 2**63)."""
    return int(chunk_id, 16)


def document_node_id(collection_id: int, document_id: str) -> str:
    """Graph node id of a document (chunk node ids are their chunk_ids)."""
    return f"doc:{collection_id}:{document_id}"


class Connection(Protocol):
    """An open transaction of a backend, as the core sees it: statements in, rows out.

    DuckDB's connection and psycopg's both satisfy it (``.execute(...).fetchall()``);
    a backend's own helpers (its :class:`GraphSQL`) may use more of their driver.
    """

    def execute(self, query: str, parameters: Any = ..., /) -> Any:
        """Run one statement with positional parameters; the result has
        ``fetchall()``/``fetchone()``."""
        ...


@dataclass
class WriteEvent:
    """Passed to write hooks inside the writing transaction (e.g. to keep the graph in step).

    kind: "put" (document replaced: ``document`` + ``chunks``; ``document_ids`` holds its id),
    "put_batch" (several documents replaced at once: ``items`` holds PutItems),
    "delete" (``document_ids`` removed), "drop" (whole collection, before its tables go).
    ``fresh``: ids of a put the store did not hold before it (nothing derived from them
    to replace); empty when the writer does not say.
    """

    kind: str
    coll: CollectionRecord
    document_ids: Sequence[str] = ()
    document: DocumentRecord | None = None
    chunks: Sequence[ChunkRecord] = ()
    items: Sequence[Any] = ()  # PutItem, for "put_batch"
    fresh: frozenset[str] = frozenset()


# hook(connection, event): runs in the same transaction as the write.
WriteHook = Callable[[Connection, WriteEvent], None]

# One stored document with its chunks (terms included) and their vectors (row i, chunk i).
Exported = tuple[DocumentRecord, list[ChunkRecord], np.ndarray]


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
    core's fusion (:mod:`hybridkb.fusion`, floors and tie-breaks included) and vector
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


class Storage(Protocol):
    """What the core needs from a database. One instance per open knowledge base.

    A backend must:

    * make every write atomic: ``put_document``, ``put_documents``,
      ``put_document_stream``, ``delete_documents`` and ``drop_collection`` each commit
      all of their rows (chunks, vectors, catalog, and whatever the write ``hooks``
      write in the same transaction) or none, and bump the collection's
      ``generation``; a reader (another thread, or another process where the backend
      declares ``concurrent_writers`` in ``storage/backends.py``) sees the old state or
      the new one, never a mix;
    * rank only: the searches return ``(chunk_key, score)`` pairs, best first, at most
      ``k``, each a chunk that matches ``where`` (filters apply before the cut, so a
      filtered search is not a post-filtered top k), ties broken by key so the same
      store answers the same way; the core fuses, dresses hits and applies settings;
    * see its own writes at once: a search or read after a write returns commits
      made before it (derived in-memory indexes are brought up to date first);
    * take identifiers from :class:`CollectionRecord` ids only: no name or other user
      text is ever spliced into SQL (values travel as bound parameters, filters
      through :func:`hybridkb.filters.to_sql`);
    * raise every driver error as a :class:`~hybridkb.errors.BackendError` (or a
      subclass, e.g. :class:`~hybridkb.errors.DatabaseLocked` when another process
      holds the file past the lock timeout), keeping the driver's as the cause; never
      the driver's own exception;
    * refuse writes with BackendError when ``read_only``, saying :meth:`write_refusal`.

    A backend must never chunk, parse files, load models or embed (the core hands it
    finished rows and vectors; :meth:`Maintenance.reembed` uses the embedder it is
    given), call back into the core except through ``hooks``, or let a connection
    escape :meth:`transaction`. What a backend lacks is said
    by :class:`Capabilities` and the ``None`` optional parts, never by raising
    NotImplementedError from a member.
    """

    capabilities: Capabilities
    read_only: bool
    hooks: list[WriteHook]  # called inside every document write/delete/drop transaction

    # Optional parts: None where the backend does not offer them (the one way a backend
    # declares what it lacks). A caller reads the attribute and handles None, naming the
    # backend (``capabilities.name``) in its message.
    graph_sql: GraphSQL | None
    """The graph's tables (the knowledge graph needs them); None: no graph here."""
    maintenance: Maintenance | None
    """doctor / compact; None: the backend offers no housekeeping."""
    reembedding: Reembedding | None
    """reembed in place; None: the backend cannot (a copy through another store can)."""
    hybrid: HybridSearch | None
    """A hybrid search run whole in the store (one round trip); None: the core fuses."""

    def close(self) -> None:
        """Release the store: save what must persist (e.g. index snapshots), close the
        connections and the file lock. Closing again does nothing; no other member may
        be called afterwards."""
        ...

    def write_refusal(self) -> str:
        """Why a write is refused while ``read_only`` and how to get write access, in one
        line (opened read-only, or a database role that may only read): what every write
        of the core and the graph raises."""
        ...

    def transaction(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(con)`` in one transaction (committed if it returns, rolled back if it
        raises) under the backend's lock; for the graph and copy helpers."""
        ...

    def list_workspaces(self) -> list[str]:
        """Workspaces holding at least one (complete) collection, sorted."""
        ...

    # catalog
    def create_collection(
        self,
        workspace: str,
        name: str,
        *,
        model: str,
        dim: int,
        chunking: dict[str, Any],
        language: str,
        recipe: dict[str, Any] | None = None,
    ) -> CollectionRecord:
        """Add a collection to the catalog and create its tables, in one transaction.

        Returns:
            Its record, with a new ``id`` and ``generation`` 0.

        Raises:
            CollectionExists: ``name`` is taken in ``workspace`` (the message names it).
        """
        ...

    def get_collection(self, workspace: str, name: str) -> CollectionRecord | None:
        """The record of ``name`` in ``workspace``, read afresh; None if there is none."""
        ...

    def list_collections(self, workspace: str, *, staged: bool = False) -> list[CollectionRecord]:
        """The workspace's collections, sorted by name; with ``staged``, instead, the
        collections a copy is still writing or left unfinished (``shared.staging_name``)."""
        ...

    def rename_collection(self, coll: CollectionRecord, name: str) -> CollectionRecord:
        """Give the collection another name in its workspace (its id, tables and rows
        stay); return its record.

        Raises:
            CollectionExists: ``name`` is taken in the workspace.
        """
        ...

    def drop_collection(self, coll: CollectionRecord) -> None:
        """Delete the collection: catalog row, tables, sources, file states and derived
        indexes, in one transaction; write hooks see a ``drop`` event before the tables go."""
        ...

    # documents
    def get_document(self, coll: CollectionRecord, document_id: str) -> DocumentRecord | None:
        """A document's record; None if the collection has no such document."""
        ...

    def get_documents(
        self, coll: CollectionRecord, document_ids: Sequence[str]
    ) -> dict[str, DocumentRecord]:
        """The records of those of ``document_ids`` the collection holds, by id (an add's
        unchanged check for a whole batch at once)."""
        ...

    def list_documents(
        self,
        coll: CollectionRecord,
        *,
        limit: int = 100,
        offset: int = 0,
        where: Filter | None = None,
    ) -> list[DocumentRecord]:
        """One page of the collection's documents, ordered by ``added_at`` then
        ``document_id``; with ``where`` (a parsed filter naming no passage's field, see
        :func:`hybridkb.filters.parse_document_filter`) only those it matches, decided
        in the database (compiled by :func:`hybridkb.filters.to_sql`)."""
        ...

    def put_document(
        self,
        coll: CollectionRecord,
        doc: DocumentRecord,
        chunks: Sequence[ChunkRecord],
        vectors: np.ndarray,
    ) -> None:
        """Atomically replace the document (and its chunks and vectors) with these."""
        ...

    def put_documents(self, coll: CollectionRecord, items: Sequence[PutItem]) -> None:
        """Atomically replace several documents in one transaction (all or none)."""
        ...

    def put_document_stream(
        self,
        coll: CollectionRecord,
        doc: DocumentRecord,
        batches: Iterable[tuple[Sequence[ChunkRecord], np.ndarray]],
    ) -> int:
        """Replace one huge document from a stream of (chunks, vectors) batches, all or nothing.

        Memory stays bounded (a batch, plus the database's own buffers). Until the new
        version is complete, reads and searches see the old one (or none) and never a
        staged row; a failure or a crash at any moment leaves the old version. Returns
        the number of chunks written. DuckDB stages the batches in a file beside the
        database and switches them in with one transaction (``duckdb_stream.py``);
        Postgres writes one transaction (it spills to disk).
        """
        ...

    def delete_documents(self, coll: CollectionRecord, document_ids: Sequence[str]) -> list[str]:
        """Delete; return the ids that existed."""
        ...

    def stats(self, coll: CollectionRecord) -> CollectionStats:
        """Counts of one collection (see :meth:`stats_many` for several)."""
        ...

    def prepare(self, coll: CollectionRecord) -> None:
        """Load now what a search of ``coll`` will need (derived indexes), e.g. in a thread
        while the query's model loads; a backend with nothing to load does nothing."""
        ...

    def stats_many(self, colls: Sequence[CollectionRecord]) -> dict[int, CollectionStats]:
        """Statistics of several collections by id (a listing asks for all at once)."""
        ...

    # search: ranked (chunk_key, score), best first, at most k, only chunks matching `where`
    def keyword_search(
        self, coll: CollectionRecord, terms: Sequence[str], k: int, where: Filter | None
    ) -> Ranked:
        """BM25 over the chunks' analysed ``terms``; an empty ``terms`` ranks nothing.

        Scores are the BM25 scores of the backend's index (only ranks compare across
        backends: the core fuses ranks and normalised scores, never raw BM25).
        """
        ...

    def vector_search(
        self, coll: CollectionRecord, query: np.ndarray, k: int, where: Filter | None
    ) -> Ranked:
        """Chunks by cosine similarity to ``query`` (a unit vector of the collection's
        dimension). The search may be approximate (an index), but with ``where`` it must
        still return ``k`` hits whenever ``k`` chunks match."""
        ...

    def filter_search(
        self,
        coll: CollectionRecord,
        terms: Sequence[str],
        query: np.ndarray,
        k: int,
        where: Filter | None,
    ) -> Ranked:
        """Chunks containing at least one of `terms`, ranked by vector similarity."""
        ...

    def fetch_chunks(self, coll: CollectionRecord, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        """Chunk rows by key (missing keys are left out); ``terms`` may be empty."""
        ...

    def fetch_vectors(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        """Stored float32 vectors in the order of ``keys`` (zero rows for missing keys)."""
        ...

    def vector_directions(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        """Vectors pointing where the stored ones of ``keys`` point (cosine >= 0.999),
        possibly read from a quantised in-memory copy: for query feedback, where a
        database round trip would cost more than the search. Zero rows for missing keys."""
        ...

    # export: for copying between stores and for the agent SQL engine
    def export_documents(self, coll: CollectionRecord, *, batch: int = 200) -> Iterator[Exported]:
        """Every stored document with its chunks (terms included) and vectors."""
        ...

    def export_tables(
        self, coll: CollectionRecord, document_ids: Sequence[str] | None = None
    ) -> tuple[Table, Table]:
        """The collection's rows for read-only SQL: tables of exactly
        ``columns.EXPORT_DOCUMENTS`` and ``columns.EXPORT_CHUNKS`` (metadata as JSON text,
        ``added_at`` as timestamp text), in the orders of the backends' SELECTs; with
        ``document_ids``, only those documents' rows (unknown ids are ignored)."""
        ...

    def document_fingerprints(self, coll: CollectionRecord) -> dict[str, str]:
        """Each document's id and a fingerprint of its catalog row, computed by the
        database (content hash, metadata, path and times included: it changes whenever
        the document's rows do), so a reader can tell which documents changed."""
        ...

    def count_vectors(self, coll: CollectionRecord) -> int:
        """Stored vectors of the collection (a copy compares it with the chunk count)."""
        ...

    # sources and file states: what a sync compares the disk with (dropped with the
    # collection; a state is a cache, so a missing or stale one only costs a re-read)
    def put_source(self, coll: CollectionRecord, source: SourceRecord) -> None:
        """Remember ``source`` (replacing the one with the same path)."""
        ...

    def list_sources(self, coll: CollectionRecord) -> list[SourceRecord]:
        """The collection's sources, sorted by path."""
        ...

    def mark_synced(self, coll: CollectionRecord, paths: Sequence[str]) -> None:
        """Record now (the database's clock) as when the sources at ``paths`` were last
        walked whole by an add or a sync; a path that is no source is ignored."""
        ...

    def delete_source(self, coll: CollectionRecord, path: str) -> bool:
        """Forget the source at ``path``; return whether there was one."""
        ...

    def file_states(self, coll: CollectionRecord) -> dict[str, FileState]:
        """Every recorded file state by document id."""
        ...

    def put_file_states(self, coll: CollectionRecord, states: Sequence[FileState]) -> None:
        """Record these states (replacing those of the same document ids)."""
        ...

    def delete_file_states(self, coll: CollectionRecord, document_ids: Sequence[str]) -> None:
        """Forget the states of these documents (unknown ids are ignored)."""
        ...
