"""Crash safety: SIGKILL a writer at random moments; the KB must always open and be whole.

Every document is either complete (the same chunks a clean ingest gives for its
content) or absent, searches agree with the tables, and no derived index returns a
chunk that no longer exists. The long variant (more kills) is marked slow.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crash_corpus import CRASH_WORKER, make_crash_corpus, reference_chunks
from internals import sql_rows

import hybridkb
from hybridkb.storage.duckdb.schema import table_names

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)"),
]


def _verify(db: Path, ref: dict[str, list[str]]) -> None:
    with hybridkb.connect(db, model="fake") as kb:
        if "Crash" not in kb.collection_names():
            return
        coll = kb.collection("Crash")
        t = table_names(coll.record.id)
        docs = coll.documents(limit=1000)
        for doc in docs:
            rows = sql_rows(
                kb,
                f"SELECT text FROM {t['chunks']} WHERE document_id = ? ORDER BY chunk_index",
                [doc.document_id],
            )
            assert [r[0] for r in rows] == ref[doc.content_hash], f"half document {doc.filename}"
        table_problems = {
            f.check: f.count
            for h in kb.doctor()
            for f in h.findings
            if f.count and f.check != "derived_indexes"
        }
        assert table_problems == {}
        live = {r[0] for r in sql_rows(kb, f"SELECT chunk_id FROM {t['chunks']}")}
        for mode in ("keyword", "vector", "hybrid"):
            hits = coll.search("shared words alpha", k=1000, mode=mode)
            assert {h.chunk_id for h in hits} <= live
        assert len(coll.search("shared words", k=1000, mode="vector")) == len(live)


def _run_kills(tmp_path: Path, kills: int, seed: int) -> int:
    corpus = tmp_path / "corpus"
    make_crash_corpus(corpus)
    ref = reference_chunks(corpus, tmp_path)
    db = tmp_path / "crash.duckdb"
    rng = random.Random(seed)
    survived = 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for i in range(kills):
        proc = subprocess.Popen(
            [sys.executable, str(CRASH_WORKER), str(db), str(corpus), str(seed * 1000 + i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()  # wait until it holds the database
        if not line.startswith(b"ready"):
            proc.kill()
            pytest.fail(
                f"worker did not start: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
            )
        time.sleep(rng.uniform(0.02, 1.2))
        if proc.poll() is not None:
            pytest.fail(
                f"worker died by itself: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
            )
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _verify(db, ref)
        survived += 1
    return survived


def test_kb_survives_sigkill_30_times(tmp_path: Path) -> None:
    assert _run_kills(tmp_path, kills=30, seed=1) == 30


@pytest.mark.slow
def test_kb_survives_sigkill_200_times(tmp_path: Path) -> None:
    assert _run_kills(tmp_path, kills=200, seed=2) == 200
