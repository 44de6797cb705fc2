"""A team on one PostgreSQL: the load curve bench/postgres.py reports (issue 37).

For each number of clients (1, 4, 16, 64 by default) the clients search SciFact in
hybrid mode as fast as they can for ``seconds``, spread over up to ``PROCESSES``
processes (threads within; each process one store with the default pool of
HYBRIDKB_PG_POOL_SIZE connections, so 64 clients share 32 connections), while two
writer processes add documents to the searched collection and a ``hybridkb watch``
process syncs a folder a feeder keeps adding files to. Reported per level: search
p50/p95/p99 and throughput, the writers' documents/s, errors; afterwards the writers'
documents are checked (none lost, none twice) and the folder's files all synced.

Run alone::

    python -P bench/pg_load.py [--url ADMIN_URL] [--clients 1,4,16,64] [--seconds 15]

(bench/postgres.py runs it on its own server and data and puts it in its JSON.)
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROCESSES = 8  # search processes at most; clients beyond are threads within them
WRITERS, WRITE_BATCH = 2, 8


def _search_process(
    url: str, threads: int, queries: list[str], qvecs: np.ndarray, go: Any, stop_at: Any, out: Any
) -> None:
    from hybridkb.search.hybrid import Target, run_search
    from hybridkb.settings import load_settings
    from hybridkb.storage import open_storage

    storage = open_storage(url)
    coll = storage.get_collection("default", "SciFact")
    assert coll is not None
    lookup = Lookup(queries, qvecs)
    target = Target(coll, lookup, ["en"])  # type: ignore[arg-type]
    settings = load_settings(model="fake")
    times: list[float] = []
    errors: list[str] = []

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        while time.monotonic() < stop_at.value:
            text = queries[int(rng.integers(len(queries)))]
            t0 = time.perf_counter()
            try:
                run_search(
                    storage, [target], text, k=10, mode="hybrid", where=None, settings=settings
                )
            except Exception as exc:  # noqa: BLE001 - counted and shown, one line each
                errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                continue
            times.append((time.perf_counter() - t0) * 1e3)

    go.wait()
    workers = [
        threading.Thread(target=client, args=(os.getpid() * 100 + i,)) for i in range(threads)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    storage.close()
    out.put((times, errors))


class Lookup:
    """An embedder that answers queries from precomputed vectors (the same everywhere)."""

    model_id = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, texts: list[str], vecs: np.ndarray) -> None:
        self.table = dict(zip(texts, vecs, strict=True))

    def embed_query(self, text: str) -> np.ndarray:
        return self.table[text]

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


def _writer_process(
    url: str, index: int, items: list[Any], go: Any, stop_at: Any, out: Any
) -> None:
    from hybridkb.storage import open_storage

    storage = open_storage(url)
    coll = storage.get_collection("default", "SciFact")
    assert coll is not None
    go.wait()
    done, errors, t0 = 0, [], time.perf_counter()
    while time.monotonic() < stop_at.value and done < len(items):
        batch = items[done : done + WRITE_BATCH]
        try:
            storage.put_documents(coll, batch)
            done += len(batch)
        except Exception as exc:  # noqa: BLE001 - counted and shown, one line each
            errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    storage.close()
    out.put(("writer", index, done, time.perf_counter() - t0, errors))


def _pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p)) if values else float("nan")


def _watcher(url: str, folder: Path, cwd: Path) -> subprocess.Popen[str]:
    from pg_server import cli_env  # tests/support/ is on the path (bench/postgres.py)

    env = cli_env(cwd, HYBRIDKB_DB=url)
    import hybridkb

    with hybridkb.connect(url, model="fake") as kb:
        if "Folder" not in kb.collection_names():
            kb.create_collection("Folder").add(folder)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hybridkb", "watch", "Folder", "--quiet-ms", "200", "--max-wait-ms", "1000"],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    if not first.startswith("watching"):
        raise RuntimeError(f"hybridkb watch did not start: {first}")
    return proc


def load_level(
    url: str,
    clients: int,
    seconds: float,
    queries: list[str],
    qvecs: np.ndarray,
    writer_items: list[list[Any]],
) -> dict[str, Any]:
    """One level of the curve: ``clients`` searching while the writers add."""
    ctx = multiprocessing.get_context("fork")
    procs_n = min(clients, PROCESSES)
    threads = [clients // procs_n + (1 if i < clients % procs_n else 0) for i in range(procs_n)]
    go, out = ctx.Event(), ctx.Queue()
    stop_at = ctx.Value("d", 0.0)
    procs = [
        ctx.Process(target=_search_process, args=(url, n, queries, qvecs, go, stop_at, out))
        for n in threads
    ] + [
        ctx.Process(target=_writer_process, args=(url, i, items, go, stop_at, out))
        for i, items in enumerate(writer_items)
    ]
    for p in procs:
        p.start()
    time.sleep(2.0)  # every process connected before the clock starts
    stop_at.value = time.monotonic() + seconds
    t0 = time.perf_counter()
    go.set()
    results = [out.get(timeout=seconds + 600) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    times = [t for r in results if r[0] != "writer" for t in r[0]]
    errors = [e for r in results if r[0] != "writer" for e in r[1]]
    writers = [r for r in results if r[0] == "writer"]
    written = sum(r[2] for r in writers)
    return {
        "clients": clients,
        "processes": procs_n,
        "searches": len(times),
        "p50_ms": _pct(times, 50),
        "p95_ms": _pct(times, 95),
        "p99_ms": _pct(times, 99),
        "searches_per_s": len(times) / wall,
        "search_errors": len(errors),
        "error_samples": sorted(set(errors))[:3],
        "writer_docs": written,
        "writer_docs_per_s": written / wall,
        "writer_errors": [e for r in writers for e in r[4]][:3],
        "done_by_writer": {r[1]: r[2] for r in writers},
    }


def load_curve(
    url: str,
    queries: list[str],
    qvecs: np.ndarray,
    new_items: Any,
    levels: list[int],
    seconds: float,
) -> dict[str, Any]:
    """The curve on the collection ``default/SciFact`` at ``url``; ``new_items(writer,
    level)`` gives a writer's documents for a level (ids unused so far)."""
    from hybridkb.storage import open_storage

    report: dict[str, Any] = {"levels": [], "seconds_per_level": seconds, "watcher": {}}
    with tempfile.TemporaryDirectory(prefix="hkb-load-") as tmp:
        folder = Path(tmp) / "folder"
        folder.mkdir()
        (folder / "seed.md").write_text("# Seed\n\nA first note.", "utf-8")
        watcher = _watcher(url, folder, Path(tmp))
        files = 1
        try:
            for level, clients in enumerate(levels):
                feeding = threading.Event()

                def feed(level: int = level) -> None:
                    nonlocal files
                    n = 0
                    while not feeding.wait(0.5):
                        (folder / f"note-{level}-{n}.md").write_text(
                            f"# Note {level} {n}\n\nWritten while {clients} clients searched.",
                            "utf-8",
                        )
                        n += 1
                        files += 1

                items = [new_items(w, level) for w in range(WRITERS)]
                feeder = threading.Thread(target=feed)
                feeder.start()
                try:
                    row = load_level(url, clients, seconds, queries, qvecs, items)
                finally:
                    feeding.set()
                    feeder.join()
                row["ids_expected"] = sorted(
                    it.document.document_id
                    for w, its in enumerate(items)
                    for it in its[: row["done_by_writer"][w]]
                )
                report["levels"].append(row)
            storage = open_storage(url)
            coll = storage.get_collection("default", "SciFact")
            assert coll is not None
            counts = storage.consistency(coll)
            folder_coll = storage.get_collection("default", "Folder")
            deadline = time.monotonic() + 120
            synced = 0
            while folder_coll is not None and time.monotonic() < deadline:
                synced = storage.stats(folder_coll).documents
                if synced == files:
                    break
                time.sleep(0.5)
            expected = [i for row in report["levels"] for i in row.pop("ids_expected")]
            present = {
                r[0]
                for r in storage.query(
                    f"SELECT document_id FROM {storage.tables(coll)['documents']}"
                    " WHERE document_id = ANY(%s)",
                    [expected],
                )
            }
            storage.close()
            report["writers_check"] = {
                "written": len(expected),
                "present_once": len(present) == len(set(expected)) == len(expected),
                "consistent": counts["documents"]
                == counts["chunks"]
                == counts["distinct_chunk_ids"]
                and counts["postings"] == counts["expected_postings"]
                and counts["stat_chunks"] == counts["chunks"],
            }
            report["watcher"].update(files=files, synced=synced)
        finally:
            watcher.send_signal(signal.SIGTERM)
            out, _ = watcher.communicate(timeout=120)
            report["watcher"]["exit"] = watcher.returncode
            report["watcher"]["traceback"] = "Traceback" in out
    return report


def print_curve(report: dict[str, Any]) -> None:
    print(
        f"\nload curve: hybrid searches for {report['seconds_per_level']:.0f} s per level while"
        f" {WRITERS} writers add documents and a watcher syncs a folder"
    )
    print(
        f"{'clients':>8} {'procs':>6} {'p50':>9} {'p95':>9} {'p99':>9} {'searches/s':>11}"
        f" {'errors':>7} {'writer docs/s':>14}"
    )
    for row in report["levels"]:
        print(
            f"{row['clients']:>8} {row['processes']:>6} {row['p50_ms']:>7.1f}ms {row['p95_ms']:>7.1f}ms"
            f" {row['p99_ms']:>7.1f}ms {row['searches_per_s']:>11.1f} {row['search_errors']:>7}"
            f" {row['writer_docs_per_s']:>14.1f}"
        )
    check, watch = report["writers_check"], report["watcher"]
    print(
        f"writers: {check['written']} documents, each present once: {check['present_once']},"
        f" tables consistent: {check['consistent']}; watcher: {watch['synced']}/{watch['files']}"
        f" files synced, exit {watch['exit']}, traceback: {watch['traceback']}"
    )
