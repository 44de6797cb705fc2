"""Many people on one PostgreSQL at once (issue 37), a short version of bench/pg_load.py:
16 threads search while 2 writers add documents and a ``hybridkb watch`` process syncs a
folder. Nothing is lost or duplicated, nothing deadlocks, no error is raised, the
watcher stops cleanly; and the connections stay within the pool's limit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import psycopg
import pytest
from internals import postgres_storage
from pg_server import cli_env

import hybridkb
from hybridkb import KnowledgeBaseAPI

pytestmark = [pytest.mark.process, pytest.mark.postgres]
pytest.importorskip("watchfiles")

HANG = 120.0  # guard for a thread or a change that should have finished (nothing is timed)
SEARCHERS, QUERIES = 16, 12
WRITERS, BATCHES, BATCH = 2, 10, 4
WORDS = "leave salary laptop travel meal office pension bonus invoice audit budget".split()


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {HANG:.0f} s: {what}")
        time.sleep(0.2)


def watcher(url: str, cwd: Path) -> subprocess.Popen[str]:
    env = cli_env(cwd, HYBRIDKB_DB=url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hybridkb", "watch", "Folder", "--quiet-ms", "200",
         "--max-wait-ms", "1000"],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("watching 'Folder'")
    return proc


def text(writer: int, batch: int, n: int) -> str:
    return f"{WORDS[(writer + batch + n) % len(WORDS)]} policy note {writer}-{batch}-{n}"


def test_searches_writes_and_a_watcher_at_once(pg_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "shared-folder"
    folder.mkdir()
    (folder / "first.md").write_text("# First\n\nThe first note about leave.", "utf-8")
    with hybridkb.connect(pg_url, model="fake") as setup:
        setup.create_collection("Team").add_texts([f"seed {w} text" for w in WORDS])
        setup.create_collection("Folder").add(folder)
    proc = watcher(pg_url, tmp_path)
    errors: list[BaseException] = []
    found: list[int] = []

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # noqa: BLE001 - every error is reported below
                errors.append(exc)

        return run

    def write(kb: KnowledgeBaseAPI, writer: int) -> None:
        team = kb.collection("Team")
        for batch in range(BATCHES):
            texts = [text(writer, batch, n) for n in range(BATCH)]
            ids = [f"w{writer}-{batch}-{n}" for n in range(BATCH)]
            team.add_texts(texts, ids=ids)

    def search(kb: KnowledgeBaseAPI, who: int) -> None:
        for i in range(QUERIES):
            query = f"{WORDS[(who + i) % len(WORDS)]} policy"
            mode = ("hybrid", "keyword", "vector")[i % 3]
            scope = ["Team"] if i % 2 else None  # one collection, or all of them
            found.append(len(kb.search(query, k=5, mode=mode, collections=scope)))

    try:
        with hybridkb.connect(pg_url, model="fake", pg_pool_size=4) as shared:
            writers = [hybridkb.connect(pg_url, model="fake") for _ in range(WRITERS)]
            threads = [
                threading.Thread(target=guarded(partial(write, kb, w)))
                for w, kb in enumerate(writers)
            ] + [
                threading.Thread(target=guarded(partial(search, shared, s)))
                for s in range(SEARCHERS)
            ]
            for thread in threads:
                thread.start()
            for n in range(6):  # while they run, files arrive in the watched folder
                (folder / f"arrived-{n}.md").write_text(f"# Note {n}\n\nAbout {WORDS[n]}.", "utf-8")
                time.sleep(0.1)
            for thread in threads:
                thread.join(HANG)
            assert not [t for t in threads if t.is_alive()], "a thread never finished"
            for kb in writers:
                kb.close()
            assert not errors, [f"{type(e).__name__}: {e}" for e in errors]
            assert len(found) == SEARCHERS * QUERIES and all(n > 0 for n in found)
            with psycopg.connect(pg_url, autocommit=True) as admin:
                (sessions,) = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    [f"hybridkb {os.getpid()}"],
                ).fetchone() or (0,)
            assert sessions <= 4 + WRITERS  # the shared pool's limit, one per writer thread

            team = shared.collection("Team")
            ids = {d.document_id for d in team.documents(limit=1000)}
            expected = {
                f"w{w}-{b}-{n}"
                for w in range(WRITERS)
                for b in range(BATCHES)
                for n in range(BATCH)
            }
            assert expected <= ids and len(ids) == len(expected) + len(WORDS)
            counts = postgres_storage(shared).consistency(shared.record("Team"))
            assert counts["documents"] == counts["chunks"] == counts["distinct_chunk_ids"]
            assert counts["postings"] == counts["expected_postings"]
            assert counts["stat_chunks"] == counts["chunks"]

            notes = shared.collection("Folder")
            eventually(lambda: notes.count() == 7, "every arrived file is synced")
            names = sorted(d.filename or "" for d in notes.documents())
            assert names == ["arrived-0.md", "arrived-1.md", "arrived-2.md", "arrived-3.md",
                             "arrived-4.md", "arrived-5.md", "first.md"]  # fmt: skip
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=HANG)
    assert proc.returncode == 0 and "Traceback" not in out, out
