"""The SQL tool's worker: how fast it ends when its owner is killed, how much address space
it needs, and what an agent alternating one-note adds and SQL calls costs the server.

    .venv/bin/python bench/sql.py                     # all three, this checkout
    .venv/bin/python bench/sql.py alternate --baseline-src /work/main/src
    .venv/bin/python bench/sql.py orphan --runs 9

* ``orphan``: a process (tests/support/sql_owner.py) runs a query that would take hours; it is
  killed with SIGKILL and the worker it left is watched (/proc, every 2 ms) until it is
  gone; its spill folder must be gone too. Seconds from the kill, median of the runs.
* ``space``: a workspace of ``--notes`` notes, a fresh worker per query with no
  address-space limit, typical and worst-case queries (spilling joins, big sorts, a
  query past the memory limit); the worker's VmPeak and DuckDB memory limit per query.
  VmPeak minus the memory limit is what ADDRESS_SPACE_BASE must cover.
* ``alternate``: a 10,000-note workspace; ``--rounds`` times, add one note then run one
  SQL call. Per call: wall seconds, this process's and the worker's CPU seconds, whether
  a new worker was started, and the bytes the worker read (for a new worker, its start
  included). Run in
  a child process per source tree, so ``--baseline-src`` measures another checkout the
  same way (a copy of the same database file).

Writes bench/results/sql.json with the machine description.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OWNER = ROOT / "tests" / "support" / "sql_owner.py"

QUERIES = {
    "count": "SELECT count(*) FROM kb_chunks",
    "group_json": "SELECT json_extract_string(metadata, '$.tag') t, count(*) FROM kb_chunks"
    " GROUP BY t ORDER BY t",
    "like": "SELECT document_id FROM kb_chunks WHERE text LIKE '%note 77 %' LIMIT 5",
    "regexp": "SELECT count(*) FROM kb_chunks WHERE regexp_matches(text, 'her.n+s\\s+and')",
    "string_agg": "SELECT length(string_agg(text, ' ')) FROM kb_chunks",
    "self_join": "SELECT count(*) FROM kb_chunks a JOIN kb_chunks b ON a.chunk_index ="
    " b.chunk_index",
    "spill_join": "SELECT count(*) FROM range(100000000) a(i) JOIN range(100000000) b(j) ON i = j",
    "big_distinct": "SELECT count(*) FROM (SELECT DISTINCT i % 50000000 FROM"
    " range(100000000) t(i))",
    "window": "SELECT max(x) FROM (SELECT sum(i) OVER (ORDER BY i DESC) x FROM"
    " range(30000000) t(i))",
    "sort": "SELECT count(*) FROM (SELECT i FROM range(50000000) t(i) ORDER BY i % 1000, i DESC)",
    "past_memory_limit": "SELECT len(list(i)) FROM range(100000000) t(i)",
}


def proc_status(pid: int) -> dict[str, int]:
    """VmPeak, VmHWM (MiB) of a process."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmPeak", "VmHWM"):
            out[key + "_mib"] = int(value.split()[0]) // 1024
    return out


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def build(db: Path, notes: int) -> None:
    """A workspace of ``notes`` ~650-character notes (one chunk each), fake embedder."""
    import hybridkb

    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("notes")
        text = "about herons and egrets wading in the marsh " * 14
        for at in range(0, notes, 1000):
            batch = range(at, min(notes, at + 1000))
            coll.add_texts(
                [f"note {i} {text}" for i in batch],
                metadatas=[{"tag": f"t{i % 7}", "n": i} for i in batch],
            )


# -- orphan --------------------------------------------------------------------------


def bench_orphan(work: Path, runs: int) -> dict[str, Any]:
    times, left = [], 0
    for n in range(runs):
        temp = work / f"orphan-{n}"
        temp.mkdir()
        owner = subprocess.Popen(
            [sys.executable, str(OWNER), str(temp / "kb.duckdb")],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "TMPDIR": str(temp), "HF_HUB_OFFLINE": "1"},
        )
        assert owner.stdout is not None
        found = json.loads(owner.stdout.readline())
        worker = int(found["pid"])
        owner.kill()
        killed = time.monotonic()
        owner.wait()
        while running(worker) and time.monotonic() - killed < 60:
            time.sleep(0.002)
        times.append(time.monotonic() - killed)
        if running(worker):
            os.kill(worker, 9)
        left += Path(found["spill"]).exists()
        print(f"orphan run {n + 1}: worker gone {times[-1] * 1000:.0f} ms after the kill")
    return {
        "runs": runs,
        "exit_after_kill_ms": [round(t * 1000, 1) for t in times],
        "median_ms": round(statistics.median(times) * 1000, 1),
        "spill_folders_left": left,
    }


# -- space ---------------------------------------------------------------------------


