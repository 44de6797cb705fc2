"""The graph page: a node's neighbourhood, drawn by the page's script (SVG, a small
force layout, no library), listed as a table for keyboards and screen readers, each
edge with where it came from.

The neighbourhood is the engine's ``kb.graph.subgraph`` one hop deep, capped
(``NODE_LIMIT``, ``EDGE_LIMIT``), so a hub node of a 100k-chunk collection costs the
same as a leaf; expanding a node asks for its own neighbourhood and merges it. The page
carries the neighbourhood it starts from, so it draws without a second request.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..agents.render import clip
from ..errors import GraphError
from .common import Problem, config_of, page, scalar_text

__all__ = ["graph_data", "graph_page", "neighbourhood"]

NODE_LIMIT = 40
EDGE_LIMIT = 120
LABEL_CHARS = 48
_LABEL_KEYS = ("name", "title", "filename", "heading", "section", "text")


def _label(node: Any) -> str:
    props = node.properties
    for key in _LABEL_KEYS:
        value = props.get(key)
        if isinstance(value, str) and value.strip():
            return clip(" ".join(value.split()), LABEL_CHARS)
    return clip(node.id, LABEL_CHARS)


def _provenance(edge: Any) -> str:
    """Where an edge came from, for people: its properties, else its kind."""
    props = {k: v for k, v in edge.properties.items() if v not in (None, "", [], {})}
    if not props:
        return "made with its document"
    return "; ".join(f"{k}: {clip(scalar_text(v), 80)}" for k, v in sorted(props.items()))


def _edge_types(raw: str) -> list[str] | None:
    types = [t for t in (s.strip() for s in raw.split(",")) if t]
    return types or None


def neighbourhood(request: Request, node_id: str, types: list[str] | None) -> dict[str, Any]:
    """The capped neighbourhood of ``node_id`` as the page's script draws it.

    The first ones are read from their own rows; then the whole graph is loaded in the
    background (``prepare_graph``), after the answer, so the next views and expansions
    answer from memory (a few ms instead of a hundred or two on 100k chunks)."""
    kb = config_of(request).kb
    try:
        sub = kb.graph.subgraph(
            node_id, edge_types=types, max_depth=1, node_limit=NODE_LIMIT, edge_limit=EDGE_LIMIT
        )
    except GraphError as exc:
        raise Problem(str(exc), 404) from None
    finally:
        kb.prepare_graph()
    return {
        "center": node_id,
        "nodes": [
            {
                "id": n.id,
                "type": n.type,
                "label": _label(n),
                "properties": {k: clip(scalar_text(v), 200) for k, v in n.properties.items()},
            }
            for n in sub.nodes
        ],
        "edges": [
            {
                "source": e.source,
                "target": e.target,
                "type": e.type,
                "weight": e.weight,
                "provenance": _provenance(e),
            }
            for e in sub.edges
        ],
        "truncated": sub.truncated,
    }


def _start(request: Request) -> str | None:
    """The node asked for, else the first collection's node."""
    node = request.query_params.get("node", "").strip()
    if node:
        return node
    kb = config_of(request).kb
    names = kb.collection_names()
    return f"coll:{kb.record(names[0]).id}" if names else None


def graph_page(request: Request) -> Response:
    """``/graph?node=ID&types=a,b``: the page with the neighbourhood it starts from in it
    (as ``/graph.json`` gives it, or the engine's message), so its script draws at once
    instead of asking for it after the page has loaded (one round trip less); expanding
    a node asks ``/graph.json``."""
    start = _start(request)
    types = _edge_types(request.query_params.get("types", ""))
    initial: dict[str, Any] | None = None
    if start:
        try:
            initial = neighbourhood(request, start, types)
        except Problem as exc:
            initial = {"error": str(exc)}
    return page(request, "graph.html", title="Graph", start=start or "", initial=initial)


def graph_data(request: Request) -> Response:
    """``/graph.json?node=ID&types=a,b``: one neighbourhood, for expanding a node."""
    node = request.query_params.get("node", "").strip()
    if not node:
        raise Problem("node: give a node id")
    types = _edge_types(request.query_params.get("types", ""))
    return JSONResponse(neighbourhood(request, node, types))
