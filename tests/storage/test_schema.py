"""DuckDB schema: stored version, forward migrations on open, key indexes kept through maintenance."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
from internals import duckdb_storage

import hybridkb
from hybridkb.errors import BackendError
from hybridkb.storage import open_storage
from hybridkb.storage.base import ChunkRecord, DocumentRecord, PutItem, chunk_key, make_chunk_id
from hybridkb.storage.duckdb.schema import MIGRATIONS, table_names


def _indexes(db: Path) -> set[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT index_name FROM duckdb_indexes()").fetchall()}
    finally:
        con.close()


def _version(db: Path) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT value FROM hybridkb_meta WHERE key = 'schema_version'").fetchone()
        assert row is not None
        (value,) = row
        return int(value)
    finally:
        con.close()


def _set_version(db: Path, version: int) -> None:
    con = duckdb.connect(str(db))
    con.execute("UPDATE hybridkb_meta SET value = ? WHERE key = 'schema_version'", [str(version)])
    con.close()


def _make(db: Path) -> int:
    with hybridkb.connect(db, model="fake") as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(
            ["lemurs live on Madagascar", "otters hold hands while sleeping"], ids=["a", "b"]
        )
        return coll.record.id


def test_new_database_is_at_the_latest_version_with_key_indexes(
    tmp_path: Path, isolated_env: Path
) -> None:
    db = tmp_path / "kb.duckdb"
    cid = _make(db)
    t = table_names(cid)
    assert _version(db) == len(MIGRATIONS)
    assert {f"{t['chunks']}_key", f"{t['vectors']}_key"} <= _indexes(db)


def test_an_older_database_is_migrated_forward_on_open(tmp_path: Path, isolated_env: Path) -> None:
    db = tmp_path / "kb.duckdb"
    cid = _make(db)
    t = table_names(cid)
    # Take the file back to schema version 2: before vectors had a key index.
    con = duckdb.connect(str(db))
    con.execute(f"DROP INDEX {t['vectors']}_key")
    con.close()
    _set_version(db, 2)
    assert f"{t['vectors']}_key" not in _indexes(db)

    with hybridkb.connect(db, model="fake") as kb:
        hits = kb["Notes"].search("lemurs Madagascar", k=1)
        assert hits[0].document_id == "a"
    assert _version(db) == len(MIGRATIONS)
    assert f"{t['vectors']}_key" in _indexes(db)


def test_a_read_only_open_does_not_migrate(tmp_path: Path, isolated_env: Path) -> None:
    db = tmp_path / "kb.duckdb"
    _make(db)
    _set_version(db, 2)
    with hybridkb.connect(db, model="fake", read_only=True) as kb:
        assert duckdb_storage(kb).schema_version == 2
        assert kb["Notes"].search("otters", k=1)[0].document_id == "b"
    assert _version(db) == 2


def test_a_newer_database_is_refused_with_the_fix(tmp_path: Path, isolated_env: Path) -> None:
    db = tmp_path / "kb.duckdb"
    _make(db)
    _set_version(db, 999)
    with pytest.raises(BackendError, match="newer than this hybridkb supports.*upgrade hybridkb"):
        hybridkb.connect(db, model="fake")


def test_reembed_keeps_the_vector_key_index(tmp_path: Path, isolated_env: Path) -> None:
    db = tmp_path / "kb.duckdb"
    cid = _make(db)
    with hybridkb.connect(db, model="fake") as kb:
        kb.reembed("Notes", model="fake:32")
        assert kb["Notes"].search("otters hold hands", k=1)[0].document_id == "b"
    assert f"{table_names(cid)['vectors']}_key" in _indexes(db)


def test_catalog_reads_see_every_write_of_the_process(tmp_path: Path, isolated_env: Path) -> None:
    # The DuckDB backend caches the catalog between writes; all handles share one storage.
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        other = kb.in_workspace("bob")
        kb.create_collection("A")
        assert kb.collection_names() == ["A"] and other.collection_names() == []
        other.create_collection("B")
        assert other.collection_names() == ["B"]
        generation = kb["A"].record.generation
        kb["A"].add_texts(["x"])
        assert kb["A"].record.generation > generation
        kb.drop_collection("A")
        assert kb.collection_names() == [] and other.collection_names() == ["B"]


def test_vectors_are_not_stored_with_alprd(tmp_path: Path, isolated_env: Path) -> None:
    """Embedding floats are written without ALPRD: on their full-entropy mantissas it took
    more blocks than plain floats and about twice the CPU at every checkpoint (the
    largest cost of a bulk load at 1M chunks)."""
    db = tmp_path / "kb.duckdb"
    rng = np.random.default_rng(0)
    storage = open_storage(str(db))
    coll = storage.create_collection(
        "default", "v", model="precomputed", dim=384, chunking={}, language="en"
    )
    items = []
    for d in range(100):
        doc_id = f"d{d}"
        doc = DocumentRecord(doc_id, None, f"{doc_id}.txt", "text", "h", "s", {}, "en", 10)
        chunks = []
        for i in range(20):
            chunk_id = make_chunk_id(coll.id, doc_id, "h", i)
            chunks.append(
                ChunkRecord(
                    chunk_key(chunk_id),
                    chunk_id,
                    doc_id,
                    i,
                    f"text {d} {i}",
                    None,
                    None,
                    0,
                    5,
                    "c",
                    "en",
                    ["text"],
                    {},
                    f"{doc_id}.txt",
                    None,
                )  # fmt: skip
            )
        vectors = rng.standard_normal((20, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        items.append(PutItem(doc, chunks, vectors))
    storage.put_documents(coll, items)
    storage.close()  # checkpoints: the rows are compressed now
    con = duckdb.connect(str(db), read_only=True)
    try:
        found = con.execute(
            f"SELECT DISTINCT compression FROM pragma_storage_info('{table_names(coll.id)['vectors']}')"
        ).fetchall()
    finally:
        con.close()
    assert found and "ALPRD" not in {r[0] for r in found}
