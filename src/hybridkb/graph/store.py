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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import GraphError
from ..storage.base import (
    Connection,
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
from .queries import EdgeTuple, MemGraph, NodeTuple

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
        if workspace not in self.graphs:
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
        coll = event.coll
        ws, cid = coll.workspace, coll.id
        if event.kind in ("put", "put_batch"):
            pairs = (
                [(i.document, i.chunks) for i in event.items]
                if event.kind == "put_batch"
                else [(event.document, event.chunks)]
            )
            per_doc = []
            for doc, chunks in pairs:
                if doc is None:
                    continue
                staged = self.staged.pop((cid, doc.document_id), None)
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
                per_doc.append(
                    (doc.document_id, list(rows.nodes.values()), list(rows.edges.values()))
                )
            if not per_doc:
                return
            if len(per_doc) == 1:
                doc_id, nodes, edges = per_doc[0]
                self.sql.replace_documents(con, ws, cid, [doc_id], nodes, edges)
            else:
                self.sql.replace_documents_many(con, ws, cid, per_doc)
            changes = [
                ((cid, d), node_tuples(n, cid, d), edge_tuples(e, cid, d)) for d, n, e in per_doc
            ]

            def replace(g: MemGraph) -> None:
                for prov, nt, et in changes:
                    g.replace_document(prov, nt, et)

            self._record(con, ws, replace)
        elif event.kind == "delete":
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
        elif event.kind == "drop":
            self.sql.drop_collection(con, ws, cid)
            self._record(con, ws, lambda g: g.drop_collection(cid))

    def write(
        self,
        workspace: str,
        change: Callable[[Connection], Any],
        apply: Callable[[MemGraph], object],
    ) -> Any:
        """An API edit: ``change(con)`` in one transaction, ``apply`` replayed in memory."""
        if self.read_only:
            raise GraphError("the knowledge base is open read-only; reopen it for writing")

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
        version = self.transaction(lambda con: self.sql.version(con, workspace))
        with self.lock:
            g = self.graphs.get(workspace)
            if g is not None and g.version != version:
                g = self._catch_up(workspace, g, version)
            if g is None or g.dead_slots > max(50_000, g.edge_count):
                g = self._load(workspace)
            return g

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


def _node_rows(table: Table) -> list[NodeTuple]:
    cols = [table.column(c) for c in ("id", "type", "properties", "collection_id", "document_id")]
    props = [load_props(p) for p in cols[2]]
    return list(zip(cols[0], cols[1], props, cols[3], cols[4], strict=True))


def _edge_rows(table: Table) -> list[EdgeTuple]:
    names = ("source", "target", "type", "weight", "properties", "collection_id", "document_id")
    cols = [table.column(c) for c in names]
    props = [load_props(p) for p in cols[4]]
    return list(zip(cols[0], cols[1], cols[2], cols[3], props, cols[5], cols[6], strict=True))
