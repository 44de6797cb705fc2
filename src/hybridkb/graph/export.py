"""Graph export: the folder format (nodes, edges, vectors per document), GraphML, Mermaid.

The folder format itself is described in :mod:`hybridkb.graph.importer`, whose import reads
what :func:`export_folder` writes. Export is its own module because the two directions
share only that format: export reads the in-memory graph and the stored chunks and
writes files atomically; import reads files and stages rows for the ingest hook.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import GraphError
from ..storage.base import CollectionRecord, chunk_key
from ..storage.boundary import first_line
from .formats import to_graphml, to_mermaid
from .host import GraphView, Host
from .model import CHUNK_TYPES, DOCUMENT, Edge, Node
from .queries import MemGraph

FORMATS = ("graphml", "mermaid")
_SAFE = re.compile(r"[^\w.\-]+")


# -- selecting what to export ------------------------------------------------------------


def collection_part(
    graph: GraphView, collection: str, node_limit: int, edge_limit: int
) -> tuple[list[Node], list[Edge], bool]:
    """Nodes and edges that came from a collection's documents, plus user edges among them."""
    record = graph.kb.record(collection)
    g = graph.memgraph()
    node_idx: dict[int, None] = {}
    edge_idx: dict[int, None] = {}
    for doc in sorted(g.by_coll.get(record.id, ())):
        nodes, edges = g.by_prov.get((record.id, doc), ([], []))
        for i in nodes:
            if g.nprov[i] is not None:
                node_idx[i] = None
        for e in edges:
            if g.eprov[e] is not None:
                edge_idx[e] = None
    for i in list(node_idx):
        for e in g.out[i]:
            if g.edst[e] in node_idx:
                edge_idx[e] = None
    for e in edge_idx:
        node_idx.setdefault(g.esrc[e], None)
        node_idx.setdefault(g.edst[e], None)
    truncated = len(node_idx) > node_limit or len(edge_idx) > edge_limit
    kept_nodes = list(node_idx)[:node_limit]
    keep = set(kept_nodes)
    kept_edges = [e for e in edge_idx if g.esrc[e] in keep and g.edst[e] in keep][:edge_limit]
    return [g.node(i) for i in kept_nodes], [g.edge(e) for e in kept_edges], truncated


def export_text(
    graph: GraphView,
    *,
    collection: str | None,
    node: str | None,
    max_depth: int,
    fmt: str,
    node_limit: int,
    edge_limit: int,
) -> str:
    if fmt not in FORMATS:
        raise GraphError(
            f"format: {fmt!r} unknown; use graphml or mermaid (or export_folder for JSON)"
        )
    if node is not None:
        sub = graph.subgraph(
            node, max_depth=max_depth, node_limit=node_limit, edge_limit=edge_limit
        )
        nodes, edges = sub.nodes, sub.edges
    elif collection is not None:
        nodes, edges, _ = collection_part(graph, collection, node_limit, edge_limit)
    else:
        raise GraphError("export: name a collection or a node")
    return to_graphml(nodes, edges) if fmt == "graphml" else to_mermaid(nodes, edges)


# -- the folder format -------------------------------------------------------------------


def export_folder(graph: GraphView, collection: str, folder: Path) -> list[Path]:
    """Write ``<doc>.nodes.json``, ``<doc>.edges.json`` and ``<doc>.parquet`` per document.

    The files are written into a hidden folder inside ``folder`` and moved into place
    once all are written: an export that fails (a full disk) leaves nothing of itself,
    not even the folders it made, and replaces no file of an earlier export.

    Raises:
        GraphError: a file could not be written (the message says why).
    """
    kb = graph.kb
    record = kb.record(collection)
    g = graph.memgraph()
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".hybridkb-export-", dir=folder))
    try:
        names = _write_sets(kb, record, g, staging)
        written = []
        for name in names:
            os.replace(staging / name, folder / name)
            written.append(folder / name)
        staging.rmdir()
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        for path in made:  # deepest first; a folder someone else filled meanwhile stays
            with contextlib.suppress(OSError):
                path.rmdir()
        reason = _write_failure(exc)
        if reason is None:
            raise
        raise GraphError(
            f"export to {folder} failed ({reason}); nothing of it was written"
        ) from exc
    return written


def _write_failure(exc: BaseException) -> str | None:
    """Why a file could not be written, or None for an error that is not about writing."""
    import duckdb  # write_vectors writes Parquet through DuckDB

    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}: {Path(exc.filename).name}" if exc.filename else str(exc)
    if isinstance(exc, duckdb.Error):
        return first_line(exc)
    return None


def _write_sets(kb: Host, record: CollectionRecord, g: MemGraph, folder: Path) -> list[str]:
    """Write every document's set into ``folder``; return the file names written."""
    written: list[str] = []
    used_names: set[str] = set()
    for doc in sorted(g.by_coll.get(record.id, ())):
        node_ids, edge_ids = g.by_prov.get((record.id, doc), ([], []))
        nodes = [g.node(i) for i in dict.fromkeys(node_ids) if g.nprov[i] is not None]
        edges = [g.edge(e) for e in dict.fromkeys(edge_ids) if g.eprov[e] is not None]
        chunk_ids = [n.id for n in nodes if n.type in CHUNK_TYPES]
        keys = [chunk_key(c) for c in chunk_ids]
        rows = kb.storage.fetch_chunks(record, keys)
        texts = {r.chunk_id: r.text for r in rows.values()}
        out_nodes = []
        for n in nodes:
            d = n.to_dict()
            if n.type in CHUNK_TYPES and n.id in texts:
                d["text"] = texts[n.id]
                d.pop("preview", None)
            if n.type == DOCUMENT:
                d["document_id"] = doc
            out_nodes.append(d)
        base = _SAFE.sub("_", doc).strip("._") or "document"
        name, k = base, 1
        while name in used_names:
            k += 1
            name = f"{base}_{k}"
        used_names.add(name)
        paths = [
            folder / f"{name}.nodes.json",
            folder / f"{name}.edges.json",
            folder / f"{name}.parquet",
        ]
        paths[0].write_text(json.dumps(out_nodes, ensure_ascii=False, indent=1), encoding="utf-8")
        paths[1].write_text(
            json.dumps([e.to_dict() for e in edges], ensure_ascii=False, indent=1), encoding="utf-8"
        )
        present = [c for c in chunk_ids if c in texts]
        vecs = (
            kb.storage.fetch_vectors(record, [chunk_key(c) for c in present])
            if present
            else np.zeros((0, record.dim))
        )
        write_vectors(paths[2], present, vecs)
        written.extend(p.name for p in paths)
    return written


def write_vectors(path: Path, ids: Sequence[str], vectors: np.ndarray) -> None:
    """Write ``id`` (text) and ``embedding`` (a list of float32) rows as Parquet, by DuckDB."""
    import duckdb

    payload = json.dumps({"id": list(ids), "embedding": np.asarray(vectors).tolist()})
    target = str(path).replace("'", "''")
    with duckdb.connect(":memory:") as con:
        con.execute(
            "COPY (SELECT unnest(j.id) AS id, unnest(j.embedding) AS embedding FROM"
            ' (SELECT from_json(?, \'{"id": ["VARCHAR"], "embedding": [["FLOAT"]]}\') AS j))'
            f" TO '{target}' (FORMAT parquet)",
            [payload],
        )
