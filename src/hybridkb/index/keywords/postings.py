"""The state of a BM25 index and every write to it.

Layout (a "row" is a dense id given to each added document, in add order):

* Postings are term-major and split in two. The *base* is one CSR block
  (:class:`~.arrays.Csr`: ptr, rows, tf); the *tail* holds, per term, a growable
  ``array`` for documents added since the last merge. Rows only grow, so tail rows
  follow base rows. A merge folds the tail into the base in O(postings) with numpy
  once it reaches a quarter of the base (or a batch is big enough that merging beats
  appending), which keeps an add of a few documents O(their terms).
* The forward index (``fptr``, ``fterm``) lists each row's distinct term ids, so a
  remove decrements document frequencies without touching postings.
* Removed rows are tombstones until :meth:`Postings.drop_tombstones` renumbers the
  rows, which happens once they are a quarter of all rows (amortised O(1) per remove).

The attributes are public for the modules of this package (``bm25.py`` reads them,
``snapshot.py`` writes and restores them); everything else uses :class:`KeywordIndex`.
"""

from __future__ import annotations

import math
import threading
import uuid
from array import array
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import ConfigError
from ..keyrows import KeyRows
from .arrays import Buffer, Csr, IntArray, Vocab, batch_csr, concat_csr

# Tuned on the SciFact train split (bench/bm25.py); Lucene's defaults are 1.2/0.75.
DEFAULT_K1 = 1.2
DEFAULT_B = 0.5

TF_MAX = np.iinfo(np.uint16).max  # tf is stored in 16 bits; BM25 saturates long before
CHUNK_TERMS = 4_000_000  # terms per slice of a bulk add
MERGE_MIN = 65_536  # tail postings below this never trigger a merge
MERGE_FRACTION = 0.25
APPEND_COST = 32  # one tail append costs about as much as merging 32 postings
TOMBSTONE_DROP_MIN = 1_024  # tombstones below this never trigger drop_tombstones
TOMBSTONE_DROP_FRACTION = 0.25

# One posting list of a query term: (the term's position in the query, rows, tfs,
# whether it is the term's base list). A term has a base and a tail list at most;
# rows ascend within each and are disjoint between them.
PostingList = tuple[int, np.ndarray[Any, Any], np.ndarray[Any, Any], bool]


