"""The rows the SQL tool's worker holds for one workspace, and what to send it after a write.

A worker is loaded once with the whole workspace (:func:`everything`). After that, a
write to the workspace does not cost another copy of it: :func:`changes` compares each
collection's generation with what the worker holds and, for a collection that changed,
each document's fingerprint (an md5 of its catalog row, content hash included,
computed by the database: ``Storage.document_fingerprints``), and sends
only the rows of documents added, changed or gone; the graph likewise, by each
document's fingerprint of its graph rows (``GraphSQL.fingerprints``, computed in the
database). An agent alternating one-note adds and SQL calls so makes the server list
the changed collection's documents (no text) and copy one note, not the workspace. The
catalog (``kb_collections``) is small and is always sent whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..storage.columns import (
    EXPORT_CHUNKS,
    EXPORT_DOCUMENTS,
    GRAPH_EDGES,
    GRAPH_NODES,
    Schema,
    Table,
)

if TYPE_CHECKING:
    from ..storage.base import CollectionRecord, GraphSQL, Storage

VIEWS = ("kb_collections", "kb_documents", "kb_chunks", "kb_graph_nodes", "kb_graph_edges")

COLLECTIONS_SCHEMA: Schema = (
    ("name", "VARCHAR"), ("model", "VARCHAR"), ("dim", "INTEGER"), ("chunking", "VARCHAR"),
    ("language", "VARCHAR"), ("created_at", "VARCHAR"), ("updated_at", "VARCHAR"),
)  # fmt: skip


class OpenWorkspace(Protocol):
    """What the SQL tool reads: an open store and the workspace whose rows it copies out
    (the local engine, :class:`hybridkb.local.LocalEngine`)."""

    @property
    def storage(self) -> Storage:
        """The open store."""
        ...

    @property
    def workspace(self) -> str:
        """The workspace whose rows the agent's SQL may read."""
        ...


def table_json(table: Table) -> bytes:
    """A table as the worker loads it: one JSON object holding a list per column."""
    columns = dict(zip(table.column_names, table.columns, strict=True))
    return json.dumps(columns, ensure_ascii=False, default=str).encode("utf-8")


def with_collection(tables: list[tuple[str, Table]], schema: Schema) -> Table:
    """The tables of several collections as one, a ``collection`` column first."""
    names = [name for name, table in tables for _ in range(table.num_rows)]
    columns = tuple(
        [value for _, table in tables for value in table.columns[i]] for i in range(len(schema))
    )
    return Table((("collection", "VARCHAR"), *schema), (names, *columns))


@dataclass
class HeldCollection:
    """One collection as a worker holds it: its name, generation and document stamps."""

    name: str
    generation: int
    stamps: dict[str, str]  # document id -> fingerprint (Storage.document_fingerprints)


@dataclass
class Held:
    """What a worker holds: each collection by id, the graph's version and fingerprints,
    and the JSON bytes sent to it so far (its memory limit was sized for the first load)."""

    collections: dict[int, HeldCollection] = field(default_factory=dict)
    graph_version: int = 0
    graph: dict[str, str] = field(default_factory=dict)  # "collection_id:document_id" -> md5
    sent: int = 0


@dataclass
class Shipment:
    """Rows for a worker: ``tables`` to add (every view for a full load), what to delete
    first (documents by collection name and ids, None: all of the collection's; graph
    rows by "collection_id:document_id"), and what the worker holds once it is applied."""

    tables: dict[str, Table]
    drop: list[tuple[str, list[str] | None]]
    graph_drop: list[str]
    held: Held

    def blobs(self) -> list[bytes]:
        """Each view's rows as :func:`table_json`, in :data:`VIEWS` order."""
        return [table_json(self.tables[name]) for name in VIEWS]


def _graph_sql(kb: OpenWorkspace) -> GraphSQL | None:
    sql = kb.storage.graph_sql
    return sql if sql is not None and kb.storage.transaction(sql.has_schema) else None


