"""Where a hybrid search's second leg runs: a thread of its own, the caller, or as measured.

Run::

    .venv/bin/python bench/leg_thread.py                                  # SciFact
    .venv/bin/python bench/leg_thread.py --db /tmp/hkb-bench-0/bench-100k.duckdb --collection bench

A hybrid search runs its vector side (the query's embedding, the vector leg) in a thread
beside its keyword leg when that pays, and ``search/legs.py``'s helper decides per kind of
search by timing both ways as searches run. This bench times, in one process on one
collection, three ways in blocks of searches alternating ABC-CBA (the first search of a
block dropped): ``adaptive`` (the helper as shipped), ``thread`` (always a thread) and
``caller`` (always in the caller, after the keyword leg). Query vectors are precomputed, as
in bench/search.py (SciFact's test queries). Prints wall p50/p95 and CPU p50 per way and
the machine; writes bench/results/leg_thread.json (``--out``; runs merge by collection).
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

import argparse
import time
from collections.abc import Callable
from typing import Any

import _common as C
import numpy as np

from hybridkb.search import legs

WAYS = ("adaptive", "thread", "caller")


def way(name: str) -> Callable[..., Any]:
    """``Helper.start`` as the named way runs it."""
    shipped = legs.Helper.start

    def thread(self: legs.Helper, fn: Callable[[], Any], kind: Any = None) -> Any:
        return shipped(self, fn)  # no kind: always a thread

    def caller(self: legs.Helper, fn: Callable[[], Any], kind: Any = None) -> Any:
        return legs.Pending(fn)  # made when the caller asks for its result

    return {"adaptive": shipped, "thread": thread, "caller": caller}[name]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="a DuckDB file (default: bench/search.py's SciFact)")
    ap.add_argument("--collection", default="bench", help="the collection in --db")
    ap.add_argument("--blocks", type=int, default=36, help="blocks of searches, all ways")
    ap.add_argument("--block", type=int, default=20, help="timed searches per block")
    ap.add_argument("--out", default="leg_thread", help="bench/results/<OUT>.json")
    args = ap.parse_args()
    import search

    if args.db:
        db, collection = args.db, args.collection
    else:
        found, collection, _ = search.scifact_source(argparse.Namespace(scifact_db=None))
        db = str(found)
    _, texts, vectors, _ = search.scifact_queries("test")
    s = search.Searcher(db, collection)
    shipped = {name: way(name) for name in WAYS}
    try:
        for i in range(40):  # the index loads and the helper's first measurements
            s.search(texts[i % len(texts)], vectors[i % len(vectors)])
        wall: dict[str, list[float]] = {name: [] for name in WAYS}
        cpu: dict[str, list[float]] = {name: [] for name in WAYS}
        q = 0
        for block in range(args.blocks):
            order = WAYS if (block // len(WAYS)) % 2 == 0 else WAYS[::-1]
            name = order[block % len(WAYS)]
            legs.Helper.start = shipped[name]  # type: ignore[method-assign]
            for j in range(args.block + 1):
                i = q % len(texts)
                q += 1
                began, began_cpu = time.perf_counter(), time.process_time()
                s.search(texts[i], vectors[i])
                if j:  # a block's first search pays for the previous way's state
                    wall[name].append((time.perf_counter() - began) * 1e3)
                    cpu[name].append((time.process_time() - began_cpu) * 1e3)
        legs.Helper.start = shipped["adaptive"]  # type: ignore[method-assign]
    finally:
        s.close()
    rows = [
        {
            "way": name,
            "wall_p50_ms": round(float(np.median(wall[name])), 3),
            "wall_p95_ms": round(float(np.percentile(wall[name], 95)), 3),
            "cpu_p50_ms": round(float(np.median(cpu[name])), 3),
            "searches": len(wall[name]),
        }
        for name in WAYS
    ]
    print(f"machine: {C.cpu_note()}")
    C.print_rows(
        rows,
        ["way", "wall_p50_ms", "wall_p95_ms", "cpu_p50_ms", "searches"],
        f"public hybrid on {db} [{collection}]: where the vector side runs",
    )
    result = {"db": db, "collection": collection, "ways": rows, "machine": C.machine()}
    print("wrote", C.write_json(args.out, {collection: result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
