"""Per-file budgets (issue 25): the worst crafted file and the largest real file per format.

Three parts, each run in child processes so peak memory (ru_maxrss) is the file's own:

- ``crafted``: the attack's files at full size (tests/support/hostilegen.py), each in a folder
  with a good file, added at the default budgets under a 1.5 GB address-space cap
  (tests/support/budget_child.py): the error line, peak RSS and seconds.
- ``real``: the largest real file of each format in ../shared/data/docs, plus large
  files made from real ones that the defaults must pass: a ~1,000-page PDF (the 76-page
  report repeated), a 100,000-row XLSX, a 500 MB log file (read as ingest streams it).
- ``speed``: ``python -m hybridkb add`` of ../shared/data/docs into a scratch database
  with the fake embedder, this checkout against another (``--baseline-src``, e.g.
  /work/main/src), interleaved runs, median seconds.

Usage: python bench/budgets.py [crafted|real|speed ...] [--baseline-src PATH] [--runs N]
       [--only spine.epub rows.csv ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests" / "support"
DOCS = ROOT.parent.parent / "shared" / "data" / "docs"
if not DOCS.exists():
    DOCS = Path("/work/shared/data/docs")
sys.path.insert(0, str(TESTS))  # hostile_cases: the crafted cases
sys.path.insert(0, str(ROOT / "bench"))

CAP_MB = 1536

_LOAD_ONE = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({cap} << 20, {cap} << 20))
from hybridkb.text.files import open_file
from hybridkb.machine import peak_rss_mb
from hybridkb.loaders import STREAMED_EXTENSIONS, load_file, stream_blocks
path = sys.argv[1]
started = time.monotonic()
try:
    with open_file(path) as opened:
        if opened.path.suffix.lower() in STREAMED_EXTENSIONS and opened.size > 16 << 20:
            blocks = sum(1 for _ in stream_blocks(opened))
        else:
            blocks = len(load_file(opened).blocks)
    outcome = f"read: {{blocks}} blocks"
except Exception as exc:
    outcome = f"{{type(exc).__name__}}: {{exc}}"
print(json.dumps({{"outcome": outcome, "seconds": round(time.monotonic() - started, 2),
    "peak_rss_mb": peak_rss_mb()}}))
"""


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{TESTS}", "HF_HUB_OFFLINE": "1"}


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return (
                line.split(":", 1)[1].strip()
                + f", {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
            )
    return "unknown CPU"