def _graph_changes(kb: OpenWorkspace, held: Held, after: Held) -> tuple[list[str], list[str]]:
    """The graph's rows to send (by provenance key) and those to drop first, noting the
    new version and fingerprints in ``after``."""
    sql = _graph_sql(kb)
    if sql is None:
        after.graph_version, after.graph = 0, {}
        return [], list(held.graph)
    # The version first: a write after it is found by the next call.
    after.graph_version = kb.storage.transaction(lambda con: sql.version(con, kb.workspace))
    if after.graph_version == held.graph_version:
        after.graph = held.graph
        return [], []
    after.graph = kb.storage.transaction(lambda con: sql.fingerprints(con, kb.workspace))
    send = [k for k, digest in after.graph.items() if held.graph.get(k) != digest]
    gone = [k for k in held.graph if k not in after.graph]
    return send, send + gone


def _catalog(records: list[CollectionRecord]) -> Table:
    return Table.from_rows(
        COLLECTIONS_SCHEMA,
        [
            (r.name, r.model, r.dim, json.dumps(r.chunking), r.language, r.created_at, r.updated_at)
            for r in records
        ],
    )


def _ship(
    kb: OpenWorkspace,
    records: list[CollectionRecord],
    wanted: dict[int, list[str] | None],
    graph_keys: list[str],
) -> dict[str, Table]:
    """The views' rows for ``wanted`` (collection id -> document ids, None: all), the
    catalog, and the graph rows of ``graph_keys``."""
    docs, chunks = [], []
    for r in records:
        if r.id not in wanted:
            continue
        d, c = kb.storage.export_tables(r, wanted[r.id])
        docs.append((r.name, d))
        chunks.append((r.name, c))
    nodes, edges = Table.from_rows(GRAPH_NODES, []), Table.from_rows(GRAPH_EDGES, [])
    sql = _graph_sql(kb) if graph_keys else None
    if sql is not None:
        nodes, edges = kb.storage.transaction(
            lambda con: sql.load_of(con, kb.workspace, graph_keys)
        )
    return {
        "kb_collections": _catalog(records),
        "kb_documents": with_collection(docs, EXPORT_DOCUMENTS),
        "kb_chunks": with_collection(chunks, EXPORT_CHUNKS),
        "kb_graph_nodes": nodes,
        "kb_graph_edges": edges,
    }


def everything(kb: OpenWorkspace) -> Shipment:
    """The whole workspace, for a new worker."""
    records = kb.storage.list_collections(kb.workspace)
    held = Held()
    for r in records:  # stamped before the rows are read: a write between is sent next time
        held.collections[r.id] = HeldCollection(
            r.name, r.generation, kb.storage.document_fingerprints(r)
        )
    graph_keys, _ = _graph_changes(kb, Held(graph_version=-1), held)
    tables = _ship(kb, records, {r.id: None for r in records}, graph_keys)
    return Shipment(tables, [], [], held)


def changes(kb: OpenWorkspace, held: Held) -> Shipment | None:
    """What a worker holding ``held`` lacks; None when it is up to date."""
    records = kb.storage.list_collections(kb.workspace)
    after = Held(sent=held.sent)
    graph_keys, graph_drop = _graph_changes(kb, held, after)
    now = {r.id: r for r in records}
    if not graph_drop and now.keys() == held.collections.keys():
        if all(now[i].generation == h.generation for i, h in held.collections.items()):
            held.graph_version = after.graph_version  # moved with no row changed
            return None
    drop: list[tuple[str, list[str] | None]] = []
    wanted: dict[int, list[str] | None] = {}
    for cid, h in held.collections.items():
        if cid not in now or now[cid].name != h.name:  # dropped (or renamed: sent anew)
            drop.append((h.name, None))
    for r in records:
        was = held.collections.get(r.id)
        if was is not None and was.name == r.name and was.generation == r.generation:
            after.collections[r.id] = was
            continue
        current = kb.storage.document_fingerprints(r)
        after.collections[r.id] = HeldCollection(r.name, r.generation, current)
        if was is None or was.name != r.name:
            wanted[r.id] = None
            continue
        changed = [i for i, s in current.items() if was.stamps.get(i) != s]
        gone = [i for i in was.stamps if i not in current]
        drop.append((r.name, changed + gone))  # changed ones are dropped, then sent again
        if changed:
            wanted[r.id] = changed
    tables = _ship(kb, records, wanted, graph_keys)
    return Shipment(tables, drop, graph_drop, after)
