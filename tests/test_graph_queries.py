"""Graph queries on hand-built graphs: cycles, self-loops, disconnected parts, bounds."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from internals import local, sql_rows

import hybridkb
from hybridkb.errors import GraphError
from hybridkb.graph import queries
from hybridkb.graph.queries import MemGraph
from hybridkb.storage.base import Connection


@pytest.fixture
def gkb(tmp_path: Path) -> Iterator[hybridkb.KnowledgeBase]:
    with hybridkb.connect(tmp_path / "g.duckdb", model="fake") as kb:
        yield local(kb)


def build(
    kb: hybridkb.KnowledgeBase, edges: list[tuple[str, str, str]], extra: tuple[str, ...] = ()
) -> None:
    ids = sorted({n for s, t, _ in edges for n in (s, t)} | set(extra))
    kb.graph.add_nodes([{"id": i, "type": "concept", "name": i.upper()} for i in ids])
    kb.graph.add_edges([{"source": s, "target": t, "type": e} for s, t, e in edges])


# a -> b -> c -> a (cycle), c -> d, d -> d (self-loop); x - y apart; z alone
SHAPE = [
    ("a", "b", "r"),
    ("b", "c", "r"),
    ("c", "a", "r"),
    ("c", "d", "s"),
    ("d", "d", "r"),
    ("x", "y", "r"),
]


def test_neighbors_by_direction_and_type(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE, extra=("z",))
    g = gkb.graph
    out = g.neighbors("c", direction="out")
    assert sorted((n.edge_type, n.node.id) for n in out.neighbors) == [("r", "a"), ("s", "d")]
    assert {n.direction for n in out.neighbors} == {"out"}
    inn = g.neighbors("c", direction="in")
    assert [(n.node.id, n.direction) for n in inn.neighbors] == [("b", "in")]
    both = g.neighbors("c")
    assert sorted(n.node.id for n in both.neighbors) == ["a", "b", "d"]
    assert [n.node.id for n in g.neighbors("c", edge_types=["s"]).neighbors] == ["d"]
    assert len(g.neighbors("c", limit=1).neighbors) == 1
    assert g.neighbors("z").neighbors == []


def test_self_loop_is_listed_once(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    loops = [n for n in gkb.graph.neighbors("d").neighbors if n.node.id == "d"]
    assert len(loops) == 1
    assert [n.node.id for n in gkb.graph.neighbors("d", direction="in").neighbors].count("d") == 1


def test_neighbors_json_shape(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    data = gkb.graph.neighbors("a").to_dict()
    assert data["node"] == {"id": "a", "type": "concept", "name": "A"}
    first = data["neighbors"][0]
    assert set(first) >= {"edge_type", "direction", "node"}
    assert set(first["node"]) >= {"id", "type"}
    assert set(first["edge"]) >= {"source", "target", "type", "weight"}


def test_traverse_stops_at_cycles_and_depth(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    res = gkb.graph.traverse("a", max_depth=10)
    reached = {p.nodes[-1].id: p for p in res.paths}
    assert set(reached) == {"b", "c", "d"}  # never back to a, never loops on d
    assert reached["d"].length == 3
    assert [n.id for n in reached["d"].nodes] == ["a", "b", "c", "d"]
    assert all(p.length == len(p.nodes) - 1 for p in res.paths)
    shallow = gkb.graph.traverse("a", max_depth=1)
    assert [p.nodes[-1].id for p in shallow.paths] == ["b"]
    assert gkb.graph.traverse("a", max_depth=0).paths == []
    limited = gkb.graph.traverse("a", max_depth=10, limit=2)
    assert len(limited.paths) == 2 and limited.truncated
    data = res.to_dict()
    assert set(data["paths"][0]) == {"depth", "nodes", "edges"}


def test_traverse_in_direction_and_disconnected(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    back = gkb.graph.traverse("d", direction="in", max_depth=5)
    assert {p.nodes[-1].id for p in back.paths} == {"a", "b", "c"}
    assert {p.nodes[-1].id for p in gkb.graph.traverse("x", direction="both").paths} == {"y"}


def test_find_paths_shortest_first(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE + [("a", "d", "t")])
    res = gkb.graph.find_paths("a", "d", max_depth=5)
    lengths = [p.length for p in res.paths]
    assert lengths == sorted(lengths)
    assert lengths[0] == 1
    seqs = [tuple(n.id for n in p.nodes) for p in res.paths]
    assert len(seqs) == len(set(seqs)) or len(
        {tuple((e.source, e.target, e.type) for e in p.edges) for p in res.paths}
    ) == len(seqs)
    for p in res.paths:  # simple paths: no node twice
        ids = [n.id for n in p.nodes]
        assert len(ids) == len(set(ids)) and ids[0] == "a" and ids[-1] == "d"
    directed = gkb.graph.find_paths("a", "d", direction="out", edge_types=["r", "s"])
    assert [[n.id for n in p.nodes] for p in directed.paths] == [["a", "b", "c", "d"]]
    data = res.to_dict()
    assert set(data["paths"][0]) == {"length", "nodes", "edges"}


def test_find_paths_none_between_parts_and_to_self(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    assert gkb.graph.find_paths("a", "x").paths == []
    assert gkb.graph.find_paths("a", "c", max_depth=1, direction="out").paths == []
    same = gkb.graph.find_paths("a", "a")
    assert [p.length for p in same.paths] == [0]
    assert gkb.graph.shortest_path("a", "x") is None
    assert gkb.graph.shortest_path("b", "a", direction="out").length == 2


def test_subgraph_limits_and_stats(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    sub = gkb.graph.subgraph("a", max_depth=2)
    assert {n.id for n in sub.nodes} == {"a", "b", "c", "d"}
    assert {(e.source, e.target) for e in sub.edges} == {
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
        ("c", "d"),
        ("d", "d"),
    }
    assert sub.stats == {"node_count": 4, "edge_count": 5, "depth_reached": 2, "truncated": False}
    small = gkb.graph.subgraph("a", max_depth=3, node_limit=2, edge_limit=1)
    assert (
        small.stats["node_count"] == 2
        and small.stats["edge_count"] <= 1
        and small.stats["truncated"]
    )
    assert set(sub.to_dict()) == {"nodes", "edges", "stats"}


def test_unknown_node_and_bad_arguments_raise_graph_error(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    g = gkb.graph
    with pytest.raises(GraphError, match="unknown node 'nope'"):
        g.neighbors("nope")
    for call in (
        lambda: g.traverse("nope"),
        lambda: g.find_paths("a", "nope"),
        lambda: g.subgraph("nope"),
        lambda: g.neighbors("a", direction="sideways"),
        lambda: g.neighbors("a", limit=0),
        lambda: g.traverse("a", max_depth=-1),
        lambda: g.relate("a", "nope"),
        lambda: g.add_edges([{"source": "a", "target": "ghost", "type": "r"}]),
        lambda: g.relate("a", "b", ""),
    ):
        with pytest.raises(GraphError):
            call()


def test_edge_upsert_is_idempotent(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    g = gkb.graph
    before = g.stats()["edges"]
    g.relate("a", "x", "related", weight=2.0)
    g.relate("a", "x", "related", weight=3.0, properties={"note": "n"})
    g.add_edges([{"source": "a", "target": "x", "type": "related", "weight": 3.0, "note": "n"}])
    assert g.stats()["edges"] == before + 1
    edges = [n.edge for n in g.neighbors("a", edge_types="related").neighbors]
    assert len(edges) == 1 and edges[0].weight == 3.0 and edges[0].properties == {"note": "n"}
    (count,) = sql_rows(
        gkb, "SELECT count(*) FROM hybridkb_graph_edges WHERE source = 'a' AND target = 'x'"
    )[0]
    assert count == 1
    assert g.unrelate("a", "x", "related") is True
    assert g.unrelate("a", "x", "related") is False
    assert g.stats()["edges"] == before


def test_removing_a_user_node_prunes_its_edges(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    assert gkb.graph.remove_node("d") is True
    assert not gkb.graph.has_node("d")
    assert all(n.node.id != "d" for n in gkb.graph.neighbors("c").neighbors)
    with pytest.raises(GraphError):
        gkb.graph.neighbors("d")


def test_memory_matches_tables_after_edits(gkb: hybridkb.KnowledgeBase, tmp_path: Path) -> None:
    build(gkb, SHAPE)
    gkb.graph.neighbors("a")  # load the in-memory copy, then keep editing
    gkb.graph.relate("a", "y", "r")
    gkb.graph.remove_node("d")
    gkb.graph.add_node("w", "concept", {"name": "W"})
    gkb.graph.relate("w", "a", "r")
    live = _edge_set(gkb.graph.memgraph())
    fresh = gkb.graph.store
    fresh.graphs.clear()
    assert _edge_set(gkb.graph.memgraph()) == live


def test_rolled_back_write_does_not_reach_memory(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    gkb.graph.neighbors("a")
    store = gkb.graph.store

    def failing(con: Connection) -> None:
        store.sql.upsert_user_edges(con, gkb.workspace, [])
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store.write(
            gkb.workspace, failing, lambda g: g.add_edges([("a", "z9", "r", 1.0, None, 0, "")])
        )
    gkb.graph.relate("a", "x", "r")  # a later write from the same version
    assert "z9" not in {n.node.id for n in gkb.graph.neighbors("a").neighbors}
    assert "x" in {n.node.id for n in gkb.graph.neighbors("a").neighbors}


def test_another_workspace_sees_nothing(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    other = gkb.in_workspace("other")
    with pytest.raises(GraphError):
        other.graph.neighbors("a")
    assert other.graph.stats()["nodes"] == 0
    assert len(gkb.storage.hooks) == 1  # one hook per storage, however many workspaces


def _edge_set(g: MemGraph) -> set[tuple[str, str, str]]:
    return {
        (g.ids[g.esrc[e]], g.ids[g.edst[e]], g.etype[e])
        for e, p in enumerate(g.eprov)
        if p is not None
    }


# -- properties against a plain reference -----------------------------------------------


def _bfs_dist(adj: dict[str, set[str]], a: str) -> dict[str, int]:
    dist = {a: 0}
    q = deque([a])
    while q:
        x = q.popleft()
        for y in adj.get(x, ()):
            if y not in dist:
                dist[y] = dist[x] + 1
                q.append(y)
    return dist


edges_strategy = st.lists(
    st.tuples(st.integers(0, 7), st.integers(0, 7), st.sampled_from(["p", "q"])),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(edges=edges_strategy, a=st.integers(0, 7), b=st.integers(0, 7))
def test_memgraph_matches_reference_bfs(edges: list[tuple[int, int, str]], a: int, b: int) -> None:
    g = MemGraph()
    names = [f"n{i}" for i in range(8)]
    g.add_nodes([(n, "t", None, 0, "") for n in names])
    g.add_edges([(f"n{s}", f"n{t}", e, 1.0, None, 0, "") for s, t, e in edges])
    out_adj: dict[str, set[str]] = {}
    und_adj: dict[str, set[str]] = {}
    for s, t, _ in edges:
        out_adj.setdefault(f"n{s}", set()).add(f"n{t}")
        und_adj.setdefault(f"n{s}", set()).add(f"n{t}")
        und_adj.setdefault(f"n{t}", set()).add(f"n{s}")
    ia, ib = g.index[f"n{a}"], g.index[f"n{b}"]
    # traverse reaches exactly the nodes the reference BFS reaches, at their distance
    dist = _bfs_dist(out_adj, f"n{a}")
    found = {
        g.ids[nodes[-1]]: d for d, nodes, _ in queries.traverse(g, ia, "out", None, 8, 1000)[0]
    }
    assert found == {n: d for n, d in dist.items() if n != f"n{a}"}
    # the first path found is a shortest one; every path is simple and within bounds
    for direction, adj in (("out", out_adj), ("both", und_adj)):
        paths, _ = queries.find_paths(g, ia, ib, direction, None, 5, 50)
        ref = _bfs_dist(adj, f"n{a}").get(f"n{b}")
        if ref is None or ref > 5:
            assert paths == []
            continue
        assert paths and len(paths[0][1]) == ref
        lengths = [len(e) for _, e in paths]
        assert lengths == sorted(lengths)
        for nodes, eids in paths:
            assert len(set(nodes)) == len(nodes) and nodes[0] == ia and nodes[-1] == ib
            for x, y, eid in zip(nodes, nodes[1:], eids, strict=False):
                ends = {g.esrc[eid], g.edst[eid]}
                assert ends == {x, y} or (x == y and ends == {x})
                if direction == "out":
                    assert (g.esrc[eid], g.edst[eid]) == (x, y)
        assert len({tuple(e) for _, e in paths}) == len(paths)  # no path twice


@settings(max_examples=60, deadline=None)
@given(
    first=edges_strategy,
    later=edges_strategy,
    removed=st.lists(st.integers(0, 60), max_size=8),
    a=st.integers(0, 7),
    b=st.integers(0, 7),
)
def test_snapshot_plus_delta_matches_reference(
    first: list[tuple[int, int, str]],
    later: list[tuple[int, int, str]],
    removed: list[int],
    a: int,
    b: int,
) -> None:
    """Edges added and removed after the CSR snapshot are seen exactly as if rebuilt."""
    g = MemGraph()
    g.add_nodes([(f"n{i}", "t", None, 0, "") for i in range(8)])
    g.add_edges([(f"n{s}", f"n{t}", e, 1.0, None, 0, "") for s, t, e in first])
    g.csr()
    g.add_edges([(f"n{s}", f"n{t}", e, 1.0, None, 0, "") for s, t, e in later])
    g.add_nodes([("n8", "t", None, 0, "")])
    g.add_edges([("n8", f"n{a}", "p", 1.0, None, 0, "")])
    edges = dict.fromkeys((f"n{s}", f"n{t}", e) for s, t, e in [*first, *later])
    edges[("n8", f"n{a}", "p")] = None
    keys = list(edges)
    for k in removed:
        if k < len(keys) and keys[k] in edges:
            assert g.remove_user_edge(*keys[k])
            del edges[keys[k]]
    fresh = MemGraph()
    fresh.add_nodes([(f"n{i}", "t", None, 0, "") for i in range(9)])
    fresh.add_edges([(s, t, e, 1.0, None, 0, "") for s, t, e in edges])
    for direction in ("out", "in", "both"):
        for types in (None, frozenset({"p"})):
            got = queries.traverse(g, g.index["n8"], direction, types, 8, 1000)[0]
            want = queries.traverse(fresh, fresh.index["n8"], direction, types, 8, 1000)[0]
            assert {g.ids[n[-1]]: d for d, n, _ in got} == {fresh.ids[n[-1]]: d for d, n, _ in want}
            pg, _ = queries.find_paths(
                g, g.index[f"n{a}"], g.index[f"n{b}"], direction, types, 4, 20
            )
            pf, _ = queries.find_paths(
                fresh, fresh.index[f"n{a}"], fresh.index[f"n{b}"], direction, types, 4, 20
            )
            assert sorted(len(p[1]) for p in pg) == sorted(len(p[1]) for p in pf)
            # Up to the limit every shortest-first answer is the same set of paths.
            cut = max((len(p[1]) for p in pg), default=0) if len(pg) == 20 else 99
            assert _path_keys(g, pg, cut) == _path_keys(fresh, pf, cut)


def _path_keys(
    m: MemGraph, paths: list[tuple[list[int], list[int]]], cut: int
) -> list[tuple[Any, ...]]:
    return sorted(
        tuple((m.ids[m.esrc[e]], m.ids[m.edst[e]], m.etype[e]) for e in p[1])
        for p in paths
        if len(p[1]) < cut
    )


def test_concurrent_reads_and_writes(gkb: hybridkb.KnowledgeBase) -> None:
    import threading

    build(gkb, SHAPE)
    errors: list[Exception] = []

    def writer() -> None:
        try:
            for k in range(40):
                gkb.graph.add_node(f"w{k}", "concept")
                gkb.graph.relate("a", f"w{k}", "r")
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(80):
                gkb.graph.traverse("a", max_depth=3)
                gkb.graph.find_paths("a", "d", limit=5)
                gkb.graph.neighbors("a")
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [
        threading.Thread(target=writer),
        threading.Thread(target=reader),
        threading.Thread(target=reader),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (
        len(
            [
                n
                for n in gkb.graph.neighbors("a", direction="out", limit=1000).neighbors
                if n.node.id.startswith("w")
            ]
        )
        == 40
    )
