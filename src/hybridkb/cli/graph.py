"""``hybridkb graph ...``: the knowledge-graph commands (a click group added to the main CLI).

Commands return an exit code like the rest of the CLI; a KBError (e.g. GraphError
for an unknown node) propagates to ``hybridkb.cli.commands.main``, which prints one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..agents.frontend import to_json
from ..agents.render import arrow, edge_line, node_line, path_line
from ..errors import ConfigError
from ..normalize import printable
from .common import echo

EPILOG = """\b
Node ids: a search hit's chunk_id is its chunk's node; its document_node
(doc:<collection_id>:<document_id>) is its document's. Entities are ent:<name>,
tag categories cat:<tag>, a collection coll:<id>. Use --json for machine output.
"""
DIRECTIONS = click.Choice(["in", "out", "both"])
STRATEGIES = click.Choice(["vector_first", "graph_first", "parallel", "vector_only", "graph_only"])


def _kb(ctx: click.Context, *, write: bool) -> Any:
    obj = ctx.find_root().obj
    opener = getattr(obj, "kb", None)
    if callable(opener):
        return opener(write=write)
    if obj is not None and hasattr(obj, "storage"):
        return obj
    raise click.UsageError("no knowledge base: run as `hybridkb graph ...`")


def _graph(ctx: click.Context, *, write: bool = False) -> Any:
    return _kb(ctx, write=write).graph


def _emit(data: Any) -> None:
    echo(to_json(data))


edge_type_option = click.option(
    "--edge-type",
    "edge_types",
    multiple=True,
    metavar="T",
    help="Follow only this edge type (repeatable).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group(name="graph", epilog=EPILOG)
def graph() -> None:
    """Query and edit the knowledge graph built from your documents."""


@graph.command(epilog=EPILOG)
@click.argument("node_id")
@edge_type_option
@click.option("--direction", type=DIRECTIONS, default="both", show_default=True)
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@json_option
@click.pass_context
def neighbors(
    ctx: click.Context,
    node_id: str,
    edge_types: tuple[str, ...],
    direction: str,
    limit: int,
    as_json: bool,
) -> int:
    """Nodes one edge away from NODE_ID."""
    result = _graph(ctx).neighbors(
        node_id, edge_types=edge_types or None, direction=direction, limit=limit
    )
    if as_json:
        _emit(result.to_dict())
        return 0
    echo(node_line(result.node))
    if not result.neighbors:
        echo("  no neighbors")
    for n in result.neighbors:
        echo(f"  {arrow(n.edge_type, out=n.direction == 'out')} {node_line(n.node)}")
    return 0


@graph.command(epilog=EPILOG)
@click.argument("node_id")
@edge_type_option
@click.option("--direction", type=DIRECTIONS, default="out", show_default=True)
@click.option("--max-depth", type=click.IntRange(0, 50), default=3, show_default=True)
@click.option("--limit", type=click.IntRange(1, 1_000_000), default=1000, show_default=True)
@json_option
@click.pass_context
def traverse(
    ctx: click.Context,
    node_id: str,
    edge_types: tuple[str, ...],
    direction: str,
    max_depth: int,
    limit: int,
    as_json: bool,
) -> int:
    """Walk from NODE_ID breadth-first; one path per node reached."""
    result = _graph(ctx).traverse(
        node_id,
        edge_types=edge_types or None,
        direction=direction,
        max_depth=max_depth,
        limit=limit,
    )
    if as_json:
        _emit(result.to_dict())
        return 0
    if not result.paths:
        echo("no nodes reached")
    for p in result.paths:
        echo(f"{p.length}  {path_line(p)}")
    return 0


@graph.command(epilog=EPILOG)
@click.argument("node_a")
@click.argument("node_b")
@edge_type_option
@click.option("--direction", type=DIRECTIONS, default="both", show_default=True)
@click.option("--max-depth", type=click.IntRange(0, 12), default=5, show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=10, show_default=True)
@json_option
@click.pass_context
def path(
    ctx: click.Context,
    node_a: str,
    node_b: str,
    edge_types: tuple[str, ...],
    direction: str,
    max_depth: int,
    limit: int,
    as_json: bool,
) -> int:
    """Paths from NODE_A to NODE_B, shortest first."""
    result = _graph(ctx).find_paths(
        node_a,
        node_b,
        edge_types=edge_types or None,
        direction=direction,
        max_depth=max_depth,
        limit=limit,
    )
    if as_json:
        _emit(result.to_dict())
        return 0
    if not result.paths:
        echo(f"no path within {max_depth} edges")
    for p in result.paths:
        echo(f"{p.length}  {path_line(p)}")
    return 0


@graph.command(epilog=EPILOG)
@click.argument("node_id")
@edge_type_option
@click.option("--max-depth", type=click.IntRange(0, 50), default=2, show_default=True)
@click.option("--node-limit", type=click.IntRange(1, 1_000_000), default=100, show_default=True)
@click.option("--edge-limit", type=click.IntRange(0, 1_000_000), default=200, show_default=True)
@json_option
@click.pass_context
def subgraph(
    ctx: click.Context,
    node_id: str,
    edge_types: tuple[str, ...],
    max_depth: int,
    node_limit: int,
    edge_limit: int,
    as_json: bool,
) -> int:
    """The nodes around NODE_ID and the edges among them."""
    result = _graph(ctx).subgraph(
        node_id,
        edge_types=edge_types or None,
        max_depth=max_depth,
        node_limit=node_limit,
        edge_limit=edge_limit,
    )
    if as_json:
        _emit(result.to_dict())
        return 0
    s = result.stats
    echo(
        f"{s['node_count']} nodes, {s['edge_count']} edges, depth {s['depth_reached']}"
        + (" (truncated)" if s["truncated"] else "")
    )
    for n in result.nodes:
        echo(f"  {node_line(n)}")
    for e in result.edges:
        echo(f"  {edge_line(e)}")
    return 0


@graph.command(epilog=EPILOG)
@click.argument("name")
@click.argument("query")
@click.option("--strategy", type=STRATEGIES, default="vector_first", show_default=True)
@click.option(
    "--depth", type=click.IntRange(0, 5), default=1, show_default=True, help="Context hops."
)
@click.option(
    "--limit", "-k", type=click.IntRange(1, 1000), default=5, show_default=True, help="Seeds."
)
@click.option("--neighbor-limit", type=click.IntRange(0, 1000), default=10, show_default=True)
@edge_type_option
@json_option
@click.pass_context
def search(
    ctx: click.Context,
    name: str,
    query: str,
    strategy: str,
    depth: int,
    limit: int,
    neighbor_limit: int,
    edge_types: tuple[str, ...],
    as_json: bool,
) -> int:
    """Search collection NAME ('*' = all) for QUERY; the graph adds each hit's context."""
    result = _graph(ctx).search(
        query,
        strategy=strategy,
        traverse_depth=depth,
        search_limit=limit,
        neighbor_limit=neighbor_limit,
        edge_types=edge_types or None,
        collections=None if name == "*" else [name],
    )
    if as_json:
        _emit(result.to_dict())
        return 0
    if not result.results:
        echo("no results")
    for r in result.results:
        h = r.seed
        where = " | ".join(printable(str(x)) for x in (h.collection, h.filename, h.section) if x)
        doc = printable(h.document_id)
        echo(f"{h.rank:>2}. {h.score:.4f}  [{r.source}] {where} (doc {doc}, chunk {h.chunk_id})")
        flat = " ".join(h.text.split())
        echo(f"    {flat[:240]}{' …' if len(flat) > 240 else ''}")
        for c in r.context:
            echo(f"      {arrow(c.edge_type, out=c.direction == 'out')} {node_line(c.node)}")
    return 0


