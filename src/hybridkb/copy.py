"""Copy a knowledge base between stores (DuckDB <-> PostgreSQL) without re-embedding.

Everything moves as stored: collections (model, dimension, chunking, language),
documents, chunks with their analysed terms, vectors, and the graph rows of the
copied collections when both stores keep a graph. Chunk ids are derived from the
destination collection's id (as an ingest there would have made them), and graph
node ids that embed a chunk id or a collection id are rewritten to match.

Nothing is overwritten: a collection that already exists in the destination stops
the copy before anything is written. Counts are compared at the end.

Example:
    >>> copy_kb("kb.duckdb", "postgresql://user@host/db")  # doctest: +SKIP
    {'collections': [{'workspace': 'default', 'name': 'Tax', 'documents': 12, ...}], ...}
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import BackendError, CollectionExists, ConfigError, KBError
from .storage import open_storage, redact_url
from .storage.base import (
    CollectionRecord,
    Connection,
    EdgeRow,
    GraphSQL,
    NodeRow,
    Storage,
    load_props,
)
from .storage.records import rekeyed_chunk
from .storage.urls import is_postgres_url

if TYPE_CHECKING:
    from .api import KnowledgeBaseAPI
    from .kb import KnowledgeBase

Progress = Callable[[str, int, int], None]  # (collection name, documents done, total)


def copy_kb(
    src_url: str,
    dst_url: str,
    *,
    workspace: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Copy every collection (of ``workspace``, or of all workspaces) from one store to another.

    Args:
        src_url: Source: DuckDB path / ``duckdb:///path`` or ``postgresql://...``.
        dst_url: Destination, created if it is a new DuckDB file or an empty database.
        workspace: Copy only this workspace.
        progress: Called as ``progress(collection, documents_done, documents_total)``.

    Returns:
        ``{"source", "destination", "collections": [{workspace, name, documents, chunks,
        vectors, graph_nodes, graph_edges}], "documents", "chunks", "graph": {copied,
        user_nodes, user_edges}}``.

    Raises:
        CollectionExists: a collection of the same workspace and name is in the destination.
        BackendError: a store cannot be opened, or the counts differ after the copy.
    """
    if src_url == dst_url:
        raise ConfigError("copy: source and destination are the same store; name another one")
    src = open_storage(src_url, read_only=True)
    try:
        dst = open_storage(dst_url)
        try:
            return _copy(src, dst, src_url, dst_url, workspace, progress)
        finally:
            dst.close()
    finally:
        src.close()


