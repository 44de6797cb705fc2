"""Benchmark the analyser and the in-memory BM25 index on SciFact and a 100k corpus.

Prints nDCG@10 (train and test qrels), search latency at 5,183 and 100,000
documents, incremental add/remove cost, build time, memory and save/load time,
and writes everything to bench/results/bm25.json.

Usage:
    python bench/bm25.py [--data /work/shared/data/scifact] [--tune] [--docs 100000]

``--tune`` grid-searches English stop words, k1 and b on the train split and
times queries with and without stop words; the defaults in
``hybridkb.index.keywords`` and ``hybridkb.text.analysis.STOPWORDS`` come from that
run. The test split is never used to choose.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from hybridkb.index.keywords import DEFAULT_B, DEFAULT_K1, KeywordIndex
from hybridkb.text.analysis import STOPWORDS, _clear_cache, analyze, analyze_query, detect_language

Qrels = dict[str, dict[str, int]]


def machine() -> dict[str, Any]:
    """Describe the machine so the numbers can be compared."""
    cpu = platform.processor() or "?"
    with_cpuinfo = Path("/proc/cpuinfo")
    if with_cpuinfo.exists():
        for line in with_cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
    }


def load_scifact(root: Path) -> tuple[dict[str, str], dict[str, str], Qrels, Qrels]:
    """Corpus (title + " " + text), queries, train and test qrels."""
    corpus = {}
    with open(root / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            corpus[str(row["_id"])] = f"{row.get('title', '')} {row['text']}".strip()
    queries = {}
    with open(root / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            queries[str(row["_id"])] = row["text"]

    def qrels(name: str) -> Qrels:
        out: Qrels = {}
        with open(root / "qrels" / name, encoding="utf-8") as fh:
            next(fh)  # header
            for line in fh:
                qid, did, score = line.rstrip("\n").split("\t")
                out.setdefault(qid, {})[did] = int(score)
        return out

    return corpus, queries, qrels("train.tsv"), qrels("test.tsv")


def ndcg_at_10(run: dict[str, list[str]], qrels: Qrels) -> float:
    """Mean nDCG@10 with graded gains and log2 discounts (pytrec_eval's ndcg_cut_10).

    As BEIR does, a hit whose id equals the query id is ignored.
    """
    total = 0.0
    for qid, rels in qrels.items():
        ranked = [d for d in run.get(qid, []) if d != qid][:10]
        dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked))
        ideal = sorted(rels.values(), reverse=True)[:10]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        total += dcg / idcg if idcg else 0.0
    return total / len(qrels)


def percentiles(samples: Sequence[tuple[float, float]]) -> dict[str, float]:
    """p50/p95/max of (wall, cpu) second pairs, in ms.

    CPU time (this process) is reported beside wall time because the bench
    machine is shared: under load, wall time mostly measures the neighbours.
    """
    out = {}
    for name, column in (("wall", 0), ("cpu", 1)):
        ms = sorted(sample[column] * 1e3 for sample in samples)
        out[f"{name}_p50_ms"] = round(statistics.median(ms), 4)
        out[f"{name}_p95_ms"] = round(ms[int(0.95 * (len(ms) - 1))], 4)
        out[f"{name}_mean_ms"] = round(statistics.fmean(ms), 4)
    return out


def timed(fn: Callable[[], Any], repeat: int = 1) -> list[tuple[float, float]]:
    """Run fn repeat times; (wall, cpu) seconds of each run."""
    out = []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        out.append((time.perf_counter() - wall, time.process_time() - cpu))
    return out


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> dict[str, float]:
    return {
        "wall_s": round(time.perf_counter() - start[0], 3),
        "cpu_s": round(time.process_time() - start[1], 3),
    }


def run_queries(
    index: KeywordIndex, qterms: dict[str, list[str]], ids: np.ndarray, k: int = 10
) -> dict[str, list[str]]:
    return {qid: [str(ids[key]) for key, _ in index.search(t, k)] for qid, t in qterms.items()}


def build(doc_terms: list[list[str]], k1: float = DEFAULT_K1, b: float = DEFAULT_B) -> KeywordIndex:
    index = KeywordIndex(k1=k1, b=b)
    index.add(list(range(len(doc_terms))), doc_terms)
    return index


def analyse(
    corpus: dict[str, str], queries: dict[str, str], langs: list[str]
) -> tuple[list[list[str]], dict[str, list[str]]]:
    doc_terms = [analyze(text, lang) for text, lang in zip(corpus.values(), langs, strict=False)]
    collection = sorted(set(langs))
    return doc_terms, {qid: analyze_query(text, collection) for qid, text in queries.items()}


def tune(
    corpus: dict[str, str],
    queries: dict[str, str],
    langs: list[str],
    ids: np.ndarray,
    qrels: Qrels,
    test_ids: Sequence[str],
    n_docs: int,
) -> dict[str, Any]:
    """Grid-search English stop words (on/off), k1 and b on the train split.

    Stop words barely move quality, so the latency each choice costs is measured
    too (test queries, SciFact and n_docs synthetic documents).
    """
    grid = []
    latency_by_stop = {}
    saved = STOPWORDS["en"]
    try:
        for stop in (True, False):
            STOPWORDS["en"] = saved if stop else frozenset()
            _clear_cache()  # analysers cache their stop words
            doc_terms, qterms = analyse(corpus, queries, langs)
            train = {q: qterms[q] for q in qrels}
            for k1 in (0.6, 0.9, 1.2, 1.5, 2.0):
                for b in (0.3, 0.4, 0.5, 0.6, 0.75, 0.9):
                    score = ndcg_at_10(run_queries(build(doc_terms, k1, b), train, ids), qrels)
                    grid.append(
                        {"stopwords": stop, "k1": k1, "b": b, "ndcg10_train": round(score, 4)}
                    )
                    print(f"  stopwords={stop!s:<5} k1={k1:<4} b={b:<5} train nDCG@10={score:.4f}")
            test_terms = [qterms[q] for q in test_ids]
            measured = {
                "mean_query_terms": round(statistics.fmean(len(t) for t in test_terms), 2),
                "scifact_search_k10": latency(build(doc_terms), test_terms, 10),
            }
            if n_docs:
                big = build(synthetic_corpus(doc_terms, n_docs))
                measured[f"synthetic_{n_docs}_search_k10"] = latency(big, test_terms, 10)
            latency_by_stop[f"stopwords={stop}"] = measured
            print(f"  stopwords={stop}: {measured}")
    finally:
        STOPWORDS["en"] = saved
        _clear_cache()
    best = max(grid, key=lambda g: g["ndcg10_train"])
    best_with_stop = max((g for g in grid if g["stopwords"]), key=lambda g: g["ndcg10_train"])
    return {
        "grid": grid,
        "best": best,
        "best_with_stopwords": best_with_stop,
        "latency": latency_by_stop,
    }


def synthetic_corpus(doc_terms: list[list[str]], n_docs: int, seed: int = 7) -> list[list[str]]:
    """n_docs documents sampled from SciFact's term distribution and document lengths.

    Independent sampling has no burstiness, so documents have more distinct
    terms than real text: a pessimistic case for postings size and latency.
    """
    rng = np.random.default_rng(seed)
    counts = Counter(t for doc in doc_terms for t in doc)
    vocab = np.array(list(counts), dtype=object)
    p = np.array(list(counts.values()), dtype=np.float64)
    p /= p.sum()
    lengths = rng.choice([len(d) for d in doc_terms], size=n_docs)
    words = vocab[rng.choice(len(vocab), size=int(lengths.sum()), p=p)].tolist()
    out, pos = [], 0
    for n in lengths.tolist():
        out.append(words[pos : pos + n])
        pos += n
    return out


def latency(index: KeywordIndex, queries: list[list[str]], k: int, **kw: Any) -> dict[str, float]:
    for q in queries[:20]:  # warm caches
        index.search(q, k, **kw)
    return percentiles([t for q in queries for t in timed(partial(index.search, q, k, **kw))])


def scale_bench(
    doc_terms: list[list[str]], query_terms: list[list[str]], n_docs: int
) -> dict[str, Any]:
    """Build, search, add, remove, save and load at n_docs synthetic documents."""
    docs = synthetic_corpus(doc_terms, n_docs + 2_000)
    base, extra = docs[:n_docs], docs[n_docs:]
    gc.collect()
    tracemalloc.start()
    start = clock()
    index = build(base)
    result: dict[str, Any] = {"docs": n_docs, "build": since(start)}
    result["index_memory_mb"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
    tracemalloc.stop()
    result["postings"] = sum(len(set(d)) for d in base)
    result["terms"] = len({t for d in base for t in d})
    result["search_k10"] = latency(index, query_terms, 10)
    result["search_k100"] = latency(index, query_terms, 100)
    rng = np.random.default_rng(3)
    allowed = np.sort(rng.choice(n_docs, size=n_docs // 10, replace=False)).astype(np.int64)
    result["search_k10_allowed_10pct"] = latency(index, query_terms, 10, allowed=allowed)
    result["matching"] = percentiles(
        [t for q in query_terms for t in timed(partial(index.matching, q))]
    )

    # 200 rounds of: add 10 new documents, search, remove 10 old ones. Means
    # include the amortised merges and compactions.
    next_key = n_docs
    adds, removes, after = [], [], []
    for i in range(200):
        at = (i * 10) % len(extra)
        batch = extra[at : at + 10]
        keys = list(range(next_key, next_key + len(batch)))
        next_key += len(batch)
        query = query_terms[i % len(query_terms)]
        victims = rng.choice(n_docs, size=10, replace=False).tolist()
        adds += timed(partial(index.add, keys, batch))
        after += timed(partial(index.search, query, 10))
        removes += timed(partial(index.remove, victims))
    result["add_10_docs"] = percentiles(adds)
    result["remove_10_docs"] = percentiles(removes)
    result["search_k10_between_writes"] = percentiles(after)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kw.idx"
        start = clock()
        index.save(path)
        result["save"] = since(start)
        result["file_mb"] = round(path.stat().st_size / 2**20, 1)
        start = clock()
        loaded = KeywordIndex.load(path)
        result["load"] = since(start)
        result["load_identical"] = all(
            loaded.search(q, 10) == index.search(q, 10) for q in query_terms[:50]
        )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/scifact"))
    parser.add_argument("--docs", type=int, default=100_000, help="synthetic corpus size")
    parser.add_argument(
        "--tune", action="store_true", help="grid-search stop words, k1, b on train"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "bm25.json")
    args = parser.parse_args(argv)

    report: dict[str, Any] = {"machine": machine(), "k1": DEFAULT_K1, "b": DEFAULT_B}
    print(f"machine: {report['machine']}")
    corpus, queries, train_qrels, test_qrels = load_scifact(args.data)
    ids = np.array(list(corpus), dtype=object)

    start = clock()
    # As the core does: one language per document, from its first 4,000 characters.
    langs = [detect_language(text[:4000]) for text in corpus.values()]
    detect = since(start)
    start = clock()
    doc_terms = [analyze(text, lang) for text, lang in zip(corpus.values(), langs, strict=False)]
    analysis = since(start)
    start = clock()
    collection = sorted(set(langs))
    qterms = {qid: analyze_query(text, collection) for qid, text in queries.items()}
    query_analysis = since(start)
    chars = sum(len(t) for t in corpus.values())
    report["analysis"] = {
        "docs": len(corpus),
        "detect_ms_per_doc_cpu": round(1e3 * detect["cpu_s"] / len(corpus), 3),
        "analyze_mb_per_s_cpu": round(chars / analysis["cpu_s"] / 1e6, 2),
        "analyze_query_ms_cpu": round(1e3 * query_analysis["cpu_s"] / len(queries), 3),
        "languages": dict(Counter(langs).most_common()),
        "mean_terms_per_doc": round(statistics.fmean(len(d) for d in doc_terms), 1),
    }
    print(f"analysis: {report['analysis']}")

    if args.tune:
        print("tuning on train:")
        report["tuning"] = tune(
            corpus, queries, langs, ids, train_qrels, list(test_qrels), args.docs
        )
        print(f"best on train: {report['tuning']['best']}")

    train = {q: qterms[q] for q in train_qrels}
    test = {q: qterms[q] for q in test_qrels}
    start = clock()
    index = build(doc_terms)
    report["scifact"] = {
        "build": since(start),
        "ndcg10_train": round(ndcg_at_10(run_queries(index, train, ids), train_qrels), 4),
        "ndcg10_test": round(ndcg_at_10(run_queries(index, test, ids), test_qrels), 4),
        "mean_query_terms": round(statistics.fmean(len(t) for t in test.values()), 1),
    }
    test_terms = list(test.values())
    report["scifact"]["search_k10"] = latency(index, test_terms * 3, 10)
    report["scifact"]["search_k100"] = latency(index, test_terms * 3, 100)
    print(f"scifact: {report['scifact']}")

    if args.docs:
        key = f"synthetic_{args.docs}"
        report[key] = scale_bench(doc_terms, test_terms, args.docs)
        print(f"synthetic {args.docs}: {report[key]}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
