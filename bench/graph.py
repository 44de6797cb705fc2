"""Benchmark of the knowledge-graph layer (hybridkb.graph) against the targets in its issue.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python bench/graph.py [--skip-scifact] [--nodes 100000 --edges 1000000]``

* Scale: a synthetic graph of 100k nodes and 1M edges written through the public API
  (``kb.graph.add_nodes/add_edges``) into a DuckDB file: 80k chunk nodes in documents
  of 10 (``next`` chains), 20k entity nodes mentioned with Zipf popularity (hubs of
  tens of thousands of edges, as real entity graphs have), and random ``related``
  edges. Times: bulk write, cold load into memory, neighbours, 2-hop traversal,
  shortest path (depth <= 5) and 10 paths, subgraph, and one edit followed by a query.
* SciFact (/work/shared/data/scifact, the real all-MiniLM-L6-v2 model): the graph
  built at ingest, latency of graph_search per strategy against plain hybrid search,
  and whether graph expansion raises recall@20 of relevant documents over plain
  hybrid at the same budget (20 documents of context).

Prints tables and writes bench/results/graph.json. Latencies are wall-clock on a
shared 2-core machine; the load average is recorded at start and end.
"""

from __future__ import annotations

import os
import sys

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # bench/keyword.py would shadow the stdlib module
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import json
import platform
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import _common as C

import hybridkb
from hybridkb.graph.model import Edge, Node

SCIFACT = Path("/work/shared/data/scifact")
WORK = C.SCRATCH / "graph"  # knowledge bases: a folder of this user's alone
RESULTS = ROOT / "bench" / "results" / "graph.json"


def cpu_name() -> str:
    with open("/proc/cpuinfo") as fh:
        return next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "?")


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def timed(
    fn: Callable[[], Any], runs: Sequence[Any] | int, *, arg: bool = False
) -> dict[str, float]:
    """p50/p95/mean in ms over ``runs`` calls (``arg``: call fn(x) for each x in runs)."""
    samples = []
    items = runs if arg else range(int(runs))  # type: ignore[arg-type]
    for x in items:
        t0 = time.perf_counter()
        fn(x) if arg else fn()  # type: ignore[call-arg]
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 3),
        "p95_ms": round(samples[int(0.95 * (len(samples) - 1))], 3),
        "mean_ms": round(statistics.fmean(samples), 3),
        "n": len(samples),
    }


def table(title: str, rows: list[tuple[str, dict[str, Any]]], cols: Sequence[str]) -> None:
    print(f"\n{title}")
    width = max(len(r[0]) for r in rows) + 2
    print("".ljust(width) + "".join(c.rjust(12) for c in cols))
    for name, vals in rows:
        print(name.ljust(width) + "".join(str(vals.get(c, "")).rjust(12) for c in cols))


# -- scale ---------------------------------------------------------------------------------


def synthetic(n_nodes: int, n_edges: int, seed: int = 7) -> tuple[list[Node], list[Edge]]:
    rng = np.random.default_rng(seed)
    n_chunks = int(n_nodes * 0.8)
    n_ents = n_nodes - n_chunks
    nodes = [
        Node(f"c{i}", "chunk", {"name": f"chunk {i}", "document_id": f"d{i // 10}"})
        for i in range(n_chunks)
    ]
    nodes += [Node(f"e{i}", "entity", {"name": f"entity {i}"}) for i in range(n_ents)]
    edges: dict[tuple[str, str, str], Edge] = {}
    for i in range(n_chunks - 1):
        if (i + 1) % 10:
            edges[(f"c{i}", f"c{i + 1}", "next")] = Edge(f"c{i}", f"c{i + 1}", "next")
    n_mentions = int(n_edges * 0.8)
    ranks = np.arange(1, n_ents + 1)
    popularity = 1.0 / ranks**1.05
    popularity /= popularity.sum()
    src = rng.integers(0, n_chunks, size=n_mentions * 2)
    dst = rng.choice(n_ents, size=n_mentions * 2, p=popularity)
    mentions = 0
    for s, t in zip(src.tolist(), dst.tolist(), strict=True):
        if mentions >= n_mentions:
            break
        key = (f"c{s}", f"e{t}", "mentions")
        if key not in edges:
            edges[key] = Edge(f"c{s}", f"e{t}", "mentions")
            mentions += 1
    a = rng.integers(0, n_nodes, size=n_edges * 2)
    b = rng.integers(0, n_nodes, size=n_edges * 2)
    name = [n.id for n in nodes]
    for s, t in zip(a.tolist(), b.tolist(), strict=True):
        if len(edges) >= n_edges:
            break
        edges.setdefault((name[s], name[t], "related"), Edge(name[s], name[t], "related"))
    return nodes, list(edges.values())


