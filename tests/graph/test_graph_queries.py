"""Graph queries on hand-built graphs: cycles, self-loops, disconnected parts, bounds."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from internals import local, local_graph, sql_rows

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
    shortest = gkb.graph.shortest_path("b", "a", direction="out")
    assert shortest is not None and shortest.length == 2


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
    live = _edge_set(local_graph(gkb).memgraph())
    fresh = local_graph(gkb).store
    fresh.graphs.clear()
    assert _edge_set(local_graph(gkb).memgraph()) == live


def test_rolled_back_write_does_not_reach_memory(gkb: hybridkb.KnowledgeBase) -> None:
    build(gkb, SHAPE)
    gkb.graph.neighbors("a")
    store = local_graph(gkb).store

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


node_rows_strategy = st.lists(
    st.tuples(
        st.sampled_from(["hub", "leaf"]),
        st.sampled_from(["category", "topic"]),
        st.dictionaries(st.sampled_from(["name", "kind", "n"]), st.integers(0, 3), max_size=2),
        st.integers(1, 5),  # the document a row comes from
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(rows=node_rows_strategy, removed=st.lists(st.integers(1, 5), max_size=5))
def test_a_node_of_many_rows_is_their_union_as_rows_come_and_go(
    rows: list[tuple[str, str, dict[str, Any], int]], removed: list[int]
) -> None:
    """A node backed by rows of several documents (a collection's node has one per
    document) has the type last written and the union of the rows' properties in row
    order, as rows are added, rewritten and taken away."""
    g = MemGraph()
    backing: dict[str, dict[tuple[int, str], tuple[str, dict[str, Any]]]] = {}
    types: dict[str, str] = {}
    for node_id, ntype, props, doc in rows:
        g.add_nodes([(node_id, ntype, props, 1, f"d{doc}")])
        backing.setdefault(node_id, {})[(1, f"d{doc}")] = (ntype, props)
        types[node_id] = ntype
    for doc in removed:
        g.remove_prov((1, f"d{doc}"))
        for node_id, rows_of in backing.items():
            if rows_of.pop((1, f"d{doc}"), None) is not None and rows_of:
                types[node_id] = list(rows_of.values())[-1][0]
    for node_id, rows_of in backing.items():
        assert g.has(node_id) == bool(rows_of)
        if rows_of:
            union: dict[str, Any] = {}
            for _type, props in rows_of.values():
                union.update(props)
            node = g.node(g.index[node_id])
            assert (node.type, node.properties) == (types[node_id], union)


# Neighbourhoods as the UI asks for them (one hop), and a few others.
NEIGHBOURHOODS: list[dict[str, Any]] = [
    {"max_depth": 1},
    {"max_depth": 1, "node_limit": 5, "edge_limit": 7},
    {"max_depth": 1, "direction": "in", "edge_types": ["r", "categorized_as"]},
    {"max_depth": 1, "direction": "out"},
    {"max_depth": 0},
]


def _notes_graph(db: str) -> tuple[int, list[str]]:
    """30 tagged notes (their collection's node is a hub) and SHAPE with user links into
    them; the collection's id and the nodes to start from."""
    tags = ["hr", "tax", "car"]
    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(
            [
                f"Note {i} about topic {i % 4}.\n\nA second paragraph of note {i}."
                for i in range(30)
            ],
            metadatas=[{"tags": [tags[i % 3], tags[(i + 1) % 3]]} for i in range(30)],
            ids=[f"n{i:02d}" for i in range(30)],
        )
        cid = coll.record.id
        build(kb, SHAPE, extra=("z",))
        kb.graph.relate("a", "cat:hr", "about")
        kb.graph.relate(f"doc:{cid}:n03", "a", "cites")
    return cid, [f"coll:{cid}", f"doc:{cid}:n03", "cat:hr", "a", "c", "d", "z"]


@pytest.mark.parametrize(
    "backend", ["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_first_neighbourhood_reads_only_its_rows_and_answers_as_the_whole_graph(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Until a query needs the whole graph, a neighbourhood one hop deep is read from the
    graph tables (its node's edges, then the rows among the nodes kept): the first view
    of a node does not wait for every node of a large workspace to be loaded."""
    db = str(tmp_path / "g.duckdb") if backend == "duckdb" else request.getfixturevalue("pg_url")
    cid, starts = _notes_graph(db)
    shapes = NEIGHBOURHOODS
    with hybridkb.connect(db, model="fake") as kb:
        store = local_graph(local(kb)).store
        coll = kb.collection("Notes")
        first = {
            (start, i): kb.graph.subgraph(start, **shape).to_dict()
            for start in starts
            for i, shape in enumerate(shapes)
        }
        assert kb.workspace not in store.graphs  # the whole graph was never loaded
        coll.add_texts(["A late note."], ids=["late"])  # read afresh: a write is seen at once
        late = kb.graph.subgraph(f"doc:{cid}:late", max_depth=1).to_dict()
        assert {n["id"] for n in late["nodes"]} >= {f"doc:{cid}:late", f"coll:{cid}"}
        assert kb.workspace not in store.graphs
        for bad in ("", ["a"]):
            with pytest.raises(GraphError, match="non-empty string"):
                kb.graph.subgraph(bad, max_depth=1)  # type: ignore[arg-type]
        with pytest.raises(GraphError, match="unknown node 'nowhere'"):
            kb.graph.subgraph("nowhere", max_depth=1)  # the whole graph's message
        kb.graph.stats()  # loads the whole graph: from now on it answers
        coll.delete(["late"])
        assert kb.workspace in store.graphs
        for (start, i), answer in first.items():
            whole = kb.graph.subgraph(start, **shapes[i]).to_dict()
            if backend == "duckdb":  # rows come in the order they were written
                assert whole == answer, (start, shapes[i])
            else:  # a Postgres scan has no fixed order: a capped answer may pick others
                assert _shape_of(whole) == _shape_of(answer), (start, shapes[i])


def _shape_of(answer: dict[str, Any]) -> Any:
    """A subgraph answer with its rows in a fixed order; a capped one by how many nodes
    it kept (which ones, and so the edges among them, follow the scan's order)."""
    if answer["stats"]["truncated"]:
        return {k: v for k, v in answer["stats"].items() if k != "edge_count"}
    nodes = sorted(json.dumps(n, sort_keys=True) for n in answer["nodes"])
    edges = sorted(json.dumps(e, sort_keys=True) for e in answer["edges"])
    return nodes, edges, answer["stats"]


def test_a_graph_prepared_in_the_background_answers_as_one_loaded_at_once(
    tmp_path: Path,
) -> None:
    """``prepare_graph`` loads the whole graph in a thread; neighbourhoods meanwhile come
    from their own rows, and once it is there (writes made meanwhile replayed onto it)
    every answer is the one a graph loaded at once gives."""
    db = str(tmp_path / "g.duckdb")
    cid, starts = _notes_graph(db)
    with hybridkb.connect(db, model="fake") as kb:
        store = local_graph(local(kb)).store
        kb.prepare_graph()
        kb.prepare_graph()  # one load, however often asked
        kb.collection("Notes").add_texts(["A note written meanwhile."], ids=["meanwhile"])
        deadline = time.monotonic() + 120  # a hang guard only
        while kb.workspace not in store.graphs and time.monotonic() < deadline:
            time.sleep(0.02)
        assert kb.workspace in store.graphs and not store.preloading
        prepared = {
            (start, i): kb.graph.subgraph(start, **shape).to_dict()
            for start in [*starts, f"doc:{cid}:meanwhile"]
            for i, shape in enumerate(NEIGHBOURHOODS)
        }
        assert kb.workspace in store.graphs  # answered from memory
    with hybridkb.connect(db, model="fake") as kb:
        kb.graph.stats()  # loaded at once
        for (start, i), answer in prepared.items():
            assert kb.graph.subgraph(start, **NEIGHBOURHOODS[i]).to_dict() == answer