def bench_space(work: Path, notes: int) -> dict[str, Any]:
    import hybridkb
    from hybridkb.sql import tool as sql_tool
    from hybridkb.sql.tool import engine_for

    db = work / "space.duckdb"
    build(db, notes)
    sql_tool.address_space = lambda memory: 0  # no limit: measure what it takes
    out: dict[str, Any] = {"notes": notes, "queries": {}}
    with hybridkb.connect(db, model="fake", enable_sql_tool=True) as kb:
        engine = engine_for(kb)
        for name, sql in {"load_only": "SELECT 1", **QUERIES}.items():
            engine.stop()  # a fresh worker: its own peak
            started = time.monotonic()
            try:
                result = str(kb.sql(sql, timeout=300).rows)[:40]
            except Exception as exc:  # noqa: BLE001 - the error is the result
                result = f"error: {str(exc)[:70]}"
            proc = engine.proc
            status = proc_status(proc.pid) if proc is not None and proc.poll() is None else {}
            memory = engine.memory >> 20
            row: dict[str, Any] = {
                **status,
                "memory_limit_mib": memory,
                "seconds": round(time.monotonic() - started, 1),
            }
            row["over_memory_limit_mib"] = status.get("VmPeak_mib", 0) - memory
            row["result"] = result
            out["queries"][name] = row
            print(f"space {name}: {row}")
        out["rows_json_mib"] = round((engine.held.sent if engine.held else 0) / 2**20, 1)
        engine.stop()
    out["worst_over_memory_limit_mib"] = max(
        q["over_memory_limit_mib"] for q in out["queries"].values()
    )
    return out


# -- alternate -----------------------------------------------------------------------


def alternate_child(db: str, rounds: int) -> None:
    """In a child process (PYTHONPATH picks the source tree): the alternation itself."""
    import hybridkb
    from hybridkb.sql.tool import engine_for

    def rchar(pid: int) -> int:
        io = Path(f"/proc/{pid}/io").read_text()
        return int(next(x for x in io.splitlines() if x.startswith("rchar")).split()[1])

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def worker_cpu(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    calls = []
    with hybridkb.connect(db, model="fake", enable_sql_tool=True) as kb:
        kb.sql("SELECT 1", timeout=300)  # the first load is not measured
        engine = engine_for(kb)
        for n in range(rounds):
            proc = engine.proc
            assert proc is not None
            before, before_cpu = rchar(proc.pid), worker_cpu(proc.pid)
            kb.collection("notes").add_texts([f"one more note {n}"])
            wall, spent = time.perf_counter(), cpu()
            rows = kb.sql("SELECT count(*) FROM kb_documents", timeout=300).rows
            wall, spent = time.perf_counter() - wall, cpu() - spent
            now = engine.proc
            assert now is not None
            new = now.pid != proc.pid
            read = rchar(now.pid) - (0 if new else before)
            used = worker_cpu(now.pid) - (0 if new else before_cpu)
            calls.append(
                {"wall_s": wall, "cpu_s": spent, "worker_cpu_s": used, "new_worker": new,
                 "read": read}
            )  # fmt: skip
            assert rows[0][0] > 0
        engine.stop()
    print(json.dumps(calls))


def bench_alternate(work: Path, rounds: int, notes: int, sources: dict[str, str]) -> Any:
    seed = work / "alternate.duckdb"
    build(seed, notes)
    out: dict[str, Any] = {"notes": notes, "rounds": rounds}
    for label, src in sources.items():
        db = work / f"alternate-{label}.duckdb"
        shutil.copyfile(seed, db)
        env = {**os.environ, "PYTHONPATH": src, "HF_HUB_OFFLINE": "1"}
        done = subprocess.run(
            [sys.executable, __file__, "alternate-child", str(db), str(rounds)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        calls = json.loads(done.stdout.strip().splitlines()[-1])
        out[label] = {
            "src": src,
            "median_wall_s": round(statistics.median(c["wall_s"] for c in calls), 3),
            "median_cpu_s": round(statistics.median(c["cpu_s"] for c in calls), 3),
            "median_worker_cpu_s": round(statistics.median(c["worker_cpu_s"] for c in calls), 3),
            "new_workers": sum(c["new_worker"] for c in calls),
            "median_worker_read_kib": round(statistics.median(c["read"] for c in calls) / 1024),
        }
        print(f"alternate {label}: {out[label]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=["orphan", "space", "alternate"])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline-src", help="another checkout's src/ to measure alike")
    args = parser.parse_args()
    if args.parts[:1] == ["alternate-child"]:
        alternate_child(args.parts[1], int(args.parts[2]))
        return
    from _common import cpu_note, machine, write_json

    from hybridkb.machine import describe

    print(describe())
    print(cpu_note())
    results: dict[str, Any] = {"machine": machine(), "cpu_note_before": cpu_note()}
    with tempfile.TemporaryDirectory(prefix="hkb-sql-bench-") as tmp:
        work = Path(tmp)
        if "orphan" in args.parts:
            results["orphan"] = bench_orphan(work, args.runs)
        if "space" in args.parts:
            results["space"] = bench_space(work, args.notes)
        if "alternate" in args.parts:
            sources = {"this": str(ROOT / "src")}
            if args.baseline_src:
                sources["baseline"] = args.baseline_src
            results["alternate"] = bench_alternate(work, args.rounds, args.notes, sources)
    results["cpu_note_after"] = cpu_note()
    print(cpu_note())
    print(f"wrote {write_json('sql', results)}")


if __name__ == "__main__":
    main()
