"""Big snapshot sections a search reads at random give its pages back after it
(fileheader.SearchPages), and writes after a load never touch the mapped file."""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from hybridkb.index import fileheader
from hybridkb.index.fileheader import mapped_span
from hybridkb.index.keywords import KeywordIndex
from hybridkb.index.vector import VectorIndex

PAGEMAP = Path("/proc/self/pagemap")
needs_pagemap = pytest.mark.skipif(
    not PAGEMAP.exists(), reason="page residency is read from Linux's /proc/self/pagemap"
)
DIM = 384


def mapped_here(arr: np.ndarray) -> int:
    """Pages of ``arr`` present in this process's page table (the pagemap's present bit)."""
    first = arr.ctypes.data // mmap.PAGESIZE
    last = (arr.ctypes.data + arr.nbytes - 1) // mmap.PAGESIZE
    count = last - first + 1
    fd = os.open(PAGEMAP, os.O_RDONLY)
    try:
        entries = struct.unpack(f"{count}Q", os.pread(fd, count * 8, first * 8))
    finally:
        os.close(fd)
    return sum(entry >> 63 for entry in entries)


def unit_rows(n: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    unit: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


def saved_vector_index(tmp_path: Path, n: int = 4_000) -> tuple[Path, np.ndarray]:
    vectors = unit_rows(n)
    index = VectorIndex(DIM, hnsw_threshold=10 * n)
    index.add(np.arange(n), vectors)
    path = tmp_path / "vectors.bin"
    index.save(path)
    return path, vectors


@needs_pagemap
@pytest.mark.parametrize("big", [True, False])
def test_a_search_of_a_big_vector_snapshot_gives_back_the_rows_it_mapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, big: bool
) -> None:
    path, vectors = saved_vector_index(tmp_path)
    rows_bytes = len(vectors) * DIM
    # A threshold just under (or over) these rows stands for a 1M-chunk collection.
    monkeypatch.setattr(
        fileheader, "RELEASE_ABOVE_BYTES", rows_bytes // 2 if big else rows_bytes * 4
    )
    index = VectorIndex.load(path, mmap=True)
    rows = index.directions(np.arange(1))  # maps a page or so, which the search then drops
    assert rows is not None
    hits = index.search(vectors[123], 5)
    assert hits[0][0] == 123
    resident = mapped_here(index._rows.rows)
    if big:
        assert resident == 0
    else:  # scanned whole, so mapped whole, and kept
        assert resident * mmap.PAGESIZE >= rows_bytes


@needs_pagemap
@pytest.mark.parametrize("big", [True, False])
def test_a_search_of_a_big_keyword_snapshot_gives_back_the_postings_it_mapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, big: bool
) -> None:
    n = 40_000
    index = KeywordIndex()
    index.add(np.arange(n), [["common", f"t{i % 97}", f"u{i}"] for i in range(n)])
    path = tmp_path / "keywords.bin"
    index.save(path)
    monkeypatch.setattr(fileheader, "RELEASE_ABOVE_BYTES", 0 if big else 1 << 40)
    loaded = KeywordIndex.load(path)
    hits = loaded.search(["common", "t5"], 10)
    assert len(hits) == 10 and all(key % 97 == 5 for key, _ in hits)
    assert loaded.matching(["u7"]).tolist() == [7]
    resident = mapped_here(loaded.postings.base.rows) + mapped_here(loaded.postings.base.tf)
    assert (resident == 0) if big else (resident > 0)


def test_writes_after_a_load_copy_the_mapped_rows_and_outlive_a_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, vectors = saved_vector_index(tmp_path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setattr(fileheader, "RELEASE_ABOVE_BYTES", 0)
    index = VectorIndex.load(path, mmap=True)
    assert index._rows.pages.active  # the release is on before the writes
    index.add(np.array([5]), vectors[9][None, :])  # key 5 now points where 9 does
    index.remove([7])
    for _ in range(2):  # the second search runs after the first one's release
        hits = dict(index.search(vectors[9], 3))
        assert hits[5] == pytest.approx(hits[9], abs=1e-6)
        assert 7 not in dict(index.search(vectors[7], 3))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not index._rows.pages.active  # the copied rows are this process's own


def test_only_arrays_over_a_read_only_mapping_have_a_span(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)) * 64)
    read_only = fileheader.map_file(path)
    assert read_only is not None
    arr = np.frombuffer(read_only, np.uint8, 5_000, 6_000).view(np.int8).reshape(50, 100)
    span = mapped_span(arr)
    assert span is not None
    mapping, start, length = span
    page_start = 6_000 - 6_000 % mmap.PAGESIZE  # 4,096 with 4 KB pages, 0 with 16 KB
    assert mapping is read_only and start == page_start and start + length == 11_000
    with path.open("r+b") as fh:
        writable = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
        assert mapped_span(np.frombuffer(writable, np.uint8, 100, 0)) is None
        del fh
    assert mapped_span(np.zeros(10)) is None