@graph.command(epilog=EPILOG)
@click.argument("name")
@click.option("--node", "node_id", metavar="NODE_ID", help="Export the subgraph around this node.")
@click.option("--max-depth", type=click.IntRange(0, 50), default=2, show_default=True)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["graphml", "mermaid", "json"]),
    required=True,
    help="json writes <doc>.nodes.json/.edges.json/.parquet sets into --output (a folder).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="File (folder for json); default stdout.",
)
@click.option(
    "--node-limit", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True
)
@click.option(
    "--edge-limit", type=click.IntRange(0, 10_000_000), default=1_000_000, show_default=True
)
@click.pass_context
def export(
    ctx: click.Context,
    name: str,
    node_id: str | None,
    max_depth: int,
    fmt: str,
    output: Path | None,
    node_limit: int,
    edge_limit: int,
) -> int:
    """Export the graph of collection NAME (or the subgraph around --node)."""
    kb = _kb(ctx, write=False)
    g = kb.graph
    if fmt == "json":
        if output is None:
            raise ConfigError("--format json writes a folder; pass --output FOLDER")
        if node_id is not None:
            raise ConfigError("--format json exports whole documents; drop --node")
        written = g.export_folder(name, output)
        echo(f"wrote {len(written)} files to {output}", err=True)
        return 0
    if node_id is None:
        kb.describe(name)  # an unknown collection fails here (served to a client too)
    text = g.export(
        collection=None if node_id else name,
        node=node_id,
        max_depth=max_depth,
        format=fmt,
        node_limit=node_limit,
        edge_limit=edge_limit,
    )
    if output is None:
        echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        echo(f"wrote {output}", err=True)
    return 0


