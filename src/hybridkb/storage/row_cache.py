"""Chunk rows kept in memory for the embedded backend, so search hits need no SQL.

A hit fetch through DuckDB costs ~1.2 ms for 10 keys even through the key index
(query setup and per-row decompression), more than both search legs together on a
SciFact-sized collection. Once a process has searched a collection twice, its rows
are read in one scan (while they fit the byte budget) and later fetches are dict
lookups. The cache is derived like the search indexes: rows are only ever forgotten
on writes (a deleted or replaced key is dropped; a new key is simply a miss and is
read from the table), so it cannot serve a row the table no longer holds. Only safe
where this process is the single writer of the file (DuckDB's rule), never for
Postgres.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

from .base import ChunkRecord

# Python object overhead of one cached row beyond its text (slotted record, ids, metadata
# dict, timestamp text): measured 800-1,000 bytes.
ROW_OVERHEAD_BYTES = 900
# Searches of a collection before its rows are loaded: a one-shot CLI query should not
# pay for reading every row.
WARM_AFTER_FETCHES = 2


def row_bytes(row: ChunkRecord) -> int:
    return len(row.text) + ROW_OVERHEAD_BYTES


class RowCache:
    """Per-collection chunk rows under one shared byte budget (0 disables it)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(int(max_bytes), 0)
        self._rows: dict[int, dict[int, ChunkRecord]] = {}
        self._bytes: dict[int, int] = {}
        self._fetches: dict[int, int] = {}
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        return sum(self._bytes.values())

    def get(
        self,
        collection_id: int,
        keys: Sequence[int],
        load_some: Callable[[Sequence[int]], Iterable[ChunkRecord]],
        load_all: Callable[[], Iterator[ChunkRecord]],
        estimate_bytes: Callable[[], int],
    ) -> dict[int, ChunkRecord]:
        """Rows for ``keys`` (missing keys are absent), warming the collection when due.

        ``estimate_bytes`` is asked (cheaply) before ``load_all`` reads every row.
        """
        if self.max_bytes == 0:
            return {r.key: r for r in load_some(keys)}
        rows = self._rows.get(collection_id)
        if rows is None:
            with self._lock:
                self._fetches[collection_id] = self._fetches.get(collection_id, 0) + 1
                due = self._fetches[collection_id] == WARM_AFTER_FETCHES
            if due and estimate_bytes() <= self.max_bytes - self.used_bytes:
                rows = self._warm(collection_id, load_all)
        if rows is None:
            return {r.key: r for r in load_some(keys)}
        found = {k: rows[k] for k in keys if k in rows}
        missing = [k for k in keys if k not in found]
        if missing:
            for r in load_some(missing):
                found[r.key] = r
                self._add(collection_id, r)
        return found

    def _warm(self, collection_id: int, load_all: Callable[[], Iterator[ChunkRecord]]) -> dict[int, ChunkRecord] | None:
        budget = self.max_bytes - self.used_bytes
        rows: dict[int, ChunkRecord] = {}
        size = 0
        for row in load_all():
            size += row_bytes(row)
            if size > budget:
                return None  # the estimate was low: stay uncached (fetch per search)
            rows[row.key] = row
        with self._lock:
            self._rows[collection_id] = rows
            self._bytes[collection_id] = size
        return rows

    def _add(self, collection_id: int, row: ChunkRecord) -> None:
        with self._lock:
            rows = self._rows.get(collection_id)
            if rows is None or row.key in rows:
                return
            if self.used_bytes + row_bytes(row) > self.max_bytes:
                return
            rows[row.key] = row
            self._bytes[collection_id] += row_bytes(row)

    def forget_keys(self, collection_id: int, keys: Iterable[int]) -> None:
        """Rows deleted or replaced by a committed write."""
        with self._lock:
            rows = self._rows.get(collection_id)
            if rows is None:
                return
            for k in keys:
                row = rows.pop(int(k), None)
                if row is not None:
                    self._bytes[collection_id] -= row_bytes(row)

    def forget(self, collection_id: int | None = None) -> None:
        """Drop one collection (or everything), e.g. after a rewrite the cache did not see."""
        with self._lock:
            if collection_id is None:
                self._rows.clear()
                self._bytes.clear()
                self._fetches.clear()
                return
            self._rows.pop(collection_id, None)
            self._bytes.pop(collection_id, None)
            self._fetches.pop(collection_id, None)
