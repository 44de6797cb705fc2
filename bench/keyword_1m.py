"""The keyword index alone on a saved snapshot: per-query CPU of ``KeywordIndex.search``
between source trees, paired query by query (issue 36: the keyword leg at 1M chunks).

    git worktree add --detach /tmp/before <commit>
    .venv/bin/python bench/keyword_1m.py --rounds 3 before=/tmp/before/src after=src

Each tree runs in a worker process of its own (the tree on PYTHONPATH) that maps the same
keyword snapshot READ-ONLY (default: bench/search.py's 1M set,
``/tmp/hkb-1m/bench-1m.duckdb.hkbidx/c1.keyword.bin``; ``--snapshot`` for another). The
driver analyses the SciFact test queries (``analyze_query(text, ["en"])``) and sends each
query to every worker in turn, the order alternating, so both see the same moment's
load; a worker times ``search(terms, k)`` in its thread's CPU time. Reported per tree:
p50, p95 and mean of the per-query medians over the rounds, in ms, and the median of the
paired ratios against the first tree; the hits of every tree must equal the first's
(same keys, same order, same float scores) or the run fails. Writes
bench/results/keyword_1m.json (``--section`` names the key).
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import _common as C
import numpy as np

SNAPSHOT = Path("/tmp/hkb-1m/bench-1m.duckdb.hkbidx/c1.keyword.bin")

WORKER = """
import json, sys, time
from hybridkb.index.keywords import KeywordIndex
index = KeywordIndex.load(sys.argv[1])
print(json.dumps({"rows": len(index)}), flush=True)
for line in sys.stdin:
    terms, k = json.loads(line)
    start = time.thread_time()
    hits = index.search(terms, k)
    cpu = time.thread_time() - start
    print(json.dumps({"cpu": cpu, "hits": hits}), flush=True)
"""


def start_worker(src: str, snapshot: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(snapshot)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    json.loads(proc.stdout.readline())  # loaded
    return proc


def ask(proc: subprocess.Popen[str], terms: list[str], k: int) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps([terms, k]) + "\n")
    proc.stdin.flush()
    return dict(json.loads(proc.stdout.readline()))


def summary(ms: np.ndarray) -> dict[str, float]:
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p95_ms": round(float(np.percentile(ms, 95)), 3),
        "mean_ms": round(float(ms.mean()), 3),
        "max_ms": round(float(ms.max()), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+", help="name=path/to/src (the first is the reference)")
    ap.add_argument("--snapshot", type=Path, default=SNAPSHOT)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    ap.add_argument("--section", default="keyword_1m")
    args = ap.parse_args()
    from hybridkb.text.analysis import analyze_query

    data = C.load_scifact("test")
    queries = [analyze_query(data.queries[q], ["en"]) for q in C.query_ids(data)]
    names = [t.split("=", 1)[0] for t in args.trees]
    workers = [start_worker(t.split("=", 1)[1], args.snapshot) for t in args.trees]
    print(C.cpu_note(), flush=True)
    load_before = list(os.getloadavg())
    cpu = np.zeros((len(names), args.rounds, len(queries)))
    started = time.time()
    for r in range(-args.warmup, args.rounds):
        for i, terms in enumerate(queries):
            order = list(range(len(names)))
            if (i + r) % 2:
                order.reverse()
            got = {w: ask(workers[w], terms, args.k) for w in order}
            for w in order:
                if got[w]["hits"] != got[0]["hits"]:
                    raise SystemExit(f"{names[w]} differs from {names[0]} on query {i}")
                if r >= 0:
                    cpu[w, r, i] = got[w]["cpu"] * 1000
    for proc in workers:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    per_query = np.median(cpu, axis=1)
    out: dict[str, Any] = {
        "command": "bench/keyword_1m.py " + " ".join(sys.argv[1:]),
        "snapshot": str(args.snapshot),
        "queries": len(queries),
        "k": args.k,
        "rounds": args.rounds,
        "identical_hits": True,
        "wall_s": round(time.time() - started, 1),
        "cpu_note": C.cpu_note(),
        "loadavg_before": load_before,
        "machine": C.machine(),
        "trees": {},
    }
    for w, name in enumerate(names):
        out["trees"][name] = summary(per_query[w])
        if w:
            ratio = per_query[w] / per_query[0]
            out["trees"][name]["median_ratio_vs_" + names[0]] = round(float(np.median(ratio)), 3)
    print(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=1))
    C.write_json("keyword_1m", {args.section: out})


if __name__ == "__main__":
    main()
