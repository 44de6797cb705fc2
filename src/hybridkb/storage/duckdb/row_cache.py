"""Chunk rows kept in memory for the embedded backend, so search hits need no SQL.

A hit fetch through DuckDB costs ~1.2 ms for 10 keys even through the key index
(query setup and per-row decompression), more than both search legs together on a
SciFact-sized collection. Once a process has searched a collection twice, its rows
are read in one scan by a background thread (while they fit the byte budget), packed
into arrays (packed_rows.py: a row costs its text plus ~270 bytes, not the ~1,400 of
Python objects), and later fetches are lookups. The cache is derived like the search indexes: rows are only ever forgotten
on writes (a deleted or replaced key is dropped; a new key is simply a miss and is
read from the table), so it cannot serve a row the table no longer holds. Only safe
where this process is the single writer of the file (DuckDB's rule), never for
Postgres.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence

from ..base import ChunkRecord
from .packed_rows import PackedRows
from .row_file import RowFile

# Bytes of one cached row beyond its text: as Python objects (a row read after the
# warm-up: slotted record, ids, metadata dict, timestamp text) ~1,400 at the 100k
# bench; packed, ~270 (tests/storage/test_packed_rows.py).
ROW_OVERHEAD_BYTES = 1400
PACKED_ROW_OVERHEAD_BYTES = 300
# Searches of a collection before its rows are loaded: a one-shot CLI query should not
# pay for reading every row.
WARM_AFTER_FETCHES = 2


def row_bytes(row: ChunkRecord) -> int:
    return len(row.text) + ROW_OVERHEAD_BYTES


class RowCache:
    """Per-collection chunk rows under one shared byte budget (0 disables it).

    Rows are read in a background thread (1.2 s at 100k chunks), so no search waits for
    them; the backend publishes them only if no write committed meanwhile.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(int(max_bytes), 0)
        self._rows: dict[int, PackedRows | RowFile] = {}
        # Rows read after the warm-up (new keys, rows read again after a write).
        self._extra: dict[int, dict[int, ChunkRecord]] = {}
        self._bytes: dict[int, int] = {}
        self._fetches: dict[int, int] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        # Bumped by every forget: a warm-up that began before one must not publish.
        self._epoch: dict[int, int] = {}

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def used_bytes(self) -> int:
        return sum(self._bytes.values())

    def get(
        self,
        collection_id: int,
        keys: Sequence[int],
        load_some: Callable[[Sequence[int]], Iterable[ChunkRecord]],
        warm: Callable[[Callable[[Iterator[ChunkRecord]], PackedRows | None]], None],
        estimate_bytes: Callable[[], int],
        warm_file: Callable[[], None] | None = None,
    ) -> dict[int, ChunkRecord]:
        """Rows for ``keys`` (missing keys are absent), starting a warm-up when due.

        ``estimate_bytes`` is asked (cheaply) before every row is read. ``warm(collect)``
        must start a thread that opens its own read of every row, calls ``collect`` on it
        and publishes the result with :meth:`publish` if the collection did not change.
        Rows over the budget are left to ``warm_file()`` (a rows file: row_file.py), which
        publishes one it finds at once or starts a warm-up that writes one.
        """
        if self.max_bytes == 0:
            return {r.key: r for r in load_some(keys)}
        with self._lock:
            packed = self._rows.get(collection_id)
            extra = self._extra.get(collection_id) or {}
            found = {k: extra[k] for k in keys if k in extra}
        if packed is None:
            with self._lock:
                self._fetches[collection_id] = self._fetches.get(collection_id, 0) + 1
                due = self._fetches[collection_id] == WARM_AFTER_FETCHES
            if due:
                if estimate_bytes() <= self.max_bytes - self.used_bytes:
                    warm(self._collect)
                elif warm_file is not None:
                    warm_file()
            return {r.key: r for r in load_some(keys)}
        found.update(packed.lookup([k for k in keys if k not in found]))
        missing = [k for k in keys if k not in found]
        if missing:
            for r in load_some(missing):
                found[r.key] = r
                self._add(collection_id, r)
        return found

    def start(self, target: Callable[[], None]) -> None:
        """Run a warm-up in a daemon thread (joined by :meth:`stop`, or at exit)."""
        thread = threading.Thread(target=target, name="hybridkb-row-cache", daemon=True)
        _WARMING.add(self)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _collect(self, rows_iter: Iterator[ChunkRecord]) -> PackedRows | None:
        budget = self.max_bytes - self.used_bytes
        packed = PackedRows()
        size = 0
        for row in rows_iter:
            if self._stopping.is_set():
                return None
            size += len(row.text) + PACKED_ROW_OVERHEAD_BYTES
            if size > budget:
                return None  # the estimate was low: stay uncached (fetch per search)
            packed.append(row)
        return packed.finish()

    def epoch(self, collection_id: int) -> int:
        return self._epoch.get(collection_id, 0)

    def publish(
        self, collection_id: int, rows: PackedRows | RowFile | Iterable[ChunkRecord], epoch: int
    ) -> bool:
        """Install warmed rows unless something was forgotten since ``epoch`` was read."""
        packed = rows if isinstance(rows, (PackedRows, RowFile)) else PackedRows.pack(rows)
        size = packed.nbytes
        with self._lock:
            if (
                self._stopping.is_set()
                or self.epoch(collection_id) != epoch
                or self.used_bytes + size > self.max_bytes
            ):
                return False
            self._rows[collection_id] = packed
            self._extra[collection_id] = {}
            self._bytes[collection_id] = size
            return True

    def wait(self) -> None:
        """Wait for running warm-ups (tests, and before the connection closes)."""
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            # Not alive: also a thread whose start a stop interrupted (it never runs).
            if t is not threading.current_thread() and t.is_alive():
                t.join()

    def stop(self) -> None:
        """Abandon running warm-ups and wait for them (the connection is about to close)."""
        self._stopping.set()
        self.wait()
        self._stopping.clear()

    def _add(self, collection_id: int, row: ChunkRecord) -> None:
        with self._lock:
            extra = self._extra.get(collection_id)
            if extra is None or row.key in extra:
                return
            if self.used_bytes + row_bytes(row) > self.max_bytes:
                return
            extra[row.key] = row
            self._bytes[collection_id] += row_bytes(row)

    def forget_keys(self, collection_id: int, keys: Iterable[int]) -> None:
        """Rows deleted or replaced by a committed write."""
        with self._lock:
            self._epoch[collection_id] = self.epoch(collection_id) + 1
            packed = self._rows.get(collection_id)
            if packed is None:
                return
            keys = [int(k) for k in keys]
            packed.forget(keys)
            extra = self._extra[collection_id]
            for k in keys:
                row = extra.pop(k, None)
                if row is not None:
                    self._bytes[collection_id] -= row_bytes(row)
            if packed.mostly_dark:  # its rows are read again (WARM_AFTER_FETCHES from now)
                self._drop(collection_id)

    def forget(self, collection_id: int | None = None) -> None:
        """Drop one collection (or everything), e.g. after a rewrite the cache did not see."""
        with self._lock:
            if collection_id is None:
                for cid in set(self._epoch) | set(self._rows):
                    self._epoch[cid] = self.epoch(cid) + 1
                self._rows.clear()
                self._extra.clear()
                self._bytes.clear()
                self._fetches.clear()
                return
            self._epoch[collection_id] = self.epoch(collection_id) + 1
            self._drop(collection_id)

    def _drop(self, collection_id: int) -> None:
        """Forget one collection's rows (the caller holds the lock)."""
        self._rows.pop(collection_id, None)
        self._extra.pop(collection_id, None)
        self._bytes.pop(collection_id, None)
        self._fetches.pop(collection_id, None)


# Caches that started a warm-up: a script that exits without closing its knowledge base
# must not leave a warm-up inside a DuckDB cursor while the interpreter tears the
# connection down (that aborted the process: "terminate called without an active
# exception", exit code 134/139, after a script's second search).
_WARMING: weakref.WeakSet[RowCache] = weakref.WeakSet()


@atexit.register
def _stop_warm_ups() -> None:
    for cache in list(_WARMING):
        cache._stopping.set()  # and left set: nothing may start a new warm-up now
        cache.wait()
