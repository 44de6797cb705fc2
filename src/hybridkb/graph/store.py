"""One GraphStore per open storage: the write hook, the SQL backend and the in-memory graphs.

Writes (document put/delete, collection drop, API edits) change the graph tables
inside the caller's transaction and bump the workspace's graph version there. The
in-memory :class:`MemGraph` of a workspace is not touched inside the transaction:
each write leaves a delta tagged (version before, version after). A reader reads
the committed version and replays the deltas that lead to it. Writes are
serialised by the storage lock, so when two deltas start from the same version
the earlier one was rolled back; a missing link (a write from another process, a
delta dropped) means the copy is rebuilt from the tables. Nothing half-written is
ever trusted.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import GraphError
from ..storage.base import (
    ChunkRecord,
    CollectionRecord,
    Connection,
    DocumentRecord,
    EdgeRow,
    GraphSQL,
    NodeRow,
    Storage,
    WriteEvent,
    load_props,
)
from ..storage.columns import Table
from .build import RowSet, document_rows
from .extract import EntityExtractor, RuleExtractor
from .queries import USER, EdgeTuple, MemGraph, NodeTuple

T = TypeVar("T")

MAX_PENDING = 20_000  # deltas kept for a loaded graph before it is dropped and rebuilt


@dataclass
class Delta:
    before: int
    after: int
    apply: Callable[[MemGraph], object]


def node_tuples(rows: Sequence[NodeRow], cid: int, doc: str) -> list[NodeTuple]:
    return [(r.id, r.type, r.properties or None, cid, doc) for r in rows]


def edge_tuples(rows: Sequence[EdgeRow], cid: int, doc: str) -> list[EdgeTuple]:
    return [
        (r.source, r.target, r.type, float(r.weight), r.properties or None, cid, doc) for r in rows
    ]


class GraphStore:
    """Graph state shared by every KnowledgeBase over one storage object."""

    def __init__(self, storage: Storage, sql: GraphSQL) -> None:
        self._storage = weakref.ref(storage)
        self.sql = sql
        self.lock = threading.RLock()  # guards graphs; never taken inside a storage transaction
        self._plock = threading.Lock()  # guards pending; taken inside transactions (the hook)
        self.graphs: dict[str, MemGraph] = {}
        self.pending: dict[str, list[Delta]] = {}
        self.extractors: dict[str, list[EntityExtractor]] = {}
        self.staged: dict[tuple[int, str], RowSet] = {}
        self._aliases: dict[str, dict[str, str]] = {}
        self.preloading: set[str] = set()  # workspaces whose graph a preload is reading
        self.read_only = storage.read_only
        self.ready = False

    @property
    def storage(self) -> Storage:
        storage = self._storage()
        if storage is None:
            raise GraphError("the knowledge base behind this graph is closed")
        return storage

    def transaction(self, fn: Callable[[Connection], T]) -> T:
        return self.storage.transaction(fn)

    def setup(self) -> None:
        if self.read_only:
            self.ready = bool(self.transaction(self.sql.has_schema))
        else:
            self.transaction(self.sql.ensure_schema)
            self.ready = True

    # -- extractors and aliases -----------------------------------------------------

    def extractors_for(self, workspace: str) -> list[EntityExtractor]:
        return self.extractors.setdefault(workspace, [RuleExtractor()])

    def aliases_for(self, con: Connection, workspace: str) -> dict[str, str]:
        found = self._aliases.get(workspace)
        if found is None:
            found = self.sql.aliases(con, workspace)
            self._aliases[workspace] = found
        return found

    def forget_aliases(self, workspace: str) -> None:
        self._aliases.pop(workspace, None)

    # -- writes ---------------------------------------------------------------------

    def _record(self, con: Connection, workspace: str, apply: Callable[[MemGraph], object]) -> None:
        before, after = self.sql.bump(con, workspace)
        if workspace not in self.graphs and workspace not in self.preloading:
            return  # nothing in memory to keep in step; the first read loads the tables
        with self._plock:
            queue = self.pending.setdefault(workspace, [])
            queue.append(Delta(before, after, apply))
            if len(queue) > MAX_PENDING:
                self.graphs.pop(workspace, None)
                queue.clear()

    def hook(self, con: Connection, event: WriteEvent) -> None:
        """Storage write hook: runs inside the document's transaction."""
        if not self.ready:
            return
        if event.kind in ("put", "put_batch"):
            self._on_put(con, event)
        elif event.kind == "delete":
            self._on_delete(con, event)
        elif event.kind == "drop":
            ws, cid = event.coll.workspace, event.coll.id
            self.sql.drop_collection(con, ws, cid)
            self._record(con, ws, lambda g: g.drop_collection(cid))

    def _on_put(self, con: Connection, event: WriteEvent) -> None:
        """Replace the rows of each document written (one, or a batch) by its new rows."""
        coll = event.coll
        ws, cid = coll.workspace, coll.id
        pairs = (
            [(i.document, i.chunks) for i in event.items]
            if event.kind == "put_batch"
            else [(event.document, event.chunks)]
        )
        per_doc = []
        for doc, chunks in pairs:
            if doc is None:
                continue
            rows = self._rows_of(con, coll, doc, chunks)
            per_doc.append((doc.document_id, list(rows.nodes.values()), list(rows.edges.values())))
        if not per_doc:
            return
        self.sql.replace_documents_many(con, ws, cid, per_doc, fresh=event.fresh)

        # The rows become tuples only when a graph in memory takes them: most bulk adds
        # have none loaded, and converting every row cost ~10 us a chunk for nothing.
        # Nothing else holds these rows, so they are as written when the delta is applied.
        def replace(g: MemGraph) -> None:
            for d, n, e in per_doc:
                g.replace_document((cid, d), node_tuples(n, cid, d), edge_tuples(e, cid, d))

        self._record(con, ws, replace)

    def _rows_of(
        self,
        con: Connection,
        coll: CollectionRecord,
        doc: DocumentRecord,
        chunks: Sequence[ChunkRecord],
    ) -> RowSet:
        """A document's rows: derived from its chunks, or (an import) the rows staged for it."""
        ws = coll.workspace
        staged = self.staged.pop((coll.id, doc.document_id), None)
        rows = document_rows(
            coll,
            doc,
            chunks,
            extractors=self.extractors_for(ws),
            aliases=self.aliases_for(con, ws),
            find_collection=lambda name: self.sql.find_collection(con, ws, name),
            structure=staged is None,
        )
        if staged is not None:
            for n in staged.nodes.values():
                rows.node(n)
            for e in staged.edges.values():
                rows.edge(e)
        return rows

    def _on_delete(self, con: Connection, event: WriteEvent) -> None:
        """Remove the rows of the documents deleted, and user edges left dangling."""
        coll = event.coll
        ws, cid = coll.workspace, coll.id
        docs = list(event.document_ids)
        if not docs:
            return
        self.sql.replace_documents(con, ws, cid, docs)

        def forget(g: MemGraph) -> None:
            vanished: set[int] = set()
            for d in docs:
                vanished |= g.remove_prov((cid, d))
            g.prune_user_edges(vanished)

        self._record(con, ws, forget)

    def write(
        self,
        workspace: str,
        change: Callable[[Connection], Any],
        apply: Callable[[MemGraph], object],
    ) -> Any:
        """An API edit: ``change(con)`` in one transaction, ``apply`` replayed in memory."""
        if self.read_only:
            raise GraphError(self.storage.write_refusal())

        def tx(con: Connection) -> Any:
            result = change(con)
            self._record(con, workspace, apply)
            return result

        return self.transaction(tx)

    # -- reads ----------------------------------------------------------------------

    def graph(self, workspace: str) -> MemGraph:
        """The current in-memory graph of a workspace (loaded or brought up to date)."""
        if not self.ready:
            return MemGraph()
        with self.lock:
            g = self.loaded(workspace)
            return self._load(workspace) if g is None else g

    def loaded(self, workspace: str) -> MemGraph | None:
        """The workspace's in-memory graph brought up to date, or None when only reading
        every row of the tables would give it (never loaded, or too far behind)."""
        if not self.ready:
            return MemGraph()
        version = self.transaction(lambda con: self.sql.version(con, workspace))
        with self.lock:
            g = self.graphs.get(workspace)
            if g is not None and g.version != version:
                g = self._catch_up(workspace, g, version)
            if g is None or g.dead_slots > max(50_000, g.edge_count):
                return None
            return g

    def around(
        self, workspace: str, node_id: str, keep: Callable[[MemGraph], Sequence[str]]
    ) -> MemGraph:
        """A graph of only some rows near ``node_id``, as of one snapshot of the tables:
        ``keep`` picks nodes from a graph of the node's edges (their ends and types
        only), and the graph returned holds those nodes' rows and the edges among
        them. A neighbourhood of a workspace whose graph is not in memory costs its
        own rows, not a load of every row (minutes for a 100k-chunk collection)."""

        def read(con: Connection) -> MemGraph:
            version = self.sql.version(con, workspace)
            first = MemGraph(version)
            first.add_edges(
                (s, t, e, 1.0, None, *USER)
                for s, t, e in self.sql.edges_at(con, workspace, node_id)
            )
            nodes, edges = self.sql.rows_among(con, workspace, keep(first))
            g = MemGraph(version)
            g.add_nodes(_node_rows(nodes, distinct=True))
            g.add_edges(_edge_rows(edges))
            return g

        return self.transaction(read) if self.ready else MemGraph()

    def preload(self, workspace: str) -> None:
        """Load the workspace's whole graph without holding the lock, so queries meanwhile
        answer as they do before a load (a neighbourhood from its own rows), then put it
        in place; writes meanwhile are replayed onto it as onto a loaded graph. Nothing
        to do when it is loaded, or being loaded."""
        with self._plock:
            if not self.ready or workspace in self.graphs or workspace in self.preloading:
                return
            self.preloading.add(workspace)
            self.pending.pop(workspace, None)  # from here on the hook records deltas
        try:
            version, nodes, edges = self.transaction(lambda con: self.sql.load(con, workspace))
            g = MemGraph(version)
            g.add_nodes(_node_rows(nodes))
            g.add_edges(_edge_rows(edges))
            with self.lock, self._plock:
                if workspace not in self.graphs:  # else a query loaded it meanwhile
                    self.graphs[workspace] = g
                    queue = self.pending.get(workspace, [])
                    queue[:] = [d for d in queue if d.before >= version]
        finally:
            with self._plock:
                self.preloading.discard(workspace)

    def _catch_up(self, workspace: str, g: MemGraph, version: int) -> MemGraph | None:
        with self._plock:
            queue = list(self.pending.get(workspace, ()))
        by_before: dict[int, Delta] = {}
        for delta in queue:
            by_before[delta.before] = delta  # a later delta from the same version wins
        current = g.version
        try:
            while current != version:
                step = by_before.get(current)
                if step is None or step.after <= current:
                    self.graphs.pop(workspace, None)
                    return None
                step.apply(g)
                current = g.version = step.after
        except Exception:
            self.graphs.pop(workspace, None)  # half-applied: never trust it
            raise
        with self._plock:
            left = self.pending.get(workspace, [])
            left[:] = [d for d in left if d.before >= current]
        return g

    def _load(self, workspace: str) -> MemGraph:
        with self._plock:
            self.pending.pop(workspace, None)
            # From here on the hook records deltas for this workspace.
            self.graphs[workspace] = placeholder = MemGraph(-1)
        version, nodes, edges = self.transaction(lambda con: self.sql.load(con, workspace))
        g = MemGraph(version)
        g.add_nodes(_node_rows(nodes))
        g.add_edges(_edge_rows(edges))
        with self._plock:
            if self.graphs.get(workspace) is placeholder:
                self.graphs[workspace] = g
                queue = self.pending.get(workspace, [])
                queue[:] = [d for d in queue if d.before >= version]
        return g


