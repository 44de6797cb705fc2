"""Cold `hybridkb search` and `hybridkb mcp` start, A/B between source trees, interleaved.

    git archive <commit> src | tar -x -C /tmp/before
    .venv/bin/python bench/cold_ab.py --rounds 8 before=/tmp/before/src after=src

For a change to imports (what a fresh process loads): each round runs, for every tree
in turn (the order alternates between rounds), one cold ``hybridkb search --json`` on a
small collection (the packaged model; its ONNX graph prepared once beforehand), one
``hybridkb mcp --read-only`` spawn up to its ``tools/list`` answer, and one
``python -X importtime -c "import hybridkb.cli.commands"``. Reports medians: wall seconds, CPU
seconds (user + system, which a loaded machine inflates less than wall time), modules
imported by ``import hybridkb.cli.commands`` and the sum of their own import times. Minutes, not
hours: no 100k collection (``bench/search.py --only cold`` has that). Prints JSON with
the machine description; writes nothing.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

import argparse
import json
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine

PYTHON = sys.executable
TEXTS = [
    "Straight-line depreciation spreads the cost evenly over the years.",
    "Annual leave accrues monthly and carries over.",
    "Vitamin D deficiency and tuberculosis.",
] + [f"note {i} on topic {i % 7}" for i in range(60)]


def _env(src: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
    return {**env, "HF_HUB_OFFLINE": "1", "PYTHONPATH": src}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_db(db: Path, src: str) -> None:
    """A small collection, searched once by its writer (which saves the index snapshot)."""
    code = (
        "import sys, json, hybridkb\n"
        "with hybridkb.connect(sys.argv[1]) as kb:\n"
        "    kb.create_collection('notes').add_texts(json.loads(sys.argv[2]))\n"
        "    kb.search('depreciation')\n"
    )
    subprocess.run(
        [PYTHON, "-c", code, str(db), json.dumps(TEXTS)], env=_env(src), check=True, cwd=db.parent
    )


def cold_search(db: Path, src: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``hybridkb search`` in a fresh process."""
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        [PYTHON, "-m", "hybridkb", "--db", str(db), "search", "notes", "vitamin D", "--json"],
        env=_env(src), capture_output=True, text=True, cwd=db.parent, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - start
    if done.returncode != 0 or "Vitamin" not in done.stdout:
        raise SystemExit(f"search failed: {done.stderr[-500:]}")
    return wall, _children_cpu() - cpu


def mcp_tools_list(db: Path, src: str) -> tuple[float, float]:
    """(wall, server CPU) seconds from spawning ``hybridkb mcp`` to its tools/list answer."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [PYTHON, "-m", "hybridkb", "--db", str(db), "mcp", "--read-only"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=_env(src), cwd=db.parent, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        proc.stdin.flush()

    client = {"name": "bench", "version": "0"}
    send({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
          "capabilities": {}, "clientInfo": client}})  # fmt: skip
    proc.stdout.readline()
    send({"method": "notifications/initialized"})
    send({"id": 2, "method": "tools/list"})
    line = proc.stdout.readline()
    wall = time.perf_counter() - start
    cpu = _process_cpu(proc.pid)
    proc.stdin.close()
    proc.wait(timeout=120)
    if '"tools"' not in line:
        raise SystemExit(f"tools/list failed: {line[:300]}")
    return wall, cpu


def cli_imports(src: str) -> tuple[int, float]:
    """Modules ``import hybridkb.cli.commands`` loads, and the sum of their own import seconds."""
    done = subprocess.run(
        [PYTHON, "-X", "importtime", "-c", "import hybridkb.cli.commands"],
        env=_env(src), capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [
        line.split(":", 1)[1].split("|")
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "self [us]" not in line
    ]
    return len(rows), sum(int(row[0]) for row in rows) / 1e6


def main() -> None:
    """Run the rounds and print one JSON object of medians per tree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="label=path to a src folder")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    trees = dict(tree.split("=", 1) for tree in args.trees)
    db = Path(tempfile.mkdtemp(prefix="hkb-cold-ab-")) / "kb.duckdb"
    make_db(db, next(iter(trees.values())))
    runs: dict[str, dict[str, list[Any]]] = {t: {"search": [], "mcp": [], "cli": []} for t in trees}
    for round_ in range(args.rounds):
        order = list(trees.items())
        for label, src in order if round_ % 2 == 0 else reversed(order):
            runs[label]["search"].append(cold_search(db, src))
            runs[label]["mcp"].append(mcp_tools_list(db, src))
            runs[label]["cli"].append(cli_imports(src))

    def median(rows: list[Any], i: int) -> float:
        return round(statistics.median(row[i] for row in rows), 3)

    report = {
        label: {
            "search_wall_s": median(r["search"], 0),
            "search_cpu_s": median(r["search"], 1),
            "mcp_tools_list_wall_s": median(r["mcp"], 0),
            "mcp_cpu_at_tools_list_s": median(r["mcp"], 1),
            "import_cli_modules": r["cli"][0][0],
            "import_cli_self_s": median(r["cli"], 1),
        }
        for label, r in runs.items()
    }
    print(json.dumps({"rounds": args.rounds, "results": report, "machine": machine()}, indent=1))


if __name__ == "__main__":
    main()
