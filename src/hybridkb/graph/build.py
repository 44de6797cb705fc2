"""Graph rows for one document, derived at ingest from its chunks (no LLM).

document -contains-> section -contains-> sub-section ... -contains-> chunk
chunk -next-> chunk (reading order); chunk -mentions-> entity
document -categorized_as-> the collection and each tag in ``metadata["tags"]``
document -TYPE-> target for each entry of ``metadata["graph_links"]``
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import GraphError
from ..storage.base import ChunkRecord, CollectionRecord, DocumentRecord, EdgeRow, NodeRow
from .extract import EntityExtractor, resolve_counted
from .model import (
    CATEGORIZED_AS,
    CATEGORY,
    CHUNK,
    CONTAINS,
    DOCUMENT,
    EDGE_RESERVED,
    ENTITY,
    MENTIONS,
    NEXT,
    NODE_RESERVED,
    SECTION,
    category_node_id,
    collection_node_id,
    document_node_id,
    entity_node_id,
    section_node_id,
)

PREVIEW_CHARS = 160
SECTION_SEP = " > "
TAG_KEYS = ("tags", "tag", "categories", "category")


class RowSet:
    """Nodes deduplicated by id, edges by (source, target, type): later rows update earlier."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeRow] = {}
        self.edges: dict[tuple[str, str, str], EdgeRow] = {}

    def node(self, row: NodeRow) -> None:
        """Add a node row; a second row of the same id adds its properties to the first."""
        found = self.nodes.get(row.id)
        if found is None:
            self.nodes[row.id] = row
        else:
            found.properties.update(row.properties)

    def edge(self, row: EdgeRow) -> None:
        """Add an edge row; a second row of the same (source, target, type) sets its weight and
        adds its properties."""
        key = (row.source, row.target, row.type)
        found = self.edges.get(key)
        if found is None:
            self.edges[key] = row
        else:
            found.weight = row.weight
            found.properties.update(row.properties)


def tags_of(metadata: Mapping[str, Any]) -> list[str]:
    """Tags from metadata: a list, or one comma-separated string, under tags/categories."""
    out: list[str] = []
    for key in TAG_KEYS:
        value = metadata.get(key)
        if isinstance(value, str):
            out.extend(t.strip() for t in value.split(","))
        elif isinstance(value, (list, tuple)):
            out.extend(str(t).strip() for t in value if isinstance(t, (str, int, float)))
    return [t for t in dict.fromkeys(out) if t]


def resolve_target(
    target: str,
    coll: CollectionRecord,
    collection: str | None,
    find_collection: Callable[[str], int | None],
) -> str:
    """A link target: a node id when it has a ':' (``doc:1:x``, ``ent:itaa-1997``), else the id
    of a document in this collection (or in ``collection``). Chunk ids go in ``"node"``."""
    if collection is not None:
        cid = find_collection(collection)
        if cid is None:
            raise GraphError(
                f"graph_links: collection {collection!r} not found; create it first or drop "
                "'collection' to link within this collection"
            )
        return document_node_id(cid, target)
    if ":" in target:
        return target
    return document_node_id(coll.id, target)


