"""Keyword search against its peers on the same texts: SQLite FTS5 and, if installed, bm25s.

Run::

    .venv/bin/python bench/keyword_peers.py              # SciFact test queries, 5 rounds
    .venv/bin/python bench/keyword_peers.py --rounds 3 --depth 10

Issue 36 measured bm25s answering SciFact's keyword queries in 0.55 ms against our 0.97,
and SQLite FTS5 NFCorpus's in 0.29 against our 0.66. This bench puts the same texts
(the chunks of bench/search.py's SciFact collection, one per abstract) into an
in-memory FTS5 table (``porter unicode61``, ranked by its ``bm25()``) and, when the
``bm25s`` package is importable, into a bm25s index (its own tokenizer and English
stop words); our side is the collection as users open it. Each query goes to every
system in turn (the order rotating per query, so all see the same moment's load) for
``--rounds`` rounds, and each call is timed on the calling thread's CPU clock and the
wall clock; then each system answers all queries in a block of its own (its caches
undisturbed by the others), best round's mean CPU. Reported per system: p50 wall and
CPU per query interleaved, the block mean, and nDCG@10 at document
level against SciFact's test qrels (the systems rank differently: a faster system that
ranks worse is not a win).

Systems, each answering with its top ``--depth`` (100: what a hybrid search asks a leg for):
* ``hybridkb keyword leg``: query analysis (``analyze_query``) + ``Storage.keyword_search``,
  the unit FTS5's ``MATCH ... ORDER BY bm25 LIMIT`` and bm25s' ``retrieve`` compare to.
* ``hybridkb public keyword``: ``Collection.search(mode="keyword")`` with k=10: analysis,
  the leg, and the cited hits (rows, metadata) a caller gets.
* ``sqlite fts5``: the query's words, quoted, ORed (FTS5's syntax would otherwise take
  words like NOT or a hyphen as operators).
* ``bm25s``: ``retrieve`` of its tokenized query (skipped when not installed: the dev
  venv does not declare it).

Writes bench/results/keyword_peers.json.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import re
import sqlite3
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import _common as C
import search as S

from hybridkb.devtools.evaluate import ndcg_at_k
from hybridkb.storage.duckdb.schema import table_names
from hybridkb.text.analysis import analyze_query

WORD = re.compile(r"\w+")

System = Callable[[str], list[str]]  # a query -> document ids, best first


def fts5_system(texts: Sequence[str], doc_ids: Sequence[str], depth: int) -> System:
    con = sqlite3.connect(":memory:", check_same_thread=False)
    con.execute("CREATE VIRTUAL TABLE f USING fts5(body, tokenize='porter unicode61')")
    con.executemany("INSERT INTO f(rowid, body) VALUES (?, ?)", enumerate(texts))
    con.execute("INSERT INTO f(f) VALUES ('optimize')")

    def search(query: str) -> list[str]:
        words = WORD.findall(query.lower())
        if not words:
            return []
        match = " OR ".join(f'"{w}"' for w in words)
        rows = con.execute(
            "SELECT rowid FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (match, depth)
        ).fetchall()
        return [doc_ids[r[0]] for r in rows]

    return search


def bm25s_system(texts: Sequence[str], doc_ids: Sequence[str], depth: int) -> System | None:
    try:
        import bm25s  # optional peer, not a declared dependency
    except ImportError:
        return None
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False))

    def search(query: str) -> list[str]:
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        found, _ = retriever.retrieve(tokens, k=min(depth, len(texts)), show_progress=False)
        return [doc_ids[int(i)] for i in found[0]]

    return search


def ours(searcher: S.Searcher, depth: int) -> tuple[System, System]:
    storage, record = searcher.storage, searcher.record
    doc_of = searcher.doc_of_key()

    def leg(query: str) -> list[str]:
        terms = analyze_query(query, searcher.languages)
        return [doc_of[key] for key, _ in storage.keyword_search(record, terms, depth, None)]

    def public(query: str) -> list[str]:
        return [h.document_id for h in searcher.coll.search(query, k=10, mode="keyword")]

    return leg, public


def corpus_of(searcher: S.Searcher) -> tuple[list[str], list[str]]:
    t = table_names(searcher.record.id)
    rows = searcher.storage.query(f"SELECT document_id, text FROM {t['chunks']} ORDER BY key")
    return [r[1] for r in rows], [r[0] for r in rows]


def measure(
    systems: dict[str, System], queries: list[str], rounds: int
) -> dict[str, dict[str, list[float]]]:
    names = list(systems)
    times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in names}
    for r in range(rounds):
        for i, query in enumerate(queries):
            shift = (i + r) % len(names)
            for name in names[shift:] + names[:shift]:
                wall, cpu = time.perf_counter(), time.thread_time()
                systems[name](query)
                times[name]["cpu"].append(time.thread_time() - cpu)
                times[name]["wall"].append(time.perf_counter() - wall)
    return times


def measure_blocks(systems: dict[str, System], queries: list[str], rounds: int) -> dict[str, float]:
    """Each system answers every query in one block (the blocks' order rotating per
    round): its caches stay its own, as in a process that only does this. Best round's
    mean CPU seconds per query."""
    names = list(systems)
    best = dict.fromkeys(names, float("inf"))
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            cpu = time.thread_time()
            for query in queries:
                systems[name](query)
            best[name] = min(best[name], (time.thread_time() - cpu) / len(queries))
    return best


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--depth", type=int, default=100)
    args = ap.parse_args(argv)
    print(f"# keyword peers [{C.cpu_note()}]", flush=True)
    db, name, kind = S.scifact_source(argparse.Namespace(scifact_db=None))
    searcher = S.Searcher(db, name, read_only=True)
    data = C.load_scifact("test")
    qids = C.query_ids(data)
    queries = [data.queries[q] for q in qids]
    texts, doc_ids = corpus_of(searcher)
    leg, public = ours(searcher, args.depth)
    systems: dict[str, System] = {
        "hybridkb keyword leg": leg,
        "hybridkb public keyword": public,
        "sqlite fts5": fts5_system(texts, doc_ids, args.depth),
    }
    peer = bm25s_system(texts, doc_ids, args.depth)
    if peer is not None:
        systems["bm25s"] = peer
    else:
        print("  bm25s is not installed: measured without it (pip install bm25s)", flush=True)
    for fn in systems.values():  # warm caches, analysers and the row cache
        for q in queries[:20]:
            fn(q)
    quality = {
        n: round(statistics.mean(ndcg_at_k(fn(data.queries[q]), data.qrels[q]) for q in qids), 4)
        for n, fn in systems.items()
    }
    times = measure(systems, queries, args.rounds)
    blocks = measure_blocks(systems, queries, args.rounds)
    out: dict[str, Any] = {
        "machine": C.machine(),
        "collection": {"db": str(db), "kind": kind, "texts": len(texts)},
        "queries": len(queries),
        "rounds": args.rounds,
        "depth": args.depth,
        "systems": {},
    }
    base = statistics.median(times["sqlite fts5"]["cpu"])
    for n in systems:
        wall, cpu = statistics.median(times[n]["wall"]), statistics.median(times[n]["cpu"])
        out["systems"][n] = {
            "wall_p50_ms": round(wall * 1e3, 3),
            "cpu_p50_ms": round(cpu * 1e3, 3),
            "cpu_over_fts5": round(cpu / base, 3),
            "block_cpu_mean_ms": round(blocks[n] * 1e3, 3),
            "ndcg@10": quality[n],
        }
        print(
            f"  {n:<26} interleaved: wall p50 {wall * 1e3:6.3f} ms, cpu p50 {cpu * 1e3:6.3f} ms "
            f"(x{cpu / base:.2f} of fts5); in a block: cpu mean {blocks[n] * 1e3:6.3f} ms; "
            f"nDCG@10 {quality[n]:.4f}",
            flush=True,
        )
    out["loadavg_end"] = C.loadavg()
    searcher.close()
    print(f"wrote {C.write_json('keyword_peers', out, merge=False)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
