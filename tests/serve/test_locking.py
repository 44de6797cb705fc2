"""One writer at a time, said out loud."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from internals import through_owner

import hybridkb
from hybridkb.errors import DatabaseLocked

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

HOLD = """
import sys, time, hybridkb
kb = hybridkb.connect(
    sys.argv[1], model="fake", read_only=sys.argv[3:] == ["read-only"], serve=True
)
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
kb.close()
"""


def _hold(db: Path, seconds: float, *mode: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), str(seconds), *mode],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"holding")
    return proc


def test_second_writer_fails_after_timeout_naming_the_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "kb.duckdb"
    hybridkb.connect(db, model="fake").close()
    proc = _hold(db, 30)
    monkeypatch.setenv("HYBRIDKB_SERVE", "false")  # this process reaches no owner: it waits
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseLocked) as err:
            hybridkb.connect(db, model="fake", lock_timeout=0.5)
        assert time.monotonic() - started >= 0.5
        message = str(err.value)
        assert (
            f"process {proc.pid}" in message and "MCP server" in message and "kb.duckdb" in message
        )
    finally:
        proc.kill()
        proc.wait()


def test_a_writer_held_off_by_a_reader_is_told_how_long_it_waited_in_all(
    tmp_path: Path,
) -> None:
    """A read-only holder serves nobody, so the writer polls for an owner until the lock
    timeout; the error reports that whole wait, not one poll's."""
    db = tmp_path / "kb.duckdb"
    hybridkb.connect(db, model="fake").close()
    proc = _hold(db, 30, "read-only")
    try:
        with pytest.raises(DatabaseLocked, match=r"\(waited 1\.5s\)") as err:
            hybridkb.connect(db, model="fake", lock_timeout=1.5)
        assert f"process {proc.pid}" in str(err.value)
    finally:
        proc.kill()
        proc.wait()


def test_with_serving_on_a_second_writer_is_served_at_once(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    hybridkb.connect(db, model="fake").close()
    proc = _hold(db, 30)
    try:
        started = time.monotonic()
        with hybridkb.connect(db, model="fake", lock_timeout=20) as kb:
            kb.create_collection("Served")
            assert through_owner(kb) and kb.collection_names() == ["Served"]
        assert time.monotonic() - started < 10  # no lock wait
    finally:
        proc.kill()
        proc.wait()


def test_writer_waits_for_the_holder_to_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "kb.duckdb"
    hybridkb.connect(db, model="fake").close()
    monkeypatch.setenv("HYBRIDKB_SERVE", "false")  # the holder (inheriting it) serves nobody
    proc = _hold(db, 1.0)
    try:
        with hybridkb.connect(db, model="fake", lock_timeout=20) as kb:
            # It waited for the lock and holds the file itself: no error, no owner between.
            assert not through_owner(kb)
            kb.create_collection("After")
    finally:
        assert proc.wait(timeout=30) == 0  # the holder finished its own work undisturbed
    with hybridkb.connect(db, model="fake") as kb:
        assert kb.collection_names() == ["After"]


def test_readers_work_alongside_each_other(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add_texts(["shared reading"], ids=["r"])
    with (
        hybridkb.connect(db, model="fake", read_only=True) as a,
        hybridkb.connect(db, model="fake", read_only=True) as b,
    ):
        assert a.collection("Notes").search("reading", k=1)[0].document_id == "r"
        assert b.collection("Notes").search("reading", k=1)[0].document_id == "r"
