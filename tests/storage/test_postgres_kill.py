"""A writer killed mid-batch on PostgreSQL loses nothing committed and leaves no half batch
(issue 37): each batch is one transaction, and the server rolls back what a dead client
left open; the next writer goes on (no lock is left held) and doctor finds nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from internals import postgres_storage

import hybridkb

pytestmark = [pytest.mark.process, pytest.mark.postgres]

BATCH = 25
WORKER = """
import sys
import hybridkb

url, run = sys.argv[1], sys.argv[2]
with hybridkb.connect(url, model="fake") as kb:
    notes = kb.collection("Notes")
    for i in range(10_000):
        ids = [f"{run}-{i}-{j}" for j in range(BATCH)]
        notes.add_texts([f"run {run} batch {i} note {j} " * 8 for j in range(BATCH)], ids=ids)
        print(f"done {i}", flush=True)
"""


def writer(url: str, run: str) -> subprocess.Popen[str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(Path(hybridkb.__file__).parents[1]))
    return subprocess.Popen(
        [sys.executable, "-c", WORKER.replace("BATCH", str(BATCH)), url, run],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


@pytest.mark.parametrize("after", [0, 2, 5])
def test_a_writer_killed_mid_batch_loses_nothing_committed(pg_url: str, after: int) -> None:
    with hybridkb.connect(pg_url, model="fake") as kb:
        kb.create_collection("Notes")
    proc = writer(pg_url, "k")
    assert proc.stdout is not None
    done = -1
    for line in proc.stdout:  # the kill lands wherever the next batch has got to
        done = int(line.split()[1])
        if done >= after:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with hybridkb.connect(pg_url, model="fake") as kb:
        notes = kb.collection("Notes")
        ids = {d.document_id for d in notes.documents(limit=100_000)}
        batches = {i.rsplit("-", 1)[0] for i in ids}
        for batch in batches:  # all of a batch or none of it
            assert sum(i.startswith(batch + "-") for i in ids) == BATCH, batch
        assert {f"k-{i}" for i in range(done + 1)} <= batches  # every reported commit
        counts = postgres_storage(kb).consistency(kb.record("Notes"))
        assert counts["documents"] == counts["chunks"] == len(ids)
        assert counts["postings"] == counts["expected_postings"]
        assert counts["stat_chunks"] == counts["chunks"]
        # The next writer is not held up by anything the dead one left.
        notes.add_texts(["after the kill"], ids=["after"])
        assert notes.get("after") is not None
        (health,) = kb.doctor("Notes")
        assert health.ok, health.to_dict()