@graph.command(name="import", epilog=EPILOG)
@click.argument("name")
@click.argument("folder", type=click.Path(path_type=Path))
@json_option
@click.pass_context
def import_(ctx: click.Context, name: str, folder: Path, as_json: bool) -> int:
    """Import <doc>.nodes.json/.edges.json/.parquet sets from FOLDER into collection NAME."""
    report = _graph(ctx, write=True).import_folder(name, folder)
    if as_json:
        _emit(report)
    else:
        for item in report["added"]:
            echo(f"added      {item['name']} ({item['chunks']} chunks, doc {item['document_id']})")
        for item in report["unchanged"]:
            echo(f"unchanged  {item['name']} (doc {item['document_id']})")
        for item in report["failed"]:
            echo(f"failed     {item['name']}: {item['error']}")
        echo(
            f"{len(report['added'])} added, {len(report['unchanged'])} unchanged, "
            f"{len(report['failed'])} failed; {report['reembedded']} chunks embedded here"
        )
    return 1 if report["failed"] else 0


@graph.command(epilog=EPILOG)
@json_option
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> int:
    """Node and edge counts of the workspace's graph, by type."""
    s = _graph(ctx).stats()
    if as_json:
        _emit(s)
        return 0
    echo(f"{s['nodes']} nodes, {s['edges']} edges (workspace {s['workspace']})")
    for kind, n in s["node_types"].items():
        echo(f"  node {kind:<16}{n:>10}")
    for kind, n in s["edge_types"].items():
        echo(f"  edge {kind:<16}{n:>10}")
    return 0


@graph.command(epilog=EPILOG)
@click.argument("source")
@click.argument("target")
@click.option("--type", "edge_type", default="related", show_default=True)
@click.option("--weight", type=float, default=1.0, show_default=True)
@click.option("--properties", metavar="JSON", help="Edge properties as a JSON object.")
@json_option
@click.pass_context
def relate(
    ctx: click.Context,
    source: str,
    target: str,
    edge_type: str,
    weight: float,
    properties: str | None,
    as_json: bool,
) -> int:
    """Link SOURCE to TARGET (both existing nodes); repeating it changes nothing."""
    props = None
    if properties is not None:
        try:
            props = json.loads(properties)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--properties: not valid JSON ({exc.msg})") from exc
        if not isinstance(props, dict):
            raise ConfigError("--properties: expected a JSON object")
    edge = _graph(ctx, write=True).relate(
        source, target, edge_type, weight=weight, properties=props
    )
    if as_json:
        _emit(edge.to_dict())
    else:
        echo(edge_line(edge))
    return 0


@graph.command(epilog=EPILOG)
@click.argument("name")
@click.pass_context
def rebuild(ctx: click.Context, name: str) -> int:
    """Re-derive the graph of collection NAME from its stored chunks."""
    count = _graph(ctx, write=True).rebuild(name)
    echo(f"rebuilt the graph of {count} document{'s' if count != 1 else ''}")
    return 0
