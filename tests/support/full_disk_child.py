"""Runs one writing operation on a disk that fills up, then again once there is room,
and prints what happened as one JSON line (used by test_full_disk.py).

Usage: python full_disk_child.py SCENARIO FOLDER

The full disk is a file-size limit (RLIMIT_FSIZE) set after the knowledge base was
built: a write past it fails with EFBIG ("File too large") as a write to a full disk
fails with ENOSPC, through the same error paths, and any user can set it. SIGXFSZ is
ignored so the write fails instead of killing the process. Raising the limit again is
the user freeing space.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hybridkb
from hybridkb.errors import KBError
from hybridkb.storage.transfer import copy_kb

NOTES = [f"note {i} about subject {i % 7} " + "filler words " * 60 for i in range(300)]
IDS = [f"n{i}" for i in range(300)]


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def limit(size: int | None) -> None:
    """Let no file of this process grow past ``size`` bytes (None: no limit)."""
    soft = resource.RLIM_INFINITY if size is None else size
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY))


def attempt(fn: Callable[[], object]) -> str:
    """'ok', or the one-line message of the KBError ``fn`` raised."""
    try:
        fn()
    except KBError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def build(db: Path, *, churn: bool = False) -> None:
    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("Docs")
        coll.add_texts(NOTES, ids=IDS)
        if churn:  # dead space for compact to reclaim
            coll.delete(IDS[::2])


def compact(folder: Path) -> dict[str, Any]:
    db = folder / "kb.duckdb"
    build(db, churn=True)
    kb = hybridkb.connect(db, model="fake")
    limit(64 << 10)  # the compacted copy needs more: it fails part-way
    first = attempt(lambda: kb.compact())
    second = attempt(lambda: kb.compact())
    left = files(folder)
    limit(None)
    third = attempt(lambda: kb.compact())
    after = attempt(lambda: kb.collection("Docs").add_texts(["after the full disk"], ids=["x"]))
    count = kb.collection("Docs").count()
    kb.close()
    return {"errors": [first, second], "left": left, "then": [third, after], "count": count}


def write(folder: Path) -> dict[str, Any]:
    db = folder / "kb.duckdb"
    build(db)
    kb = hybridkb.connect(db, model="fake")
    wal = Path(str(db) + ".wal")
    limit((wal.stat().st_size if wal.exists() else 0) + (32 << 10))
    report = kb.collection("Docs").add_texts([t + " again" for t in NOTES], ids=IDS)
    limit(None)
    after = attempt(lambda: kb.collection("Docs").add_texts(["after the full disk"], ids=["x"]))
    kb.close()
    with hybridkb.connect(db, model="fake") as again:
        count = again.collection("Docs").count()
        problems = [f.check for h in again.doctor() for f in h.findings if f.count]
    errors = sorted({f.error for f in report.failed})
    return {"failed": len(report.failed), "errors": errors, "then": [after], "count": count,
            "problems": problems}  # fmt: skip


def copy(folder: Path) -> dict[str, Any]:
    src, out = folder / "src.duckdb", folder / "out"
    build(src)
    out.mkdir()
    dst = out / "dst.duckdb"
    limit(1 << 20)  # room for a new file and its WAL with part of the collection only
    first = attempt(lambda: copy_kb(str(src), str(dst)))
    left = files(out)
    limit(None)
    report: dict[str, Any] = {}

    def again() -> None:
        report.update(copy_kb(str(src), str(dst)))

    then = attempt(again)
    return {"errors": [first], "left": left, "then": [then], "count": report.get("documents")}


def copy_into_existing(folder: Path) -> dict[str, Any]:
    src, dst = folder / "src.duckdb", folder / "dst.duckdb"
    build(src)
    with hybridkb.connect(dst, model="fake") as kb:
        kb.create_collection("Other").add_texts(["already there"], ids=["o"])
    # The copy's writes go to the WAL (checkpointed at 256 MB): a new file that may take
    # part of the collection only.
    limit(256 << 10)
    first = attempt(lambda: copy_kb(str(src), str(dst)))
    limit(None)
    with hybridkb.connect(dst, model="fake", read_only=True) as kb:
        names = kb.collection_names()
    report: dict[str, Any] = {}

    def again() -> None:
        report.update(copy_kb(str(src), str(dst)))

    then = attempt(again)
    with hybridkb.connect(dst, model="fake") as kb:
        problems = [f.check for h in kb.doctor() for f in h.findings if f.count]
        final = kb.collection_names()
    return {"errors": [first], "names": names, "then": [then], "count": report.get("documents"),
            "final": final, "problems": problems}  # fmt: skip


def graph_export(folder: Path) -> dict[str, Any]:
    db, out = folder / "kb.duckdb", folder / "export"
    build(db)
    kb = hybridkb.connect(db, model="fake")
    big = "a long note " * 4000  # the last document's files do not fit; the others do
    kb.collection("Docs").add_texts([big], ids=["zz-long"])
    kb.graph.stats()  # the graph is built before the disk fills
    limit(16 << 10)
    first = attempt(lambda: kb.graph.export_folder("Docs", out))
    existed = out.exists()
    left = files(out) if existed else []
    limit(None)
    written: list[Path] = []
    then = attempt(lambda: written.extend(kb.graph.export_folder("Docs", out)))
    kb.close()
    return {"errors": [first], "existed": existed, "left": left, "then": [then],
            "count": len(written)}  # fmt: skip


SCENARIOS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "compact": compact,
    "write": write,
    "copy": copy,
    "copy_into_existing": copy_into_existing,
    "graph_export": graph_export,
}


def main() -> None:
    scenario, folder = sys.argv[1], Path(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    os.environ["HYBRIDKB_SERVE"] = "false"  # nobody else reaches these files
    print(json.dumps(SCENARIOS[scenario](folder)), flush=True)


if __name__ == "__main__":
    main()