def copy_to(
    kb: KnowledgeBaseAPI,
    dst_url: str,
    *,
    workspace: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """:func:`copy_kb` from an open knowledge base: ``kb.copy_to``. On a client of the
    process that holds the file (hybridkb.serve) that process copies it (``progress``
    is then not called).

    Raises:
        CollectionExists, BackendError: as :func:`copy_kb`.
    """
    return kb.copy_to(dst_url, workspace=workspace, progress=progress)


def copy_here(
    kb: KnowledgeBase,
    dst_url: str,
    *,
    workspace: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """:func:`copy_to` in the process that opened the store."""
    if absolute_url(dst_url) == absolute_url(kb.settings.db):
        raise ConfigError("copy: source and destination are the same store; name another one")
    dst = open_storage(dst_url)
    try:
        return _copy(kb.storage, dst, kb.settings.db, dst_url, workspace, progress)
    finally:
        dst.close()


def absolute_url(url: str) -> str:
    """A DuckDB file as an absolute path (the owner runs in another folder); URLs as given."""
    if is_postgres_url(url) or url in (":memory:", "duckdb://:memory:"):
        return url
    return os.path.realpath(os.path.expanduser(url.removeprefix("duckdb://")))


def _copy(
    src: Storage,
    dst: Storage,
    src_url: str,
    dst_url: str,
    workspace: str | None,
    progress: Progress | None,
) -> dict[str, Any]:
    workspaces = [workspace] if workspace is not None else src.list_workspaces()
    plan = [c for ws in workspaces for c in src.list_collections(ws)]
    clashes = [c for c in plan if dst.get_collection(c.workspace, c.name) is not None]
    if clashes:
        names = ", ".join(f"{c.workspace}/{c.name}" for c in clashes)
        raise CollectionExists(
            f"copy: the destination already has {names}; drop those collections there or copy "
            "into an empty store (nothing was copied)"
        )
    graph = _GraphCopy.open(src, dst)
    report: list[dict[str, Any]] = []
    for coll in plan:
        report.append(_copy_collection(src, dst, coll, graph, progress))
    user_graph = {"nodes": 0, "edges": 0}
    if graph is not None:
        for ws in dict.fromkeys(c.workspace for c in plan):
            n, e = graph.copy_workspace(ws)
            user_graph["nodes"] += n
            user_graph["edges"] += e
    return {
        "source": redact_url(src_url),
        "destination": redact_url(dst_url),
        "collections": report,
        "documents": sum(r["documents"] for r in report),
        "chunks": sum(r["chunks"] for r in report),
        "graph": {
            "copied": graph is not None,
            "user_nodes": user_graph["nodes"],
            "user_edges": user_graph["edges"],
        },
    }


def _copy_collection(
    src: Storage,
    dst: Storage,
    coll: CollectionRecord,
    graph: _GraphCopy | None,
    progress: Progress | None,
) -> dict[str, Any]:
    new = dst.create_collection(
        coll.workspace,
        coll.name,
        model=coll.model,
        dim=coll.dim,
        chunking=dict(coll.chunking),
        language=coll.language,
        recipe=dict(coll.recipe),
    )
    total = src.stats(coll).documents
    chunk_ids: dict[str, str] = {}
    done = 0
    try:
        for doc, chunks, vectors in src.export_documents(coll):
            moved = []
            for c in chunks:
                copied = rekeyed_chunk(
                    c,
                    collection_id=new.id,
                    document_id=doc.document_id,
                    content_hash=doc.content_hash,
                )
                chunk_ids[c.chunk_id] = copied.chunk_id
                moved.append(copied)
            dst.put_document(new, doc, moved, np.asarray(vectors, dtype=np.float32))
            done += 1
            if progress is not None:
                progress(coll.name, done, total)
        nodes = edges = 0
        if graph is not None:
            nodes, edges = graph.copy_collection(coll, new, chunk_ids)
    except BaseException:
        # A half-copied collection must not look complete: remove it, keep the cause.
        try:
            dst.drop_collection(new)
        except KBError:
            pass
        raise
    have, want = dst.stats(new), src.stats(coll)
    vectors_src, vectors_dst = src.count_vectors(coll), dst.count_vectors(new)
    if (have.documents, have.chunks, vectors_dst) != (want.documents, want.chunks, vectors_src):
        raise BackendError(
            f"copy: counts differ for {coll.workspace}/{coll.name}: source has {want.documents} "
            f"documents, {want.chunks} chunks, {vectors_src} vectors; destination has "
            f"{have.documents}, {have.chunks}, {vectors_dst}"
        )
    return {
        "workspace": coll.workspace,
        "name": coll.name,
        "documents": have.documents,
        "chunks": have.chunks,
        "vectors": vectors_dst,
        "graph_nodes": nodes,
        "graph_edges": edges,
    }


class _GraphCopy:
    """Moves graph rows, rewriting node ids that embed a chunk id or a collection id."""

    def __init__(self, src: Storage, dst: Storage, src_sql: GraphSQL, dst_sql: GraphSQL) -> None:
        self.src, self.dst, self.src_sql, self.dst_sql = src, dst, src_sql, dst_sql
        self.chunk_ids: dict[str, str] = {}
        self.collection_ids: dict[int, int] = {}

    @classmethod
    def open(cls, src: Storage, dst: Storage) -> _GraphCopy | None:
        src_sql = src.graph_sql
        dst_sql = dst.graph_sql
        if src_sql is None or dst_sql is None:
            return None
        if not src.transaction(src_sql.has_schema):
            return None
        dst.transaction(dst_sql.ensure_schema)
        return cls(src, dst, src_sql, dst_sql)

    def remap(self, node_id: str) -> str:
        if node_id in self.chunk_ids:
            return self.chunk_ids[node_id]
        head, _, rest = node_id.partition(":")
        if head in ("doc", "sec", "coll"):
            cid, sep, tail = rest.partition(":")
            if cid.isdigit() and int(cid) in self.collection_ids:
                return f"{head}:{self.collection_ids[int(cid)]}{sep}{tail}"
        return node_id

    def _rows(
        self, ws: str, collection_id: int
    ) -> tuple[dict[str, list[NodeRow]], dict[str, list[EdgeRow]]]:
        nodes_t, edges_t = self.src.transaction(
            lambda con: self.src_sql.rows_of_collection(con, ws, collection_id)
        )
        nodes: dict[str, list[NodeRow]] = {}
        for r in nodes_t.to_pylist():
            nodes.setdefault(r["document_id"], []).append(
                NodeRow(
                    id=self.remap(r["id"]),
                    type=r["type"],
                    properties=load_props(r["properties"]) or {},
                    chunk_id=self.remap(r["chunk_id"] or ""),
                )
            )
        edges: dict[str, list[EdgeRow]] = {}
        for r in edges_t.to_pylist():
            edges.setdefault(r["document_id"], []).append(
                EdgeRow(
                    source=self.remap(r["source"]),
                    target=self.remap(r["target"]),
                    type=r["type"],
                    weight=float(r["weight"]),
                    properties=load_props(r["properties"]) or {},
                    chunk_id=self.remap(r["chunk_id"] or ""),
                )
            )
        return nodes, edges

    def copy_collection(
        self, old: CollectionRecord, new: CollectionRecord, chunk_ids: dict[str, str]
    ) -> tuple[int, int]:
        self.chunk_ids.update(chunk_ids)
        self.collection_ids[old.id] = new.id
        nodes, edges = self._rows(old.workspace, old.id)

        def write(con: Connection) -> None:
            for doc in sorted(set(nodes) | set(edges)):
                self.dst_sql.insert_nodes(con, new.workspace, new.id, doc, nodes.get(doc, []))
                self.dst_sql.insert_edges(con, new.workspace, new.id, doc, edges.get(doc, []))
            self.dst_sql.bump(con, new.workspace)

        self.dst.transaction(write)
        return sum(map(len, nodes.values())), sum(map(len, edges.values()))

    def copy_workspace(self, ws: str) -> tuple[int, int]:
        """Nodes and edges a user made through the API (collection 0), and entity aliases."""
        nodes, edges = self._rows(ws, 0)
        user_nodes = [n for rows in nodes.values() for n in rows]
        user_edges = [e for rows in edges.values() for e in rows]
        aliases = self.src.transaction(lambda con: self.src_sql.aliases(con, ws))

        def write(con: Connection) -> None:
            if user_nodes:
                self.dst_sql.upsert_user_nodes(con, ws, user_nodes)
            if user_edges:
                self.dst_sql.upsert_user_edges(con, ws, user_edges)
            for alias, canonical in aliases.items():
                self.dst_sql.set_alias(con, ws, alias, canonical)
            self.dst_sql.bump(con, ws)

        self.dst.transaction(write)
        return len(user_nodes), len(user_edges)
