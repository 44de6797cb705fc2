"""Derived indexes are persisted for a fast start, but never trusted when stale or damaged."""

from __future__ import annotations

from pathlib import Path

import pytest

import hybridkb
from hybridkb.index import derived
from hybridkb.storage import duckdb as duckdb_storage

TEXTS = ["alpha beta gamma", "delta epsilon", "zeta eta theta", "beta delta"]


def _fill(db: Path) -> None:
    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(TEXTS, ids=["a", "b", "c", "d"])
        assert coll.search("beta", k=1, mode="keyword")  # builds the indexes


def _forbid_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("indexes were rebuilt from the tables")

    monkeypatch.setattr(duckdb_storage, "build_indexes", boom)


def test_reopen_uses_the_saved_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "kb.duckdb"
    _fill(db)
    assert (tmp_path / "kb.duckdb.hkbidx").is_dir()
    _forbid_rebuild(monkeypatch)
    with hybridkb.connect(db, model="fake") as kb:
        hits = kb.collection("Notes").search("beta", k=5, mode="keyword")
    assert sorted(h.document_id for h in hits) == ["a", "d"]


def test_stale_snapshot_is_rebuilt(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    _fill(db)
    meta = next((tmp_path / "kb.duckdb.hkbidx").glob("*.meta.json"))
    saved = meta.read_text()
    with hybridkb.connect(db, model="fake") as kb:
        kb.collection("Notes").delete(["a"])
    # A crash after the write but before the snapshot was saved leaves the old one behind.
    meta.write_text(saved)
    with hybridkb.connect(db, model="fake") as kb:
        hits = kb.collection("Notes").search("beta", k=5, mode="keyword")
    assert [h.document_id for h in hits] == ["d"]


@pytest.mark.parametrize("victim", ["keyword.npz", "vector.bin", "meta.json"])
def test_damaged_snapshot_is_rebuilt(tmp_path: Path, victim: str) -> None:
    db = tmp_path / "kb.duckdb"
    _fill(db)
    target = next((tmp_path / "kb.duckdb.hkbidx").glob(f"*.{victim}"))
    target.write_bytes(target.read_bytes()[: max(1, target.stat().st_size // 3)])
    with hybridkb.connect(db, model="fake") as kb:
        hits = kb.collection("Notes").search("beta", k=5, mode="keyword")
        assert sorted(h.document_id for h in hits) == ["a", "d"]
        assert len(kb.collection("Notes").search("delta", k=5, mode="vector")) == 4


def test_drop_removes_the_snapshot(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    _fill(db)
    with hybridkb.connect(db, model="fake") as kb:
        kb.drop_collection("Notes")
    assert not list((tmp_path / "kb.duckdb.hkbidx").glob("*"))


def test_snapshot_paths_depend_only_on_collection_id(tmp_path: Path) -> None:
    paths = derived.snapshot_paths(tmp_path, 7)
    assert {p.name for p in paths.values()} == {"c7.keyword.npz", "c7.vector.bin", "c7.meta.json"}
