"""A copy stopped part-way (SIGTERM, SIGKILL) leaves no half collection under the full
name: the CLI stops cleanly on SIGTERM and drops what it staged; after SIGKILL doctor
names the half copy, repair drops it, and copying again succeeds. Every writing command
(add, sync, reembed here) stops on SIGTERM as on Ctrl-C: exit 143, whole documents,
doctor clean."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hung import FAULTHANDLER, communicate_or_show_stacks

import hybridkb
from hybridkb.cli.commands import main

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals"),
]

DOCUMENTS = 300
WAL_BYTES = 256 << 10  # the WAL of a destination part-way through the copy


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src.duckdb"
    with hybridkb.connect(src, model="fake") as kb:
        kb.create_collection("Docs").add_texts(
            [f"document {i} about subject {i % 9} " + "words " * 80 for i in range(DOCUMENTS)],
            ids=[f"d{i}" for i in range(DOCUMENTS)],
        )
    return src


def _stop_copy_part_way(src: Path, dst: Path, sig: int) -> subprocess.CompletedProcess[str]:
    """`hybridkb copy` into ``dst``, sent ``sig`` once the copy has written part of it."""
    return _stop_part_way(["--db", str(src), "copy", "--to", str(dst)], dst, sig)


def _stop_part_way(args: list[str], db: Path, sig: int) -> subprocess.CompletedProcess[str]:
    """`hybridkb ARGS`, sent ``sig`` once it has written part of what it writes to ``db``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "HYBRIDKB_SERVE": "false",
        "HYBRIDKB_MODEL": "fake",
    }
    proc = subprocess.Popen(
        [sys.executable, *FAULTHANDLER, "-m", "hybridkb", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wal = Path(f"{db}.wal")
    while proc.poll() is None and not (wal.exists() and wal.stat().st_size > WAL_BYTES):
        try:
            proc.wait(timeout=0.01)
        except subprocess.TimeoutExpired:
            pass
    assert proc.poll() is None, f"{args[2]} ended before it was stopped: {proc.communicate()}"
    proc.send_signal(sig)
    out, err = communicate_or_show_stacks(proc, timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _doctor(dst: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["--db", str(dst), "doctor", *flags])
    return code, capsys.readouterr().out


def _copy_again(src: Path, dst: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["--db", str(src), "copy", "--to", str(dst), "--json"]) == 0, capsys.readouterr()
    assert json.loads(capsys.readouterr().out)["documents"] == DOCUMENTS
    with hybridkb.connect(dst, model="fake") as kb:
        assert kb["Docs"].count() == DOCUMENTS
        assert not [f for h in kb.doctor() for f in h.findings if f.count]


def test_a_copy_stopped_by_sigterm_ends_cleanly_and_leaves_no_file_it_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = _source(tmp_path), tmp_path / "dst.duckdb"
    done = _stop_copy_part_way(src, dst, signal.SIGTERM)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert "stopped by signal" in done.stderr and "Traceback" not in done.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("dst")] == []
    _copy_again(src, dst, capsys)


def test_a_copy_into_a_store_stopped_by_sigterm_leaves_no_half_collection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = _source(tmp_path), tmp_path / "dst.duckdb"
    with hybridkb.connect(dst, model="fake") as kb:
        kb.create_collection("Other").add_texts(["already there"], ids=["o"])
    done = _stop_copy_part_way(src, dst, signal.SIGTERM)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert "stopped by signal" in done.stderr and "Traceback" not in done.stderr
    assert _doctor(dst, capsys) == (0, "Other: ok\n")  # the stop dropped what it had copied
    _copy_again(src, dst, capsys)


def test_a_copy_killed_by_sigkill_leaves_a_half_copy_doctor_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = _source(tmp_path), tmp_path / "dst.duckdb"
    done = _stop_copy_part_way(src, dst, signal.SIGKILL)
    assert done.returncode == -signal.SIGKILL
    with hybridkb.connect(dst, model="fake", read_only=True) as kb:
        assert kb.collection_names() == []  # nothing under the full name
    code, out = _doctor(dst, capsys)
    assert code == 1 and "Docs: unfinished_copy: 1 found" in out, out
    code, out = _doctor(dst, capsys, "--repair")
    assert "Docs: unfinished_copy: 1 repaired" in out, out
    assert _doctor(dst, capsys) == (0, "")
    _copy_again(src, dst, capsys)


def test_the_next_copy_replaces_what_a_killed_copy_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = _source(tmp_path), tmp_path / "dst.duckdb"
    assert _stop_copy_part_way(src, dst, signal.SIGKILL).returncode == -signal.SIGKILL
    _copy_again(src, dst, capsys)


def test_an_add_stopped_by_sigterm_ends_cleanly_with_whole_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, db = tmp_path / "notes", tmp_path / "kb.duckdb"
    folder.mkdir()
    # ~20 chunks a note: the add commits in several batches (ingest.BATCH_CHUNKS), so the
    # stop lands after some of them and before the last.
    for i in range(DOCUMENTS):
        (folder / f"note{i:03d}.txt").write_text(f"note {i} " + "words " * 3000, "utf-8")
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes")
    done = _stop_part_way(["--db", str(db), "add", "Notes", str(folder)], db, signal.SIGTERM)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert "stopped by signal" in done.stderr and "Traceback" not in done.stderr
    with hybridkb.connect(db, model="fake") as kb:
        before = kb["Notes"].count()
        assert 0 < before < DOCUMENTS
        assert not [f for h in kb.doctor() for f in h.findings if f.count]
        report = kb["Notes"].add(folder)  # what was added is whole: unchanged
        assert (len(report.unchanged), len(report.added)) == (before, DOCUMENTS - before)


def _notes(folder: Path, version: str, words: int = 200) -> Path:
    folder.mkdir(exist_ok=True)
    for i in range(DOCUMENTS):
        text = f"note {i} {version} " + "words " * words
        (folder / f"note{i:03d}.txt").write_text(text, "utf-8")
    return folder


def _stopped_cleanly(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert "stopped by signal" in done.stderr and "Traceback" not in done.stderr


def test_a_sync_stopped_by_sigterm_ends_cleanly(tmp_path: Path) -> None:
    folder, db = _notes(tmp_path / "notes", "first"), tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add(folder)
    # Every file changed: the sync reads them all again. ~20 chunks a note, so it commits
    # in several batches (ingest.BATCH_CHUNKS) and the stop lands between two.
    _notes(folder, "second", words=3000)
    _stopped_cleanly(_stop_part_way(["--db", str(db), "sync", "Notes"], db, signal.SIGTERM))
    with hybridkb.connect(db, model="fake") as kb:
        assert kb["Notes"].count() == DOCUMENTS
        assert not [f for h in kb.doctor() for f in h.findings if f.count]
        seconds = {h.document_id for h in kb["Notes"].search("second", k=DOCUMENTS)}
        assert 0 < len(seconds) < DOCUMENTS  # stopped part-way, each document whole
        report = kb["Notes"].sync()
        assert report.updated and report.ok
        assert len({h.document_id for h in kb["Notes"].search("second", k=DOCUMENTS)}) == DOCUMENTS


def test_a_reembed_stopped_by_sigterm_keeps_the_old_vectors(tmp_path: Path) -> None:
    folder, db = _notes(tmp_path / "notes", "first"), tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add(folder)
    args = ["--db", str(db), "reembed", "Notes", "--model", "fake:512"]
    _stopped_cleanly(_stop_part_way(args, db, signal.SIGTERM))
    with hybridkb.connect(db, model="fake") as kb:
        info = kb.describe("Notes")
        assert (info.embedding_model, info.dim, info.documents) == ("fake", 64, DOCUMENTS)
        assert not [f for h in kb.doctor() for f in h.findings if f.count]
        assert len(kb["Notes"].search("note", k=5)) == 5
