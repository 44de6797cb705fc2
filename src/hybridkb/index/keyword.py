"""In-memory BM25 index, updated in place on every add and remove.

The database tables hold every chunk's terms and stay the source of truth; this
index is derived from them, so it never needs a full rebuild per write and can be
saved to one file for a fast cold start.

Layout (a "row" is a dense id given to each added document, in add order):

* Postings are term-major and split in two. The *base* is one CSR block
  (``_Csr``: ptr, rows, tf); the *tail* holds, per term, a growable ``array``
  for documents added since the last merge. Rows only grow, so tail rows follow
  base rows. A merge folds the tail into the base in O(postings) with numpy once
  it reaches a quarter of the base (or a batch is big enough that merging beats
  appending), which keeps an add of a few documents O(their terms).
* The forward index (``_fptr``, ``_fterm``) lists each row's distinct term ids,
  so a remove decrements document frequencies without touching postings.
* Removed rows are tombstones until a compaction renumbers the rows, which
  happens once they are a quarter of all rows (amortised O(1) per remove).

Scores are Okapi BM25 with Lucene's idf, ``ln(1 + (N - df + 0.5) / (df + 0.5))``,
times ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``; N, df and avgdl
always describe the live documents, and every score is computed in float64 in the
same operation order (terms in query order), so results are bit-identical whatever
path computed them. A top-k query is pruned (MaxScore, see ``_search_pruned``):
the long lists of common terms are only probed for candidates found in the
others, using per-list score bounds cached per base; the exact top k is the same
as scoring every posting (the dense ``_scores``, kept as the reference).

Snapshots (``save``/``load``) are one file of raw aligned arrays behind a JSON
header, memory-mapped on load and checked for consistency, not parsed.

Searches may run concurrently (each thread has its own scratch buffers); writes
are not thread-safe: the caller serialises them with everything else.
"""

from __future__ import annotations

import json
import math
import os
import struct
import tempfile
import threading
import uuid
import zipfile
from array import array
from collections.abc import Iterable, Sequence
from contextlib import suppress
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import BackendError, ConfigError
from .fileheader import encode_header, read_header

__all__ = ["DEFAULT_B", "DEFAULT_K1", "KeywordIndex"]

# Tuned on the SciFact train split (bench/bm25.py); Lucene's defaults are 1.2/0.75.
DEFAULT_K1 = 1.2
DEFAULT_B = 0.5

_FORMAT = "hybridkb-keyword-index"
_VERSION = 2  # v1 was an .npz archive, read by copying every array
_MAGIC = b"HKBKIDX\x02"
_HEADER_ROOM = 4096  # the JSON header fits here; arrays start after it
_ALIGN = 64
_TF_MAX = np.iinfo(np.uint16).max  # tf is stored in 16 bits; BM25 saturates long before
_CHUNK_TERMS = 4_000_000  # terms per slice of a bulk add
_MERGE_MIN = 65_536  # tail postings below this never trigger a merge
_MERGE_FRACTION = 0.25
_APPEND_COST = 32  # one tail append costs about as much as merging 32 postings
_COMPACT_MIN = 1_024  # tombstones below this never trigger a compaction
_COMPACT_FRACTION = 0.25
_FEW_ALLOWED = 16  # allowed keys under 1/16 of the rows are looked up one by one
# Pruned top-k (see _search_pruned): queries with fewer postings than this are
# scored exhaustively; above it, the exact scores of a few documents from the
# strongest lists give the first threshold.
_PRUNE_MIN = 32_768
_SEED = 8_192  # postings of the strongest lists that seed the threshold
_SEED_DOCS = 4  # of their documents, the best _SEED_DOCS * k are scored exactly
# Bounds are inflated and thresholds deflated by this much, so rounding in the
# pruning arithmetic (which adds terms in another order) can never drop a hit.
_SLACK = 1e-9
_LOOKUP_DENSE = 12  # a list shorter than 12x the candidates is gathered, not bisected

IntArray = npt.NDArray[np.int64]
# One posting list of a query term: (the term's position in the query, rows, tfs,
# whether it is the term's base list). A term has a base and a tail list at most;
# rows ascend within each and are disjoint between them.
_List = tuple[int, np.ndarray[Any, Any], np.ndarray[Any, Any], bool]


