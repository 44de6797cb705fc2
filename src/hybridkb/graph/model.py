"""Graph records, node id rules and the JSON shapes every front end prints.

In JSON a node is ``{"id", "type", ...properties}`` and an edge is
``{"source", "target", "type", "weight", ...properties}``; a path's length counts
edges. Node ids are plain strings: a chunk's node id is its ``chunk_id``, a
document's is ``storage.base.document_node_id(collection_id, document_id)``.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from ..results import Hit
from ..storage.base import document_node_id

__all__ = [
    "DIRECTIONS",
    "STRUCTURAL_EDGES",
    "ContextItem",
    "Edge",
    "GraphSearchResult",
    "GraphSearchResults",
    "Neighbor",
    "NeighborsResult",
    "Node",
    "Path",
    "PathsResult",
    "Subgraph",
    "TraverseResult",
    "category_node_id",
    "collection_node_id",
    "document_node_id",
    "entity_node_id",
    "section_node_id",
]

DIRECTIONS = ("in", "out", "both")

# Node types the ingest builder writes (imports may bring others, e.g. "code").
DOCUMENT, SECTION, CHUNK, ENTITY, CATEGORY = "document", "section", "chunk", "entity", "category"
# Node types whose id is a chunk_id (imports may call a chunk of source code "code").
CHUNK_TYPES = frozenset({CHUNK, "code"})
# Edge types the ingest builder writes; user links keep the type they are given.
CONTAINS, NEXT, MENTIONS, CATEGORIZED_AS, RELATED = (
    "contains",
    "next",
    "mentions",
    "categorized_as",
    "related",
)
# Edges that shape a document rather than relate it to something else.
STRUCTURAL_EDGES = frozenset({CONTAINS, "parent_of", NEXT, MENTIONS, CATEGORIZED_AS})

# Keys a node's or edge's properties may not use: they are the record's own fields.
NODE_RESERVED = frozenset({"id", "type"})
EDGE_RESERVED = frozenset({"source", "target", "type", "weight"})

_SLUG = re.compile(r"[^\w.\-/]+", re.UNICODE)


@functools.lru_cache(maxsize=1 << 16)
def slug(text: str) -> str:
    """Lower-case, NFKC, whitespace runs -> '-': the comparable form of a name.

    Remembered: ingest slugs every entity mention (~3 a chunk), and names repeat."""
    clean = unicodedata.normalize("NFKC", text).casefold().strip()
    return _SLUG.sub("-", clean).strip("-")


def _short_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def section_node_id(collection_id: int, document_id: str, path: str) -> str:
    """A section is local to its document; the heading path names it."""
    return f"sec:{collection_id}:{document_id}:{_short_hash(path)}"


def entity_node_id(key: str) -> str:
    """Entities are shared by every document of a workspace that mentions them."""
    return f"ent:{key}"


def category_node_id(name: str) -> str:
    """A tag category's node id: ``cat:`` and the tag's slug, so spellings of one tag meet."""
    return f"cat:{slug(name)}"


def collection_node_id(collection_id: int) -> str:
    """The collection itself is a category of each of its documents."""
    return f"coll:{collection_id}"


@dataclass
class Node:
    """A graph node: its id (see the module docstring for the id rules), type and properties."""

    id: str
    type: str
    properties: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """``{"id", "type", ...properties}``: properties flattened beside the record's own
        fields (a property named ``id`` or ``type`` is left out rather than overwrite them)."""
        out: dict[str, Any] = {"id": self.id, "type": self.type}
        out.update((k, v) for k, v in self.properties.items() if k not in NODE_RESERVED)
        return out


@dataclass
class Edge:
    """A directed, typed edge; one edge per (source, target, type), ``weight`` 1.0 unless set."""

    source: str
    target: str
    type: str
    weight: float = 1.0
    properties: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """``{"source", "target", "type", "weight", ...properties}``: properties flattened,
        those named like a field left out."""
        out: dict[str, Any] = {
            "source": self.source,
            "target": self.target,
            "type": self.type,
            "weight": self.weight,
        }
        out.update((k, v) for k, v in self.properties.items() if k not in EDGE_RESERVED)
        return out


@dataclass
class Neighbor:
    """One step from a node: the edge taken, which way, and the node reached."""

    edge_type: str
    direction: str  # "out": node -> neighbor; "in": neighbor -> node
    node: Node
    edge: Edge
    depth: int = 1

    def to_dict(self) -> dict[str, Any]:
        """``{"edge_type", "direction", "node", "edge", "depth"}``, node and edge as their dicts."""
        return {
            "edge_type": self.edge_type,
            "direction": self.direction,
            "node": self.node.to_dict(),
            "edge": self.edge.to_dict(),
            "depth": self.depth,
        }


@dataclass
class Path:
    """A walk through the graph: ``nodes[i]`` and ``nodes[i + 1]`` joined by ``edges[i]``."""

    nodes: list[Node]
    edges: list[Edge]

    @property
    def length(self) -> int:
        """The number of edges (a path of one node has length 0)."""
        return len(self.edges)

    def to_dict(self, *, key: str = "length") -> dict[str, Any]:
        """``{key: length, "nodes", "edges"}``; ``key`` is ``depth`` where the path leads to a
        node reached by a walk (traverse) and ``length`` elsewhere."""
        return {
            key: self.length,
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [e.to_dict() for e in self.edges],
        }


@dataclass
class Subgraph:
    """The nodes around a start node and the edges among them; ``truncated`` when a limit cut
    it short, ``depth_reached`` the farthest hop walked."""

    nodes: list[Node]
    edges: list[Edge]
    depth_reached: int
    truncated: bool = False

    @property
    def stats(self) -> dict[str, Any]:
        """``node_count``, ``edge_count``, ``depth_reached`` and ``truncated``, as front ends print
        them."""
        return {
            "node_count": len(self.nodes),
            "edge_count": len(self.edges),
            "depth_reached": self.depth_reached,
            "truncated": self.truncated,
        }

    def to_dict(self) -> dict[str, Any]:
        """``{"nodes", "edges", "stats"}``."""
        return {
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [e.to_dict() for e in self.edges],
            "stats": self.stats,
        }


@dataclass
class ContextItem:
    """A node the graph adds around a search seed. ``via`` names the node it hangs off."""

    edge_type: str
    direction: str
    node: Node
    depth: int
    via: str

    def to_dict(self) -> dict[str, Any]:
        """``{"edge_type", "direction", "node", "depth", "via"}``."""
        return {
            "edge_type": self.edge_type,
            "direction": self.direction,
            "node": self.node.to_dict(),
            "depth": self.depth,
            "via": self.via,
        }


@dataclass
class GraphSearchResult:
    """One seed hit of a graph search and the graph context around it."""

    seed: Hit
    context: list[ContextItem]
    source: str = "vector"  # which leg found the seed: vector | graph | both

    def to_dict(self) -> dict[str, Any]:
        """``{"seed": hit, "context": [...], "source"}``."""
        return {
            "seed": self.seed.to_dict(),
            "context": [c.to_dict() for c in self.context],
            "source": self.source,
        }


@dataclass
class NeighborsResult:
    """The start node of :meth:`Graph.neighbors` and the steps one edge away from it."""

    node: Node
    neighbors: list[Neighbor]

    def to_dict(self) -> dict[str, Any]:
        """``{"node", "neighbors"}``."""
        return {"node": self.node.to_dict(), "neighbors": [n.to_dict() for n in self.neighbors]}


@dataclass
class TraverseResult:
    """The start of a walk and one shortest path to each node reached, nearest first."""

    start: Node
    paths: list[Path]
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        """``{"node": start, "paths", "truncated"}``; each path carries its ``depth``."""
        return {
            "node": self.start.to_dict(),
            "paths": [p.to_dict(key="depth") for p in self.paths],
            "truncated": self.truncated,
        }


@dataclass
class PathsResult:
    """Paths between two nodes, shortest first; ``truncated`` when the limit left some out."""

    paths: list[Path]
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        """``{"paths", "truncated"}``; each path carries its ``length``."""
        return {"paths": [p.to_dict() for p in self.paths], "truncated": self.truncated}


@dataclass
class GraphSearchResults:
    """What :meth:`Graph.search` returns: the query, the strategy and the seeds in rank order."""

    query: str
    strategy: str
    results: list[GraphSearchResult]

    def to_dict(self) -> dict[str, Any]:
        """``{"query", "strategy", "results"}``."""
        return {
            "query": self.query,
            "strategy": self.strategy,
            "results": [r.to_dict() for r in self.results],
        }
