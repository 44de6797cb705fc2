"""Streamed documents (huge text files): staged outside the tables, switched in at once.

The promises: searches see the old version (never a staged row) until the switch,
a failed stream leaves the old version and no staged file, leftovers of a killed
process are reported and removed, and the in-memory indexes are extended in place.
Kill tests for the staged path live in test_crash_stream.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pytest
from internals import duckdb_storage, sql_rows
from streams import Batches, streamed_batches

import hybridkb
from hybridkb.errors import IngestError
from hybridkb.ingest import pipeline as ingest
from hybridkb.storage.base import (
    ChunkRecord,
    CollectionRecord,
    DocumentRecord,
)
from hybridkb.storage.duckdb import stream as duckdb_stream
from hybridkb.storage.duckdb.schema import table_names


def _batches(
    kb: hybridkb.KnowledgeBase,
    coll: hybridkb.Collection,
    version: str,
    n: int,
    *,
    during: Callable[[int], None] | None = None,
) -> Batches:
    """n batches of 3 chunks of document "big"; ``during(b)`` runs after batch b is taken."""
    return streamed_batches(coll.record.id, kb.embedder("fake"), version, n, during=during)


def _doc(version: str) -> DocumentRecord:
    return DocumentRecord("big", "/big.txt", "big.txt", "file", version, "sig")


def _table_texts(kb: hybridkb.KnowledgeBase, coll: hybridkb.Collection) -> list[str]:
    t = table_names(coll.record.id)
    return [r[0] for r in sql_rows(kb, f"SELECT text FROM {t['chunks']} ORDER BY chunk_index")]


def _stage_files(kb: hybridkb.KnowledgeBase) -> list[Path]:
    folder = duckdb_stream.stage_dir(duckdb_storage(kb).engine)
    return sorted(folder.iterdir()) if folder is not None and folder.exists() else []


def test_old_version_stays_searchable_until_the_switch(
    kb: hybridkb.KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(duckdb_stream, "ROW_GROUP_CHARS", 1)  # every batch is written out
    coll = kb.create_collection("Stream", language="en")
    assert (
        kb.storage.put_document_stream(coll.record, _doc("v1"), _batches(kb, coll, "v1", 4)) == 12
    )
    assert len(coll.search("lemurs", k=50, mode="keyword")) == 12  # loads the indexes
    seen: list[int] = []

    def during(b: int) -> None:
        # Batches already staged (one Parquet part each, of one stream) are in no table
        # and no index.
        assert len({p.name.rsplit("-", 1)[0] for p in _stage_files(kb)}) == 1
        assert _table_texts(kb, coll) == [
            f"v1 streamed part {p} line {i} about lemurs" for p in range(4) for i in range(3)
        ]
        for mode in ("keyword", "vector", "hybrid"):
            hits = coll.search("v2 lemurs streamed", k=50, mode=mode)
            assert hits and all(h.text.startswith("v1") for h in hits), mode
        got = coll.get("big")
        assert got is not None and got.content_hash == "v1" and got.chunk_count == 12
        assert coll.describe().chunks == 12
        seen.append(b)

    assert (
        kb.storage.put_document_stream(
            coll.record, _doc("v2"), _batches(kb, coll, "v2", 5, during=during)
        )
        == 15
    )
    assert seen == [0, 1, 2, 3, 4]
    assert _stage_files(kb) == []
    got = coll.get("big")
    assert coll.describe().chunks == 15 and got is not None and got.chunk_count == 15
    hits = coll.search("lemurs streamed", k=50, mode="keyword")
    assert len(hits) == 15 and all(h.text.startswith("v2") for h in hits)
    assert {h.text for h in coll.search("lemurs streamed", k=50, mode="vector")} == set(
        _table_texts(kb, coll)
    )


def test_the_indexes_are_extended_not_rebuilt(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Stream", language="en")
    coll.add_texts(["a small note about otters"], ids=["note"])
    coll.search("otters", k=3)
    storage = duckdb_storage(kb)
    loaded = storage.derived.indexes[coll.record.id]
    storage.put_document_stream(coll.record, _doc("v1"), _batches(kb, coll, "v1", 3))
    storage.put_document_stream(coll.record, _doc("v2"), _batches(kb, coll, "v2", 2))
    assert storage.derived.indexes[coll.record.id] is loaded
    assert loaded.generation == kb.record("Stream").generation
    mirrored = {
        m: [(h.chunk_id, round(h.score, 5)) for h in coll.search("v2 lemurs part 1", k=20, mode=m)]
        for m in ("keyword", "vector")
    }
    storage.derived.forget(coll.record.id)
    rebuilt = {
        m: [(h.chunk_id, round(h.score, 5)) for h in coll.search("v2 lemurs part 1", k=20, mode=m)]
        for m in ("keyword", "vector")
    }
    assert mirrored == rebuilt and len(rebuilt["keyword"]) == 6
    assert {f.check: f.count for h in kb.doctor() for f in h.findings if f.count} == {}


def test_a_failed_stream_leaves_the_old_version_and_no_staged_file(
    kb: hybridkb.KnowledgeBase,
) -> None:
    coll = kb.create_collection("Stream", language="en")
    kb.storage.put_document_stream(coll.record, _doc("v1"), _batches(kb, coll, "v1", 2))
    generation = kb.record("Stream").generation

    def fail(b: int) -> None:
        if b == 2:
            raise IngestError("big.txt: cannot read the rest; check the file")

    with pytest.raises(IngestError):
        kb.storage.put_document_stream(
            coll.record, _doc("v2"), _batches(kb, coll, "v2", 5, during=fail)
        )
    assert _stage_files(kb) == []
    assert _table_texts(kb, coll)[0].startswith("v1") and len(_table_texts(kb, coll)) == 6
    assert kb.record("Stream").generation == generation
    assert all(h.text.startswith("v1") for h in coll.search("lemurs", k=50))


def test_the_switch_restores_duckdb_settings(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Stream", language="en")
    con = duckdb_storage(kb).engine.con
    con.execute("SET memory_limit = '300MB'")
    con.execute("SET threads = 2")
    settings = "SELECT current_setting('memory_limit'), current_setting('threads')"
    before = con.execute(settings).fetchone()
    assert before is not None
    seen: list[tuple[str, int]] = []  # (memory_limit, threads)
    # Hooks run inside the switch: the pool is held to a headroom, one thread copies.
    kb.storage.hooks.append(lambda c, event: seen.append(c.execute(settings).fetchone()))
    kb.storage.put_document_stream(coll.record, _doc("v1"), _batches(kb, coll, "v1", 2))
    after = con.execute(settings).fetchone()
    assert after is not None
    # Restored from DuckDB's rounded display ("286.1 MiB"): equal to a display digit.
    assert after[1] == 2 and abs(_mib(after[0]) - _mib(before[0])) <= 0.1
    [(limit, threads)] = seen
    assert threads == 1 and _mib(limit) < _mib(before[0])


def _mib(setting: str) -> float:
    size = duckdb_stream._size_bytes(setting)
    assert size is not None, setting
    return size / 2**20


def test_an_empty_stream_replaces_the_document_with_no_chunks(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Stream", language="en")
    kb.storage.put_document_stream(coll.record, _doc("v1"), _batches(kb, coll, "v1", 2))
    assert kb.storage.put_document_stream(coll.record, _doc("v2"), iter([])) == 0
    got = coll.get("big")
    assert got is not None and got.content_hash == "v2" and got.chunk_count == 0
    assert coll.search("lemurs", k=50) == [] and _table_texts(kb, coll) == []


def test_staged_leftovers_are_reported_repaired_and_swept(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Stream", language="en")
    other = kb.create_collection("Other", language="en")
    folder = duckdb_stream.stage_dir(duckdb_storage(kb).engine)
    assert folder is not None and folder.name == "kb.duckdb.hkbstage"
    folder.mkdir()
    (folder / f"c{coll.record.id}-deadbeef.parquet").write_bytes(b"half a file")
    (folder / f"c{other.record.id}-deadbeef.parquet").write_bytes(b"half a file")
    found = {(h.collection, f.check): f.count for h in kb.doctor() for f in h.findings if f.count}
    assert found == {("Stream", "staged_leftovers"): 1, ("Other", "staged_leftovers"): 1}
    [health] = kb.doctor("Stream", repair=True)
    assert health.ok and [(f.check, f.repaired) for f in health.findings if f.count] == [
        ("staged_leftovers", True)
    ]
    assert [p.name for p in _stage_files(kb)] == [f"c{other.record.id}-deadbeef.parquet"]
    # The next stream (the writer holds the file: nobody else is streaming) sweeps the rest.
    kb.storage.put_document_stream(coll.record, _doc("v1"), _batches(kb, coll, "v1", 1))
    assert _stage_files(kb) == []


def test_a_read_only_open_keeps_staged_files_a_writable_open_sweeps_them(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        kb.create_collection("Stream")
    folder = tmp_path / "kb.duckdb.hkbstage"
    folder.mkdir()
    (folder / "c1-deadbeef.parquet").write_bytes(b"x")
    from hybridkb.storage.duckdb import DuckDBStorage

    storage = DuckDBStorage(str(tmp_path / "kb.duckdb"), read_only=True)
    try:
        assert duckdb_stream.drop_stale_stages(storage.engine) == 0
    finally:
        storage.close()
    assert (folder / "c1-deadbeef.parquet").exists()
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake"):  # a writer holds the file
        assert not (folder / "c1-deadbeef.parquet").exists()


@pytest.mark.parametrize("where", ["file", "memory"])
def test_a_big_file_streams_through_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    path = tmp_path / "big.txt"
    path.write_text(
        "Big notes\n\n"
        + "".join(f"Paragraph {i} is about item{i} and lemurs.\n\n" for i in range(800))
    )
    monkeypatch.setattr(ingest, "STREAM_BYTES", 4_000)
    monkeypatch.setattr(ingest, "WINDOW_CHARS", 8_000)
    # Several staged parts (so several mirror pages too).
    monkeypatch.setattr(duckdb_stream, "ROW_GROUP_CHARS", 5_000)
    staged: list[list[Path]] = []
    real = duckdb_stream._stage

    def spy(
        coll: CollectionRecord,
        batches: Iterable[tuple[Sequence[ChunkRecord], np.ndarray]],
        folder: Path,
        stream: str,
        parts: list[Path],
    ) -> int:
        staged.append(parts)
        return real(coll, batches, folder, stream, parts)

    monkeypatch.setattr(duckdb_stream, "_stage", spy)
    with hybridkb.connect(
        tmp_path / "kb.duckdb" if where == "file" else ":memory:", model="fake"
    ) as kb:
        coll = kb.create_collection("Big")
        coll.search("anything", k=1)  # indexes loaded: the stream extends them
        report = coll.add(path)
        assert [f.filename for f in report.added] == ["big.txt"] and not report.failed
        assert report.added[0].chunks == coll.describe().chunks > 20
        hits = coll.search("item799", k=3, mode="keyword")
        assert hits and "Paragraph 799 " in hits[0].text
        # Only the document's first line can be its title, never a later window's.
        assert {c.section for c in coll.chunks(report.added[0].document_id)} == {"Big notes"}
    assert len(staged) == 1 and len(staged[0]) > 1
    assert not any(part.exists() for part in staged[0])
    # A file database stages beside itself; :memory: in a scratch folder that goes too.
    assert staged[0][0].parent.exists() == (where == "file")


def test_an_index_build_skips_rows_the_tables_disagree_on(kb: hybridkb.KnowledgeBase) -> None:
    from hybridkb.index.derived import build_indexes

    coll = kb.create_collection("Paged", language="en")
    words = ["otter", "lemur", "heron", "badger", "marten", "vole", "shrew", "stoat"]
    coll.add_texts(
        [f"note {i} about {words[i % 8]} and {words[(i * 3) % 8]}" for i in range(40)],
        ids=[f"n{i}" for i in range(40)],
    )
    storage = duckdb_storage(kb)
    t = table_names(coll.record.id)
    # Tables that disagree: a vector with no chunk, a chunk with no vector; neither is indexed.
    lone = storage.query(f"SELECT key FROM {t['vectors']} LIMIT 1")[0][0]
    storage.transaction(
        lambda con: (
            con.execute(
                f"INSERT INTO {t['vectors']} SELECT 12345, embedding FROM {t['vectors']} LIMIT 1"
            ),
            con.execute(f"DELETE FROM {t['vectors']} WHERE key = ?", [lone]),
        )
    )
    record = storage.get_collection(kb.workspace, "Paged")
    assert record is not None
    full = build_indexes(record.dim, record.generation, lambda: storage.derived.load_rows(record))
    assert len(full.keyword) == len(full.vector) == 39
    assert lone not in full.vector and 12345 not in full.vector and lone not in full.keyword
    query = kb.embedder("fake").embed_query("otter heron")
    for terms in (["otter"], ["heron", "vole"], ["note"]):
        assert full.keyword.search(terms, 50)
    assert len(full.vector.search(query, 50)) == 39
