"""The array structures postings are built from: growable buffers, the vocabulary, CSR
blocks, and the two ways CSR blocks are made (one batch, or several concatenated)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


class Buffer:
    """Append-only numpy array with amortised O(1) growth."""

    __slots__ = ("data", "size")

    def __init__(self, dtype: npt.DTypeLike, values: npt.ArrayLike = ()) -> None:
        initial = np.asarray(values, dtype=dtype)
        self.data = np.empty(max(16, len(initial)), dtype=dtype)
        self.data[: len(initial)] = initial
        self.size = len(initial)

    def extend(self, values: npt.ArrayLike) -> None:
        """Append ``values``, growing the storage by half when it is full."""
        values = np.asarray(values)
        if not len(values):
            return
        need = self.size + len(values)
        if need > len(self.data):
            grown = np.empty(max(need, len(self.data) * 3 // 2), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : need] = values
        self.size = need

    @classmethod
    def adopt(cls, values: np.ndarray[Any, Any]) -> Buffer:
        """Wrap an array without copying it (it may be read-only: growth copies)."""
        buffer = cls.__new__(cls)
        buffer.data, buffer.size = values, len(values)
        return buffer

    def view(self) -> np.ndarray[Any, Any]:
        """The filled part, without copying."""
        return self.data[: self.size]

    def trim(self) -> None:
        """Drop spare capacity beyond 1/8 of the size (after a bulk add)."""
        if len(self.data) > self.size + self.size // 8 + 16:
            self.data = self.data[: self.size + self.size // 8 + 16].copy()


class Vocab(dict[str, int]):
    """Term -> id; looking up a new term gives it the next id."""

    def __missing__(self, term: str) -> int:
        tid = self[term] = len(self)
        return tid


class Csr:
    """Term-major postings: rows and tfs of term t are ``rows[ptr[t]:ptr[t+1]]``."""

    __slots__ = ("ptr", "rows", "tf")

    def __init__(self, ptr: IntArray, rows: np.ndarray[Any, Any], tf: np.ndarray[Any, Any]):
        self.ptr = ptr
        self.rows = rows
        self.tf = tf

    @classmethod
    def empty(cls) -> Csr:
        """A matrix with no terms and no postings."""
        return cls(np.zeros(1, np.int64), np.empty(0, np.int32), np.empty(0, np.uint16))

    def padded_ptr(self, n_terms: int) -> IntArray:
        """ptr extended to ``n_terms`` (terms created after this CSR have no postings)."""
        missing = n_terms + 1 - len(self.ptr)
        if missing <= 0:
            return self.ptr
        return np.concatenate([self.ptr, np.full(missing, self.ptr[-1], np.int64)])


def concat_csr(parts: Sequence[Csr], n_terms: int, keep_row: np.ndarray[Any, Any]) -> Csr:
    """Concatenate per term the postings of ``parts`` (given in row order).

    Postings of rows where ``keep_row`` is False (tombstones) are dropped.
    """
    parts = [p for p in parts if len(p.rows)]
    if len(parts) == 1 and keep_row[parts[0].rows].all():
        return Csr(parts[0].padded_ptr(n_terms), parts[0].rows, parts[0].tf)
    ptrs = [p.padded_ptr(n_terms) for p in parts]
    counts = [np.diff(ptr) for ptr in ptrs]
    total = np.sum(counts, axis=0) if counts else np.zeros(n_terms, np.int64)
    new_ptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(total, out=new_ptr[1:])
    rows = np.empty(int(new_ptr[-1]), np.int32)
    tf = np.empty(int(new_ptr[-1]), np.uint16)
    write = new_ptr[:-1].copy()  # next free slot of each term
    terms = np.arange(n_terms)
    for part, ptr, cnt in zip(parts, ptrs, counts, strict=True):
        # Each posting moves by its term's shift: new start + earlier parts - old start.
        shift = np.repeat(write - ptr[:-1], cnt)
        dest = np.arange(len(part.rows), dtype=np.int64) + shift
        rows[dest] = part.rows
        tf[dest] = part.tf
        write += cnt
    keep = keep_row[rows]
    if keep.all():
        return Csr(new_ptr, rows, tf)
    kept = np.bincount(np.repeat(terms, total)[keep], minlength=n_terms)
    new_ptr[1:] = np.cumsum(kept)
    return Csr(new_ptr, rows[keep], tf[keep])


def batch_csr(
    tids: IntArray, rel_rows: IntArray, tf16: np.ndarray[Any, Any], start: int, n_terms: int
) -> Csr:
    """Term-major postings of one batch, rows ascending within each term."""
    row_bits = max(int(rel_rows[-1]).bit_length() if len(rel_rows) else 1, 1)
    if n_terms.bit_length() + row_bits + 16 <= 63:
        # Pack (term, row, tf) into one int64 and sort values (see Postings.add_ids).
        packed = tids << (row_bits + 16) | rel_rows << 16 | tf16
        packed.sort()
        sorted_tids = packed >> (row_bits + 16)
        rows = ((packed >> 16) & ((1 << row_bits) - 1)) + start
        tf = packed & 0xFFFF
    else:
        order = np.argsort(tids, kind="stable")
        sorted_tids, rows, tf = tids[order], rel_rows[order] + start, tf16[order]
    ptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(np.bincount(sorted_tids, minlength=n_terms), out=ptr[1:])
    return Csr(ptr, rows.astype(np.int32), tf.astype(np.uint16))


def distinct(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Sorted distinct values: ``np.unique`` without its hash table, which numpy 2.3+
    uses for integers and which is ~30x slower than a sort here."""
    values = np.sort(values)
    if len(values) > 1:
        values = values[np.concatenate(([True], values[1:] != values[:-1]))]
    return values
