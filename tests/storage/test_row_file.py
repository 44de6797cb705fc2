"""Rows of a collection too big for the row cache, kept in a file beside its indexes:
the same rows as the table, never stale, never half-written."""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from internals import duckdb_storage, local, sql_rows

import hybridkb
from hybridkb.index.derived import drop_snapshot
from hybridkb.storage.base import ChunkRecord
from hybridkb.storage.duckdb.row_cache import WARM_AFTER_FETCHES
from hybridkb.storage.duckdb.row_file import (
    HEADER_BYTES,
    MAGIC,
    RowFile,
    available,
    row_file_path,
    write_row_file,
)
from hybridkb.storage.records import chunk_record

pytestmark = pytest.mark.skipif(not available(), reason="no os.pread on this platform")

N = 1500  # ~1.2 MB of rows in the cache's estimate: over a 1 MB budget


def _texts() -> list[str]:
    words = ["lemur", "otter", "café", "naïve", "東京", "🦦"]
    return [
        f"note {i} on the {words[i % 6]} of island {i % 7}: {'x' * (400 + i % 50)}"
        for i in range(N)
    ]


def _fill(db: Path) -> None:
    with _open(db) as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(
            _texts(),
            ids=[f"d{i}" for i in range(N)],
            metadatas=[{"n": i, "tag": "é" if i % 2 else None} for i in range(N)],
        )


@pytest.fixture
def db(tmp_path: Path, isolated_env: Path) -> Path:
    """A file whose collection "Notes" holds N rows, over a 1 MB row-cache budget."""
    path = tmp_path / "kb.duckdb"
    _fill(path)
    return path


def _open(db: Path, *, read_only: bool = False) -> hybridkb.KnowledgeBase:
    return local(hybridkb.connect(db, model="fake", row_cache_mb=1, read_only=read_only))


def _keys(kb: hybridkb.KnowledgeBase) -> list[int]:
    return sorted(
        int(r[0]) for r in sql_rows(kb, f"SELECT key FROM kb_c{kb.record('Notes').id}_chunks")
    )


def _warm(kb: hybridkb.KnowledgeBase, keys: list[int]) -> dict[int, ChunkRecord]:
    rec = kb.record("Notes")
    for _ in range(WARM_AFTER_FETCHES):
        kb.storage.fetch_chunks(rec, keys[:3])
    duckdb_storage(kb).derived.rows.wait()
    return kb.storage.fetch_chunks(rec, keys)


def _table_rows(db: Path, keys: list[int]) -> dict[int, ChunkRecord]:
    with local(hybridkb.connect(db, model="fake", row_cache_mb=0)) as kb:
        return kb.storage.fetch_chunks(kb.record("Notes"), keys)


def _path(kb: hybridkb.KnowledgeBase) -> Path:
    folder = duckdb_storage(kb).engine.snapshot_dir
    assert folder is not None
    return row_file_path(folder, kb.record("Notes").id)


def test_rows_over_the_budget_come_from_a_file_equal_to_the_table(db: Path) -> None:
    with _open(db) as kb:
        keys = _keys(kb)
        served = _warm(kb, keys)
        assert _path(kb).exists()
        held = duckdb_storage(kb).derived.rows.used_bytes
        # Keys, offsets and the distinct values (metadata here: one per row), not the texts.
        assert 0 < held < sum(len(t) for t in _texts()) / 2
    assert served == _table_rows(db, keys) and len(served) == N


def test_a_later_process_reads_the_file_without_writing_it(db: Path) -> None:
    with _open(db) as kb:
        keys = _keys(kb)
        _warm(kb, keys)
        before = _path(kb).stat()
    with _open(db, read_only=True) as kb:
        served = _warm(kb, keys)
        after = _path(kb).stat()
        assert duckdb_storage(kb).derived.rows.used_bytes > 0
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert served == _table_rows(db, keys)


def test_a_read_only_process_never_writes_one(db: Path) -> None:
    with _open(db, read_only=True) as kb:
        keys = _keys(kb)
        served = _warm(kb, keys)
        assert not _path(kb).exists()
    assert served == _table_rows(db, keys)


