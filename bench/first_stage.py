"""A smaller first stage for the vector graph (issue 36): PCA-rotated int8 rows in the HNSW
graph, the full int8 rows re-scoring its candidates, against today's full 384-d graph.

Measured on the 100k synthetic collection bench/search.py builds (SciFact document
vectors plus noise: ``python bench/search.py --only scale --scales 100000 --build-only``)
and the SciFact test queries (``/tmp/scifact_qvecs.npy``, bench/postgres.py writes it):

* graph build: process CPU and wall seconds to insert every row (2 threads), and the
  graph's memory (usearch's ``memory_usage``: links plus its own copy of the rows);
* per query, at expansion_search 128/256/512: the graph search of ``2 * depth`` candidates
  (the index's ``RESCORE_FACTOR``) and their re-score with the full int8 rows, CPU p50 of
  the calling thread, and recall@10 against exact float32 cosine.

The graph parameters are the index's own (``vector_layouts``: connectivity, expansion_add,
the int8 rows and graph copies of quantized.py); the rotation is the index's own
(``index/first_stage.py``), fitted on the first 20,000 rows (the flat -> HNSW threshold:
what a collection holds when its graph is first built).

``--candidates 100,200,400`` times the re-score at other candidate counts (the index
re-scores ``vector_layouts.rescored_count``: more as the graph grows); every count is
also measured against the index's own exact int8 scan (``recall@10_int8``), the measure
its recall self-check uses. ``--db`` takes any bench collection, e.g. the 1M one
(``--scales 1000000``): at 1M rows, beam 1024, the SciFact test queries got
``recall@10_int8`` 0.979 / 0.987 / 0.9915 with 100 / 200 / 400 candidates.

Run::

    .venv/bin/python -P bench/first_stage.py [--dims 384,192,128] [--queries 300]
        [--beams 128,256,512] [--candidates 200] [--db path/to/bench.duckdb]

Writes bench/results/first_stage.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.append(str(ROOT / "bench"))

import _common as C  # noqa: E402

from hybridkb.index.first_stage import FirstStage  # noqa: E402
from hybridkb.index.hnsw import Graph, MetricKind, ScalarKind  # noqa: E402
from hybridkb.index.quantized import (  # noqa: E402
    encode,
    graph_rows,
    graph_scale,
    inverse_norms,
    scan,
    top_per_query,
)
from hybridkb.index.vector_layouts import (  # noqa: E402
    DEFAULT_HNSW_THRESHOLD,
    HNSW_CONNECTIVITY,
    HNSW_EXPANSION_ADD,
    RESCORE_FACTOR,
)
from hybridkb.storage.duckdb.schema import table_names  # noqa: E402

QUERY_VECS = Path("/tmp/scifact_qvecs.npy")
DEPTH = 100  # a hybrid search's vector leg (settings.candidates)


def collection_vectors(db: Path) -> np.ndarray:
    """Unit float32 vectors of the bench collection, read in key order."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT id FROM hybridkb_collections WHERE name = 'bench'").fetchone()
        if row is None:
            raise SystemExit(f"{db}: no 'bench' collection; build it with bench/search.py")
        t = table_names(int(row[0]))
        found = con.execute(f"SELECT embedding FROM {t['vectors']} ORDER BY key").fetchall()
    finally:
        con.close()
    x = np.asarray([r[0] for r in found], np.float32)
    return np.asarray(x / np.linalg.norm(x, axis=1, keepdims=True), dtype=np.float32)


def rotation(x: np.ndarray, dims: int) -> tuple[FirstStage, float]:
    """The index's first stage fitted as the index fits it (on the rows it holds when its
    graph is first built), and the share of the rows' energy its axes keep."""
    sample = x[:DEFAULT_HNSW_THRESHOLD]
    stage = FirstStage.fit(sample, dims)
    kept = float((stage.rotate(sample) ** 2).sum() / (sample**2).sum())
    return stage, kept


