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

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
from ..text.analysis import analyze, detect_language
from .build import RowSet
from .export import export_folder, export_text
from .extract import canonical_key
from .formats import to_graphml, to_mermaid
from .host import GraphView
from .model import (
    CATEGORY,
    CHUNK_TYPES,
    CONTAINS,
    DOCUMENT,
    EDGE_RESERVED,
    ENTITY,
    NODE_RESERVED,
    SECTION,
    category_node_id,
    collection_node_id,
    document_node_id,
    entity_node_id,
)

TEXT_KEYS = ("text", "content")
VECTOR_KEYS = ("embedding", "vector", "embeddings")
# Keys of a document node that describe the set itself, not the document's metadata.
DOCUMENT_NODE_KEYS = (
    "id",
    "type",
    "document_id",
    "collection",
    "collection_id",
    "name",
    "source",
    "filename",
)
# Other spellings of an edge's source, target and type, kept out of its properties.
EDGE_KEY_ALIASES = {"from", "to", "src", "dst", "relation", "label"}


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


@dataclass(frozen=True)
class DocumentHeader:
    """What a set's document node says about the document (the set's name by default)."""

    document_id: str
    filename: str
    metadata: dict[str, Any]
    old_collection_id: int | None  # set when the set is an export of ours


def _prepare(graph: GraphView, record: Any, folder: Path, name: str) -> dict[str, Any]:
    from ..ingest.pipeline import signature

    nodes_path = folder / f"{name}.nodes.json"
    edges_path = folder / f"{name}.edges.json"
    nodes = _read_list(nodes_path, "nodes")
    edges = _read_list(edges_path, "edges") if edges_path.is_file() else []
    vectors_by_id = _read_vectors(folder / f"{name}.parquet")
    raw = nodes_path.read_bytes() + (edges_path.read_bytes() if edges_path.is_file() else b"")
    content_hash = hashlib.sha256(raw).hexdigest()
    header = _read_header(nodes, name)
    chunk_nodes = _chunk_nodes(nodes, name)
    language = _language(record, chunk_nodes)
    rows = RowSet()
    mapping: dict[str, str] = {}
    chunks = _stage_chunks(record, header, content_hash, language, chunk_nodes, rows, mapping)
    vectors, missing = _given_vectors(chunk_nodes, vectors_by_id, record.dim)
    doc_node = document_node_id(record.id, header.document_id)
    _stage_other_nodes(nodes, record.id, header.document_id, doc_node, rows, mapping)
    renames = _renames(header.old_collection_id, record.id)
    has_parent = _stage_edges(edges, name, record.id, mapping, renames, rows)
    # Hang the document's top-level parts (no parent of their own) off its document node.
    for node_id, row in list(rows.nodes.items()):
        if row.type in (SECTION, *CHUNK_TYPES) and node_id not in has_parent:
            rows.edge(EdgeRow(doc_node, node_id, CONTAINS))
    doc = DocumentRecord(
        document_id=header.document_id,
        path=None,
        filename=header.filename,
        source="import",
        content_hash=content_hash,
        signature=signature(record),
        metadata=header.metadata,
        bytes=len(raw),
        chunk_count=len(chunks),
        language=language,
    )
    return {"doc": doc, "chunks": chunks, "vectors": vectors, "missing": missing, "rows": rows}


def _read_header(nodes: list[dict[str, Any]], name: str) -> DocumentHeader:
    """The document id, file name and metadata a set's document node gives (the last wins)."""
    doc_meta: dict[str, Any] = {"imported_from": name}
    document_id = name
    filename = f"{name}.nodes.json"
    old_cid: int | None = None
    for n in nodes:
        if n.get("type") == DOCUMENT:
            document_id = str(n.get("document_id") or document_id)
            doc_meta.update(_props(n, DOCUMENT_NODE_KEYS))
            if isinstance(n.get("filename"), str) and n["filename"]:
                filename = n["filename"]
            if isinstance(n.get("collection_id"), int):
                old_cid = n["collection_id"]  # an export of ours: re-point its doc: ids
    return DocumentHeader(document_id, filename, doc_meta, old_cid)


def _chunk_nodes(nodes: list[dict[str, Any]], name: str) -> list[tuple[int, dict[str, Any], str]]:
    """Check every node's id and type; return the chunk nodes with text, in chunk order.

    Each entry is (position in the file, node, text); the order is the node's
    ``chunk_index`` (or ``index``, ``order``), else its position.
    """
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
    return chunk_nodes


def _language(record: CollectionRecord, chunk_nodes: list[tuple[int, dict[str, Any], str]]) -> str:
    """The collection's language, or the one detected in the set's first 4,000 characters."""
    if record.language and record.language != "auto":
        return record.language
    return detect_language(" ".join(t for _, _, t in chunk_nodes)[:4000])


