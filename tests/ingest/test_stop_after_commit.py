"""A stop (SIGTERM, Ctrl-C) can land just after a write's COMMIT took effect, before the
in-memory indexes mirror it: the caller sees the stop, the file holds the write. Memory
that lacks a committed write is never trusted (searches in the same process find the
write) or saved, and the snapshot older than the tables is dropped (doctor is clean)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from internals import signal_after_commit

import hybridkb
from hybridkb.ingest import pipeline as ingest
from hybridkb.lifecycle import Stopped, stop_on_signals

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="needs POSIX signals")


def _found(kb: hybridkb.KnowledgeBase, word: str) -> list[str]:
    return [h.document_id for h in kb["Notes"].search(word, mode="keyword")]


def _problems(kb: hybridkb.KnowledgeBase) -> list[str]:
    return [f"{f.check}: {f.detail}" for h in kb.doctor() for f in h.findings if f.count]


@pytest.mark.parametrize("write", ["add", "delete"])
def test_a_stop_right_after_commit_leaves_no_stale_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add_texts(["an apple a day", "a pear"], ids=["a", "p"])
    with hybridkb.connect(db, model="fake") as kb:
        assert _found(kb, "apple") == ["a"]  # the indexes are in memory now
        with monkeypatch.context() as patched, stop_on_signals(), pytest.raises(Stopped):
            signal_after_commit(db, signal.SIGTERM, patched)
            if write == "add":
                kb["Notes"].add_texts(["a banana split"], ids=["b"])
            else:
                kb["Notes"].delete(["a"])
        want = {"add": (["a"], ["b"]), "delete": ([], [])}[write]
        assert (_found(kb, "apple"), _found(kb, "banana")) == want
        assert _problems(kb) == []
    with hybridkb.connect(db, model="fake") as kb:
        assert _problems(kb) == []
        assert (_found(kb, "apple"), _found(kb, "banana")) == want


def test_a_streamed_add_leaves_no_stale_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed (huge) document is switched in without the collection's indexes in
    memory: the snapshot a process saved before is older than the tables after it."""
    monkeypatch.setattr(ingest, "STREAM_BYTES", 4_000)
    db, big = tmp_path / "kb.duckdb", tmp_path / "big.txt"
    big.write_text("a banana split\n\n" + "lorem ipsum dolor sit amet\n\n" * 400, "utf-8")
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add_texts(["an apple a day"], ids=["a"])
        assert _found(kb, "apple") == ["a"]  # built, and saved at close
    with hybridkb.connect(db, model="fake") as kb:
        kb["Notes"].add(big)
        assert _problems(kb) == []
    with hybridkb.connect(db, model="fake") as kb:
        assert _problems(kb) == []
        assert len(set(_found(kb, "banana"))) == 1