def bench_scale(n_nodes: int, n_edges: int) -> dict[str, Any]:
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"scale_{n_nodes}_{n_edges}.duckdb"
    for p in (path, Path(str(path) + ".wal")):
        p.unlink(missing_ok=True)
    t0 = time.perf_counter()
    nodes, edges = synthetic(n_nodes, n_edges)
    gen_s = time.perf_counter() - t0
    out: dict[str, Any] = {"nodes": len(nodes), "edges": len(edges), "generate_s": round(gen_s, 2)}
    with hybridkb.connect(path, model="fake", cache_dir=str(WORK / "cache")) as kb:
        t0 = time.perf_counter()
        kb.graph.add_nodes(nodes)
        kb.graph.add_edges(edges, check=False)
        out["bulk_write_s"] = round(time.perf_counter() - t0, 2)
    with hybridkb.connect(path, model="fake", cache_dir=str(WORK / "cache")) as kb:
        g = kb.graph
        before = rss_mb()
        t0 = time.perf_counter()
        stats = g.stats()
        out["cold_load_s"] = round(time.perf_counter() - t0, 2)
        out["memory_mb"] = round(rss_mb() - before, 1)
        out["stats"] = {"nodes": stats["nodes"], "edges": stats["edges"]}
        mem = g.memgraph()
        degree = sorted(
            ((len(mem.out[i]) + len(mem.inn[i]), mem.ids[i]) for i in range(len(mem.ids))),
            reverse=True,
        )
        out["max_degree"] = degree[0][0]
        out["mean_degree"] = round(2 * stats["edges"] / stats["nodes"], 1)
        rnd = random.Random(11)
        chunk_ids = [f"c{rnd.randrange(int(n_nodes * 0.8))}" for _ in range(1000)]
        any_ids = [rnd.choice(mem.ids) for _ in range(1000)]
        pairs = [
            (f"c{rnd.randrange(int(n_nodes * 0.8))}", f"c{rnd.randrange(int(n_nodes * 0.8))}")
            for _ in range(300)
        ]
        rows: dict[str, dict[str, Any]] = {}
        rows["neighbors (any node, limit 100)"] = timed(
            lambda x: g.neighbors(x, limit=100), any_ids, arg=True
        )
        rows["neighbors of top hub (limit 100)"] = timed(
            lambda: g.neighbors(degree[0][1], limit=100), 200
        )
        rows["neighbors + to_dict (JSON)"] = timed(
            lambda x: g.neighbors(x, limit=100).to_dict(), any_ids, arg=True
        )
        rows["traverse 2-hop out (limit 1000)"] = timed(
            lambda x: g.traverse(x, max_depth=2, direction="out", limit=1000), chunk_ids, arg=True
        )
        rows["traverse 2-hop both (limit 1000)"] = timed(
            lambda x: g.traverse(x, max_depth=2, direction="both", limit=1000), chunk_ids, arg=True
        )
        found = {"hit": 0}

        def shortest(pair: tuple[str, str]) -> None:
            if g.find_paths(pair[0], pair[1], max_depth=5, limit=1).paths:
                found["hit"] += 1

        rows["shortest path (depth <= 5)"] = timed(shortest, pairs, arg=True)
        out["shortest_path_found_pct"] = round(100 * found["hit"] / len(pairs), 1)
        rows["10 paths (depth <= 5)"] = timed(
            lambda p: g.find_paths(p[0], p[1], max_depth=5, limit=10), pairs, arg=True
        )
        typed = [(a, b) for a, b in pairs]
        rows["shortest path, next+mentions only"] = timed(
            lambda p: g.find_paths(
                p[0], p[1], max_depth=5, limit=1, edge_types=["next", "mentions"]
            ),
            typed,
            arg=True,
        )
        rows["subgraph depth 2 (100 nodes)"] = timed(
            lambda x: g.subgraph(x, max_depth=2), chunk_ids[:300], arg=True
        )
        counter = iter(range(10**9))

        def edit_then_query() -> None:
            k = next(counter)
            g.relate(f"c{k}", f"e{k % 1000}", "bench")
            g.neighbors(f"c{k}", limit=10)

        rows["relate + neighbors (kept in step)"] = timed(edit_then_query, 200)
        rows["version check alone"] = timed(lambda: g.memgraph(), 500)
        out["queries"] = rows
    for p in (path, Path(str(path) + ".wal")):
        p.unlink(missing_ok=True)
    return out