def _stage_chunks(
    record: CollectionRecord,
    header: DocumentHeader,
    content_hash: str,
    language: str,
    chunk_nodes: list[tuple[int, dict[str, Any], str]],
    rows: RowSet,
    mapping: dict[str, str],
) -> list[ChunkRecord]:
    """The chunk records of a set; add a graph node per chunk and map its id to the chunk_id."""
    cid = record.id
    chunks: list[ChunkRecord] = []
    offset = 0  # chunks are laid out as if joined by blank lines
    for index, (_pos, n, text) in enumerate(chunk_nodes):
        chunk_id = make_chunk_id(cid, header.document_id, content_hash, index)
        mapping[n["id"]] = chunk_id
        page = n.get("page") if isinstance(n.get("page"), int) else None
        section = n.get("section") if isinstance(n.get("section"), str) else None
        chunks.append(
            ChunkRecord(
                key=chunk_key(chunk_id),
                chunk_id=chunk_id,
                document_id=header.document_id,
                chunk_index=index,
                text=text,
                page=page,
                section=section,
                char_start=offset,
                char_end=offset + len(text),
                content_hash=hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
                language=language,
                terms=analyze(text, language),
                metadata=header.metadata,
                filename=header.filename,
                path=None,
            )
        )
        offset += len(text) + 2
        props = _props(n, NODE_RESERVED)
        props.update(
            {
                "name": props.get("name") or " ".join(text.split())[:60],
                "collection": record.name,
                "collection_id": cid,
                "document_id": header.document_id,
                "chunk_index": index,
                "source_id": n["id"],
                "preview": " ".join(text.split())[:160],
            }
        )
        rows.node(NodeRow(chunk_id, n["type"], props, chunk_id))
    return chunks


def _given_vectors(
    chunk_nodes: list[tuple[int, dict[str, Any], str]],
    vectors_by_id: dict[str, np.ndarray],
    dim: int,
) -> tuple[np.ndarray, list[int]]:
    """The set's own vectors, normalized, and the chunk indexes left to embed.

    A vector is used when it has the collection's dimension, is finite and not zero.
    """
    vectors = np.zeros((len(chunk_nodes), dim), dtype=np.float32)
    missing: list[int] = []
    for index, (_pos, n, _text) in enumerate(chunk_nodes):
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
    return vectors, missing


def _stage_other_nodes(
    nodes: list[dict[str, Any]],
    cid: int,
    document_id: str,
    doc_node: str,
    rows: RowSet,
    mapping: dict[str, str],
) -> None:
    """Add the set's non-chunk nodes under their workspace ids, recorded in ``mapping``."""
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
        new_id = _workspace_node_id(orig, kind, label, cid, document_id)
        mapping[orig] = new_id
        props = _props(n, NODE_RESERVED)
        props.setdefault("name", label if isinstance(label, str) else orig)
        props["source_id"] = orig
        rows.node(NodeRow(new_id, kind, props))


def _workspace_node_id(orig: str, kind: str, label: Any, cid: int, document_id: str) -> str:
    """The id an imported node gets: shared for entities and categories, else prefixed."""
    if kind in (ENTITY, CATEGORY) and orig.startswith(("ent:", "cat:")):
        return orig  # ours already: entities and tags are shared by the workspace
    if kind == ENTITY and isinstance(label, str) and canonical_key(label):
        return entity_node_id(canonical_key(label))
    if kind == CATEGORY and isinstance(label, str) and canonical_key(label):
        return category_node_id(label)
    if kind == SECTION:
        return f"imp:{cid}:{document_id}:{orig}"
    return f"imp:{cid}:{orig}"


def _renames(old_cid: int | None, cid: int) -> dict[str, str]:
    """Id prefixes of an export of ours to re-point at this collection."""
    if old_cid is None:
        return {}
    return {f"doc:{old_cid}:": f"doc:{cid}:", f"coll:{old_cid}": f"coll:{cid}"}


def _stage_edges(
    edges: list[dict[str, Any]],
    name: str,
    cid: int,
    mapping: dict[str, str],
    renames: dict[str, str],
    rows: RowSet,
) -> set[str]:
    """Add the set's edges between mapped ids; return the ids that got a parent."""
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
        props = {k2: v for k2, v in e.items() if k2 not in EDGE_RESERVED | EDGE_KEY_ALIASES}
        rows.edge(EdgeRow(s, t, kind, float(weight), props))
        if kind in (CONTAINS, "parent_of"):
            has_parent.add(t)
    return has_parent


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


__all__ = [
    "EmbeddingMismatch",
    "export_folder",
    "export_text",
    "import_folder",
    "to_graphml",
    "to_mermaid",
]