class _Buffer:
    """Append-only numpy array with amortised O(1) growth."""

    __slots__ = ("data", "size")

    def __init__(self, dtype: npt.DTypeLike, values: npt.ArrayLike = ()) -> None:
        initial = np.asarray(values, dtype=dtype)
        self.data = np.empty(max(16, len(initial)), dtype=dtype)
        self.data[: len(initial)] = initial
        self.size = len(initial)

    def extend(self, values: npt.ArrayLike) -> None:
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
    def adopt(cls, values: np.ndarray[Any, Any]) -> _Buffer:
        """Wrap an array without copying it (it may be read-only: growth copies)."""
        buffer = cls.__new__(cls)
        buffer.data, buffer.size = values, len(values)
        return buffer

    def view(self) -> np.ndarray[Any, Any]:
        return self.data[: self.size]

    def trim(self) -> None:
        """Drop spare capacity beyond 1/8 of the size (after a bulk add)."""
        if len(self.data) > self.size + self.size // 8 + 16:
            self.data = self.data[: self.size + self.size // 8 + 16].copy()


class _Vocab(dict[str, int]):
    """Term -> id; looking up a new term gives it the next id."""

    def __missing__(self, term: str) -> int:
        tid = self[term] = len(self)
        return tid


class _Csr:
    """Term-major postings: rows and tfs of term t are ``rows[ptr[t]:ptr[t+1]]``."""

    __slots__ = ("ptr", "rows", "tf")

    def __init__(self, ptr: IntArray, rows: np.ndarray[Any, Any], tf: np.ndarray[Any, Any]):
        self.ptr = ptr
        self.rows = rows
        self.tf = tf

    @classmethod
    def empty(cls) -> _Csr:
        return cls(np.zeros(1, np.int64), np.empty(0, np.int32), np.empty(0, np.uint16))

    def padded_ptr(self, n_terms: int) -> IntArray:
        """ptr extended to ``n_terms`` (terms created after this CSR have no postings)."""
        missing = n_terms + 1 - len(self.ptr)
        if missing <= 0:
            return self.ptr
        return np.concatenate([self.ptr, np.full(missing, self.ptr[-1], np.int64)])


def _concat_csr(parts: Sequence[_Csr], n_terms: int, keep_row: np.ndarray[Any, Any]) -> _Csr:
    """Concatenate per term the postings of ``parts`` (given in row order).

    Postings of rows where ``keep_row`` is False (tombstones) are dropped.
    """
    parts = [p for p in parts if len(p.rows)]
    if len(parts) == 1 and keep_row[parts[0].rows].all():
        return _Csr(parts[0].padded_ptr(n_terms), parts[0].rows, parts[0].tf)
    ptrs = [p.padded_ptr(n_terms) for p in parts]
    counts = [np.diff(ptr) for ptr in ptrs]
    total = np.sum(counts, axis=0) if counts else np.zeros(n_terms, np.int64)
    new_ptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(total, out=new_ptr[1:])
    rows = np.empty(int(new_ptr[-1]), np.int32)
    tf = np.empty(int(new_ptr[-1]), np.uint16)
    write = new_ptr[:-1].copy()  # next free slot of each term
    terms = np.arange(n_terms)
    for part, ptr, cnt in zip(parts, ptrs, counts):
        # Each posting moves by its term's shift: new start + earlier parts - old start.
        shift = np.repeat(write - ptr[:-1], cnt)
        dest = np.arange(len(part.rows), dtype=np.int64) + shift
        rows[dest] = part.rows
        tf[dest] = part.tf
        write += cnt
    keep = keep_row[rows]
    if keep.all():
        return _Csr(new_ptr, rows, tf)
    kept = np.bincount(np.repeat(terms, total)[keep], minlength=n_terms)
    new_ptr[1:] = np.cumsum(kept)
    return _Csr(new_ptr, rows[keep], tf[keep])


def _batch_csr(
    tids: IntArray, rel_rows: IntArray, tf16: np.ndarray[Any, Any], start: int, n_terms: int
) -> _Csr:
    """Term-major postings of one batch, rows ascending within each term."""
    row_bits = max(int(rel_rows[-1]).bit_length() if len(rel_rows) else 1, 1)
    if n_terms.bit_length() + row_bits + 16 <= 63:
        # Pack (term, row, tf) into one int64 and sort values (see _add_ids).
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
    return _Csr(ptr, rows.astype(np.int32), tf.astype(np.uint16))


class KeywordIndex:
    """BM25 index over int64 keys, updated incrementally.

    Example:
        >>> idx = KeywordIndex()
        >>> idx.add([1, 2], [["red", "apple"], ["green", "apple", "apple"]])
        >>> [key for key, _ in idx.search(["green"], 10)]
        [2]
    """

    def __init__(self, *, k1: float = DEFAULT_K1, b: float = DEFAULT_B) -> None:
        """Create an empty index.

        Args:
            k1: Term-frequency saturation (>= 0).
            b: Length normalisation, from 0 (none) to 1 (full).

        Raises:
            ConfigError: k1 or b out of range.
        """
        if not (k1 >= 0 and math.isfinite(k1)):
            raise ConfigError(f"BM25 k1 must be a finite number >= 0, got {k1}")
        if not 0 <= b <= 1:
            raise ConfigError(f"BM25 b must be between 0 and 1, got {b}")
        self.k1 = float(k1)
        self.b = float(b)
        self._vocab = _Vocab()
        self._df = _Buffer(np.int64)
        self._keys = _Buffer(np.int64)
        self._dl = _Buffer(np.int64)
        self._live = _Buffer(np.bool_)
        self._fptr = _Buffer(np.int64, [0])
        self._fterm = _Buffer(np.int32)
        self._rows: dict[int, int] = {}  # live key -> row
        self._total_len = 0  # sum of live document lengths (an int, so exact)
        self._dead = 0
        self._base = _Csr.empty()
        # term id -> interleaved (row, tf) pairs; arrays, not tuples, so the
        # garbage collector has no per-term objects to walk.
        self._tail: dict[int, array[int]] = {}
        self._tail_size = 0
        self._uid = uuid.uuid4().hex
        self._generation = 0
        self._norm_cache: tuple[int, np.ndarray[Any, Any]] | None = None
        # term id -> (max of tf / (tf + norm) over its base postings, avgdl then);
        # cleared whenever the base is rebuilt (see _bound).
        self._bounds: dict[int, tuple[float, float]] = {}
        # Per thread (searches may run concurrently; each needs its own): a per-row
        # float accumulator and a per-row candidate slot, all zero between queries.
        self._buffers = threading.local()

    # -- size -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def state_token(self) -> str:
        """Return a token that changes with every write and survives save/load.

        Two indexes with equal tokens hold the same contents: the token is the
        index's creation id plus a write counter.
        """
        return f"{self._uid}:{self._generation}"

    # -- writes -----------------------------------------------------------------

    def add(
        self, keys: Sequence[int] | npt.NDArray[np.integer[Any]], terms: Sequence[Sequence[str]]
    ) -> None:
        """Add documents; a key already present is replaced.

        Args:
            keys: int64 document keys (ints or an integer array). Within one call the
                last copy of a key wins.
            terms: Each document's terms with repeats, as from ``analysis.analyze``.

        Raises:
            ConfigError: keys and terms differ in length.
        """
        if len(keys) != len(terms):
            raise ConfigError(f"add got {len(keys)} keys but {len(terms)} term lists")
        last = {int(key): i for i, key in enumerate(keys)}
        if not last:
            return
        try:  # before any change, so a bad key leaves the index untouched
            new_keys = np.array(list(last), np.int64)
        except OverflowError as exc:
            raise ConfigError(f"document keys must fit in int64: {exc}") from exc
        self._remove_rows([self._rows.pop(key) for key in last if key in self._rows])

        order = list(last.values())
        parts: list[_Csr] = []
        begin = 0
        while begin < len(order):
            # Bulk loads go in slices of ~4M terms to bound the sort buffers.
            end, tokens = begin, 0
            while end < len(order) and (end == begin or tokens < _CHUNK_TERMS):
                tokens += len(terms[order[end]])
                end += 1
            docs = [terms[i] for i in order[begin:end]]
            lengths = np.fromiter(map(len, docs), np.int64, len(docs))
            # _Vocab hands the next id to a term seen for the first time.
            ids = np.fromiter(
                map(self._vocab.__getitem__, chain.from_iterable(docs)),
                np.int64,
                int(lengths.sum()),
            )
            self._add_ids(new_keys[begin:end], lengths, ids, parts)
            begin = end
        if parts:
            self._merge(parts)
        self._changed()

    def add_coded(
        self,
        keys: npt.ArrayLike,
        offsets: npt.ArrayLike,
        codes: npt.ArrayLike,
        terms: Sequence[str],
    ) -> None:
        """Add documents whose terms come as codes into a list of distinct terms.

        The bulk form of :meth:`add` for columnar input (an Arrow list column after
        ``dictionary_encode``): no Python string per term occurrence is ever made.

        Args:
            keys: int64 document keys; within one call the last copy of a key wins.
            offsets: ``len(keys) + 1`` ascending positions: document i's terms are
                ``codes[offsets[i]:offsets[i + 1]]``.
            codes: Indexes into ``terms``, with repeats.
            terms: The distinct terms the codes refer to.

        Raises:
            ConfigError: The arrays do not fit together, or a key is outside int64.
        """
        try:
            key_arr = np.asarray(keys, dtype=np.int64).ravel()
        except OverflowError as exc:
            raise ConfigError(f"document keys must fit in int64: {exc}") from exc
        off = np.asarray(offsets, dtype=np.int64).ravel()
        code_arr = np.asarray(codes).ravel()
        if (
            len(off) != len(key_arr) + 1
            or off[0] != 0
            or off[-1] != len(code_arr)
            or (len(off) > 1 and bool(np.any(np.diff(off) < 0)))
        ):
            raise ConfigError(
                f"add_coded got {len(key_arr)} keys, {len(off)} offsets and {len(code_arr)} codes"
            )
        if len(code_arr) and (int(code_arr.min()) < 0 or int(code_arr.max()) >= len(terms)):
            raise ConfigError(f"add_coded: codes must index the {len(terms)} terms")
        if not len(key_arr):
            return
        lengths = np.diff(off)
        order = np.argsort(key_arr, kind="stable")
        ranked = key_arr[order]
        if len(ranked) > 1 and bool(np.any(ranked[1:] == ranked[:-1])):
            # Keep the last copy of each key (the stable sort keeps input order).
            last = np.ones(len(ranked), np.bool_)
            last[:-1] = ranked[1:] != ranked[:-1]
            keep = np.zeros(len(key_arr), np.bool_)
            keep[order[last]] = True
            code_arr = code_arr[np.repeat(keep, lengths)]
            key_arr, lengths = key_arr[keep], lengths[keep]
            off = np.zeros(len(key_arr) + 1, np.int64)
            np.cumsum(lengths, out=off[1:])
        used = np.bincount(code_arr, minlength=len(terms)) if len(code_arr) else np.zeros(1)
        tid_of = np.full(len(terms), -1, np.int64)
        for code in np.flatnonzero(used).tolist():
            tid_of[code] = self._vocab[terms[code]]
        self._remove_rows([self._rows.pop(key) for key in key_arr.tolist() if key in self._rows])
        parts: list[_Csr] = []
        begin = 0
        while begin < len(key_arr):
            # Slices of ~_CHUNK_TERMS terms, at least one document each.
            end = max(begin + 1, int(np.searchsorted(off, off[begin] + _CHUNK_TERMS, "right")) - 1)
            end = min(end, len(key_arr))
            ids = tid_of[code_arr[off[begin] : off[end]]]
            self._add_ids(key_arr[begin:end], lengths[begin:end], ids, parts)
            begin = end
        if parts:
            self._merge(parts)
        self._changed()

    def _add_ids(self, keys: IntArray, lengths: IntArray, ids: IntArray, parts: list[_Csr]) -> None:
        """Append new rows for keys not present in the index.

        ``ids`` are the documents' term ids, concatenated. A batch big enough to be
        merged into the base is appended to ``parts`` instead (the caller merges all
        parts of a bulk add at once: one O(postings) merge, not one per slice).
        """
        n = len(keys)
        # Distinct (row, term) pairs with their counts, via one sort of packed
        # int64 values: numpy sorts values with SIMD, argsort is ~10x slower.
        packed = np.repeat(np.arange(n, dtype=np.int64), lengths) << 32 | ids
        packed.sort()
        starts = np.flatnonzero(np.diff(packed, prepend=-1))
        pairs = packed[starts]
        tf16 = np.minimum(np.diff(starts, append=len(packed)), _TF_MAX).astype(np.uint16)
        rel_rows = pairs >> 32
        tids = pairs & 0xFFFFFFFF
        uniq = np.bincount(rel_rows, minlength=n)

        start = self._keys.size
        n_terms = len(self._vocab)
        self._df.extend(np.zeros(n_terms - self._df.size, np.int64))
        np.add.at(self._df.data, tids, 1)  # O(batch), where a bincount would be O(vocabulary)
        self._keys.extend(keys)
        self._dl.extend(lengths)
        self._live.extend(np.ones(n, np.bool_))
        self._fptr.extend(self._fptr.data[self._fptr.size - 1] + np.cumsum(uniq))
        self._fterm.extend(tids)
        self._rows.update(zip(keys.tolist(), range(start, start + n)))
        self._total_len += int(lengths.sum())

        base = len(self._base.rows)
        if (
            parts  # later rows than a pending part cannot go to the tail
            or self._tail_size + len(pairs) >= max(_MERGE_MIN, _MERGE_FRACTION * base)
            or len(pairs) * _APPEND_COST >= base + self._tail_size
        ):
            # Merge the tail and this batch into the base: O(all postings) in numpy
            # beats O(batch) appends in Python once the batch is a few % of the base.
            parts.append(_batch_csr(tids, rel_rows, tf16, start, n_terms))
        else:
            self._append_tail(tids, rel_rows + start, tf16)

    def _append_tail(
        self, ids: np.ndarray[Any, Any], rows: np.ndarray[Any, Any], tfs: np.ndarray[Any, Any]
    ) -> None:
        tail = self._tail
        for tid, row, tf in zip(ids.tolist(), rows.tolist(), tfs.tolist()):
            entry = tail.get(tid)
            if entry is None:
                entry = tail[tid] = array("i")
            entry.append(row)
            entry.append(tf)
        self._tail_size += len(ids)

    def remove(self, keys: Iterable[int]) -> None:
        """Remove documents by key; unknown keys are ignored.

        Args:
            keys: int64 document keys.
        """
        rows = [row for row in (self._rows.pop(int(key), None) for key in keys) if row is not None]
        if rows:
            self._remove_rows(rows)
            self._changed()

    def _remove_rows(self, rows: list[int]) -> None:
        """Tombstone rows already dropped from ``_rows`` and update the statistics."""
        if not rows:
            return
        live, dl, df = self._live.data, self._dl.data, self._df.data
        fptr, fterm = self._fptr.data, self._fterm.data
        for row in rows:
            live[row] = False
            self._total_len -= int(dl[row])
            df[fterm[fptr[row] : fptr[row + 1]]] -= 1  # term ids of a row are distinct
        self._dead += len(rows)

    def _changed(self) -> None:
        self._generation += 1
        self._norm_cache = None
        if self._dead >= max(_COMPACT_MIN, _COMPACT_FRACTION * self._keys.size):
            self._compact()

    def _merge(self, extra: Sequence[_Csr] = ()) -> None:
        """Fold the tail (and ``extra``, newer rows in order) into the base; drop tombstones."""
        parts = [self._base]
        if self._tail:
            tids = np.fromiter(self._tail, np.int64, len(self._tail))
            order = np.argsort(tids)
            entries = list(self._tail.values())
            counts = np.zeros(len(self._vocab), np.int64)
            counts[tids] = [len(e) // 2 for e in entries]
            ptr = np.zeros(len(self._vocab) + 1, np.int64)
            np.cumsum(counts, out=ptr[1:])
            pairs = np.frombuffer(b"".join([entries[i] for i in order]), np.int32).reshape(-1, 2)
            parts.append(_Csr(ptr, pairs[:, 0], pairs[:, 1].astype(np.uint16)))
        parts.extend(extra)
        self._base = _concat_csr(parts, len(self._vocab), self._live.view())
        self._bounds = {}
        self._tail = {}
        self._tail_size = 0
        # A merge is O(postings) anyway; also hand back growth slack.
        for buffer in (self._df, self._keys, self._dl, self._live, self._fptr, self._fterm):
            buffer.trim()

    def _compact(self) -> None:
        """Merge the tail, renumber rows without tombstones, drop terms no document has."""
        self._merge()
        self._norm_cache = None
        if self._dead:
            live = self._live.view()
            new_row = (np.cumsum(live) - 1).astype(np.int32)
            self._base.rows = new_row[self._base.rows]
            per_row = np.diff(self._fptr.view())
            fterm = self._fterm.view()[np.repeat(live, per_row)]
            self._fterm = _Buffer(np.int32, fterm)
            fptr = np.zeros(int(live.sum()) + 1, np.int64)
            np.cumsum(per_row[live], out=fptr[1:])
            self._fptr = _Buffer(np.int64, fptr)
            self._keys = _Buffer(np.int64, self._keys.view()[live])
            self._dl = _Buffer(np.int64, self._dl.view()[live])
            self._live = _Buffer(np.bool_, np.ones(len(fptr) - 1, np.bool_))
            self._rows = dict(zip(self._keys.view().tolist(), range(len(fptr) - 1)))
            self._dead = 0
        df = self._df.view()
        used = df > 0
        if not used.all():
            new_tid = (np.cumsum(used) - 1).astype(np.int32)
            self._fterm = _Buffer(np.int32, new_tid[self._fterm.view()])
            ptr = self._base.ptr
            self._base.ptr = np.append(ptr[:-1][used], ptr[-1])
            self._df = _Buffer(np.int64, df[used])
            kept = [term for term, keep in zip(self._vocab, used.tolist()) if keep]
            self._vocab = _Vocab(zip(kept, range(len(kept))))

    # -- reads ------------------------------------------------------------------

    def _postings(self, tid: int) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
        """Posting (rows, tfs) pieces of one term: base slice, then tail."""
        out = []
        ptr = self._base.ptr
        if tid + 1 < len(ptr) and ptr[tid] != ptr[tid + 1]:
            a, z = ptr[tid], ptr[tid + 1]
            out.append((self._base.rows[a:z], self._base.tf[a:z]))
        entry = self._tail.get(tid)
        if entry is not None:
            # A copy: a buffer view would pin the array and block later appends.
            pairs = np.array(entry, np.int32).reshape(-1, 2)
            out.append((pairs[:, 0], pairs[:, 1]))
        return out

    def _term_ids(self, terms: Sequence[str]) -> list[int]:
        df = self._df.data
        found = (self._vocab.get(term) for term in dict.fromkeys(terms))
        return [tid for tid in found if tid is not None and df[tid] > 0]

    def _norms(self) -> np.ndarray[Any, Any]:
        """Per-row BM25 length norm ``k1 * (1 - b + b * dl / avgdl)``, cached per write."""
        if self._norm_cache is None or self._norm_cache[0] != self._generation:
            avgdl = self._total_len / len(self._rows)
            dl = self._dl.view().astype(np.float64)
            norms = self.k1 * (1.0 - self.b + self.b * dl / avgdl)
            self._norm_cache = (self._generation, norms)
        return self._norm_cache[1]

    def search(
        self, terms: Sequence[str], k: int, *, allowed: npt.ArrayLike | None = None
    ) -> list[tuple[int, float]]:
        """Rank live documents by BM25 against the query terms.

        Args:
            terms: Query terms (as from ``analysis.analyze_query``); repeats count once.
            k: Maximum number of hits.
            allowed: int64 keys that may be returned; None allows every key.

        Returns:
            Up to k ``(key, score)`` pairs, score descending, ties by key ascending.
            With ``allowed``, exactly ``min(k, allowed documents matching a term)``.

        Raises:
            ConfigError: k is negative.
        """
        if k < 0:
            raise ConfigError(f"k must be >= 0, got {k}")
        tids = self._term_ids(terms) if k and self._rows else []
        if not tids:
            return []
        keys = self._keys.data
        if allowed is None:
            rows, scores = self._search_pruned(tids, k)
            return _top_k(keys[rows], scores, k)
        pool = np.asarray(allowed, dtype=np.int64).ravel()
        if len(pool) * _FEW_ALLOWED < self._keys.size:
            # Few allowed keys: score their rows (live ones only) directly.
            found = map(self._rows.get, pool.tolist())
            rows = _distinct(np.fromiter((r for r in found if r is not None), np.int64))
            scores = self._exact(self._lists(tids), self._weights(tids), rows)
            hit = scores > 0
            return _top_k(keys[rows[hit]], scores[hit], k)
        live = self._live.data if self._dead else None
        rows, scores = self._accumulate(self._lists(tids), self._weights(tids), live, 0.0)
        ok = np.isin(keys[rows], pool)
        return _top_k(keys[rows[ok]], scores[ok], k)

    def _lists(self, tids: list[int]) -> list[_List]:
        """The posting lists of the query terms, in query order (base, then tail)."""
        out: list[_List] = []
        ptr = self._base.ptr
        for j, tid in enumerate(tids):
            if tid + 1 < len(ptr) and ptr[tid] != ptr[tid + 1]:
                a, z = ptr[tid], ptr[tid + 1]
                out.append((j, self._base.rows[a:z], self._base.tf[a:z], True))
            entry = self._tail.get(tid)
            if entry is not None:
                # A copy: a buffer view would pin the array and block later appends.
                pairs = np.array(entry, np.int32).reshape(-1, 2)
                out.append((j, pairs[:, 0].copy(), pairs[:, 1].copy(), False))
        return out

    def _weights(self, tids: list[int]) -> list[float]:
        """Per query term: Lucene idf times (k1 + 1), from the live statistics."""
        n_docs = len(self._rows)
        df = self._df.data
        return [
            math.log1p((n_docs - int(df[t]) + 0.5) / (int(df[t]) + 0.5)) * (self.k1 + 1.0)
            for t in tids
        ]

    def _contrib(
        self, weight: float, rows: np.ndarray[Any, Any], tf16: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """weight * tf / (tf + norm) per posting, in the exact float64 operation order of
        the original dense scorer (so scores agree bit for bit with Postgres's checks)."""
        tf = tf16.astype(np.float64)
        denom = self._norms().take(rows)
        denom += tf
        np.divide(tf, denom, out=tf)
        tf *= weight
        return tf

    def _scratch_for(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """This thread's zeroed per-row buffers, grown to the row count."""
        buffers = self._buffers
        scratch: np.ndarray[Any, Any] | None = getattr(buffers, "scratch", None)
        size = self._keys.size
        if scratch is None or len(scratch) < size:
            grown = max(size, 0 if scratch is None else len(scratch) * 5 // 4)
            buffers.scratch = np.zeros(grown)
            buffers.slots = np.zeros(grown, np.int32)
        return buffers.scratch, buffers.slots

    def _find(
        self, rows: np.ndarray[Any, Any], cand: np.ndarray[Any, Any]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Where the sorted candidate rows occur in one sorted posting list.

        Returns (indexes into ``cand``, indexes into ``rows``) of the common rows.
        """
        if not len(rows) or not len(cand):
            empty = np.empty(0, np.int64)
            return empty, empty
        if len(rows) < _LOOKUP_DENSE * len(cand):
            # Gather a slot map: O(len(rows)) with sequential access.
            _, slots = self._scratch_for()
            slots.put(cand, np.arange(1, len(cand) + 1, dtype=np.int32))
            try:
                got = slots.take(rows)
            finally:
                slots.put(cand, 0)
            at = np.flatnonzero(got)
            return got[at].astype(np.int64) - 1, at
        pos = np.searchsorted(rows, cand)
        np.minimum(pos, len(rows) - 1, out=pos)
        hit = np.flatnonzero(rows.take(pos) == cand)
        return hit, pos[hit]

    def _exact(
        self, lists: list[_List], weights: list[float], cand: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """Exact BM25 scores of sorted candidate rows, terms added in query order."""
        scores = np.zeros(len(cand))
        term = np.zeros(len(cand))
        previous = -1
        for j, rows, tf16, _ in lists:
            if j != previous and previous >= 0:
                scores += term  # a term's lists hold disjoint rows: one value per row
                term[:] = 0.0
            previous = j
            at, pos = self._find(rows, cand)
            if len(at):
                term[at] = self._contrib(weights[j], rows.take(pos), tf16.take(pos))
        if previous >= 0:
            scores += term
        return scores

    def _bound(
        self, tid: int, rows: np.ndarray[Any, Any], tf16: np.ndarray[Any, Any], in_base: bool
    ) -> float:
        """Upper bound of tf / (tf + norm) over one posting list, at today's avgdl.

        A base list's maximum is computed once per base and kept with the avgdl of
        that moment. ``tf / (tf + k1 (1 - b) + k1 b dl / avgdl)`` grows by at most the
        factor avgdl' / avgdl when avgdl grows to avgdl', and never grows when avgdl
        shrinks; removed rows only lower the true maximum. Tail lists are small and
        computed each time.
        """
        avgdl = self._total_len / len(self._rows)
        if not in_base:
            return float(self._contrib(1.0, rows, tf16).max()) if len(rows) else 0.0
        found = self._bounds.get(tid)
        if found is None:
            found = self._bounds[tid] = (float(self._contrib(1.0, rows, tf16).max()), avgdl)
        peak, then = found
        return peak * max(1.0, avgdl / then)

    def _search_pruned(
        self, tids: list[int], k: int
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Rows and exact scores of a superset of the top k (ties included).

        MaxScore: with lists ordered by their score bound, a document found only in
        the lists whose bounds add up to less than the current k-th best score cannot
        make the top k, so those lists are never scanned; they are only probed for
        the candidates the other lists produced, and candidates whose partial score
        plus the bounds still to come falls below the threshold are dropped. The
        first threshold comes from the exact scores of the documents in the
        strongest (usually rarest) lists. Survivors are rescored exactly.
        """
        weights = self._weights(tids)
        lists = self._lists(tids)
        live = self._live.data if self._dead else None
        if sum(len(rows) for _, rows, _, _ in lists) < _PRUNE_MIN:
            return self._search_all(lists, weights, live)
        bounds = [
            weights[j] * self._bound(tids[j], rows, tf16, in_base) * (1 + _SLACK)
            for j, rows, tf16, in_base in lists
        ]
        order = sorted(range(len(lists)), key=lambda i: -bounds[i])
        rest = np.zeros(len(order) + 1)  # rest[i]: bound sum of the lists from order[i] on
        rest[:-1] = np.cumsum([bounds[i] for i in order][::-1])[::-1]

        scratch, _ = self._scratch_for()
        added: list[_List] = []  # lists summed into the scratch so far, in bound order
        try:
            # Threshold: exact scores of the documents that score best on the
            # strongest lists (any k documents' scores bound the k-th best from below).
            size = 0
            for i in order:
                added.append(self._add(scratch, lists[i], weights))
                size += len(lists[i][1])
                if size >= max(_SEED, k):
                    break
            cand = _distinct(np.concatenate([rows for _, rows, _, _ in added]))
            if live is not None:
                cand = cand[live.take(cand)]
            if len(cand) > _SEED_DOCS * k:
                best = np.argpartition(-scratch.take(cand), _SEED_DOCS * k)[: _SEED_DOCS * k]
                cand = np.sort(cand[best])
            theta = _kth(self._exact(lists, weights, cand), k) * (1 - _SLACK)
            # The lists scanned whole: those whose bounds, with the stronger ones', reach
            # theta (and the seed lists, already summed).
            essential = max(len(added), int(np.count_nonzero(rest[:-1] >= theta)))
            step = essential
            if essential < len(lists):
                for i in order[len(added) : essential]:
                    added.append(self._add(scratch, lists[i], weights))
                if self._dense(added):
                    # Candidates are many: probe the strongest other list on the dense
                    # sums in place, rows still able to reach theta only, before
                    # listing any candidate.
                    j, rows, tf16, _ = item = lists[order[step]]
                    sums = scratch.take(rows)
                    hit = np.flatnonzero(sums >= theta - rest[step])
                    found = rows.take(hit)
                    scratch.put(
                        found, sums.take(hit) + self._contrib(weights[j], found, tf16.take(hit))
                    )
                    added.append(item)
                    step += 1
                # A document scoring less than theta minus the bounds of the other
                # lists cannot reach theta: drop it now.
                cand = self._matches(scratch, added, live, theta - rest[step])
                acc = scratch.take(cand)
        finally:
            self._clear(scratch, added)
        if essential == len(lists):
            return self._accumulate(lists, weights, live, 0.0)

        # Probe the other lists for the candidates only, pruning as bounds shrink.
        first = step
        for step, i in enumerate(order[first:], start=first):
            theta = max(theta, _kth(acc, k) * (1 - _SLACK))
            keep = acc >= theta - rest[step]
            cand, acc = cand[keep], acc[keep]
            if len(cand) <= k:
                break
            j, rows, tf16, _ = lists[i]
            at, pos = self._find(rows, cand)
            acc[at] += self._contrib(weights[j], rows.take(pos), tf16.take(pos))
        else:
            theta = max(theta, _kth(acc, k) * (1 - _SLACK))
            keep = acc >= theta
            cand = cand[keep]
        return cand, self._exact(lists, weights, cand)

    def _search_all(
        self, lists: list[_List], weights: list[float], live: np.ndarray[Any, Any] | None
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Score every posting, terms in query order (so the sums are exact)."""
        return self._accumulate(lists, weights, live, 0.0)

    def _accumulate(
        self,
        lists: list[_List],
        weights: list[float],
        live: np.ndarray[Any, Any] | None,
        cutoff: float,
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Sum the lists' contributions per row; return sorted rows above cutoff.

        Rows are live, matched by at least one list, and scored at least ``cutoff``.
        Each row's sum follows the order of ``lists`` (``ufunc.at`` adds in index
        order), so in query order the sums are the exact scores.
        """
        scratch, _ = self._scratch_for()
        try:
            for item in lists:
                self._add(scratch, item, weights)
            cand = self._matches(scratch, lists, live, cutoff)
            return cand, scratch.take(cand)
        finally:
            self._clear(scratch, lists)

    def _add(self, scratch: np.ndarray[Any, Any], item: _List, weights: list[float]) -> _List:
        j, rows, tf16, _ = item
        np.add.at(scratch, rows, self._contrib(weights[j], rows, tf16))
        return item

    def _dense(self, lists: list[_List]) -> bool:
        """Whether one pass over all rows beats sorting the lists' rows."""
        return sum(len(rows) for _, rows, _, _ in lists) * 8 >= self._keys.size

    def _matches(
        self,
        scratch: np.ndarray[Any, Any],
        lists: list[_List],
        live: np.ndarray[Any, Any] | None,
        cutoff: float,
    ) -> np.ndarray[Any, Any]:
        """Sorted live rows of the lists whose sum in the scratch is at least cutoff."""
        if self._dense(lists):
            sums = scratch[: self._keys.size]
            hit = sums >= cutoff if cutoff > 0 else sums > 0
            if live is not None:
                hit &= live[: self._keys.size]
            return np.flatnonzero(hit)
        cand = _distinct(np.concatenate([rows for _, rows, _, _ in lists]))
        if live is not None:
            cand = cand[live.take(cand)]
        if cutoff > 0:
            cand = cand[scratch.take(cand) >= cutoff]
        return cand

    def _clear(self, scratch: np.ndarray[Any, Any], lists: list[_List]) -> None:
        """Zero the scratch again where the lists' rows summed into it."""
        if self._dense(lists):
            scratch[: self._keys.size] = 0.0
        else:
            for _, rows, _, _ in lists:
                scratch.put(rows, 0.0)

    def _scores(self, tids: list[int]) -> np.ndarray[Any, Any]:
        """Dense BM25 scores per row (tombstones included) for known term ids.

        Every posting, one dense array: the reference the pruned search is tested
        and benchmarked against (tests/test_keyword_index.py, bench/index_scale.py).
        """
        norms = self._norms()
        # float64 throughout: the Postgres backend computes the same scores in SQL
        # and the two must agree to 1e-6.
        scores = np.zeros(self._keys.size)
        n_docs = len(self._rows)
        df = self._df.data
        for tid in tids:
            d = int(df[tid])
            weight = math.log1p((n_docs - d + 0.5) / (d + 0.5)) * (self.k1 + 1.0)
            for rows, tf16 in self._postings(tid):
                # weight * tf / (tf + norm), in place; take/put beat fancy indexing.
                tf = tf16.astype(np.float64)
                denom = norms.take(rows)
                denom += tf
                np.divide(tf, denom, out=tf)
                tf *= weight
                acc = scores.take(rows)
                acc += tf
                scores.put(rows, acc)  # rows of one term are distinct, so no lost adds
        return scores

    def matching(self, terms: Sequence[str]) -> IntArray:
        """Return the keys of live documents containing at least one of the terms.

        Args:
            terms: Query terms.

        Returns:
            Sorted int64 keys.
        """
        tids = self._term_ids(terms)
        hit = np.zeros(self._keys.size, np.bool_)
        for tid in tids:
            for rows, _ in self._postings(tid):
                hit[rows] = True
        hit &= self._live.view()
        return np.sort(self._keys.view()[hit])

    # -- persistence ------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the index to one file atomically (temp file, fsync, rename).

        The index is compacted first, so the file holds only live documents. The
        file is a JSON header followed by the raw arrays, aligned, so :meth:`load`
        maps them instead of parsing or copying them.

        Args:
            path: Destination file; its folder must exist.

        Raises:
            BackendError: the file cannot be written.
        """
        self._compact()
        path = Path(path)
        arrays: dict[str, np.ndarray[Any, Any]] = {
            "ptr": self._base.ptr,
            "rows": self._base.rows,
            "tf": self._base.tf,
            "keys": self._keys.view(),
            "dl": self._dl.view(),
            "fptr": self._fptr.view(),
            "fterm": self._fterm.view(),
        }
        joined = "\n".join(self._vocab)
        if joined.count("\n") != max(len(self._vocab) - 1, 0):
            # Some term holds a newline: store the terms unseparated, with lengths.
            joined = "".join(self._vocab)
            arrays["vocab_lengths"] = np.array(
                [len(t.encode("utf-8", "surrogatepass")) for t in self._vocab], np.int64
            )
        arrays["vocab"] = np.frombuffer(joined.encode("utf-8", "surrogatepass"), np.uint8)
        meta: dict[str, Any] = {
            "format": _FORMAT,
            "version": _VERSION,
            "k1": self.k1,
            "b": self.b,
            "uid": self._uid,
            "generation": self._generation,
            "terms": len(self._vocab),
            "sections": [],
        }
        offset = _HEADER_ROOM
        for name, arr in arrays.items():
            meta["sections"].append(
                {"name": name, "dtype": arr.dtype.str, "count": len(arr), "offset": offset}
            )
            offset += -(-arr.nbytes // _ALIGN) * _ALIGN
        prefix = encode_header(_MAGIC, meta)
        if len(prefix) > _HEADER_ROOM:  # pragma: no cover - a few hundred bytes in practice
            raise BackendError(f"{path}: keyword index header too large")
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(prefix)
                for section, arr in zip(meta["sections"], arrays.values()):
                    fh.seek(section["offset"])
                    fh.write(np.ascontiguousarray(arr).data)
                fh.truncate(offset)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            tmp = None
        except OSError as exc:
            raise BackendError(f"{path}: cannot save the keyword index: {exc}") from exc
        finally:
            if tmp is not None:
                with suppress(OSError):
                    os.unlink(tmp)

    @classmethod
    def load(cls, path: str | Path) -> KeywordIndex:
        """Read an index written by :meth:`save`.

        The arrays are memory-mapped read-only (pages are read on first use; a
        write copies what it changes), and checked for consistency: sizes, offsets
        and every stored row and term id in range, so a damaged file fails here and
        never mid-search. A file is checked in O(size) numpy passes, not hashed.

        Args:
            path: The file.

        Returns:
            The index, with the k1 and b it was saved with.

        Raises:
            FileNotFoundError: no such file.
            BackendError: the file is not a keyword index of this version or is
                damaged; delete it and rebuild from the database.
        """
        path = Path(path)
        try:
            size = path.stat().st_size
            with path.open("rb") as fh:
                if fh.read(4) == b"PK\x03\x04":
                    return cls._load_v1(path)
                fh.seek(0)
                meta = read_header(fh, _MAGIC, "keyword index")
            if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
                raise ValueError(f"format {meta.get('format')} v{meta.get('version')}")
            data: dict[str, np.ndarray[Any, Any]] = {}
            for section in meta["sections"]:
                dtype = np.dtype(section["dtype"])
                count, offset = int(section["count"]), int(section["offset"])
                if offset + count * dtype.itemsize > size:
                    raise ValueError(
                        f"truncated: {size} bytes, section {section['name']!r} "
                        f"ends at {offset + count * dtype.itemsize}"
                    )
                # A plain ndarray view of the map: slicing a np.memmap runs Python
                # code per slice, which a search does hundreds of times.
                data[section["name"]] = (
                    np.memmap(path, dtype, "r", offset, (count,)).view(np.ndarray)
                    if count
                    else np.empty(0, dtype)
                )
            return cls._from_arrays(meta, data)
        except FileNotFoundError:
            raise
        except (
            OSError,
            EOFError,
            ValueError,
            KeyError,
            IndexError,
            TypeError,
            struct.error,
            zipfile.BadZipFile,
        ) as exc:
            raise BackendError(
                f"{path}: not a readable keyword index ({exc}); delete it to rebuild it "
                "from the database"
            ) from exc

    @classmethod
    def _load_v1(cls, path: Path) -> KeywordIndex:
        """Read the v1 format (an .npz archive, copied into memory): still read so an
        existing snapshot is not rebuilt; the next save writes the current format."""
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(bytes(npz["meta"]).decode())
            if meta.get("format") != _FORMAT or meta.get("version") != 1:
                raise ValueError(f"format {meta.get('format')} v{meta.get('version')}")
            data = {name: npz[name] for name in npz.files if name != "meta"}
        return cls._from_arrays(
            meta,
            {
                **data,
                "ptr": data["ptr"].astype(np.int64),
                "keys": data["keys"].astype(np.int64),
                "dl": data["dl"].astype(np.int64),
                "fptr": data["fptr"].astype(np.int64),
                "rows": data["rows"].astype(np.int32),
                "fterm": data["fterm"].astype(np.int32),
                "tf": data["tf"].astype(np.uint16),
            },
        )

    @classmethod
    def _from_arrays(cls, meta: dict[str, Any], data: dict[str, Any]) -> KeywordIndex:
        index = cls(k1=float(meta["k1"]), b=float(meta["b"]))
        raw = data["vocab"].tobytes()
        if "vocab_lengths" in data:
            ends = np.cumsum(data["vocab_lengths"]).tolist()
            terms = [
                raw[a:z].decode("utf-8", "surrogatepass") for a, z in zip([0, *ends[:-1]], ends)
            ]
        else:
            terms = raw.decode("utf-8", "surrogatepass").split("\n") if meta["terms"] else []
        ptr, rows, tf = data["ptr"], data["rows"], data["tf"]
        keys, dl, fptr, fterm = data["keys"], data["dl"], data["fptr"], data["fterm"]
        if not (
            len(terms) == meta["terms"] == len(ptr) - 1
            and ptr[0] == 0
            and ptr[-1] == len(rows) == len(tf)
            and len(keys) == len(dl) == len(fptr) - 1
            and fptr[0] == 0
            and fptr[-1] == len(fterm)
            and ptr.dtype == fptr.dtype == keys.dtype == dl.dtype == np.int64
            and rows.dtype == fterm.dtype == np.int32
            and tf.dtype == np.uint16
        ):
            raise ValueError("inconsistent array sizes")
        # Out-of-range ids would raise mid-search; a saved index is compacted, so
        # every term has postings and every row is live.
        if (
            np.any(np.diff(ptr) <= 0)
            or np.any(np.diff(fptr) < 0)
            or (len(rows) and not 0 <= rows.min() <= rows.max() < len(keys))
            or (len(fterm) and not 0 <= fterm.min() <= fterm.max() < len(terms))
        ):
            raise ValueError("ids out of range")
        index._vocab = _Vocab(zip(terms, range(len(terms))))
        index._base = _Csr(ptr, rows, tf)
        index._df = _Buffer.adopt(np.diff(ptr))  # saved compacted: postings are all live
        index._keys = _Buffer.adopt(keys)
        index._dl = _Buffer.adopt(dl)
        index._live = _Buffer.adopt(np.ones(len(keys), np.bool_))
        index._fptr = _Buffer.adopt(fptr)
        index._fterm = _Buffer.adopt(fterm)
        index._rows = dict(zip(keys.tolist(), range(len(keys))))
        index._total_len = int(dl.sum())
        index._uid = str(meta["uid"])
        index._generation = int(meta["generation"])
        return index


def _distinct(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Sorted distinct values: ``np.unique`` without its hash table, which numpy 2.3+
    uses for integers and which is ~30x slower than a sort here."""
    values = np.sort(values)
    if len(values) > 1:
        values = values[np.concatenate(([True], values[1:] != values[:-1]))]
    return values


def _kth(values: np.ndarray[Any, Any], k: int) -> float:
    """The k-th largest value (0.0 when there are fewer than k)."""
    if len(values) < k:
        return 0.0
    return float(np.partition(values, len(values) - k)[len(values) - k])


def _top_k(keys: IntArray, scores: np.ndarray[Any, Any], k: int) -> list[tuple[int, float]]:
    """The k best (key, score) pairs: score descending, then key ascending."""
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        # Keep every tie of the k-th score so the key tie-break is global.
        near = scores >= kth
        keys, scores = keys[near], scores[near]
    order = np.lexsort((keys, -scores))[:k]
    return list(zip(keys[order].tolist(), scores[order].tolist()))
