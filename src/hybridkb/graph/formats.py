"""Graph export formats: GraphML (for Gephi, yEd, networkx) and Mermaid (for Markdown)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from xml.etree import ElementTree as ET

from .model import CATEGORY, CHUNK, DOCUMENT, ENTITY, SECTION, Edge, Node


def _graphml_type(values: list[Any]) -> str:
    if all(isinstance(v, bool) for v in values):
        return "boolean"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "long"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "double"
    return "string"


def _graphml_value(value: Any, kind: str) -> str:
    if kind == "boolean":
        return "true" if value else "false"
    if kind in ("long", "double"):
        return repr(value) if kind == "double" else str(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def to_graphml(nodes: Sequence[Node], edges: Sequence[Edge]) -> str:
    """GraphML with one typed <key> per property name (lists and objects as JSON text)."""
    root = ET.Element("graphml", xmlns="http://graphml.graphdrawing.org/xmlns")
    keys: dict[tuple[str, str], tuple[str, str]] = {}
    node_dicts = [n.to_dict() for n in nodes]
    edge_dicts = [e.to_dict() for e in edges]
    _declare_keys(root, keys, "node", node_dicts, ("id",))
    _declare_keys(root, keys, "edge", edge_dicts, ("id", "source", "target"))
    g = ET.SubElement(root, "graph", {"id": "G", "edgedefault": "directed"})
    for d in node_dicts:
        el = ET.SubElement(g, "node", {"id": d["id"]})
        _add_data(el, keys, "node", d, ("id",))
    known = {d["id"] for d in node_dicts}
    for n, d in enumerate(edge_dicts):
        if d["source"] not in known or d["target"] not in known:
            continue
        el = ET.SubElement(g, "edge", {"id": f"e{n}", "source": d["source"], "target": d["target"]})
        _add_data(el, keys, "edge", d, ("source", "target"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _declare_keys(
    root: ET.Element,
    keys: dict[tuple[str, str], tuple[str, str]],
    scope: str,
    items: list[dict[str, Any]],
    skip: tuple[str, ...],
) -> None:
    """Add a <key> for each property name of ``scope`` (node or edge) with a value, typed by
    its values, and record it in ``keys`` as (scope, name) -> (key id, type)."""
    values: dict[str, list[Any]] = {}
    for item in items:
        for k, v in item.items():
            if v is not None and k not in skip:
                values.setdefault(k, []).append(v)
    for k in sorted(values):
        kind = _graphml_type(values[k])
        key_id = f"{scope[0]}{len(keys)}"
        keys[(scope, k)] = (key_id, kind)
        ET.SubElement(root, "key", {"id": key_id, "for": scope, "attr.name": k, "attr.type": kind})


def _add_data(
    el: ET.Element,
    keys: dict[tuple[str, str], tuple[str, str]],
    scope: str,
    item: dict[str, Any],
    skip: tuple[str, ...],
) -> None:
    """A <data> child of ``el`` for each property of ``item`` with a value."""
    for k, v in item.items():
        if k not in skip and v is not None:
            key_id, kind = keys[(scope, k)]
            ET.SubElement(el, "data", {"key": key_id}).text = _graphml_value(v, kind)


_MERMAID_ESCAPES = {'"': "#quot;", "<": "#lt;", ">": "#gt;", "|": "#124;", "\n": " ", "`": "#96;"}
_MERMAID_STYLE = {
    DOCUMENT: "fill:#dbeafe,stroke:#1d4ed8",
    SECTION: "fill:#e0e7ff,stroke:#4338ca",
    CHUNK: "fill:#f3f4f6,stroke:#6b7280",
    ENTITY: "fill:#dcfce7,stroke:#15803d",
    CATEGORY: "fill:#fef3c7,stroke:#b45309",
}


def _mermaid_text(text: str, limit: int = 48) -> str:
    flat = " ".join(str(text).split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return "".join(_MERMAID_ESCAPES.get(ch, ch) for ch in flat)


def to_mermaid(nodes: Sequence[Node], edges: Sequence[Edge]) -> str:
    """A Mermaid flowchart; node ids become n0, n1, ... (labels carry name and type)."""
    alias = {n.id: f"n{i}" for i, n in enumerate(nodes)}
    lines = ["flowchart LR"]
    for n in nodes:
        name = n.properties.get("name") or n.id
        lines.append(
            f'    {alias[n.id]}["{_mermaid_text(name)}<br/><i>{_mermaid_text(n.type, 20)}</i>"]'
        )
    for e in edges:
        if e.source in alias and e.target in alias:
            lines.append(
                f"    {alias[e.source]} -->|{_mermaid_text(e.type, 30)}| {alias[e.target]}"
            )
    used = sorted({n.type for n in nodes} & set(_MERMAID_STYLE))
    for t in used:
        lines.append(f"    classDef {t} {_MERMAID_STYLE[t]}")
        members = ",".join(alias[n.id] for n in nodes if n.type == t)
        lines.append(f"    class {members} {t}")
    return "\n".join(lines) + "\n"


# -- folder export -----------------------------------------------------------------------