def _node_rows(table: Table, *, distinct: bool = False) -> list[NodeTuple]:
    """The node rows as the in-memory graph takes them. ``distinct``: a row the same as
    the row before it of its node is left out, which changes neither the node's type nor
    its properties (the union of its rows, the last one winning), only its provenance:
    for a graph that is never written to (a collection's node has one such row per
    document, 10,000 JSON texts to read for a neighbourhood of 40 nodes)."""
    cols = [table.column(c) for c in ("id", "type", "properties", "collection_id", "document_id")]
    rows: Iterable[tuple[Any, ...]] = zip(*cols, strict=True)
    if distinct:
        before: dict[str, tuple[Any, ...]] = {}
        kept = []
        for row in rows:
            if before.get(row[0]) != row[1:3]:
                before[row[0]] = row[1:3]
                kept.append(row)
        rows = kept
    return [(i, t, load_props(p), cid, doc) for i, t, p, cid, doc in rows]


def _edge_rows(table: Table) -> list[EdgeTuple]:
    names = ("source", "target", "type", "weight", "properties", "collection_id", "document_id")
    cols = [table.column(c) for c in names]
    props = [load_props(p) for p in cols[4]]
    return list(zip(cols[0], cols[1], cols[2], cols[3], props, cols[5], cols[6], strict=True))