def measure(
    x: np.ndarray,
    q: np.ndarray,
    dims: int,
    exact: np.ndarray,
    beams: list[int],
    candidates: list[int],
) -> dict[str, Any]:
    """Build one graph over ``dims`` (PCA-rotated below the full width) and search it."""
    if dims < x.shape[1]:
        stage, kept = rotation(x, dims)
        y, qy = stage.rotate(x), stage.rotate(q)
    else:
        y, qy, kept = x, q, 1.0
    # As the index holds them (quantized.py): per-row int8 rows and their inverse norms
    # (re-scored), and the graph's copies scaled to one norm, searched by inner product.
    rows = encode(x, "i8")
    inv = inverse_norms(rows)
    first = encode(y, "i8")
    first_inv = inverse_norms(first)
    scale = graph_scale(first_inv)
    graph = Graph(
        ndim=dims,
        metric=MetricKind.IP,
        dtype=ScalarKind.I8,
        connectivity=HNSW_CONNECTIVITY,
        expansion_add=HNSW_EXPANSION_ADD,
        expansion_search=beams[0],
    )
    cpu0, wall0 = time.process_time(), time.perf_counter()
    graph.add(
        np.arange(len(y), dtype=np.int64), graph_rows(first, first_inv, "i8", scale), threads=2
    )
    out: dict[str, Any] = {
        "dims": dims,
        "energy_kept": round(kept, 3),
        "build_cpu_s": round(time.process_time() - cpu0, 1),
        "build_wall_s": round(time.perf_counter() - wall0, 1),
        "graph_mb": round(graph.memory_usage / 2**20, 1),
        "beams": [],
    }
    q_enc = encode(q, "i8")
    exact_int8, _ = top_per_query(rows, q_enc, 10, "i8", x.shape[1])
    for beam in beams:
        graph.expansion_search = beam
        for want in candidates:
            recalls, own, cpu = [], [], []
            for i in range(len(q)):
                t0 = time.thread_time()
                q_first = encode(qy[i : i + 1], "i8")[0]
                cand, _ = graph.search(q_first, want)
                best, _ = scan(rows[cand], inv[cand], q_enc[i], 10, "i8", x.shape[1])
                found = set(cand[best].tolist())
                cpu.append(time.thread_time() - t0)
                recalls.append(len(found & set(exact[i].tolist())) / 10)
                own.append(len(found & set(exact_int8[i].tolist())) / 10)
            out["beams"].append(
                {
                    "expansion_search": beam,
                    "candidates": want,
                    "recall@10": round(float(np.mean(recalls)), 4),
                    "recall@10_int8": round(float(np.mean(own)), 4),
                    "cpu_p50_ms": round(float(np.median(cpu)) * 1e3, 3),
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", default=str(C.SCRATCH / "bench-100k.duckdb"))
    ap.add_argument("--dims", default="384,192,128")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--beams", default="128,256,512")
    ap.add_argument("--candidates", default=str(RESCORE_FACTOR * DEPTH))
    args = ap.parse_args()
    beams = [int(b) for b in args.beams.split(",")]
    candidates = [int(c) for c in args.candidates.split(",")]
    if not QUERY_VECS.exists():
        raise SystemExit(f"{QUERY_VECS}: missing; run bench/postgres.py once (it embeds them)")
    print(f"# first stage [{C.cpu_note()}]", flush=True)
    x = collection_vectors(Path(args.db))
    q = np.load(QUERY_VECS).astype(np.float32)[: args.queries]
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    exact = np.argsort(-(q @ x.T), axis=1)[:, :10]
    report: dict[str, Any] = {"machine": C.machine(), "rows": len(x), "queries": len(q)}
    report["load_before"] = C.loadavg()
    report["graphs"] = []
    for dims in (int(d) for d in args.dims.split(",")):
        found = measure(x, q, dims, exact, beams, candidates)
        report["graphs"].append(found)
        for b in found["beams"]:
            print(
                f"  {dims:>3}-d (energy {found['energy_kept']:.2f}): build "
                f"{found['build_cpu_s']} CPU-s, graph {found['graph_mb']} MB | beam "
                f"{b['expansion_search']}, {b['candidates']} candidates: recall@10 "
                f"{b['recall@10']:.4f} (vs int8 {b['recall@10_int8']:.4f}), "
                f"search + re-score CPU p50 {b['cpu_p50_ms']:.2f} ms",
                flush=True,
            )
    report["load_after"] = C.loadavg()
    path = C.write_json("first_stage", report, merge=False)
    print(f"wrote {path.relative_to(ROOT)}  (load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
