"""Derived indexes are persisted for a fast start, but never trusted when stale or damaged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from internals import duckdb_storage as duckdb_backend

import hybridkb
from hybridkb.index import derived
from hybridkb.index.keywords import KeywordIndex
from hybridkb.index.vector import VectorIndex
from hybridkb.storage.duckdb import memory as duckdb_storage
from hybridkb.storage.duckdb.schema import table_names

TEXTS = ["alpha beta gamma", "delta epsilon", "zeta eta theta", "beta delta"]


def _fill(db: Path) -> None:
    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(TEXTS, ids=["a", "b", "c", "d"])
        assert coll.search("beta", k=1, mode="keyword")  # builds the indexes


def _forbid_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("indexes were rebuilt from the tables")

    monkeypatch.setattr(duckdb_storage, "build_from_slices", boom)


def test_reopen_uses_the_saved_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "kb.duckdb"
    _fill(db)
    assert (tmp_path / "kb.duckdb.hkbidx").is_dir()
    _forbid_rebuild(monkeypatch)
    with hybridkb.connect(db, model="fake") as kb:
        hits = kb.collection("Notes").search("beta", k=5, mode="keyword")
    assert sorted(h.document_id for h in hits) == ["a", "d"]


def test_a_writer_that_never_searched_leaves_the_indexes_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes keep the indexes current and saved: the next process loads them instead
    of building them from the tables (a 1M-chunk bulk load then took minutes)."""
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(TEXTS[:2], ids=["a", "b"])
    with hybridkb.connect(db, model="fake") as kb:  # another writer, no search either
        coll = kb.collection("Notes")
        coll.add_texts(TEXTS[2:], ids=["c", "d"])
        coll.delete(["b"])
    _forbid_rebuild(monkeypatch)
    with hybridkb.connect(db, model="fake") as kb:
        hits = kb.collection("Notes").search("beta delta", k=5, mode="keyword")
        assert sorted(h.document_id for h in hits) == ["a", "d"]
        assert len(kb.collection("Notes").search("zeta", k=5, mode="vector")) == 3


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


def test_build_from_coded_terms_equals_the_list_build(tmp_path: Path) -> None:
    """The columnar form DuckDB builds (storage/duckdb/memory.py) indexes as the lists do."""
    terms = [["alpha", "beta", "beta"], [], ["gamma"], ["beta", "delta"]]
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        coll = kb.create_collection("c")
        coll.add_texts(["x"] * 4, ids=["a", "b", "c", "d"])
        storage = duckdb_backend(kb)
        t = table_names(coll.record.id)["chunks"]
        keys = [k for (k,) in storage.engine.query(f"SELECT key FROM {t} ORDER BY key")]
        for key, row in zip(keys, terms, strict=True):  # our terms, written as a list column
            storage.engine.con.execute(f"UPDATE {t} SET terms = ? WHERE key = ?", [row, key])
        got_keys, coded, vectors = storage.derived.load_rows(coll.record)
    assert got_keys.tolist() == keys and coded.lengths.tolist() == [3, 0, 1, 2]
    assert [coded.dictionary[c] for c in coded.codes] == [t for row in terms for t in row]
    listed = derived.build_indexes(coll.record.dim, 1, lambda: (got_keys, terms, vectors))
    built = derived.build_indexes(coll.record.dim, 1, lambda: (got_keys, coded, vectors))
    for query in (["beta"], ["alpha", "delta"], ["gamma"]):
        assert built.keyword.search(query, 10) == listed.keyword.search(query, 10)
    assert len(built.keyword) == len(listed.keyword) == 4


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


# -- the vector index's recall decisions are saved with the snapshot --------------------


