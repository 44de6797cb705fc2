"""Derived indexes are persisted for a fast start, but never trusted when stale or damaged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hybridkb
from hybridkb.index import derived
from hybridkb.storage.duckdb import memory as duckdb_storage

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


@pytest.mark.parametrize("victim", ["keyword.bin", "vector.bin", "meta.json"])
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
    assert {p.name for p in paths.values()} == {"c7.keyword.bin", "c7.vector.bin", "c7.meta.json"}


def test_snapshot_from_another_save_is_rebuilt(tmp_path: Path) -> None:
    """The meta vouches for one keyword file: a file from another save is not trusted."""
    db = tmp_path / "kb.duckdb"
    _fill(db)
    folder = tmp_path / "kb.duckdb.hkbidx"
    stale = next(folder.glob("*.keyword.bin")).read_bytes()
    with hybridkb.connect(db, model="fake") as kb:
        kb.collection("Notes").search("beta", k=1, mode="keyword")  # loads the snapshot
        kb.collection("Notes").delete(["a"])
        kb.collection("Notes").add_texts(["beta beta"], ids=["e"])  # saved again at close
    next(folder.glob("*.keyword.bin")).write_bytes(stale)  # same generation, wrong file
    with hybridkb.connect(db, model="fake") as kb:
        hits = kb.collection("Notes").search("beta", k=5, mode="keyword")
    assert sorted(h.document_id for h in hits) == ["d", "e"]


def test_saving_removes_leftovers_of_an_interrupted_save(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    _fill(db)
    folder = tmp_path / "kb.duckdb.hkbidx"
    leftovers = [
        folder / ".c1.keyword.bin.x1.tmp",
        folder / "c1.keyword.npz",
        folder / "c1.meta.tmp",
    ]
    for path in leftovers:
        path.write_bytes(b"partial")
    keep = folder / ".c2.keyword.bin.x1.tmp"  # another collection's: not ours to remove
    keep.write_bytes(b"partial")
    with hybridkb.connect(db, model="fake") as kb:
        kb.collection("Notes").search("beta", k=1, mode="keyword")  # loads the snapshot
        kb.collection("Notes").add_texts(["zeta"], ids=["z"])  # saved again at close
    assert not any(path.exists() for path in leftovers)
    assert keep.exists()
    assert sorted(p.name for p in folder.glob("c1.*")) == [
        "c1.keyword.bin",
        "c1.meta.json",
        "c1.vector.bin",
    ]


def test_build_from_an_arrow_terms_column_equals_the_list_build() -> None:
    import pyarrow as pa

    keys = np.array([5, 3, 9, 4], np.int64)
    terms = [["alpha", "beta", "beta"], [], ["gamma"], ["beta", "delta"]]
    vectors = np.eye(4, 8, dtype=np.float32)
    column = pa.chunked_array([pa.array(terms[:2]), pa.array(terms[2:])])
    listed = derived.build_indexes(8, 1, lambda: (keys, terms, vectors))
    arrow = derived.build_indexes(8, 1, lambda: (keys, column, vectors))
    for query in (["beta"], ["alpha", "delta"], ["gamma"]):
        assert arrow.keyword.search(query, 10) == listed.keyword.search(query, 10)
    assert len(arrow.keyword) == len(listed.keyword) == 4
    nulls = derived.build_indexes(
        8, 1, lambda: (keys, pa.array([None, ["x"], None, ["x", "x"]]), vectors)
    )
    assert [key for key, _ in nulls.keyword.search(["x"], 10)] == [4, 3]


def test_a_snapshot_of_an_older_format_is_rebuilt_not_read(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    _fill(db)
    folder = tmp_path / "kb.duckdb.hkbidx"
    meta_path = next(folder.glob("*.meta.json"))
    meta = json.loads(meta_path.read_text())
    (folder / "c1.keyword.bin").unlink()
    (folder / "c1.keyword.npz").write_bytes(b"PK\x03\x04 an old archive")
    del meta["keyword"]  # the first format's meta had no keyword token
    meta_path.write_text(json.dumps(meta))
    assert derived.load_snapshot(folder, 1, generation=meta["generation"], chunks=4) is None
    with hybridkb.connect(db, model="fake") as kb:
        hits = kb.collection("Notes").search("beta", k=5, mode="keyword")
    assert sorted(h.document_id for h in hits) == ["a", "d"]
    assert sorted(p.name for p in folder.glob("c1.*")) == [
        "c1.keyword.bin",
        "c1.meta.json",
        "c1.vector.bin",
    ]
