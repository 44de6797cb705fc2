"""SciFact hybrid search latency A/B between source trees, paired query by query.

    git archive <commit> src | tar -x -C /tmp/before
    .venv/bin/python bench/search_ab.py --rounds 5 before=/tmp/before/src after=src

A tree may search a file of its own (``name=path/to/src@path/to/file.duckdb``): when the
trees keep their indexes in different forms, each searches a copy of the same collection
with the snapshot its own code wrote. ``--mode vector`` times the vector mode instead.

On a shared, loaded machine two whole benchmark runs a few minutes apart measure the
load as much as the code. Here each tree runs in a worker process of its own (the
tree on PYTHONPATH), both open the same SciFact collection (bench/search.py's, built by
``bench/search.py --only scifact``) and search with the same precomputed query vectors
(query embedding excluded, as in bench/search.py); the driver sends each query to
every worker in turn (the order alternating), so both see the same moment's load, and
reports per tree the median wall and CPU milliseconds of a public ``coll.search`` in
hybrid mode, and the median of the paired after/before ratios. Prints JSON with the
machine description and writes bench/results/search_ab.json.

Repeated rounds search the same queries again, so whatever a tree remembers of a query's
words counts for it from the second round on; ``--warm train --rounds 1`` times each
query once, in processes that first served the 809 SciFact train queries.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

import argparse
import json
import statistics
import subprocess
from typing import Any

import _common as C

WORKER = """
import json, sys, time
sys.path.append(sys.argv[1])
import search as S
db, name, mode = sys.argv[2], sys.argv[3], sys.argv[4]
s = S.Searcher(db, name, read_only=True)
_, texts, vectors, _ = S.scifact_queries("test")
s.search(texts[0], vectors[0])  # the index load, outside the timings
if sys.argv[5]:  # a process that has served other queries: what it remembers is warm
    _, others, other_vectors, _ = S.scifact_queries(sys.argv[5])
    for j in range(len(others)):
        s.search(others[j], other_vectors[j], mode=mode)
print("ready", len(texts), flush=True)
for line in sys.stdin:
    i = int(line)
    wall, cpu = time.perf_counter(), time.process_time()
    s.search(texts[i], vectors[i], mode=mode)
    print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu]), flush=True)
s.close()
"""


def start(
    src: str, db: str, name: str, mode: str, warm: str = ""
) -> tuple[subprocess.Popen[str], int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
    env.update({"PYTHONPATH": src, "HF_HUB_OFFLINE": "1", "HYBRIDKB_CACHE_DIR": "/tmp/hkb-cache"})
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, _HERE, db, name, mode, warm],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline().split()
    assert ready and ready[0] == "ready", f"{src}: the worker did not start"
    return proc, int(ready[1])


def ask(proc: subprocess.Popen[str], query: int) -> tuple[float, float]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{query}\n")
    proc.stdin.flush()
    wall, cpu = json.loads(proc.stdout.readline())
    return wall * 1000, cpu * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "trees", nargs=2, help="name=path/to/src[@file.duckdb] (the first is the baseline)"
    )
    ap.add_argument("--mode", default="hybrid", choices=["hybrid", "vector", "keyword"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--db", help="a DuckDB file to search (default: bench/search.py's SciFact)")
    ap.add_argument("--collection", default="bench", help="the collection in --db")
    ap.add_argument("--out", default="search_ab", help="bench/results/<OUT>.json")
    ap.add_argument(
        "--warm",
        default="",
        choices=["", "train"],
        help="each worker first searches every query of this SciFact split once (untimed): "
        "a process that has served other queries, whose memos (words, language features) "
        "are warm, timed on queries it has not seen (use --rounds 1)",
    )
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.trees)
    names = list(trees)
    import search

    # Found or built once, here: the workers only read it (read-only, side by side).
    if args.db or all("@" in spec for spec in trees.values()):
        db, collection = args.db or "", args.collection
    else:
        db, collection, _ = search.scifact_source(argparse.Namespace(scifact_db=None))
    workers = {}
    for name, spec in trees.items():
        src, _, own_db = spec.partition("@")
        workers[name] = start(src, own_db or str(db), collection, args.mode, args.warm)
    n = min(args.queries, *(count for _, count in workers.values()))
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(args.rounds):
        for q in range(n):
            order = names if (r + q) % 2 == 0 else names[::-1]
            for name in order:
                times[name].append(ask(workers[name][0], q))
    for proc, _ in workers.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)
    base, other = names
    results: dict[str, Any] = {
        "db": str(db),
        "collection": collection,
        "trees_searched": trees,
        "mode": args.mode,
        "rounds": args.rounds,
        "warmed_with": args.warm or None,
        "queries": n,
        # The workers inherit it: numpy's AVX-512 kernels off (an AVX2-only CPU, numpy's part).
        "NPY_DISABLE_CPU_FEATURES": os.environ.get("NPY_DISABLE_CPU_FEATURES", ""),
        "trees": {},
    }
    for name in names:
        results["trees"][name] = {
            f"{args.mode}_wall_p50_ms": round(statistics.median(w for w, _ in times[name]), 3),
            f"{args.mode}_cpu_p50_ms": round(statistics.median(c for _, c in times[name]), 3),
        }
    for i, what in ((0, "wall"), (1, "cpu")):
        ratios = [b[i] / a[i] for a, b in zip(times[base], times[other], strict=True) if a[i] > 0]
        results[f"paired_{what}_ratio_{other}_over_{base}"] = round(statistics.median(ratios), 3)
    results["machine"] = C.machine()
    print(json.dumps(results, indent=1))
    C.write_json(args.out, results, merge=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