# -- SciFact -------------------------------------------------------------------------------


def load_scifact(kb: hybridkb.KnowledgeBase) -> tuple[Any, dict[str, Any]]:
    from hybridkb.devtools.evaluate import load_beir, prepare_collection

    data = load_beir(SCIFACT, "test")
    t0 = time.perf_counter()
    coll, stats = prepare_collection(kb, SCIFACT, data)
    stats["seconds"] = round(time.perf_counter() - t0, 1)
    return data, {"collection": coll.name, **stats}


def ranked_docs(doc_ids: Sequence[str], limit: int) -> list[str]:
    return list(dict.fromkeys(doc_ids))[:limit]


def recall(ranked: Sequence[str], relevant: dict[str, int], k: int = 20) -> float:
    rel = {d for d, r in relevant.items() if r > 0}
    return len(rel & set(ranked[:k])) / len(rel) if rel else 0.0


def expansion_docs(
    graph: Any, query: str, coll: str, seeds: int, *, depth: int = 2
) -> list[tuple[str, float]]:
    """Documents the graph reaches from the top ``seeds`` hybrid chunks (chunk -> entity -> chunk),
    scored by spreading activation weighted by the seed's rank."""
    res = graph.search(
        query,
        strategy="vector_first",
        traverse_depth=depth,
        search_limit=seeds,
        neighbor_limit=200,
        edge_types=["mentions"],
        collections=[coll],
    )
    scores: dict[str, float] = {}
    for rank, r in enumerate(res.results, 1):
        for c in r.context:
            doc = c.node.properties.get("document_id")
            if c.node.type == "chunk" and doc and doc != r.seed.document_id:
                scores[doc] = (
                    scores.get(doc, 0.0) + float(c.node.properties.get("score", 0.0)) / rank
                )
    return sorted(scores.items(), key=lambda kv: -kv[1])