class Postings:
    """Documents, terms and postings of one BM25 index (writes are not thread-safe)."""

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
        self.vocab = Vocab()
        self.df = Buffer(np.int64)
        self.keys = Buffer(np.int64)
        self.dl = Buffer(np.int64)
        self.live = Buffer(np.bool_)
        self.fptr = Buffer(np.int64, [0])
        self.fterm = Buffer(np.int32)
        self.key_rows = KeyRows.empty()  # live key -> row
        self.total_len = 0  # sum of live document lengths (an int, so exact)
        self.dead = 0
        self.base = Csr.empty()
        # Bulk adds land here first (rows newer than the base's, older than the tail's),
        # and move to the base once this holds MERGE_FRACTION of its postings: merging
        # each 10k-chunk batch into the base itself moved the whole base every time
        # (quadratic in a bulk load: ~100M postings per batch at 1M chunks).
        self.mid = Csr.empty()
        # term id -> interleaved (row, tf) pairs; arrays, not tuples, so the
        # garbage collector has no per-term objects to walk.
        self.tail: dict[int, array[int]] = {}
        self.tail_size = 0
        self.uid = uuid.uuid4().hex
        self.generation = 0
        self.norm_cache: tuple[int, np.ndarray[Any, Any]] | None = None
        # Per thread (searches may run concurrently; each needs its own): a per-row
        # float accumulator and a per-row candidate slot, all zero between queries, and
        # blocks.py's work arrays (a few MB: one block's postings).
        self.buffers = threading.local()

    # -- size -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.key_rows)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, (int, np.integer)) or not -(2**63) <= key < 2**63:
            return False
        return bool(self.key_rows.lookup(np.array([key], np.int64))[0] >= 0)

    def rows_of(self, keys: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Sorted distinct rows of the live documents among int64 ``keys`` (others skipped)."""
        rows = self.key_rows.lookup(keys)
        return np.unique(rows[rows >= 0])

    def state_token(self) -> str:
        """Return a token that changes with every write and survives save/load.

        Two indexes with equal tokens hold the same contents: the token is the
        index's creation id plus a write counter.
        """
        return f"{self.uid}:{self.generation}"

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
        self.remove_rows(self.key_rows.pop(new_keys))

        order = list(last.values())
        parts: list[Csr] = []
        begin = 0
        while begin < len(order):
            # Bulk loads go in slices of ~4M terms to bound the sort buffers.
            end, tokens = begin, 0
            while end < len(order) and (end == begin or tokens < CHUNK_TERMS):
                tokens += len(terms[order[end]])
                end += 1
            docs = [terms[i] for i in order[begin:end]]
            lengths = np.fromiter(map(len, docs), np.int64, len(docs))
            # Vocab hands the next id to a term seen for the first time.
            ids = np.fromiter(
                map(self.vocab.__getitem__, chain.from_iterable(docs)),
                np.int64,
                int(lengths.sum()),
            )
            self.add_ids(new_keys[begin:end], lengths, ids, parts)
            begin = end
        if parts:
            self.absorb(parts)
        self.changed()

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
            tid_of[code] = self.vocab[terms[code]]
        self.remove_rows(self.key_rows.pop(key_arr))
        parts: list[Csr] = []
        begin = 0
        while begin < len(key_arr):
            # Slices of ~CHUNK_TERMS terms, at least one document each.
            end = max(begin + 1, int(np.searchsorted(off, off[begin] + CHUNK_TERMS, "right")) - 1)
            end = min(end, len(key_arr))
            ids = tid_of[code_arr[off[begin] : off[end]]]
            self.add_ids(key_arr[begin:end], lengths[begin:end], ids, parts)
            begin = end
        if parts:
            self.absorb(parts)
        self.changed()

    def add_ids(self, keys: IntArray, lengths: IntArray, ids: IntArray, parts: list[Csr]) -> None:
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
        tf16 = np.minimum(np.diff(starts, append=len(packed)), TF_MAX).astype(np.uint16)
        rel_rows = pairs >> 32
        tids = pairs & 0xFFFFFFFF
        uniq = np.bincount(rel_rows, minlength=n)

        start = self.keys.size
        n_terms = len(self.vocab)
        self.df.extend(np.zeros(n_terms - self.df.size, np.int64))
        np.add.at(self.df.data, tids, 1)  # O(batch), where a bincount would be O(vocabulary)
        self.keys.extend(keys)
        self.dl.extend(lengths)
        self.live.extend(np.ones(n, np.bool_))
        self.fptr.extend(self.fptr.data[self.fptr.size - 1] + np.cumsum(uniq))
        self.fterm.extend(tids)
        self.key_rows.insert(keys, np.arange(start, start + n))
        self.total_len += int(lengths.sum())

        base = len(self.base.rows)
        if (
            parts  # later rows than a pending part cannot go to the tail
            or self.tail_size + len(pairs) >= max(MERGE_MIN, MERGE_FRACTION * base)
            or len(pairs) * APPEND_COST >= max(len(self.mid.rows) + self.tail_size, MERGE_MIN)
        ):
            # Merge the tail and this batch into the middle block: O(its postings) in
            # numpy beats O(batch) appends in Python once the batch is a few % of it.
            parts.append(batch_csr(tids, rel_rows, tf16, start, n_terms))
        else:
            self.append_tail(tids, rel_rows + start, tf16)

    def append_tail(
        self, ids: np.ndarray[Any, Any], rows: np.ndarray[Any, Any], tfs: np.ndarray[Any, Any]
    ) -> None:
        """Append (term id, row, tf) postings to the tail, which a merge folds in later."""
        tail = self.tail
        for tid, row, tf in zip(ids.tolist(), rows.tolist(), tfs.tolist(), strict=False):
            entry = tail.get(tid)
            if entry is None:
                entry = tail[tid] = array("i")
            entry.append(row)
            entry.append(tf)
        self.tail_size += len(ids)

    def remove(self, keys: Iterable[int]) -> None:
        """Remove documents by key; unknown keys are ignored.

        Args:
            keys: int64 document keys.
        """
        # Keys outside int64 cannot be in the index: skipped, as unknown keys are.
        wanted = np.unique(
            np.fromiter((k for k in map(int, keys) if -(2**63) <= k < 2**63), np.int64)
        )
        rows = self.key_rows.pop(wanted)
        if len(rows):
            self.remove_rows(rows)
            self.changed()

    def remove_rows(self, rows: np.ndarray[Any, Any]) -> None:
        """Tombstone rows already dropped from ``key_rows`` and update the statistics."""
        if not len(rows):
            return
        fptr = self.fptr.data
        starts, ends = fptr.take(rows), fptr.take(rows + 1)
        self.live.data[rows] = False
        self.total_len -= int(self.dl.data.take(rows).sum())
        # Each row's distinct term ids, all at once: positions starts[i] .. ends[i] - 1.
        counts = ends - starts
        at = np.arange(int(counts.sum())) + np.repeat(starts - np.cumsum(counts) + counts, counts)
        np.subtract.at(self.df.data, self.fterm.data.take(at), 1)
        self.dead += len(rows)

    def changed(self) -> None:
        """After a write: invalidate cached norms, and drop tombstones once they are many."""
        self.generation += 1
        self.norm_cache = None
        if self.dead >= max(TOMBSTONE_DROP_MIN, TOMBSTONE_DROP_FRACTION * self.keys.size):
            self.drop_tombstones()

    def tail_csr(self) -> list[Csr]:
        """The tail as a CSR block (none when it is empty), emptying it."""
        if not self.tail:
            return []
        tids = np.fromiter(self.tail, np.int64, len(self.tail))
        order = np.argsort(tids)
        entries = list(self.tail.values())
        counts = np.zeros(len(self.vocab), np.int64)
        counts[tids] = [len(e) // 2 for e in entries]
        ptr = np.zeros(len(self.vocab) + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        pairs = np.frombuffer(b"".join([entries[i] for i in order]), np.int32).reshape(-1, 2)
        self.tail = {}
        self.tail_size = 0
        return [Csr(ptr, pairs[:, 0], pairs[:, 1].astype(np.uint16))]

    def absorb(self, parts: Sequence[Csr]) -> None:
        """Fold bulk batches (newer rows, in order) and the tail into the middle block,
        and that into the base once it holds MERGE_FRACTION of the base's postings: a
        posting then moves a few times in a bulk load, not once per batch."""
        live = self.live.view()
        mid = concat_csr([self.mid, *self.tail_csr(), *parts], len(self.vocab), live)
        if len(mid.rows) >= MERGE_FRACTION * len(self.base.rows):
            self.base = concat_csr([self.base, mid], len(self.vocab), live)
            self.mid = Csr.empty()
        else:
            self.mid = mid

    def merge(self, extra: Sequence[Csr] = ()) -> None:
        """Fold the middle block, the tail (and ``extra``, newer rows in order) into the
        base; drop tombstones."""
        parts = [self.base, self.mid, *self.tail_csr(), *extra]
        self.base = concat_csr(parts, len(self.vocab), self.live.view())
        self.mid = Csr.empty()
        # A merge is O(postings) anyway; also hand back growth slack.
        for buffer in (self.df, self.keys, self.dl, self.live, self.fptr, self.fterm):
            buffer.trim()

    def drop_tombstones(self) -> None:
        """Merge the tail, renumber rows without tombstones, drop terms no document has."""
        self.merge()
        self.norm_cache = None
        if self.dead:
            live = self.live.view()
            new_row = (np.cumsum(live) - 1).astype(np.int32)
            self.base.rows = new_row[self.base.rows]
            per_row = np.diff(self.fptr.view())
            fterm = self.fterm.view()[np.repeat(live, per_row)]
            self.fterm = Buffer(np.int32, fterm)
            fptr = np.zeros(int(live.sum()) + 1, np.int64)
            np.cumsum(per_row[live], out=fptr[1:])
            self.fptr = Buffer(np.int64, fptr)
            self.keys = Buffer(np.int64, self.keys.view()[live])
            self.dl = Buffer(np.int64, self.dl.view()[live])
            self.live = Buffer(np.bool_, np.ones(len(fptr) - 1, np.bool_))
            self.key_rows = KeyRows.of(self.keys.view())
            self.dead = 0
        df = self.df.view()
        used = df > 0
        if not used.all():
            new_tid = (np.cumsum(used) - 1).astype(np.int32)
            self.fterm = Buffer(np.int32, new_tid[self.fterm.view()])
            ptr = self.base.ptr
            self.base.ptr = np.append(ptr[:-1][used], ptr[-1])
            self.df = Buffer(np.int64, df[used])
            kept = [term for term, keep in zip(self.vocab, used.tolist(), strict=False) if keep]
            self.vocab = Vocab(zip(kept, range(len(kept)), strict=False))

    # -- reads ------------------------------------------------------------------

    def postings(self, tid: int) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
        """Posting (rows, tfs) pieces of one term: base slice, then tail."""
        out = []
        ptr = self.base.ptr
        if tid + 1 < len(ptr) and ptr[tid] != ptr[tid + 1]:
            a, z = ptr[tid], ptr[tid + 1]
            out.append((self.base.rows[a:z], self.base.tf[a:z]))
        mid = self.mid.ptr
        if tid + 1 < len(mid) and mid[tid] != mid[tid + 1]:
            a, z = mid[tid], mid[tid + 1]
            out.append((self.mid.rows[a:z], self.mid.tf[a:z]))
        entry = self.tail.get(tid)
        if entry is not None:
            # A copy: a buffer view would pin the array and block later appends.
            pairs = np.array(entry, np.int32).reshape(-1, 2)
            out.append((pairs[:, 0], pairs[:, 1]))
        return out

    def term_ids(self, terms: Sequence[str]) -> list[int]:
        """Ids of the distinct ``terms`` that some live document has, in first-seen order."""
        df = self.df.data
        found = (self.vocab.get(term) for term in dict.fromkeys(terms))
        return [tid for tid in found if tid is not None and df[tid] > 0]

    def norms(self) -> np.ndarray[Any, Any]:
        """Per-row BM25 length norm ``k1 * (1 - b + b * dl / avgdl)``, cached per write."""
        if self.norm_cache is None or self.norm_cache[0] != self.generation:
            avgdl = self.total_len / len(self)
            dl = self.dl.view().astype(np.float64)
            norms = self.k1 * (1.0 - self.b + self.b * dl / avgdl)
            self.norm_cache = (self.generation, norms)
        return self.norm_cache[1]

    def lists(self, tids: list[int]) -> list[PostingList]:
        """The posting lists of the query terms, in query order (base, then tail)."""
        out: list[PostingList] = []
        ptr, mid = self.base.ptr, self.mid.ptr
        for j, tid in enumerate(tids):
            if tid + 1 < len(ptr) and ptr[tid] != ptr[tid + 1]:
                a, z = ptr[tid], ptr[tid + 1]
                out.append((j, self.base.rows[a:z], self.base.tf[a:z], True))
            if tid + 1 < len(mid) and mid[tid] != mid[tid + 1]:
                a, z = mid[tid], mid[tid + 1]
                out.append((j, self.mid.rows[a:z], self.mid.tf[a:z], False))
            entry = self.tail.get(tid)
            if entry is not None:
                # A copy: a buffer view would pin the array and block later appends.
                pairs = np.array(entry, np.int32).reshape(-1, 2)
                out.append((j, pairs[:, 0].copy(), pairs[:, 1].copy(), False))
        return out

    def weights(self, tids: list[int]) -> list[float]:
        """Per query term: Lucene idf times (k1 + 1), from the live statistics."""
        n_docs = len(self)
        df = self.df.data
        return [
            math.log1p((n_docs - int(df[t]) + 0.5) / (int(df[t]) + 0.5)) * (self.k1 + 1.0)
            for t in tids
        ]

    def contrib(
        self,
        weight: float | np.ndarray[Any, Any],
        rows: np.ndarray[Any, Any],
        tf16: np.ndarray[Any, Any],
    ) -> np.ndarray[Any, Any]:
        """weight * tf / (tf + norm) per posting (``weight``: one, or one per posting), in
        the exact float64 operation order of the original dense scorer (so scores agree
        bit for bit with Postgres's checks)."""
        tf = tf16.astype(np.float64)
        denom = self.norms().take(rows)
        denom += tf
        np.divide(tf, denom, out=tf)
        tf *= weight
        return tf

    def scratch_for(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """This thread's zeroed per-row buffers, grown to the row count."""
        buffers = self.buffers
        scratch: np.ndarray[Any, Any] | None = getattr(buffers, "scratch", None)
        size = self.keys.size
        if scratch is None or len(scratch) < size:
            grown = max(size, 0 if scratch is None else len(scratch) * 5 // 4)
            buffers.scratch = np.zeros(grown)
            buffers.slots = np.zeros(grown, np.int32)
        return buffers.scratch, buffers.slots
