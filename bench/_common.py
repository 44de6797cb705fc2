"""Helpers shared by bench/search.py and bench/ingest.py.

Machine description, a latency timer (wall clock and process CPU time, p50/p95),
a same-process baseline for a loaded machine, the PASS/FAIL table, the JSON
writer and the SciFact loader. Not a test helper: benches only.

The machine these benches run on is shared. Every latency figure therefore comes
with the process CPU time of the same calls (what the call cost when it got the
CPU; close to an idle machine's wall time for single-threaded work) and with a
fixed reference workload timed in the same process (``baseline``), so two runs
under different loads can be compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _scratch() -> Path:
    """The benches' folder for knowledge bases and work files, this user's alone:
    ``HYBRIDKB_BENCH_DIR``, else ``<temp>/hkb-bench-<uid>`` (made 0700, checked).
    hybridkb refuses a knowledge base whose folder others may write (``/tmp`` itself),
    and a fixed name in ``/tmp`` may be another user's."""
    from hybridkb.private_files import private_folder, temp_folder

    named = os.environ.get("HYBRIDKB_BENCH_DIR")
    folder = Path(named) if named else temp_folder() / f"hkb-bench-{os.getuid()}"
    return private_folder(folder, secret=True, fix="or set HYBRIDKB_BENCH_DIR to a folder of yours")


SCRATCH = _scratch()
RESULTS = ROOT / "bench" / "results"
SCIFACT = Path(os.environ.get("HYBRIDKB_BENCH_SCIFACT", "/work/shared/data/scifact"))
DEFAULT_MODEL = "all-MiniLM-L6-v2"


# -- the machine ------------------------------------------------------------------------


def engine_of(kb: Any) -> Any:
    """The engine a knowledge base's calls run on (``kb.door``), where a bench swaps the
    query embedder; a source tree from before the engine (issue 33) ran them on ``kb``."""
    return getattr(kb, "door", kb)


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, versions and the load average right now."""
    from hybridkb.machine import cpu_flags, cpu_model

    cpu, flags = cpu_model(), list(cpu_flags())
    mem = _meminfo()
    import duckdb

    versions = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "duckdb": duckdb.__version__,
    }
    for name in (
        "usearch",
        "pyarrow",
        "torch",
        "onnxruntime",
        "sentence_transformers",
        "pypdf",
        "docx",
    ):
        try:
            module = __import__(name)
            versions[name] = str(getattr(module, "__version__", "?"))
        except ImportError:  # optional: a missing module is simply not listed
            continue
    return {
        "git": git_state(),
        "cpu": cpu,
        "cpu_flags": flags,
        "nproc": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "memory_gb": round(mem.get("MemTotal", 0) / 2**30, 1),
        "memory_available_gb": round(mem.get("MemAvailable", 0) / 2**30, 1),
        "platform": platform.platform(),
        "versions": versions,
        "loadavg": list(os.getloadavg()),
    }


# The CPU features that change the int8 / float kernels of the embedder and the vector
# index (hybridkb.machine.KERNEL_FLAGS has the full list): a figure measured with them
# does not carry to a CPU without them, so every figure is printed next to them.
_SHOWN_FLAGS = (
    ("AVX2", ("avx2",)),
    ("AVX-512 VNNI", ("avx512_vnni",)),
    ("AMX", ("amx_int8",)),
    ("NEON dot", ("asimddp",)),
)


def cpu_note() -> str:
    """One short line: the kernel-deciding CPU flags present and absent, and the load now,
    e.g. ``AVX2 yes, AVX-512 VNNI no, AMX no; load 1.9``."""
    from hybridkb.machine import cpu_flags

    have = set(cpu_flags())
    arm = "asimddp" in have or "sve" in have
    parts = [
        f"{label} {'yes' if any(f in have for f in flags) else 'no'}"
        for label, flags in _SHOWN_FLAGS
        if (label == "NEON dot") == arm
    ]
    return f"{', '.join(parts)}; load {loadavg()[0]}"


def git_state() -> dict[str, Any]:
    """Commit of the tree measured and the files of src/ changed since (others work in it)."""
    import subprocess

    def run(*cmd: str) -> str:
        try:
            return subprocess.run(
                ["git", *cmd], cwd=ROOT, capture_output=True, text=True, check=False, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "commit": run("rev-parse", "--short", "HEAD"),
        "src_changed": [
            line[3:] for line in run("status", "--porcelain", "--", "src").splitlines()
        ],
    }


def expendable() -> None:
    """On a shared machine, let the kernel's OOM killer pick this bench before anyone's work."""
    try:
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def rss_mb() -> float:
    """Resident set size of this process now (MB)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- timing -----------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    return (
        float(np.percentile(np.asarray(values, dtype=np.float64), q))
        if len(values)
        else float("nan")
    )


@dataclass
class Timing:
    """Per-call wall and CPU milliseconds; ``best`` is each item's fastest round."""

    wall: list[float] = field(default_factory=list)  # every call
    cpu: list[float] = field(default_factory=list)
    best: list[float] = field(default_factory=list)  # per item: min wall over rounds
    best_cpu: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        return {
            "p50_ms": round(pct(self.wall, 50), 3),
            "p95_ms": round(pct(self.wall, 95), 3),
            "mean_ms": round(float(np.mean(self.wall)), 3) if self.wall else float("nan"),
            "cpu_p50_ms": round(pct(self.cpu, 50), 3),
            "cpu_p95_ms": round(pct(self.cpu, 95), 3),
            "best_p50_ms": round(pct(self.best, 50), 3),
            "best_p95_ms": round(pct(self.best, 95), 3),
            "best_cpu_p50_ms": round(pct(self.best_cpu, 50), 3),
            "best_cpu_p95_ms": round(pct(self.best_cpu, 95), 3),
            "calls": len(self.wall),
        }


