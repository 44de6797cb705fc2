"""Key -> row lookups for the indexes, as two arrays sorted by key.

Both indexes give each stored item a dense row and must find the row of a key. A Python
dict costs ~100 bytes a key and a Python object per entry (the BM25 index's took ~100 MB
and 0.5 s to rebuild at each load of a 1M-chunk snapshot); two sorted int64 arrays cost
16 bytes a key, are saved beside the index and mapped back as they are. Lookups bisect
(vectorised); an insert or delete moves the arrays once per batch: O(n) memory moves,
~1 ms at 100k keys, small beside what a write does anyway.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class KeyRows:
    """Distinct int64 keys and their rows, sorted by key."""

    __slots__ = ("keys", "rows")

    def __init__(self, keys: np.ndarray[Any, Any], rows: np.ndarray[Any, Any]) -> None:
        """Wrap sorted distinct ``keys`` and their ``rows`` (not copied; never written)."""
        self.keys = keys
        self.rows = rows

    @classmethod
    def empty(cls) -> KeyRows:
        """No keys."""
        return cls(np.empty(0, np.int64), np.empty(0, np.int64))

    @classmethod
    def of(cls, keys_by_row: np.ndarray[Any, Any]) -> KeyRows:
        """The lookup of distinct keys stored at rows 0, 1, ... in that order."""
        order = np.argsort(keys_by_row, kind="stable")
        return cls(np.asarray(keys_by_row[order], dtype=np.int64), order.astype(np.int64))

    def __len__(self) -> int:
        return len(self.keys)

    def lookup(self, keys: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The row of each key, -1 where absent."""
        if not len(self.keys):
            return np.full(len(keys), -1, np.int64)
        pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys.take(pos) == keys, self.rows.take(pos), -1)

    def insert(self, keys: np.ndarray[Any, Any], rows: np.ndarray[Any, Any]) -> None:
        """Add distinct keys absent so far, with their rows."""
        if not len(keys):
            return
        order = np.argsort(keys, kind="stable")
        keys, rows = keys[order], np.asarray(rows, dtype=np.int64)[order]
        at = np.searchsorted(self.keys, keys)
        self.keys = np.insert(self.keys, at, keys)
        self.rows = np.insert(self.rows, at, rows)

    def pop(self, keys: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Remove the present ones of distinct ``keys``; return their rows."""
        if not len(self.keys) or not len(keys):
            return np.empty(0, np.int64)
        pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        pos = pos[self.keys.take(pos) == keys]
        rows: np.ndarray[Any, Any] = self.rows.take(pos)
        if len(pos):
            self.keys = np.delete(self.keys, pos)
            self.rows = np.delete(self.rows, pos)
        return rows

    def move(self, keys: np.ndarray[Any, Any], rows: np.ndarray[Any, Any]) -> None:
        """Give present ``keys`` new ``rows`` (a store that fills holes moves rows)."""
        self.rows = self.rows.copy() if not self.rows.flags.writeable else self.rows
        self.rows[np.searchsorted(self.keys, keys)] = rows

    def check(self, keys_by_row: np.ndarray[Any, Any]) -> None:
        """Raise ValueError unless this is the lookup of ``keys_by_row`` (a loaded file)."""
        n = len(keys_by_row)
        if not (
            len(self.keys) == len(self.rows) == n
            and self.keys.dtype == self.rows.dtype == np.int64
            and (not n or 0 <= int(self.rows.min()) <= int(self.rows.max()) < n)
            and bool(np.all(self.keys[1:] > self.keys[:-1]))
            and np.array_equal(keys_by_row.take(self.rows), self.keys)
        ):
            raise ValueError("key lookup does not match the keys")
