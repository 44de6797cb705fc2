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
always describe the live documents. A query adds each term's contributions into
a dense score buffer with numpy, then selects the top k.

Not thread-safe: the caller serialises writes and searches on one index.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
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

__all__ = ["DEFAULT_B", "DEFAULT_K1", "KeywordIndex"]

# Tuned on the SciFact train split (bench/bm25.py); Lucene's defaults are 1.2/0.75.
DEFAULT_K1 = 1.2
DEFAULT_B = 0.5

_FORMAT = "hybridkb-keyword-index"
_VERSION = 1
_TF_MAX = np.iinfo(np.uint16).max  # tf is stored in 16 bits; BM25 saturates long before
_CHUNK_TERMS = 4_000_000  # terms per slice of a bulk add
_MERGE_MIN = 65_536  # tail postings below this never trigger a merge
_MERGE_FRACTION = 0.25
_APPEND_COST = 32  # one tail append costs about as much as merging 32 postings
_COMPACT_MIN = 1_024  # tombstones below this never trigger a compaction
_COMPACT_FRACTION = 0.25
_FEW_ALLOWED = 16  # allowed keys under 1/16 of the rows are looked up one by one

IntArray = npt.NDArray[np.int64]


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
        need = self.size + len(values)
        if need > len(self.data):
            grown = np.empty(max(need, len(self.data) * 3 // 2), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : need] = values
        self.size = need

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
        # Pack (term, row, tf) into one int64 and sort values (see _add_rows).
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
        begin = 0
        while begin < len(order):
            # Bulk loads go in slices of ~4M terms to bound the sort buffers.
            end, tokens = begin, 0
            while end < len(order) and (end == begin or tokens < _CHUNK_TERMS):
                tokens += len(terms[order[end]])
                end += 1
            self._add_rows(new_keys[begin:end], [terms[i] for i in order[begin:end]])
            begin = end
        self._changed()

    def _add_rows(self, keys: IntArray, docs: list[Sequence[str]]) -> None:
        """Append new rows for keys not present in the index."""
        n = len(docs)
        lengths = np.fromiter(map(len, docs), np.int64, n)
        # _Vocab hands the next id to a term seen for the first time.
        ids = np.fromiter(
            map(self._vocab.__getitem__, chain.from_iterable(docs)), np.int64, int(lengths.sum())
        )
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
            self._tail_size + len(pairs) >= max(_MERGE_MIN, _MERGE_FRACTION * base)
            or len(pairs) * _APPEND_COST >= base + self._tail_size
        ):
            # Merge the tail and this batch into the base: O(all postings) in numpy
            # beats O(batch) appends in Python once the batch is a few % of the base.
            self._merge(_batch_csr(tids, rel_rows, tf16, start, n_terms))
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

    def _merge(self, extra: _Csr | None = None) -> None:
        """Fold the tail (and ``extra``, newer rows) into the base; drop tombstoned postings."""
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
        if extra is not None:
            parts.append(extra)
        self._base = _concat_csr(parts, len(self._vocab), self._live.view())
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
        scores = self._scores(tids)
        if self._dead:
            scores *= self._live.view()
        keys = self._keys.data
        if allowed is not None:
            pool = np.asarray(allowed, dtype=np.int64).ravel()
            if len(pool) * _FEW_ALLOWED < len(scores):
                # Few allowed keys: look up their rows (live ones only) directly.
                found = map(self._rows.get, pool.tolist())
                rows = np.unique(np.fromiter((r for r in found if r is not None), np.int64))
                cand = rows[scores[rows] > 0]
            else:
                # Every contribution is > 0, so the non-zero rows are exactly the matches.
                cand = np.flatnonzero(scores)
                cand = cand[np.isin(keys[cand], pool)]
        elif len(scores) > k:
            # Threshold at the k-th best score: cheaper than listing every match.
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            cand = np.flatnonzero(scores >= kth) if kth > 0 else np.flatnonzero(scores)
        else:
            cand = np.flatnonzero(scores)
        return _top_k(keys[cand], scores[cand], k)

    def _scores(self, tids: list[int]) -> np.ndarray[Any, Any]:
        """Dense BM25 scores per row (tombstones included) for known term ids."""
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
        """Write the index to one file atomically (temp file, then rename).

        The index is compacted first, so the file holds only live documents.

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
        meta = {
            "format": _FORMAT,
            "version": _VERSION,
            "k1": self.k1,
            "b": self.b,
            "uid": self._uid,
            "generation": self._generation,
            "terms": len(self._vocab),
        }
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, allow_pickle=False, **arrays)
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

        Args:
            path: The file.

        Returns:
            The index, with the k1 and b it was saved with.

        Raises:
            FileNotFoundError: no such file.
            BackendError: the file is not a keyword index of this version or is
                damaged; delete it and rebuild from the database.
        """
        try:
            with np.load(path, allow_pickle=False) as npz:
                meta = json.loads(bytes(npz["meta"]).decode())
                if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
                    raise ValueError(f"format {meta.get('format')} v{meta.get('version')}")
                data = {name: npz[name] for name in npz.files if name != "meta"}
            return cls._from_arrays(meta, data)
        except FileNotFoundError:
            raise
        except (OSError, EOFError, ValueError, KeyError, IndexError, zipfile.BadZipFile) as exc:
            raise BackendError(
                f"{path}: not a readable keyword index ({exc}); delete it to rebuild it "
                "from the database"
            ) from exc

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
        ptr = data["ptr"].astype(np.int64)
        keys, fptr = data["keys"].astype(np.int64), data["fptr"].astype(np.int64)
        if not (
            len(terms) == meta["terms"] == len(ptr) - 1
            and ptr[-1] == len(data["rows"]) == len(data["tf"])
            and len(keys) == len(data["dl"]) == len(fptr) - 1
            and fptr[-1] == len(data["fterm"])
        ):
            raise ValueError("inconsistent array sizes")
        index._vocab = _Vocab(zip(terms, range(len(terms))))
        index._base = _Csr(ptr, data["rows"].astype(np.int32), data["tf"].astype(np.uint16))
        index._df = _Buffer(np.int64, np.diff(ptr))  # saved compacted: postings are all live
        index._keys = _Buffer(np.int64, keys)
        index._dl = _Buffer(np.int64, data["dl"])
        index._live = _Buffer(np.bool_, np.ones(len(keys), np.bool_))
        index._fptr = _Buffer(np.int64, fptr)
        index._fterm = _Buffer(np.int32, data["fterm"])
        index._rows = dict(zip(keys.tolist(), range(len(keys))))
        index._total_len = int(index._dl.view().sum())
        index._uid = str(meta["uid"])
        index._generation = int(meta["generation"])
        return index


def _top_k(keys: IntArray, scores: np.ndarray[Any, Any], k: int) -> list[tuple[int, float]]:
    """The k best (key, score) pairs: score descending, then key ascending."""
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        # Keep every tie of the k-th score so the key tie-break is global.
        near = scores >= kth
        keys, scores = keys[near], scores[near]
    order = np.lexsort((keys, -scores))[:k]
    return list(zip(keys[order].tolist(), scores[order].tolist()))
