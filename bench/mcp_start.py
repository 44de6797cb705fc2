"""How long `hybridkb mcp` takes to start as an MCP client launches it, first and later.

    .venv/bin/python bench/mcp_start.py [--later 5] [--out NAME]

The hybridkb it runs is the one this Python imports (PYTHONPATH=/other/checkout/src
compares another checkout).

Spawns the server from the README's Claude Desktop config (venv form), with only the
config's "env", a fresh HOME (so an empty cache and no knowledge base), working folder
`/`, the real packaged model. First launch: spawn -> tools/list, then the first tool
call that needs the model (create a collection from one document: the model graph is
built and int8 judged on this CPU first) and a search. Later starts (same HOME, cache
filled): spawn -> tools/list, and spawn -> the first search answer. CPU seconds are
the server's (user + system), which machine load does not inflate the way it does wall
time (also read at tools/list and at the first search, from /proc: Linux only).
A first use no longer judges int8 before answering (a detached child does, see
embedders/judge.py): after the first launch the bench waits for that judge's verdict and
reports what judging cost (from the verdict's record), before the later starts.
Writes bench/results/mcp_start.json (or ``--out``) with the machine description.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]
sys.path.append(os.path.join(os.path.dirname(_HERE), "tests", "support"))

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, write_json
from mcp_client import StdioClient, readme_configs, spawn_command, spawn_env

import hybridkb
from hybridkb.machine import describe


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_for_verdict(home: Path, timeout: float = 900.0) -> dict[str, Any] | None:
    """The int8 verdict a background judge writes under ``home``'s cache (None if no
    judge runs and none is there, e.g. with a hybridkb that judges in the foreground)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted((home / ".cache" / "hybridkb" / "onnx").glob("*/v*/precision-*.json"))
        if found:
            data: dict[str, Any] = json.loads(found[0].read_text())
            return data
        if not _judge_running(home):
            return None
        time.sleep(0.5)
    raise TimeoutError("no int8 verdict within the timeout")


def _judge_running(home: Path) -> bool:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "hybridkb.embedders.judge" in command and str(home) in command:
                return True
    return False


def launch(home: Path, *, first: bool) -> dict[str, Any]:
    config = next(c for c in readme_configs() if c.client == "Claude Desktop" and c.form == "venv")
    cpu_before = _children_cpu()
    start = time.perf_counter()
    client = StdioClient(
        spawn_command(config, home), spawn_env(config, home), cwd="/",
        stderr_path=home / f"server-{'first' if first else 'later'}.stderr",
    )  # fmt: skip
    client.handshake()
    client.request("tools/list")
    listed = time.perf_counter() - start
    row: dict[str, Any] = {
        "tools_list_s": round(listed, 3),
        "tools_list_cpu_s": round(_cpu_of(client.proc.pid), 2),
    }
    if first:
        error, text = client.call(
            "create_kb_collection", timeout=1200, collection_name="HR",
            documents=str(home / "Documents"),
        )  # fmt: skip
        assert not error, text
        row["first_model_call_s"] = round(time.perf_counter() - start, 1)
    error, text = client.call("search_kb", timeout=1200, query="how many days of annual leave")
    assert not error and "25 days" in text, text
    row["first_search_s"] = round(time.perf_counter() - start, 3)
    row["first_search_cpu_s"] = round(_cpu_of(client.proc.pid), 2)
    assert client.close() == 0, client.stderr_tail()
    row["server_cpu_s"] = round(_children_cpu() - cpu_before, 2)
    if first:
        stderr = (home / "server-first.stderr").read_text(errors="replace")
        row["preparing_lines"] = stderr.count("hybridkb: preparing")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--later", type=int, default=5, help="later starts to time")
    parser.add_argument("--out", default="mcp_start", help="results file name (no .json)")
    args = parser.parse_args()
    print("hybridkb from", Path(hybridkb.__file__).parent, flush=True)
    print("machine:", describe(), "load", os.getloadavg(), flush=True)
    with tempfile.TemporaryDirectory(prefix="hkb-mcp-start-") as tmp:
        home = Path(tmp)
        (home / "Documents").mkdir()
        (home / "Documents" / "leave.md").write_text(
            "# Leave policy\n\nStaff get 25 days of annual leave; unused days carry over.\n"
        )
        load_before = os.getloadavg()[0]
        first = launch(home, first=True)
        print("first launch:", first, flush=True)
        verdict = wait_for_verdict(home)
        if verdict is not None:
            first["judged_in_background"] = {
                k: verdict.get(k) for k in ("took_s", "took_cpu_s", "load", "chosen", "error")
            }
            print("int8 judged in the background:", first["judged_in_background"], flush=True)
        later = [launch(home, first=False) for _ in range(args.later)]
        for row in later:
            print("later start:", row, flush=True)
    summary: dict[str, Any] = {"first": first, "later": later}
    if later:
        summary.update(
            later_tools_list_median_s=statistics.median(r["tools_list_s"] for r in later),
            later_first_search_median_s=statistics.median(r["first_search_s"] for r in later),
            later_tools_list_cpu_median_s=statistics.median(r["tools_list_cpu_s"] for r in later),
            later_first_search_cpu_median_s=statistics.median(
                r["first_search_cpu_s"] for r in later
            ),
        )
    summary |= {
        "hybridkb": str(Path(hybridkb.__file__).parent),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "machine": machine(),
    }
    print({k: v for k, v in summary.items() if k not in ("later", "machine")})
    write_json(args.out, summary, merge=False)


if __name__ == "__main__":
    main()