def bench_scifact(budget_docs: int = 20) -> dict[str, Any]:
    from hybridkb.search import fusion

    WORK.mkdir(parents=True, exist_ok=True)
    db = WORK / "scifact.duckdb"
    out: dict[str, Any] = {}
    with hybridkb.connect(db, cache_dir=str(WORK / "cache"), model="all-MiniLM-L6-v2") as kb:
        data, load = load_scifact(kb)
        out["load"] = load
        name = load["collection"]
        if (
            kb.graph.stats()["edges"] == 0
            or load.get("reused")
            and not kb.graph.stats()["edge_types"].get("mentions")
        ):
            t0 = time.perf_counter()
            kb.graph.rebuild(name)
            out["graph_rebuild_s"] = round(time.perf_counter() - t0, 1)
        stats = kb.graph.stats()
        out["graph"] = stats
        queries = [(qid, data.queries[qid]) for qid in sorted(data.qrels) if qid in data.queries]
        out["queries"] = len(queries)
        # -- latency: graph_search per strategy vs plain hybrid (both embed the query)
        kb.search("warm up", k=5, collections=[name])
        kb.graph.search("warm up", strategy="parallel", collections=[name])
        lat: dict[str, dict[str, Any]] = {}
        texts = [q for _, q in queries]
        lat["hybrid search k=5"] = timed(
            lambda q: kb.search(q, k=5, collections=[name]), texts, arg=True
        )
        for strategy in ("vector_only", "vector_first", "graph_first", "parallel", "graph_only"):
            lat[f"graph_search {strategy}"] = timed(
                lambda q, s=strategy: kb.graph.search(q, strategy=s, collections=[name]),
                texts,
                arg=True,
            )
        base = lat["hybrid search k=5"]["p50_ms"]
        for row in lat.values():
            row["x_hybrid"] = round(row["p50_ms"] / base, 2)
        out["latency"] = lat
        # -- recall@20 of relevant documents at a budget of 20 documents
        variants: dict[str, list[float]] = {}

        def add(label: str, value: float) -> None:
            variants.setdefault(label, []).append(value)

        for qid, q in queries:
            rel = data.qrels[qid]
            hits = kb.search(q, k=budget_docs * 4, collections=[name])
            plain = ranked_docs([h.document_id for h in hits], budget_docs)
            add("hybrid (baseline)", recall(plain, rel, budget_docs))
            for m in (5, 10, 15):
                exp = [d for d, _ in expansion_docs(kb.graph, q, name, m) if d not in plain[:m]]
                filled = ranked_docs(plain[:m] + exp + plain[m:], budget_docs)
                add(f"top {m} hybrid + graph fill", recall(filled, rel, budget_docs))
            exp10 = expansion_docs(kb.graph, q, name, 10)
            fused = fusion.rrf(
                [
                    [(d, 0.0) for d in ranked_docs([h.document_id for h in hits], 80)],
                    [(d, s) for d, s in exp10],
                ],
                k=60,
            )
            add(
                "RRF(hybrid, graph expansion)",
                recall([f.key for f in fused][:budget_docs], rel, budget_docs),
            )
            par = kb.graph.search(
                q,
                strategy="parallel",
                search_limit=budget_docs * 3,
                neighbor_limit=0,
                collections=[name],
            )
            add(
                "parallel (query entities + hybrid)",
                recall(
                    ranked_docs([r.seed.document_id for r in par.results], budget_docs),
                    rel,
                    budget_docs,
                ),
            )
            gf = kb.graph.search(
                q,
                strategy="graph_first",
                search_limit=budget_docs * 3,
                neighbor_limit=0,
                collections=[name],
            )
            add(
                "graph_first",
                recall(
                    ranked_docs([r.seed.document_id for r in gf.results], budget_docs),
                    rel,
                    budget_docs,
                ),
            )
        out["recall@20"] = {k: round(statistics.fmean(v), 4) for k, v in variants.items()}
        base_r = out["recall@20"]["hybrid (baseline)"]
        out["recall@20_delta"] = {k: round(v - base_r, 4) for k, v in out["recall@20"].items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-scifact", action="store_true")
    parser.add_argument("--results", type=Path, default=RESULTS, help="JSON file to update")
    args = parser.parse_args()
    result: dict[str, Any] = {
        "machine": {
            "cpu": cpu_name(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_at_start": list(os.getloadavg()),
        }
    }
    if not args.skip_scale:
        scale = bench_scale(args.nodes, args.edges)
        result["scale"] = scale
        print(
            f"graph: {scale['stats']['nodes']:,} nodes, {scale['stats']['edges']:,} edges "
            f"(max degree {scale['max_degree']:,}, mean {scale['mean_degree']}); bulk write "
            f"{scale['bulk_write_s']} s, cold load {scale['cold_load_s']} s, ~{scale['memory_mb']} MB"
        )
        table("scale queries", list(scale["queries"].items()), ["p50_ms", "p95_ms", "mean_ms", "n"])
        print(f"shortest path found for {scale['shortest_path_found_pct']}% of random chunk pairs")
    if not args.skip_scifact and SCIFACT.is_dir():
        sf = bench_scifact()
        result["scifact"] = sf
        print(
            f"\nSciFact: {sf['graph']['nodes']:,} nodes, {sf['graph']['edges']:,} edges; "
            f"{sf['queries']} test queries; load {sf['load']}"
        )
        table(
            "graph_search latency (query embedding included)",
            list(sf["latency"].items()),
            ["p50_ms", "p95_ms", "x_hybrid"],
        )
        table(
            "recall@20 of relevant documents (budget 20 documents)",
            [
                (k, {"recall@20": v, "delta": sf["recall@20_delta"][k]})
                for k, v in sf["recall@20"].items()
            ],
            ["recall@20", "delta"],
        )
    result["machine"]["loadavg_at_end"] = list(os.getloadavg())
    # Update, not overwrite: the scale and SciFact parts may come from separate runs.
    previous = json.loads(args.results.read_text()) if args.results.is_file() else {}
    previous.update(result)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(previous, indent=1))
    print(f"\nwrote {args.results}")


if __name__ == "__main__":
    main()
