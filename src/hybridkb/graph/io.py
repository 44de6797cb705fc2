"""Graph import and export.

Folder format, one set per document ``<name>``:

* ``<name>.nodes.json``: a JSON list of nodes ``{"id", "type", ...properties}`` (or
  ``{"nodes": [...]}``). Nodes with text (``text`` or ``content``) of type chunk or
  code become the document's chunks; section, entity, category and other nodes
  become graph nodes.
* ``<name>.edges.json``: a list of edges ``{"source", "target", "type", ...}`` (types
  such as parent_of, contains, next, mentions, categorized_as, related).
* ``<name>.parquet``: embeddings, columns ``id`` and ``embedding`` (a float list).

Importing stores each set as one document of a collection. Vectors are used as they
are when their dimension matches the collection's; chunks without a usable vector
are embedded with the collection's model. Chunk node ids become chunk_ids; entities
and categories join the workspace's own (``ent:<name>``, ``cat:<name>``); other node
ids are kept under ``imp:<collection_id>:``.

Export writes the same folder format, GraphML (for Gephi, yEd, networkx) or Mermaid.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EmbeddingMismatch, GraphError, KBError
from ..limits import MAX_JSON_DEPTH, parse_json
from ..storage.base import (
    ChunkRecord,
    CollectionRecord,
    DocumentRecord,
    EdgeRow,
    NodeRow,
    chunk_key,
    make_chunk_id,
)
from ..storage.boundary import first_line
from .build import RowSet
from .extract import canonical_key
from .formats import to_graphml, to_mermaid
from .host import GraphView, Host
from .model import (
    CATEGORY,
    CHUNK_TYPES,
    CONTAINS,
    DOCUMENT,
    EDGE_RESERVED,
    ENTITY,
    NODE_RESERVED,
    SECTION,
    Edge,
    Node,
    category_node_id,
    collection_node_id,
    document_node_id,
    entity_node_id,
)
from .queries import MemGraph

TEXT_KEYS = ("text", "content")
VECTOR_KEYS = ("embedding", "vector", "embeddings")
FORMATS = ("graphml", "mermaid")
_SAFE = re.compile(r"[^\w.\-]+")


# -- reading the folder ------------------------------------------------------------------


def _read_list(path: Path, key: str) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GraphError(f"{path.name}: not readable JSON ({exc})") from exc
    # The rule of every JSON text from outside (a crafted file nested 100,000 deep was a
    # RecursionError): a list (or {key: list}) of objects whose properties nest like metadata.
    data = parse_json(
        text, what=path.name, max_chars=None, max_depth=MAX_JSON_DEPTH + 3, error=GraphError
    )
    if isinstance(data, dict):
        data = data.get(key)
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise GraphError(
            f'{path.name}: expected a JSON list of {key} objects (or {{"{key}": [...]}})'
        )
    return data


def _read_vectors(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        return {}
    import duckdb  # DuckDB reads Parquet itself

    source = "read_parquet('" + str(path).replace("'", "''") + "')"
    with duckdb.connect(":memory:") as con:
        try:
            names = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()]
            column = next((c for c in VECTOR_KEYS if c in names), None)
            if "id" not in names or column is None:
                raise GraphError(
                    f"{path.name}: needs columns 'id' and 'embedding' (a list of floats)"
                )
            rows = con.execute(
                f'SELECT CAST(id AS VARCHAR), CAST("{column}" AS FLOAT[]) FROM {source}'
            ).fetchall()
        except duckdb.Error as exc:
            raise GraphError(f"{path.name}: not a readable Parquet file ({exc})") from exc
    out: dict[str, np.ndarray] = {}
    for node_id, vec in rows:
        if vec is not None:
            out[str(node_id)] = np.asarray(vec, dtype=np.float32)
    return out


def _text(node: dict[str, Any]) -> str | None:
    for key in TEXT_KEYS:
        value = node.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _edge_field(edge: dict[str, Any], *names: str) -> Any:
    for n in names:
        if n in edge:
            return edge[n]
    return None


def _props(node: dict[str, Any], drop: Iterable[str]) -> dict[str, Any]:
    skip = set(drop) | set(TEXT_KEYS) | set(VECTOR_KEYS)
    return {k: v for k, v in node.items() if k not in skip}


def import_folder(graph: GraphView, collection: str, folder: Path) -> dict[str, Any]:
    """Import every ``*.nodes.json`` set in ``folder`` as documents of ``collection``."""
    if not folder.is_dir():
        raise GraphError(f"{folder}: not a folder; pass the folder holding <name>.nodes.json files")
    sets = sorted(folder.glob("*.nodes.json"))
    if not sets:
        raise GraphError(f"{folder}: no <name>.nodes.json files found")
    kb = graph.kb
    record = kb.record(kb.collection(collection, create=True))
    report: dict[str, Any] = {
        "collection": record.name,
        "added": [],
        "unchanged": [],
        "failed": [],
        "reembedded": 0,
    }
    embedder = None
    for nodes_path in sets:
        name = nodes_path.name[: -len(".nodes.json")]
        try:
            staged = _prepare(graph, record, folder, name)
            existing = kb.storage.get_document(record, staged["doc"].document_id)
            doc = staged["doc"]
            if (
                existing is not None
                and existing.content_hash == doc.content_hash
                and existing.signature == doc.signature
            ):
                report["unchanged"].append(
                    {"name": name, "document_id": doc.document_id, "chunks": existing.chunk_count}
                )
                continue
            vectors = staged["vectors"]
            missing = staged["missing"]
            if missing:
                if embedder is None:
                    embedder = kb.embedder_for(record)
                fresh = embedder.embed_documents([staged["chunks"][i].text for i in missing])
                vectors[missing] = fresh
                report["reembedded"] += len(missing)
            graph.store.staged[(record.id, doc.document_id)] = staged["rows"]
            try:
                kb.storage.put_document(record, doc, staged["chunks"], vectors)
            finally:
                graph.store.staged.pop((record.id, doc.document_id), None)
            report["added"].append(
                {
                    "name": name,
                    "document_id": doc.document_id,
                    "chunks": len(staged["chunks"]),
                    "reembedded": len(missing),
                }
            )
        except KBError as exc:
            report["failed"].append({"name": name, "error": str(exc), "code": exc.code})
    return report


def _prepare(graph: GraphView, record: Any, folder: Path, name: str) -> dict[str, Any]:
    from ..analysis import analyze, detect_language
    from ..ingest import signature

    nodes_path = folder / f"{name}.nodes.json"
    edges_path = folder / f"{name}.edges.json"
    nodes = _read_list(nodes_path, "nodes")
    edges = _read_list(edges_path, "edges") if edges_path.is_file() else []
    vectors_by_id = _read_vectors(folder / f"{name}.parquet")
    raw = nodes_path.read_bytes() + (edges_path.read_bytes() if edges_path.is_file() else b"")
    content_hash = hashlib.sha256(raw).hexdigest()
    doc_meta: dict[str, Any] = {"imported_from": name}
    document_id = name
    filename = f"{name}.nodes.json"
    old_cid: int | None = None
    for n in nodes:
        if n.get("type") == DOCUMENT:
            document_id = str(n.get("document_id") or document_id)
            doc_meta.update(
                _props(
                    n,
                    (
                        "id",
                        "type",
                        "document_id",
                        "collection",
                        "collection_id",
                        "name",
                        "source",
                        "filename",
                    ),
                )
            )
            if isinstance(n.get("filename"), str) and n["filename"]:
                filename = n["filename"]
            if isinstance(n.get("collection_id"), int):
                old_cid = n["collection_id"]  # an export of ours: re-point its doc: ids
    cid = record.id
    mapping: dict[str, str] = {}
    renames = (
        {}
        if old_cid is None
        else {f"doc:{old_cid}:": f"doc:{cid}:", f"coll:{old_cid}": f"coll:{cid}"}
    )
    chunk_nodes: list[tuple[int, dict[str, Any], str]] = []
    for pos, n in enumerate(nodes):
        orig = n.get("id")
        if not isinstance(orig, str) or not orig:
            raise GraphError(f"{name}.nodes.json: node {pos} has no string 'id'")
        kind = n.get("type")
        if not isinstance(kind, str) or not kind:
            raise GraphError(f"{name}.nodes.json: node {orig!r} has no 'type'")
        text = _text(n)
        if kind in CHUNK_TYPES and text is not None:
            chunk_nodes.append((pos, n, text))
    order = sorted(
        range(len(chunk_nodes)),
        key=lambda j: (
            _int(chunk_nodes[j][1], ("chunk_index", "index", "order"), chunk_nodes[j][0]),
            j,
        ),
    )
    chunk_nodes = [chunk_nodes[j] for j in order]
    if not chunk_nodes:
        raise GraphError(f"{name}.nodes.json: no chunk or code node with 'text'; nothing to search")
    doc_node = document_node_id(cid, document_id)
    language = (
        record.language
        if record.language and record.language != "auto"
        else detect_language(" ".join(t for _, _, t in chunk_nodes)[:4000])
    )
    chunks: list[ChunkRecord] = []
    rows = RowSet()
    dim = record.dim
    vectors = np.zeros((len(chunk_nodes), dim), dtype=np.float32)
    missing: list[int] = []
    offset = 0
    for index, (_pos, n, text) in enumerate(chunk_nodes):
        chunk_id = make_chunk_id(cid, document_id, content_hash, index)
        mapping[n["id"]] = chunk_id
        page = n.get("page") if isinstance(n.get("page"), int) else None
        section = n.get("section") if isinstance(n.get("section"), str) else None
        chunks.append(
            ChunkRecord(
                key=chunk_key(chunk_id),
                chunk_id=chunk_id,
                document_id=document_id,
                chunk_index=index,
                text=text,
                page=page,
                section=section,
                char_start=offset,
                char_end=offset + len(text),
                content_hash=hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
                language=language,
                terms=analyze(text, language),
                metadata=doc_meta,
                filename=filename,
                path=None,
            )
        )
        offset += len(text) + 2
        vec = vectors_by_id.get(n["id"])
        if (
            vec is not None
            and vec.shape == (dim,)
            and np.isfinite(vec).all()
            and np.linalg.norm(vec) > 1e-12
        ):
            vectors[index] = vec / np.linalg.norm(vec)
        else:
            missing.append(index)
        props = _props(n, NODE_RESERVED)
        props.update(
            {
                "name": props.get("name") or " ".join(text.split())[:60],
                "collection": record.name,
                "collection_id": cid,
                "document_id": document_id,
                "chunk_index": index,
                "source_id": n["id"],
                "preview": " ".join(text.split())[:160],
            }
        )
        rows.node(NodeRow(chunk_id, n["type"], props, chunk_id))
    for n in nodes:
        orig, kind = n["id"], n["type"]
        if orig in mapping or kind == DOCUMENT:
            if kind == DOCUMENT:
                mapping[orig] = doc_node
            continue
        label = n.get("name") or n.get("title") or n.get("label")
        if kind == CATEGORY and n.get("kind") == "collection":
            mapping[orig] = collection_node_id(cid)  # the ingest hook writes this node
            continue
        if kind in (ENTITY, CATEGORY) and orig.startswith(("ent:", "cat:")):
            new_id = orig  # ours already: entities and tags are shared by the workspace
        elif kind == ENTITY and isinstance(label, str) and canonical_key(label):
            new_id = entity_node_id(canonical_key(label))
        elif kind == CATEGORY and isinstance(label, str) and canonical_key(label):
            new_id = category_node_id(label)
        elif kind == SECTION:
            new_id = f"imp:{cid}:{document_id}:{orig}"
        else:
            new_id = f"imp:{cid}:{orig}"
        mapping[orig] = new_id
        props = _props(n, NODE_RESERVED)
        props.setdefault("name", label if isinstance(label, str) else orig)
        props["source_id"] = orig
        rows.node(NodeRow(new_id, kind, props))
    has_parent: set[str] = set()
    for k, e in enumerate(edges):
        src = _edge_field(e, "source", "from", "src")
        dst = _edge_field(e, "target", "to", "dst")
        kind = _edge_field(e, "type", "relation", "label")
        if not all(isinstance(v, str) and v for v in (src, dst, kind)):
            raise GraphError(
                f"{name}.edges.json: edge {k} needs string 'source', 'target' and 'type'"
            )
        weight = e.get("weight", 1.0)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool):
            weight = 1.0
        s, t = _map_endpoint(mapping, src, cid, renames), _map_endpoint(mapping, dst, cid, renames)
        props = {
            k2: v
            for k2, v in e.items()
            if k2 not in EDGE_RESERVED | {"from", "to", "src", "dst", "relation", "label"}
        }
        rows.edge(EdgeRow(s, t, kind, float(weight), props))
        if kind in (CONTAINS, "parent_of"):
            has_parent.add(t)
    # Hang the document's top-level parts (no parent of their own) off its document node.
    for node_id, row in list(rows.nodes.items()):
        if row.type in (SECTION, *CHUNK_TYPES) and node_id not in has_parent:
            rows.edge(EdgeRow(doc_node, node_id, CONTAINS))
    doc = DocumentRecord(
        document_id=document_id,
        path=None,
        filename=filename,
        source="import",
        content_hash=content_hash,
        signature=signature(record),
        metadata=doc_meta,
        bytes=len(raw),
        chunk_count=len(chunks),
        language=language,
    )
    return {"doc": doc, "chunks": chunks, "vectors": vectors, "missing": missing, "rows": rows}


def _int(node: dict[str, Any], keys: Sequence[str], default: int) -> int:
    for k in keys:
        v = node.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return default


def _map_endpoint(mapping: dict[str, str], orig: str, cid: int, renames: dict[str, str]) -> str:
    found = mapping.get(orig)
    if found is not None:
        return found
    for old, new in renames.items():
        if orig.startswith(old):
            return new + orig[len(old) :]
    return orig if ":" in orig else f"imp:{cid}:{orig}"


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


# -- GraphML and Mermaid -----------------------------------------------------------------


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


__all__ = [
    "EmbeddingMismatch",
    "export_folder",
    "export_text",
    "import_folder",
    "to_graphml",
    "to_mermaid",
]