def test_a_write_removes_the_file_and_every_hit_stays_true(db: Path) -> None:
    with _open(db) as kb:
        old = _keys(kb)
        _warm(kb, old)
        coll = kb.collection("Notes")
        coll.add_texts(["the lemur now sleeps in a mango tree"], ids=["d5"], metadatas=[{"v": 2}])
        coll.delete("d7")
        assert not _path(kb).exists()  # stale on disk now; this process reads its copy
        now = _keys(kb)
        served = kb.storage.fetch_chunks(kb.record("Notes"), sorted(set(old) | set(now)))
        assert set(served) == set(now)
        hit = coll.search("mango", k=1, mode="keyword")[0]
        assert hit.document_id == "d5" and hit.metadata["v"] == 2
    assert served == _table_rows(db, now)


def test_a_stale_file_is_never_trusted(db: Path) -> None:
    with _open(db) as kb:
        _warm(kb, _keys(kb))
        path = _path(kb)
        stale = path.read_bytes()
        # The same text under new metadata: the same chunk keys, other rows.
        kb.collection("Notes").add_texts([_texts()[3]], ids=["d3"], metadatas=[{"n": -3}])
    path.write_bytes(stale)  # as if the write's process had died before removing it
    with _open(db) as kb:
        keys = _keys(kb)
        served = _warm(kb, keys)
        generation = kb.record("Notes").generation
    assert served == _table_rows(db, keys)
    assert RowFile.open(path, generation=generation, chunks=N) is not None  # written again


def test_a_damaged_record_is_read_through_sql(db: Path) -> None:
    with _open(db) as kb:
        keys = _keys(kb)
        _warm(kb, keys)
        path = _path(kb)
    data = bytearray(path.read_bytes())
    for at in range(HEADER_BYTES + 40, HEADER_BYTES + 40_000, 997):  # inside records
        data[at] ^= 0x20
    path.write_bytes(bytes(data))
    with _open(db, read_only=True) as kb:
        served = _warm(kb, keys)
    assert served == _table_rows(db, keys)


def _row(key: int) -> tuple[Any, ...]:
    """A row of CHUNK_COLUMNS as DuckDB returns it (metadata as JSON text)."""
    return (
        key,
        f"c{key}",
        "d",
        0,
        "text",
        None,
        None,
        0,
        4,
        None,
        None,
        '{"n": 1}',
        None,
        "/p",
        None,
    )


def _record(key: int) -> ChunkRecord:
    return chunk_record(_row(key))


def test_a_stopped_write_leaves_no_file(tmp_path: Path) -> None:
    stop = threading.Event()

    def rows() -> Iterator[tuple[Any, ...]]:
        for key in range(10_000):
            if key == 5_000:
                stop.set()
            yield _row(key)

    assert (
        write_row_file(tmp_path, 1, rows(), generation=1, chunks=10_000, stopped=stop.is_set)
        is None
    )
    assert list(tmp_path.iterdir()) == []


def test_the_leftover_of_a_killed_write_goes_with_the_snapshot(tmp_path: Path) -> None:
    leftover = tmp_path / f".{row_file_path(tmp_path, 4).name}.12345.tmp"
    leftover.write_bytes(b"half a file")
    drop_snapshot(tmp_path, 4)
    assert not leftover.exists()


def test_a_file_vouches_only_for_its_generation_and_count(tmp_path: Path) -> None:
    found = write_row_file(
        tmp_path,
        2,
        iter([_row(k) for k in (5, 1, 3)]),
        generation=7,
        chunks=3,
        stopped=lambda: False,
    )
    assert found is not None and found.lookup([1, 3, 5, 9]) == {k: _record(k) for k in (1, 3, 5)}
    path = row_file_path(tmp_path, 2)
    assert RowFile.open(path, generation=8, chunks=3) is None
    assert RowFile.open(path, generation=7, chunks=4) is None
    assert RowFile.open(tmp_path / "missing.bin", generation=7, chunks=3) is None


