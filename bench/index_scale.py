"""The derived search indexes alone at 100k and 1M chunks (issue 3: scale).

Reads a synthetic KB built by ``bench/search.py`` (``bench-100k.duckdb``,
``bench-1m.duckdb`` in its scratch folder, ``_common.SCRATCH``) READ-ONLY (numpy columns), then measures, in one process:

* build: columnar load of terms and vectors, keyword index from the coded terms
  (``derived.add_terms``), vector index (HNSW), CPU and peak RSS;
* keyword search at depth 100 over the SciFact test queries: the pruned top-k
  (``KeywordIndex.search``) against the dense exhaustive scorer the index used
  before (``_scores`` + top-k), same process, and that both return the same list;
* vector recall@10 against exact float32 search, per HNSW expansion_search;
* snapshot save / load (``derived.save_snapshot`` / ``load_snapshot``);
* an incremental add of one 10-chunk document, then a search on each index.

Usage: ``.venv/bin/python bench/index_scale.py --sizes 100k,1m [--vector-cache DIR]``
(``--vector-cache`` keeps built vector indexes in DIR so reruns skip the graph
build). Writes bench/results/index_scale.json.
"""

from __future__ import annotations

import argparse
import gc
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
import duckdb
import numpy as np

from hybridkb.index import derived
from hybridkb.index.keywords import KeywordIndex, bm25
from hybridkb.index.recall import AUDIT_QUERIES
from hybridkb.index.vector import VectorIndex
from hybridkb.index.vector_layouts import expansion_search_for
from hybridkb.storage.duckdb.bulk import fetch_vectors_sql
from hybridkb.storage.duckdb.memory import coded_terms
from hybridkb.text.analysis import analyze, analyze_query

DBS = {"100k": C.SCRATCH / "bench-100k.duckdb", "1m": C.SCRATCH / "bench-1m.duckdb"}
DEPTH = 100


def peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def load_columns(db: Path) -> tuple[np.ndarray, Any, np.ndarray, dict[str, Any]]:
    """keys, terms (CodedTerms), float32 vectors in key order: the columnar form the
    storage reads (numpy, no Arrow: the dev venv has none)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        (cid,) = con.execute("SELECT min(id) FROM hybridkb_collections").fetchone()  # type: ignore[misc]
        (keys, terms), wall_t, cpu_t = C.timed(lambda: coded_terms(con, f"kb_c{cid}_chunks"))
        (vkeys, vectors), wall_v, cpu_v = C.timed(
            lambda: fetch_vectors_sql(con, f"SELECT key, embedding FROM kb_c{cid}_vectors", 384)
        )
    finally:
        con.close()
    order = np.argsort(vkeys, kind="stable")
    vectors = vectors[order]
    assert np.array_equal(keys, vkeys[order])
    info = {
        "fetch_terms_s": round(wall_t, 1),
        "fetch_terms_cpu_s": round(cpu_t, 1),
        "fetch_vectors_s": round(wall_v, 1),
        "fetch_vectors_cpu_s": round(cpu_v, 1),
    }
    return keys, terms, vectors, info


def exhaustive(index: KeywordIndex, terms: list[str], k: int) -> list[tuple[int, float]]:
    """The scorer the index used before pruning: every posting into a dense array."""
    p = index.postings
    tids = p.term_ids(terms)
    if not tids:
        return []
    scores = bm25.dense_scores(p, tids)
    rows = np.flatnonzero(scores)
    return bm25.top_k(p.keys.data[rows], scores[rows], k)


def keyword_latency(index: KeywordIndex, queries: list[list[str]], rounds: int) -> dict[str, Any]:
    for q in queries:
        index.search(q, DEPTH)  # caches the per-term bounds, as a warm server would
    same = sum(index.search(q, DEPTH) == exhaustive(index, q, DEPTH) for q in queries)
    pruned = C.time_calls(lambda q: index.search(q, DEPTH), queries, rounds=rounds)
    dense = C.time_calls(lambda q: exhaustive(index, q, DEPTH), queries, rounds=rounds)
    p, d = pruned.summary(), dense.summary()
    out = {
        "queries": len(queries),
        "identical_results": same,
        "pruned": p,
        "exhaustive": d,
        "speedup_cpu_p50": round(d["cpu_p50_ms"] / p["cpu_p50_ms"], 2),
        "speedup_best_p50": round(d["best_p50_ms"] / p["best_p50_ms"], 2),
    }
    # "Typical" queries: 5-10 distinct known terms.
    typical = [q for q in queries if 5 <= len(index.postings.term_ids(q)) <= 10]
    pt = C.time_calls(lambda q: index.search(q, DEPTH), typical, rounds=rounds).summary()
    dt = C.time_calls(lambda q: exhaustive(index, q, DEPTH), typical, rounds=rounds).summary()
    out["typical_5_to_10_terms"] = {
        "queries": len(typical),
        "pruned": pt,
        "exhaustive": dt,
        "speedup_cpu_p50": round(dt["cpu_p50_ms"] / pt["cpu_p50_ms"], 2),
    }
    return out


def exact_top(
    vectors: np.ndarray, keys: np.ndarray, queries: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Keys and cosines of each query's exact top ``k``."""
    best_s = np.full((len(queries), k), -np.inf, np.float32)
    best_i = np.zeros((len(queries), k), np.int64)
    for a in range(0, len(vectors), 100_000):
        scores = queries @ vectors[a : a + 100_000].T
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        cs = np.concatenate([best_s, np.take_along_axis(scores, top, 1)], 1)
        ci = np.concatenate([best_i, top + a], 1)
        order = np.argsort(-cs, 1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(cs, order, 1), np.take_along_axis(ci, order, 1)
    return keys[best_i], best_s


def vector_recall(
    index: VectorIndex, exact: np.ndarray, queries: np.ndarray
) -> list[dict[str, Any]]:
    hnsw = index._hnsw
    rows = []
    beams = [None] if hnsw is None else [None, 256, 512, 1024, 1536]
    for beam in beams:
        if beam is not None:
            # Pin the beam: the index re-derives it from the size on every search.
            saved = vector_module_expansion(beam)
        try:
            got = [{key for key, _ in index.search(q, 10)} for q in queries]
            timing = C.time_calls(lambda q: index.search(q, 10), list(queries), rounds=2)
        finally:
            if beam is not None:
                vector_module_expansion(saved)
        recall = float(
            np.mean([len(g & set(e[:10].tolist())) / 10 for g, e in zip(got, exact, strict=False)])
        )
        rows.append(
            {
                "expansion_search": beam or f"default ({expansion_search_for(len(index))})"
                if hnsw is not None
                else "flat",
                "recall@10": round(recall, 4),
                **{k: v for k, v in timing.summary().items() if "p50" in k},
            }
        )
    return rows


def vector_module_expansion(beam: Any) -> Any:
    """Swap hybridkb.index.vector_layouts.expansion_search_for for a constant (or restore it)."""
    from hybridkb.index import vector_layouts as vm

    previous = vm.expansion_search_for
    vm.expansion_search_for = beam if callable(beam) else (lambda rows, b=beam: b)
    return previous


def incremental(indexes: derived.CollectionIndexes, dim: int, query: list[str]) -> dict[str, Any]:
    """Add one 10-chunk document (as a write mirrors it), then search both indexes."""
    rng = np.random.default_rng(1)
    texts = [
        f"incremental chunk {i} about vitamin b12 and homocysteine levels {i}" for i in range(10)
    ]
    terms = [analyze(t, "en") for t in texts]
    vecs = rng.standard_normal((10, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    keys = list(range(2**62, 2**62 + 10))
    qvec = vecs[0]

    def step() -> None:
        indexes.apply(
            removed=keys,
            added_keys=keys,
            added_terms=terms,
            added_vectors=vecs,
            generation=indexes.generation + 1,
        )
        assert indexes.keyword.search(query + ["homocystein"], DEPTH)
        assert indexes.vector.search(qvec, 10)[0][0] == keys[0]

    runs = [C.timed(step) for _ in range(5)]
    return {
        "add_10_chunks_plus_searches_ms": [round(w * 1000, 1) for _, w, _ in runs],
        "cpu_ms": [round(c * 1000, 1) for _, _, c in runs],
    }


def scale(
    label: str, args: argparse.Namespace, queries: list[list[str]], qvecs: np.ndarray
) -> dict[str, Any]:
    print(f"\n# {label}", flush=True)
    gc.collect()
    rss0 = C.rss_mb()
    keys, terms, vectors, out = load_columns(Path(args.db_dir) / DBS[label].name)
    dim = vectors.shape[1]
    print(f"  loaded {len(keys):,} rows: {out}", flush=True)
    keyword = KeywordIndex()
    c0, t0 = time.process_time(), time.perf_counter()
    with derived.gc_paused():
        derived.add_terms(keyword, keys, terms)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    del terms
    out["keyword_build"] = {
        "seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "peak_rss_mb": peak_mb(),
    }
    print(f"  keyword build {wall:.1f}s (cpu {cpu:.1f}s)", flush=True)
    out["keyword_search_depth100"] = keyword_latency(keyword, queries, args.rounds)
    print(f"  keyword: {out['keyword_search_depth100']} [{C.cpu_note()}]", flush=True)

    exact, cosines = exact_top(vectors, keys, qvecs, 10)
    # How related the queries are to these vectors: ~0.47 for the SciFact-based sets,
    # ~0.22 for a set scattered around random centres (no query has real neighbours).
    out["query_top1_cosine"] = round(float(cosines[:, 0].mean()), 3)
    print(f"  queries' top-1 cosine {out['query_top1_cosine']}", flush=True)
    cache = Path(args.vector_cache) / f"{label}.vector.bin" if args.vector_cache else None
    if cache is not None and cache.exists():
        vector = VectorIndex.load(cache)
        out["vector_build"] = {"reused": str(cache)}
    else:
        vector = VectorIndex(dim)
        c0, t0 = time.process_time(), time.perf_counter()
        with derived.gc_paused():
            vector.add(keys, vectors)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        out["vector_build"] = {
            "seconds": round(wall, 1),
            "cpu_seconds": round(cpu, 1),
            "peak_rss_mb": peak_mb(),
        }
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            vector.save(cache)
    del vectors
    print(f"  vector build: {out['vector_build']} [{C.cpu_note()}]", flush=True)
    out["self_check_built"] = vector.recall_report()
    # Served queries are checked once AUDIT_QUERIES have been seen (recall.py): let that
    # happen before the sweep below pins beams, and report what it decided.
    for q in qvecs[:AUDIT_QUERIES]:
        vector.search(q, 10)
    vector.wait_for_audit()
    out["self_check"] = vector.recall_report()
    print(f"  self-check: {out['self_check']}", flush=True)
    out["vector_recall"] = vector_recall(vector, exact, qvecs)
    C.print_rows(
        out["vector_recall"],
        ["expansion_search", "recall@10", "p50_ms", "cpu_p50_ms"],
        f"{label}: vector recall@10 vs exact float32",
    )

    indexes = derived.CollectionIndexes(keyword, vector, generation=1)
    folder = Path(tempfile.mkdtemp(prefix="hkb-index-scale-", dir="/tmp"))
    try:
        t0 = time.perf_counter()
        derived.save_snapshot(folder, 1, indexes)
        wall = time.perf_counter() - t0
        sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
        del indexes, keyword, vector
        gc.collect()
        rss1 = C.rss_mb()
        loaded, lwall, lcpu = C.timed(
            lambda: derived.load_snapshot(folder, 1, generation=1, chunks=len(keys))
        )
        assert loaded is not None
        out["snapshot"] = {
            "save_s": round(wall, 2),
            "load_s": round(lwall, 2),
            "load_cpu_s": round(lcpu, 2),
            "bytes": sizes,
            "rss_after_load_delta_mb": round(C.rss_mb() - rss1),
        }
        _, fwall, _ = C.timed(lambda: loaded.keyword.search(queries[0], DEPTH))
        out["snapshot"]["first_keyword_search_after_load_ms"] = round(fwall * 1000, 1)
        out["snapshot"]["self_check_after_load"] = loaded.vector.recall_report()
        print(f"  snapshot: {out['snapshot']} [{C.cpu_note()}]", flush=True)
        out["incremental"] = incremental(loaded, dim, queries[1])
        print(f"  incremental: {out['incremental']}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out["rss_delta_mb"] = round(C.rss_mb() - rss0)
    out["peak_rss_mb"] = peak_mb()
    out["loadavg"] = C.loadavg()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100k", help="comma-separated: 100k,1m")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--vector-queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vector-cache", default="", help="folder keeping built vector indexes")
    ap.add_argument(
        "--db-dir", default=str(C.SCRATCH), help="folder of bench/search.py's scale collections"
    )
    args = ap.parse_args()
    C.expendable()
    data = C.load_scifact("test")
    qids = C.query_ids(data)
    texts = [data.queries[q] for q in qids]
    queries = [analyze_query(t, ["en"]) for t in texts][: args.queries]
    qvecs = C.embed_cached(texts, tag="scifact-test")[: args.vector_queries]
    results: dict[str, Any] = {
        "machine": C.machine(),
        "git": C.git_state(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    for label in args.sizes.split(","):
        results[f"scale_{label}"] = scale(label, args, queries, qvecs)
        C.write_json("index_scale", results)
    print(f"\nwrote {C.write_json('index_scale', results)}")


if __name__ == "__main__":
    main()
