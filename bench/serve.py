"""Many clients, one file: what a call through the owner costs, and 4 clients at once.

    .venv/bin/python bench/serve.py            # SciFact corpus, fake embedder

This process opens a fresh DuckDB file (so it is the owner and serves it) and adds the
SciFact corpus with the fake embedder (embedding is not what is measured: the owner
embeds queries either way, and the fake embedder keeps that near zero). Then, with
the same 300 test queries:

* in-process: hybrid searches in the owner's own process (p50, p95);
* through the owner: the same searches from a client process (p50, p95); the
  overhead is the difference of the p50s, measured in this run;
* 4 clients: four client processes searching at once; searches per second overall.

Each on both transports: the Unix socket (the default where there is one) and the
loopback TCP port Windows gets.

Writes bench/results/serve.json with the machine description.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import load_scifact, machine, pct, write_json

import hybridkb

CLIENT = """
import json, sys, time, hybridkb
db, queries, rounds = sys.argv[1], json.loads(sys.stdin.read()), int(sys.argv[2])
kb = hybridkb.connect(db, model="fake")
assert kb.is_client
kb.search(queries[0], k=10)  # connect once before timing
times = []
start = time.perf_counter()
for _ in range(rounds):
    for q in queries:
        t0 = time.perf_counter(); kb.search(q, k=10); times.append(time.perf_counter() - t0)
print(json.dumps({"times": times, "wall": time.perf_counter() - start}))
kb.close()
"""


def _clients(db: Path, queries: list[str], n: int, rounds: int) -> list[dict[str, Any]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(db), str(rounds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(n)
    ]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(queries))
        proc.stdin.close()
    outs = []
    for proc in procs:
        assert proc.stdout is not None
        outs.append(json.loads(proc.stdout.read()))
        proc.wait()
    return outs


def _ms(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(values, 50) * 1000, 3), "p95_ms": round(pct(values, 95) * 1000, 3)}


def _measure(db: Path, queries: list[str], transport: str) -> dict[str, Any]:
    """Owner in this process on ``transport``; in-process, 1 client and 4 clients."""
    kb = hybridkb.connect(db, model="fake", serve_transport=transport)
    assert not kb.is_client
    for q in queries[:20]:
        kb.search(q, k=10)  # warm: indexes built, rows cached
    local: list[float] = []
    for _ in range(3):
        for q in queries:
            t0 = time.perf_counter()
            kb.search(q, k=10)
            local.append(time.perf_counter() - t0)
    one = _clients(db, queries, 1, 3)[0]
    start = time.perf_counter()
    four = _clients(db, queries, 4, 2)
    wall4 = time.perf_counter() - start
    searches4 = sum(len(out["times"]) for out in four)
    remote = one["times"]
    kb.close()
    return {
        "in_process": _ms(local),
        "through_owner": _ms(remote),
        "overhead_p50_ms": round((pct(remote, 50) - pct(local, 50)) * 1000, 3),
        "four_clients": {
            "searches": searches4,
            "wall_s": round(wall4, 2),
            "searches_per_s": round(searches4 / wall4, 1),
            "per_client_p50_ms": [_ms(out["times"])["p50_ms"] for out in four],
        },
        "one_client_searches_per_s": round(len(remote) / one["wall"], 1),
    }


def main() -> None:
    info = machine()
    print(f"machine: {info['cpu']} flags {info['cpu_flags']} load {info['loadavg']}")
    data = load_scifact("test")
    queries = [data.queries[q] for q in sorted(data.qrels)]
    folder = Path(tempfile.mkdtemp(prefix="hkb-serve-"))
    db = folder / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("scifact")
        ids = list(data.corpus)
        coll.add_texts([f"{data.corpus[i][0]} {data.corpus[i][1]}" for i in ids], ids=ids)
        chunks = kb.describe("scifact").chunks
    # unix: the default where it exists; tcp: what Windows gets (127.0.0.1 + token).
    result: dict[str, Any] = {"machine": info, "chunks": chunks}
    for transport in ("unix", "tcp"):
        result[transport] = _measure(db, queries, transport)
        print(transport, json.dumps(result[transport], indent=1), flush=True)
    print(f"wrote {write_json('serve', result, merge=False)}")


if __name__ == "__main__":
    main()
