"""A collection being copied in is staged: stored under a name no user can give, never
listed, renamed to its own name once complete. What a killed copy left is named by
doctor, dropped by repair, and replaced by the next copy; on every backend."""

from __future__ import annotations

import itertools
import signal
from pathlib import Path

import pytest
from internals import signal_after_commit

import hybridkb
from hybridkb.errors import CollectionExists, ConfigError
from hybridkb.lifecycle import Stopped, stop_on_signals
from hybridkb.storage import CollectionRecord, Storage, open_storage
from hybridkb.storage.shared import staging_name
from hybridkb.storage.transfer import copy_kb

TEXTS = [f"note {i} about apples and pears" for i in range(12)]


def _create(storage: Storage, name: str) -> CollectionRecord:
    return storage.create_collection(
        "default", name, model="fake", dim=64, chunking={}, language="en"
    )


def _source(tmp_path: Path) -> str:
    src = str(tmp_path / "src.duckdb")
    with hybridkb.connect(src, model="fake") as kb:
        kb.create_collection("Docs").add_texts(TEXTS, ids=[f"n{i}" for i in range(12)])
    return src


def _leave_a_half_copy(dst_url: str, src_url: str) -> None:
    """What a copy killed part-way leaves: the staged collection, half filled."""
    storage = open_storage(dst_url)
    try:
        staged = _create(storage, staging_name("Docs"))
        source = open_storage(src_url, read_only=True)
        try:
            record = source.get_collection("default", "Docs")
            assert record is not None
            exported = list(source.export_documents(record))[:5]
        finally:
            source.close()
        for doc, chunks, vectors in exported:
            storage.put_document(staged, doc, chunks, vectors)
    finally:
        storage.close()


class StagingContract:
    @pytest.fixture
    def db_url(self) -> str:
        raise NotImplementedError

    def test_a_staged_collection_is_unlisted_until_renamed(self, db_url: str) -> None:
        storage = open_storage(db_url)
        try:
            staged = _create(storage, staging_name("Docs"))
            assert storage.list_collections("default") == []
            assert storage.list_workspaces() == []
            assert [r.id for r in storage.list_collections("default", staged=True)] == [staged.id]
            _create(storage, "Taken")
            with pytest.raises(CollectionExists):
                storage.rename_collection(staged, "Taken")
            done = storage.rename_collection(staged, "Docs")
            assert (done.id, done.name) == (staged.id, "Docs")
            assert [r.name for r in storage.list_collections("default")] == ["Docs", "Taken"]
            assert storage.list_collections("default", staged=True) == []
        finally:
            storage.close()

    def test_doctor_names_a_half_copy_and_repair_drops_it(
        self, db_url: str, tmp_path: Path
    ) -> None:
        _leave_a_half_copy(db_url, _source(tmp_path))
        with hybridkb.connect(db_url, model="fake") as kb:
            assert kb.collection_names() == []
            found = kb.doctor()
            assert [(h.collection, [f.check for f in h.findings if f.count]) for h in found] == [
                ("Docs", ["unfinished_copy"])
            ]
            assert "stopped after 5 documents" in found[0].findings[0].detail
            assert [h.collection for h in kb.doctor("Docs")] == ["Docs"]
            assert all(h.ok for h in kb.doctor(repair=True))
            assert kb.doctor() == []
            with pytest.raises(ConfigError):
                kb.collection(staging_name("Docs"))  # no user reaches it by name

    def test_the_next_copy_replaces_a_half_copy(self, db_url: str, tmp_path: Path) -> None:
        src = _source(tmp_path)
        _leave_a_half_copy(db_url, src)
        assert copy_kb(src, db_url)["documents"] == len(TEXTS)
        with hybridkb.connect(db_url, model="fake") as kb:
            assert kb.collection_names() == ["Docs"] and kb["Docs"].count() == len(TEXTS)
            assert kb["Docs"].search("apples", k=1)
            assert not [f for h in kb.doctor() for f in h.findings if f.count]


class TestDuckDBStaging(StagingContract):
    @pytest.fixture
    def db_url(self, tmp_path: Path) -> str:
        return str(tmp_path / "dst.duckdb")


@pytest.mark.postgres
class TestPostgresStaging(StagingContract):
    @pytest.fixture
    def db_url(self, pg_url: str) -> str:
        return pg_url


def test_a_stop_after_any_commit_of_a_copy_leaves_no_half_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM delivered as each of the copy's commits into the destination returns (the
    creation of the staged collection, each document, the graph rows, the rename...):
    the destination then holds the whole collection or none of it, and doctor is clean."""
    src = _source(tmp_path)
    for nth in itertools.count(1):
        dst = tmp_path / f"dst-{nth}.duckdb"
        with hybridkb.connect(dst, model="fake") as kb:
            kb.create_collection("Other").add_texts(["already there"], ids=["o"])
        with monkeypatch.context() as patched, stop_on_signals():
            signal_after_commit(dst, signal.SIGTERM, patched, nth=nth)
            try:
                copy_kb(src, str(dst))
                stopped = False
            except Stopped:
                stopped = True
        with hybridkb.connect(dst, model="fake") as kb:
            assert not [(h.collection, f.check) for h in kb.doctor() for f in h.findings if f.count]
            names = kb.collection_names()
            assert names in (["Other"], ["Docs", "Other"]), (nth, names)
            if names == ["Docs", "Other"]:
                assert kb["Docs"].count() == len(TEXTS), nth
        if not stopped:  # the copy made fewer commits than nth: every one was tried
            assert nth > 3
            break