def _rows(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, KeywordIndex]:
    """Keys 1..rows, random 16-d unit rows, and a keyword index holding each key once."""
    rng = np.random.default_rng(seed)
    keys = np.arange(1, rows + 1, dtype=np.int64)
    vectors = rng.standard_normal((rows, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    keyword = KeywordIndex()
    keyword.add(keys.tolist(), [["term"]] * rows)
    return keys, vectors, keyword


def _graph_indexes(generation: int = 3, rows: int = 300) -> derived.CollectionIndexes:
    """Indexes whose vector index is a graph (HNSW) that checked its own recall."""
    keys, vectors, keyword = _rows(rows, seed=0)
    vector = VectorIndex(16, hnsw_threshold=rows // 2)
    vector.add(keys, vectors)
    assert vector.layout == "hnsw" and vector.recall_report()["verified_recall"] is not None
    return derived.CollectionIndexes(keyword, vector, generation)


def test_a_changed_recall_decision_is_saved_without_the_keyword_file(tmp_path: Path) -> None:
    indexes = _graph_indexes()
    assert indexes.saved_generation == -1  # never saved
    derived.save_snapshot(tmp_path, 1, indexes)
    assert indexes.saved_generation == 3
    indexes.vector.search(np.ones(16, np.float32), 5)  # a query served is no decision
    assert indexes.saved_generation == 3

    loaded = derived.load_snapshot(tmp_path, 1, generation=3, chunks=300)
    assert loaded is not None and loaded.saved_generation == 3
    loaded.vector.beam_factor = 2  # what a check of the served queries may decide
    assert loaded.saved_generation == -1  # Derived.save() writes it at close
    keyword_file = tmp_path / "c1.keyword.bin"
    before = keyword_file.stat()
    derived.save_snapshot(tmp_path, 1, loaded)
    after = keyword_file.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert loaded.saved_generation == 3

    again = derived.load_snapshot(tmp_path, 1, generation=3, chunks=300)
    assert again is not None and again.saved_generation == 3
    assert again.vector.beam_factor == 2
    assert again.keyword.search(["term"], 3) == loaded.keyword.search(["term"], 3)


def test_a_snapshot_checked_again_on_another_machine_is_saved_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    derived.save_snapshot(tmp_path, 1, _graph_indexes())
    # Another CPU or usearch version: the loaded graph checks its recall again.
    import hybridkb.index.vector as vector_module
    from hybridkb.index.recall import build_environment as here  # what vector.py calls

    def elsewhere(isa: str) -> dict[str, str]:
        return {**here(isa), "isa": "another-cpu"}

    checks: list[int] = []
    verify = VectorIndex.verify_recall

    def counted(self: VectorIndex, *, seed: int = 0) -> float | None:
        checks.append(1)
        return verify(self, seed=seed)

    monkeypatch.setattr(vector_module, "build_environment", elsewhere)
    monkeypatch.setattr(VectorIndex, "verify_recall", counted)
    moved = derived.load_snapshot(tmp_path, 1, generation=3, chunks=300)
    assert moved is not None and len(checks) == 1
    assert moved.saved_generation == -1  # the check's outcome is not on disk yet
    derived.save_snapshot(tmp_path, 1, moved)
    later = derived.load_snapshot(tmp_path, 1, generation=3, chunks=300)
    assert later is not None and len(checks) == 1  # the next process trusts the saved check
    assert later.saved_generation == 3
    assert later.vector.recall_report()["built_on"]["isa"] == "another-cpu"


def test_a_snapshot_saved_before_decisions_were_kept_is_saved_again_by_a_writer(
    tmp_path: Path,
) -> None:
    db = tmp_path / "kb.duckdb"
    _fill(db)
    folder = tmp_path / "kb.duckdb.hkbidx"
    meta_path = folder / "c1.meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["recall"]  # the meta of an earlier version
    meta_path.write_text(json.dumps(meta))
    keyword_stamp = (folder / "c1.keyword.bin").stat().st_mtime_ns
    with hybridkb.connect(db, model="fake", read_only=True) as kb:
        kb.collection("Notes").search("beta", k=1, mode="keyword")
    assert "recall" not in json.loads(meta_path.read_text())  # a reader writes nothing
    with hybridkb.connect(db, model="fake") as kb:
        kb.collection("Notes").search("beta", k=1, mode="keyword")
    saved = json.loads(meta_path.read_text())
    assert saved["recall"]["layout"] == "flat" and saved["generation"] == meta["generation"]
    assert (folder / "c1.keyword.bin").stat().st_mtime_ns == keyword_stamp


@pytest.mark.parametrize("term_hash", ["hash({})", "hash({}) % 2"])  # % 2: hashes collide
def test_coded_terms_follow_key_order_whatever_the_scan_order(
    term_hash: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows stored out of key order (and terms whose hashes collide, which the exact
    SQL then encodes) come back as the term lists in key order."""
    import duckdb

    monkeypatch.setattr(duckdb_storage, "TERM_HASH", term_hash)
    con = duckdb.connect(":memory:", config={"threads": 1})
    con.execute("CREATE TABLE c (key BIGINT, terms VARCHAR[])")
    rows = {9: ["z", "a", "z"], 2: [], 5: None, 7: ["a"], 3: ["b", "c", "a", "b"]}
    for key, terms in rows.items():  # stored in this order: 9, 2, 5, 7, 3
        con.execute("INSERT INTO c VALUES (?, ?)", [key, terms])
    keys, coded = duckdb_storage.coded_terms(con, "c")
    assert keys.tolist() == sorted(rows)
    offsets = np.concatenate(([0], np.cumsum(coded.lengths)))
    got = [
        [coded.dictionary[c] for c in coded.codes[offsets[i] : offsets[i + 1]]]
        for i in range(len(keys))
    ]
    assert got == [rows[k] or [] for k in sorted(rows)]


def test_slices_hold_at_most_their_rows_and_terms() -> None:
    """Every row lands in exactly one slice, and no slice exceeds either bound unless
    one row alone is larger than the term bound."""
    rowids = np.array([0, 1, 2, 5, 6, 7, 9])
    lengths = np.array([3, 3, 9, 0, 1, 1, 2])
    got = duckdb_storage.slice_bounds(rowids, lengths, max_rows=2, max_terms=4)
    assert got == [(0, 0), (1, 1), (2, 2), (5, 6), (7, 9)]
    assert duckdb_storage.slice_bounds(rowids, lengths, 100, 100) == [(0, 9)]
    assert duckdb_storage.slice_bounds(rowids[:0], lengths[:0], 2, 4) == []


def test_an_index_built_in_small_term_slices_finds_what_one_slice_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [f"lemur {i} madagascar forest" if i % 3 else f"gecko {i} desert" for i in range(40)]
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        coll = kb.create_collection("c")
        coll.add_texts(texts)
        storage = duckdb_backend(kb)
        whole = derived.build_from_slices(
            coll.record.dim, 1, storage.derived.row_slices(coll.record)
        )
        monkeypatch.setattr(duckdb_storage, "BUILD_SLICE_TERMS", 7)
        sliced = derived.build_from_slices(
            coll.record.dim, 1, storage.derived.row_slices(coll.record)
        )
    assert len(sliced.keyword) == len(whole.keyword) == 40
    for query in (["lemur"], ["gecko", "desert"], ["madagascar"]):
        assert sliced.keyword.search(query, 50) == whole.keyword.search(query, 50)


def test_graph_rows_inserted_after_a_load_are_saved_at_the_next_save(tmp_path: Path) -> None:
    """A bulk load leaves rows its graph did not hold yet; the next process inserts them in
    the background. What it inserted must reach the snapshot when that process saves (at
    close), not be done again by every process that opens the file."""
    first, rows = 600, 4000
    keys, vectors, keyword = _rows(rows, seed=5)
    vector = VectorIndex(16, hnsw_threshold=300, defer_graph=True)
    vector.add(keys[:first], vectors[:first])  # a graph built and checked on this machine
    vector.wait_for_graph()
    vector.wait_for_audit()
    vector.stop()  # then a bulk add whose writer closed before its background inserts
    vector.add(keys[first:], vectors[first:])
    written = derived.CollectionIndexes(keyword, vector, 4)
    derived.save_snapshot(tmp_path, 1, written)
    pending = rows - first
    assert vector.pending == pending and written.saved_generation == 4

    # Not deferred: the graph catches up while loading (a deferred one does it in a
    # background thread, and a process may close part-way: the same check applies).
    loaded = derived.load_snapshot(tmp_path, 1, generation=4, chunks=rows)
    assert loaded is not None and loaded.vector.pending == 0
    # The same recall decisions as the file's (same machine, a graph checked before):
    # only the rows inserted since tell that the file is behind.
    assert derived.recall_decisions(loaded.vector) == loaded.on_disk[1]  # type: ignore[index]
    assert loaded.saved_generation == -1  # holds what the file does not: Derived.save() writes it
    derived.save_snapshot(tmp_path, 1, loaded)
    assert loaded.saved_generation == 4

    again = derived.load_snapshot(tmp_path, 1, generation=4, chunks=rows, defer_graph=True)
    assert again is not None and again.vector.pending_in_file == 0
    assert again.saved_generation == 4
    assert again.vector.search(vectors[3000], 1)[0][0] == keys[3000]
