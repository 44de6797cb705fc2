"""Checks of the nodes and edges a user writes into the graph (``relate``, ``add_nodes``,
``add_edges``), turned into records or refused with a GraphError that says what to fix.

Pure functions, their own module as the metadata checks are (``metadata_check.py``):
they read no graph and no store, so the handle that writes stays about writing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import GraphError
from ..storage.base import NodeRow
from .build import clean_properties
from .model import EDGE_RESERVED, Edge, Node


def checked_edge_type(value: Any) -> str:
    """A user-given edge type, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise GraphError("edge type: expected a non-empty string such as 'related' or 'AMENDS'")
    return value.strip()


def checked_weight(value: Any) -> float:
    """A user-given edge weight: a finite number (not a bool)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise GraphError(f"weight: expected a number, got {value!r}")
    return float(value)


def is_chunk_id(value: str) -> bool:
    """Whether a node id has the shape of a chunk id (16 hex digits), which ingest owns."""
    return len(value) == 16 and all(c in "0123456789abcdef" for c in value)


def user_node_row(item: Node | Mapping[str, Any]) -> NodeRow:
    """The row of a node a user writes: an id and type of text, not a document, section or
    chunk node (those come from ingest)."""
    n = item if isinstance(item, Node) else node_from_dict(item)
    if not isinstance(n.id, str) or not n.id or not isinstance(n.type, str) or not n.type:
        raise GraphError("node: 'id' and 'type' must be non-empty strings")
    if n.id.startswith(("doc:", "sec:")) or is_chunk_id(n.id):
        raise GraphError(f"node {n.id!r}: document, section and chunk nodes come from ingest")
    return NodeRow(n.id, n.type, dict(n.properties))


def node_from_dict(d: Mapping[str, Any]) -> Node:
    """A node given as ``{"id", "type", ...properties}``."""
    if not isinstance(d, Mapping):
        raise GraphError("node: expected an object with 'id' and 'type'")
    return Node(d.get("id"), d.get("type"), clean_properties(d))  # type: ignore[arg-type]


def edge_from_dict(d: Mapping[str, Any]) -> Edge:
    """An edge given as ``{"source", "target", "type", "weight", ...properties}``, checked."""
    if not isinstance(d, Mapping):
        raise GraphError("edge: expected an object with 'source', 'target' and 'type'")
    src, dst = d.get("source"), d.get("target")
    if not isinstance(src, str) or not isinstance(dst, str) or not src or not dst:
        raise GraphError("edge: 'source' and 'target' must be node ids")
    return Edge(
        src,
        dst,
        checked_edge_type(d.get("type")),
        checked_weight(d.get("weight", 1.0)),
        clean_properties(d, EDGE_RESERVED),
    )