def test_dropping_the_collection_removes_its_file(db: Path) -> None:
    with _open(db) as kb:
        _warm(kb, _keys(kb))
        path = _path(kb)
        assert path.exists()
        kb.drop_collection("Notes")
        assert not path.exists()


def test_a_new_write_removes_what_a_killed_one_left(tmp_path: Path) -> None:
    leftover = tmp_path / f".{row_file_path(tmp_path, 3).name}.999999.tmp"
    leftover.write_bytes(b"x" * 1000)
    assert write_row_file(
        tmp_path, 3, iter([_row(1)]), generation=1, chunks=1, stopped=lambda: False
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c3.rows.bin"]


def _craft(tmp_path: Path, **changes: Any) -> Path:
    """A valid one-row file whose header then says ``changes`` (its CRCs left as they are
    unless changed too): what a hostile or damaged file can claim."""
    write_row_file(tmp_path, 5, iter([_row(1)]), generation=1, chunks=1, stopped=lambda: False)
    return _recraft(row_file_path(tmp_path, 5), **changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"index_bytes": 1 << 50},  # would allocate a petabyte to read it
        {"values_bytes": 1 << 50},
        {"index_offset": -8},
        {"values_offset": 1 << 40},
        {"count": 1 << 40},
        {"count": "1"},
    ],
)
def test_a_header_claiming_what_the_file_lacks_is_refused(
    tmp_path: Path, changes: dict[str, Any]
) -> None:
    assert RowFile.open(_craft(tmp_path, **changes), generation=1, chunks=1) is None


def test_a_header_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c5.rows.bin"
    path.write_bytes(MAGIC + b"[1, 2]" + b"\0" * HEADER_BYTES)
    assert RowFile.open(path, generation=1, chunks=1) is None


def _with_tables(tmp_path: Path, index: np.ndarray, raw_values: bytes) -> Path:
    """A one-row file whose index (keys, starts, lengths) and value tables are replaced,
    their CRCs matching: a crafted file passes every checksum."""
    path = _craft(tmp_path)
    data = path.read_bytes()
    raw_index = index.astype(np.int64).tobytes()
    path.write_bytes(data + raw_index + raw_values)
    return _recraft(
        path,
        index_offset=len(data), index_bytes=len(raw_index), index_crc=zlib.crc32(raw_index),
        values_offset=len(data) + len(raw_index), values_bytes=len(raw_values),
        values_crc=zlib.crc32(raw_values), count=len(index) // 3,
    )  # fmt: skip


def _recraft(path: Path, **changes: Any) -> Path:
    data = bytearray(path.read_bytes())
    header = json.loads(data[len(MAGIC) : HEADER_BYTES].rstrip(b"\0"))
    header.update(changes)
    head = MAGIC + json.dumps(header).encode()
    data[:HEADER_BYTES] = head + b"\0" * (HEADER_BYTES - len(head))
    path.write_bytes(bytes(data))
    return path


def _one_row_index(tmp_path: Path) -> np.ndarray:
    found = write_row_file(
        tmp_path, 6, iter([_row(1)]), generation=1, chunks=1, stopped=lambda: False
    )
    assert found is not None
    return np.concatenate([found.sorted_keys, found.starts, found.lengths])


def test_records_outside_the_file_are_refused(tmp_path: Path) -> None:
    # key 1 at offset 4096, a record claiming a petabyte
    index = np.array([1, HEADER_BYTES, 1 << 50])
    path = _with_tables(tmp_path, index, json.dumps([[None]] * 8).encode())
    assert RowFile.open(path, generation=1, chunks=1) is None


@pytest.mark.parametrize(
    "raw_values",
    [
        json.dumps([[None]] * 7).encode(),  # one table short
        json.dumps([{"0": 1}] * 8).encode(),  # not lists
        b"[" * 200_000 + b"]" * 200_000,  # deeper than the JSON parser recurses
    ],
)
def test_value_tables_of_the_wrong_shape_are_refused(tmp_path: Path, raw_values: bytes) -> None:
    path = _with_tables(tmp_path, _one_row_index(tmp_path), raw_values)
    assert RowFile.open(path, generation=1, chunks=1) is None