def time_calls(
    fn: Callable[[Any], Any], items: Sequence[Any], *, rounds: int = 3, warmup: int = 5
) -> Timing:
    """Time ``fn(item)`` for every item, ``rounds`` times, one call at a time."""
    for item in list(items)[:warmup]:
        fn(item)
    walls = np.zeros((rounds, len(items)))
    cpus = np.zeros((rounds, len(items)))
    for r in range(rounds):
        for i, item in enumerate(items):
            c0, t0 = time.process_time(), time.perf_counter()
            fn(item)
            walls[r, i] = (time.perf_counter() - t0) * 1000
            cpus[r, i] = (time.process_time() - c0) * 1000
    return Timing(
        wall=walls.ravel().tolist(),
        cpu=cpus.ravel().tolist(),
        best=walls.min(axis=0).tolist(),
        best_cpu=cpus.min(axis=0).tolist(),
    )


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall seconds, process CPU seconds) of one call."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def repeat(fn: Callable[[], Any], n: int = 5) -> dict[str, float]:
    """Median wall and CPU ms of ``n`` calls of ``fn`` (for one-off operations)."""
    walls, cpus = [], []
    for _ in range(n):
        _, w, c = timed(fn)
        walls.append(w * 1000)
        cpus.append(c * 1000)
    return {
        "median_ms": round(statistics.median(walls), 3),
        "min_ms": round(min(walls), 3),
        "cpu_median_ms": round(statistics.median(cpus), 3),
        "runs": n,
    }


_BASE_ROWS = np.random.default_rng(0).standard_normal((5_000, 384)).astype(np.float32)
_BASE_Q = _BASE_ROWS[0].copy()


def _reference_work() -> None:
    # One numpy scan plus some interpreter work: roughly what a search does.
    scores = _BASE_ROWS @ _BASE_Q
    np.argpartition(-scores, 100)[:100]
    total = 0
    for i in range(20_000):
        total += i * i


def baseline(calls: int = 30) -> dict[str, float]:
    """Wall and CPU ms of a fixed workload, measured now, in this process."""
    t = time_calls(lambda _: _reference_work(), list(range(calls)), rounds=1, warmup=3)
    s = t.summary()
    return {"p50_ms": s["p50_ms"], "cpu_p50_ms": s["cpu_p50_ms"], "loadavg": loadavg()}


# -- reporting --------------------------------------------------------------------------


def target(
    name: str,
    value: float | None,
    limit: float,
    unit: str = "ms",
    *,
    higher_is_better: bool = False,
    note: str = "",
) -> dict[str, Any]:
    """One issue target with its measured figure and verdict."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        verdict = "N/A"
    elif higher_is_better:
        verdict = "PASS" if value >= limit else "FAIL"
    else:
        verdict = "PASS" if value <= limit else "FAIL"
    return {
        "target": name,
        "measured": None if value is None else round(float(value), 4),
        "limit": limit,
        "unit": unit,
        "verdict": verdict,
        "note": note,
        "op": ">=" if higher_is_better else "<=",
        "cpu": cpu_note(),  # the flags that decide kernels, and the load when measured
    }


def print_targets(rows: Iterable[dict[str, Any]], title: str = "targets") -> None:
    rows = list(rows)
    print(f"\n== {title} ==")
    width = max([len(r["target"]) for r in rows] + [10])
    for r in rows:
        measured = "-" if r["measured"] is None else f"{r['measured']:g}"
        where = f"[{r['cpu']}]" if r.get("cpu") else ""
        print(
            f"{r['target']:<{width}}  {measured:>10} {r['unit']:<3} {r['op']} {r['limit']:<8g}"
            f" {r['verdict']:<5} {r['note']} {where}".rstrip()
        )


def print_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], title: str = "") -> None:
    if title:
        print(f"\n-- {title} [{cpu_note()}] --")
    if not rows:
        print("(none)")
        return
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=False)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)))


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"
    return str(value)


def write_json(name: str, data: dict[str, Any], *, merge: bool = True) -> Path:
    """Write bench/results/<name>.json; with ``merge`` keep sections this run did not redo."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    out: dict[str, Any] = {}
    if merge and path.exists():
        try:
            out = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            out = {}
    out.update(data)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1, default=_json_default))
    os.replace(tmp, path)
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return str(value)


# -- data -------------------------------------------------------------------------------


def load_scifact(split: str = "test", folder: Path = SCIFACT) -> Any:
    """SciFact through the project's own BEIR loader (``hybridkb.devtools.evaluate.load_beir``)."""
    from hybridkb.devtools.evaluate import load_beir

    return load_beir(folder, split)


def query_ids(data: Any) -> list[str]:
    """The split's queries with text, in qrels order (as ``run_eval`` takes them)."""
    return [q for q in data.qrels if q in data.queries and data.queries[q].strip()]


def embed_cached(
    texts: list[str], model: str = DEFAULT_MODEL, *, backend: str = "torch", tag: str = "q"
) -> np.ndarray:
    """Embed ``texts`` once with hybridkb's own embedder; cached in /tmp by content hash."""
    digest = hashlib.sha256(("\x00".join([model, backend, *texts])).encode()).hexdigest()[:16]
    path = Path("/tmp") / f"hkb-bench-{tag}-{digest}.npy"
    if path.exists():
        return np.load(path)
    from hybridkb.embedders import get_embedder

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    vectors = np.asarray(
        get_embedder(model, device="cpu", backend=backend).embed_documents(texts), dtype=np.float32
    )
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    os.replace(tmp, path)
    return vectors