def parse_links(
    value: Any, coll: CollectionRecord, find_collection: Callable[[str], int | None]
) -> list[tuple[str, str, float, dict[str, Any]]]:
    """``graph_links`` metadata -> (type, target node id, weight, properties)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise GraphError('graph_links: expected a list of {"type", "target"} objects')
    return [_parse_link(n, link, coll, find_collection) for n, link in enumerate(value)]


def _parse_link(
    n: int, link: Any, coll: CollectionRecord, find_collection: Callable[[str], int | None]
) -> tuple[str, str, float, dict[str, Any]]:
    """Entry ``n`` of ``graph_links``, checked, with its target resolved to a node id."""
    if not isinstance(link, Mapping):
        raise GraphError(f"graph_links[{n}]: expected an object with 'type' and 'target'")
    kind, target, node = link.get("type"), link.get("target"), link.get("node")
    if not isinstance(kind, str) or not kind.strip():
        raise GraphError(f"graph_links[{n}]: 'type' must be a non-empty string, e.g. \"AMENDS\"")
    _check_link_end(n, target, node)
    props = link.get("properties") or {}
    if not isinstance(props, Mapping):
        raise GraphError(f"graph_links[{n}]: 'properties' must be an object")
    weight = link.get("weight", 1.0)
    if not isinstance(weight, (int, float)) or isinstance(weight, bool):
        raise GraphError(f"graph_links[{n}]: 'weight' must be a number")
    collection = link.get("collection")
    if collection is not None and not isinstance(collection, str):
        raise GraphError(f"graph_links[{n}]: 'collection' must be a collection name")
    if node is not None:
        resolved = node.strip()
    else:
        resolved = resolve_target(str(target).strip(), coll, collection, find_collection)
    clean = {str(k): v for k, v in props.items() if k not in EDGE_RESERVED}
    return (kind.strip(), resolved, float(weight), clean)


def _check_link_end(n: int, target: Any, node: Any) -> None:
    """A link names one end: ``node`` (any node id) or ``target`` (a document id)."""
    if node is not None:
        if not isinstance(node, str) or not node.strip() or target is not None:
            raise GraphError(f"graph_links[{n}]: 'node' must be one node id (and no 'target')")
    elif not isinstance(target, str) or not target.strip():
        raise GraphError(
            f"graph_links[{n}]: needs 'target' (a document id) or 'node' (any node id)"
        )


def document_node(coll: CollectionRecord, doc: DocumentRecord) -> NodeRow:
    """The node of a document: named by its metadata ``title``, else its filename, else its id."""
    meta = doc.metadata or {}
    title = meta.get("title") if isinstance(meta.get("title"), str) else None
    props: dict[str, Any] = {
        "name": title or doc.filename or doc.document_id,
        "collection": coll.name,
        "collection_id": coll.id,
        "document_id": doc.document_id,
        "filename": doc.filename,
        "source": doc.source,
    }
    return NodeRow(document_node_id(coll.id, doc.document_id), DOCUMENT, props)


def document_rows(
    coll: CollectionRecord,
    doc: DocumentRecord,
    chunks: Sequence[ChunkRecord],
    *,
    extractors: Iterable[EntityExtractor],
    aliases: Mapping[str, str],
    find_collection: Callable[[str], int | None],
    structure: bool = True,
) -> RowSet:
    """Every node and edge one document contributes. ``structure=False`` keeps only the
    document node, its categories and its links (an import brings its own structure)."""
    rows = RowSet()
    doc_row = document_node(coll, doc)
    doc_id = doc_row.id
    rows.node(doc_row)
    _add_categories(rows, coll, doc, doc_id)
    for kind, target, weight, props in parse_links(
        (doc.metadata or {}).get("graph_links"), coll, find_collection
    ):
        rows.edge(EdgeRow(doc_id, target, kind, weight, props))
    if not structure:
        return rows
    extractors = list(extractors)
    ordered = sorted(chunks, key=lambda c: c.chunk_index)
    previous: str | None = None
    for chunk in ordered:
        parent = _add_sections(rows, coll, doc, chunk, doc_id)
        rows.node(_chunk_node(coll, doc, chunk))
        rows.edge(EdgeRow(parent, chunk.chunk_id, CONTAINS, chunk_id=chunk.chunk_id))
        if previous is not None:
            rows.edge(EdgeRow(previous, chunk.chunk_id, NEXT, chunk_id=chunk.chunk_id))
        previous = chunk.chunk_id
        _add_mentions(rows, chunk, extractors, aliases)
    return rows


def _add_categories(rows: RowSet, coll: CollectionRecord, doc: DocumentRecord, doc_id: str) -> None:
    """The document is categorized as its collection and as each of its tags."""
    coll_id = collection_node_id(coll.id)
    rows.node(
        NodeRow(
            coll_id, CATEGORY, {"name": coll.name, "kind": "collection", "collection_id": coll.id}
        )
    )
    rows.edge(EdgeRow(doc_id, coll_id, CATEGORIZED_AS))
    for tag in tags_of(doc.metadata or {}):
        cat = category_node_id(tag)
        rows.node(NodeRow(cat, CATEGORY, {"name": tag, "kind": "tag"}))
        rows.edge(EdgeRow(doc_id, cat, CATEGORIZED_AS))


def _add_sections(
    rows: RowSet, coll: CollectionRecord, doc: DocumentRecord, chunk: ChunkRecord, doc_id: str
) -> str:
    """The section nodes on a chunk's section path, each containing the next; return the
    id of the innermost (the document's when the chunk has no section)."""
    parent = doc_id
    if not chunk.section:
        return parent
    parts = [p.strip() for p in chunk.section.split(SECTION_SEP.strip()) if p.strip()]
    for depth in range(len(parts)):
        path = SECTION_SEP.join(parts[: depth + 1])
        sec = section_node_id(coll.id, doc.document_id, path)
        rows.node(
            NodeRow(
                sec,
                SECTION,
                {
                    "name": parts[depth],
                    "path": path,
                    "level": depth + 1,
                    "collection": coll.name,
                    "document_id": doc.document_id,
                },
                chunk.chunk_id,
            )
        )
        rows.edge(EdgeRow(parent, sec, CONTAINS, chunk_id=chunk.chunk_id))
        parent = sec
    return parent


def _chunk_node(coll: CollectionRecord, doc: DocumentRecord, chunk: ChunkRecord) -> NodeRow:
    flat = " ".join(chunk.text.split())  # once for both previews
    return NodeRow(
        chunk.chunk_id,
        CHUNK,
        {
            "name": _shortened(flat, 60),
            "collection": coll.name,
            "collection_id": coll.id,
            "document_id": doc.document_id,
            "chunk_index": chunk.chunk_index,
            "page": chunk.page,
            "section": chunk.section,
            "filename": chunk.filename,
            "preview": _shortened(flat, PREVIEW_CHARS),
        },
        chunk.chunk_id,
    )


def _add_mentions(
    rows: RowSet,
    chunk: ChunkRecord,
    extractors: Sequence[EntityExtractor],
    aliases: Mapping[str, str],
) -> None:
    """The entities the extractors find in a chunk, each mentioned as often as it occurs."""
    entities = []
    for extractor in extractors:
        entities.extend(extractor.extract(chunk.text))
    for ent, count in resolve_counted(entities, aliases):
        node = entity_node_id(ent.key)
        rows.node(NodeRow(node, ENTITY, {"name": ent.name, "kind": ent.kind}, chunk.chunk_id))
        rows.edge(
            EdgeRow(
                chunk.chunk_id,
                node,
                MENTIONS,
                float(count),
                {"surface": ent.surface},
                chunk.chunk_id,
            )
        )


def _shortened(flat: str, limit: int) -> str:
    """A text whose whitespace runs are single spaces, cut to ``limit`` characters."""
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def clean_properties(
    props: Mapping[str, Any] | None, reserved: frozenset[str] = NODE_RESERVED
) -> dict[str, Any]:
    """User properties as a plain dict with string keys, the ``reserved`` ones (the record's own
    fields) left out.

    Raises:
        GraphError: ``props`` is not a mapping.
    """
    if props is None:
        return {}
    if not isinstance(props, Mapping):
        raise GraphError("properties: expected an object")
    return {str(k): v for k, v in props.items() if str(k) not in reserved}
