"""Copy a knowledge base between stores (DuckDB <-> PostgreSQL) without re-embedding.

Everything moves as stored: collections (model, dimension, chunking, language),
documents, chunks with their analysed terms, vectors, and the graph rows of the
copied collections when both stores keep a graph. Chunk ids are derived from the
destination collection's id (as an ingest there would have made them), and graph
node ids that embed a chunk id or a collection id are rewritten to match.

Nothing is overwritten: a collection that already exists in the destination stops
the copy before anything is written. Each collection is written under a staging name
(``storage.shared.staging_name``: never listed, searched or copied) and takes its own
name only once its counts match the source's, so a copy that fails or is killed never
leaves a half collection under the full name. A failed copy drops what it staged; one
that was killed leaves it for ``doctor --repair`` or the next copy of that collection to
drop. A DuckDB file the copy created is deleted again if the copy fails.

Example:
    >>> copy_kb("kb.duckdb", "postgresql://user@host/db")  # doctest: +SKIP
    {'collections': [{'workspace': 'default', 'name': 'Tax', 'documents': 12, ...}], ...}
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendError, CollectionExists, ConfigError, KBError
from ..lifecycle import raise_if_stopped, read_ahead
from . import open_storage, redact_url
from .backends import backend_for
from .base import (
    CollectionRecord,
    Connection,
    EdgeRow,
    GraphSQL,
    NodeRow,
    PutItem,
    Storage,
    load_props,
)
from .records import rekeyed_chunk
from .shared import drop_staged, staging_name

Progress = Callable[[str, int, int], None]  # (collection name, documents done, total)
COPY_BATCH_DOCS = 64  # documents per write transaction, as ingest batches them


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
        return copy_from(src, src_url, dst_url, workspace=workspace, progress=progress)
    finally:
        src.close()


def copy_from(
    src: Storage,
    src_url: str,
    dst_url: str,
    *,
    workspace: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """:func:`copy_kb` from a store already open (``src_url`` names it in the report):
    the destination is opened here, and a DuckDB file the copy created is deleted again
    if the copy fails (an empty or half-filled file is left nowhere)."""
    with _destination(dst_url) as dst:
        return copy_stores(src, dst, src_url, dst_url, workspace, progress)


@contextmanager
def _destination(dst_url: str) -> Iterator[Storage]:
    """The destination, open for the copy and closed after it."""
    held = backend_for(dst_url).held_file(dst_url)
    created = None if held is None or os.path.lexists(held) else Path(held)
    try:
        dst = open_storage(dst_url)
    except BaseException:
        if created is not None:
            _remove_file(created)
        raise
    try:
        yield dst
    except BaseException as exc:
        try:
            dst.close()
        except KBError as failed:  # a full disk fails the close's checkpoint too
            exc.add_note(f"closing the destination failed too: {failed}")
        if created is not None:
            _remove_file(created)
        raise
    dst.close()


def _remove_file(path: Path) -> None:
    from .duckdb.connection import remove_database  # only a DuckDB store is a file

    remove_database(path)


def copy_stores(
    src: Storage,
    dst: Storage,
    src_url: str,
    dst_url: str,
    workspace: str | None,
    progress: Progress | None,
) -> dict[str, Any]:
    """:func:`copy_kb` between two open stores (``KnowledgeBase.copy_to`` copies from the one
    it holds); the URLs name them in the report."""
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
    staged = staging_name(coll.name)
    leftover = dst.get_collection(coll.workspace, staged)
    if leftover is not None:  # a copy of this collection that was killed
        drop_staged(dst, leftover)
    try:
        new = dst.create_collection(
            coll.workspace,
            staged,
            model=coll.model,
            dim=coll.dim,
            chunking=dict(coll.chunking),
            language=coll.language,
            recipe=dict(coll.recipe),
        )
        chunk_ids = _copy_documents(src, dst, coll, new, progress)
        nodes = edges = 0
        if graph is not None:
            nodes, edges = graph.copy_collection(coll, new, chunk_ids)
        have = _check_counts(src, dst, coll, new)
        dst.rename_collection(new, coll.name)
    except BaseException as exc:
        _drop_half_copy(dst, coll.workspace, staged, exc)
        raise
    return {
        "workspace": coll.workspace,
        "name": coll.name,
        "documents": have.documents,
        "chunks": have.chunks,
        "vectors": have.vectors,
        "graph_nodes": nodes,
        "graph_edges": edges,
    }


def _copy_documents(
    src: Storage,
    dst: Storage,
    coll: CollectionRecord,
    new: CollectionRecord,
    progress: Progress | None,
) -> dict[str, str]:
    """Every document of ``coll``, its chunks re-keyed and its vectors, into ``new``;
    returns the new id of each chunk by its old one (the graph's provenance follows)."""
    chunk_ids: dict[str, str] = {}
    total = src.stats(coll).documents
    done = 0
    batch: list[PutItem] = []

    def flush() -> None:
        # Documents in batches, as ingest writes them: one transaction per document
        # made a copy to PostgreSQL a fraction of the ingest rate.
        nonlocal done
        raise_if_stopped()  # a stop swallowed on the way still ends the copy here
        dst.put_documents(new, batch)
        for _ in batch:
            done += 1
            if progress is not None:
                progress(coll.name, done, total)
        batch.clear()

    # The source is read a batch ahead while the destination writes: each side waits on
    # its own database most of the time (SciFact to PostgreSQL: reading was 3.4 s of 11).
    with read_ahead(src.export_documents(coll), COPY_BATCH_DOCS, "hybridkb-copy-read") as documents:
        for doc, chunks, vectors in documents:
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
            batch.append(PutItem(doc, moved, np.asarray(vectors, dtype=np.float32)))
            if len(batch) >= COPY_BATCH_DOCS or sum(len(i.chunks) for i in batch) >= 2000:
                flush()
    if batch:
        flush()
    return chunk_ids


def _drop_half_copy(dst: Storage, workspace: str, staged: str, cause: BaseException) -> None:
    """Drop what a failed or stopped copy staged, found by its name: a stop can land as
    a COMMIT returns, so the creation may have committed though it raised, and the
    rename too (then nothing is staged and the whole collection stays). If even the drop
    fails (a full disk), it stays staged, unlisted, for doctor and the next copy."""
    try:
        half = dst.get_collection(workspace, staged)
        if half is not None:
            drop_staged(dst, half)
    except KBError as failed:
        cause.add_note(f"dropping the half copy failed too: {failed}")


@dataclass(frozen=True)
class _Counts:
    documents: int
    chunks: int
    vectors: int


def _check_counts(
    src: Storage, dst: Storage, coll: CollectionRecord, new: CollectionRecord
) -> _Counts:
    """The copy's counts, refused unless they are the source's."""
    have_stats, want_stats = dst.stats(new), src.stats(coll)
    have = _Counts(have_stats.documents, have_stats.chunks, dst.count_vectors(new))
    want = _Counts(want_stats.documents, want_stats.chunks, src.count_vectors(coll))
    if have != want:
        raise BackendError(
            f"copy: counts differ for {coll.workspace}/{coll.name}: source has {want.documents} "
            f"documents, {want.chunks} chunks, {want.vectors} vectors; destination has "
            f"{have.documents}, {have.chunks}, {have.vectors}"
        )
    return have


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