def load_in_child(path: Path) -> dict[str, object]:
    run = subprocess.run(
        [sys.executable, "-c", _LOAD_ONE.format(cap=CAP_MB), str(path)],
        capture_output=True, text=True, env=_env(ROOT / "src"), timeout=900, check=False,
    )  # fmt: skip
    if run.returncode != 0:
        return {"outcome": f"child died ({run.returncode}): {run.stderr[-300:]}"}
    return json.loads(run.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def crafted(work: Path, only: list[str]) -> None:
    from hostile_cases import FULL, SMALL

    by_name = {c.name: c for c in SMALL}
    by_name.update({c.name: c for c in FULL})  # full sizes where the suite has them
    for case in by_name.values():
        if only and case.name not in only:
            continue
        folder = work / case.name / "in"
        folder.mkdir(parents=True)
        (folder / "good.txt").write_text("Lemurs live on Madagascar.\n")
        made = time.monotonic()
        case.make(folder / case.name)
        size = (folder / case.name).stat().st_size
        made = time.monotonic() - made
        run = subprocess.run(
            [sys.executable, str(TESTS / "budget_child.py"), str(work / case.name / "kb.duckdb"),
             str(folder), str(CAP_MB)],
            capture_output=True, text=True, env=_env(ROOT / "src"), timeout=900, check=False,
        )  # fmt: skip
        if run.returncode != 0:
            print(f"{case.name:14} {size / 1024:9.0f} KB  child died: {run.stderr[-300:]}")
            continue
        result = json.loads(run.stdout.strip().splitlines()[-1])
        error = next(iter(result["failed"].values()), "(added)")
        print(
            f"{case.name:14} {size / 1024:9.0f} KB  peak {result['peak_rss_mb']:5} MB  "
            f"{result['seconds']:6.1f} s  good added: {result['added'] == ['good.txt']}  "
            f"(made in {made:.0f} s)\n    {error}"
        )


def _large_real_files(work: Path) -> list[Path]:
    import openpyxl
    from pypdf import PdfReader, PdfWriter

    report = DOCS / "pdf" / "failure-after-repair.pdf"
    writer = PdfWriter()
    source = PdfReader(report)
    while len(writer.pages) < 1000:
        for page in source.pages:
            writer.add_page(page)
    pdf = work / "report-1000-pages.pdf"
    with pdf.open("wb") as out:
        writer.write(out)
    workbook = openpyxl.Workbook(write_only=True)
    sheet = workbook.create_sheet("Ledger")
    sheet.append(["date", "account", "description", "amount", "balance"])
    for n in range(100_000):
        sheet.append([f"2024-{n % 12 + 1:02}-01", f"ACC-{n % 97}", f"payment {n}", n * 1.5, n * 3])
    xlsx = work / "ledger-100k-rows.xlsx"
    workbook.save(xlsx)
    log = work / "server-500mb-log.txt"
    line = b"2024-06-01T12:00:00Z INFO request served path=/api/items status=200 ms=12\n"
    with log.open("wb") as out:
        block = line * ((1 << 20) // len(line) + 1)
        while out.tell() < 500 << 20:
            out.write(block)
    return [pdf, xlsx, log]


def real(work: Path) -> None:
    largest: dict[str, Path] = {}
    for path in DOCS.rglob("*"):
        if path.is_file():
            ext = path.suffix.lower()
            if ext not in largest or path.stat().st_size > largest[ext].stat().st_size:
                largest[ext] = path
    for path in [*sorted(largest.values()), *_large_real_files(work)]:
        result = load_in_child(path)
        print(
            f"{path.name[:40]:40} {path.stat().st_size / 1024:9.0f} KB  "
            f"peak {result.get('peak_rss_mb', '?'):>5} MB  {result.get('seconds', '?'):>6} s  "
            f"{str(result['outcome'])[:110]}"
        )


def speed(work: Path, baseline: Path | None, runs: int) -> None:
    sources = {"this": ROOT / "src"}
    if baseline is not None:
        sources["baseline"] = baseline
    times: dict[str, list[float]] = {name: [] for name in sources}
    for run in range(runs):
        for name, src in sources.items():
            db = work / f"{name}-{run}.duckdb"
            env = {**_env(src), "HYBRIDKB_MODEL": "fake", "HYBRIDKB_DB": str(db)}
            env["HYBRIDKB_CACHE_DIR"] = str(work / "cache")
            started = time.monotonic()
            subprocess.run(
                [sys.executable, "-m", "hybridkb", "add", "--create", "Docs", str(DOCS)],
                env=env, cwd=work, capture_output=True, check=False, timeout=600,
            )  # fmt: skip
            times[name].append(time.monotonic() - started)
    for name, values in times.items():
        print(f"add {DOCS} ({name}: {sources[name]}): median {statistics.median(values):.2f} s "
              f"of {runs} ({', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=["crafted", "real", "speed"])
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=[], help="crafted files to run (names)")
    args = parser.parse_args()
    print(_cpu())
    with tempfile.TemporaryDirectory(prefix="hybridkb-budgets-") as tmp:
        for part in args.parts:
            work = Path(tmp) / part
            work.mkdir()
            print(f"-- {part}")
            if part == "crafted":
                crafted(work, args.only)
            elif part == "real":
                real(work)
            elif part == "speed":
                speed(work, args.baseline_src, args.runs)


if __name__ == "__main__":
    main()
