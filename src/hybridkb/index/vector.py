"""In-memory vector index derived from the vector table.

The DuckDB table holding full float32 vectors is the source of truth; this index
is a compact, rebuildable copy that answers nearest-neighbour queries fast and
honours a permitted-key filter without starving (DuckDB's vss HNSW only
post-filters, so a 1 % filter returns almost nothing).

Two layouts, chosen by size (figures from ``bench/vector.py``):

* **flat** (``len <= hnsw_threshold``, default 20k): one compact matrix scanned
  exactly with SIMD int8 dot products: no build, exact filters, ~0.15 ms at 5k
  rows. Past ~20k rows (8 MB at 384-d) the scan leaves the core's cache and, on
  a shared machine, slows ~20x (0.6 ms at 20k, 14 ms at 50k under load).
* **hnsw** (above the threshold): a usearch HNSW graph over the same compact
  vectors, updated incrementally. Filters scan the permitted rows exactly when
  they are few, and otherwise search the graph with growing oversampling, falling
  back to the exact scan, so a filter never starves the result. The graph's
  links cost ~10 % of float32 on top of the int8 vectors (~35-38 % in all).

Vectors are stored compactly (``quantization``): ``"i8"`` (per-row scaled int8,
27 % of float32 with keys and norms, the default: on SciFact its nDCG@10 is
within 0.001 of float32 with no re-rank at all), ``"b1"`` (sign bits, 5 %, needs
the ``rerank`` callback and 200 candidates to get there, and fails on noisier
data) or ``"f32"``. Scores are cosines between the compact vectors; pass
``rerank`` to get exact cosines from the full vectors for the top candidates.

A lock serialises every call, so one index can serve several threads.
"""

from __future__ import annotations

import importlib
import math
import os
import struct
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import numpy as np
from usearch.index import Index, MetricKind, ScalarKind

from .fileheader import encode_header, read_header


def _optional_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:  # pragma: no cover - depends on the installed usearch
        return None


# SIMD int8 kernels: a dependency of usearch >= 2.26, absent before (numpy fallback).
_numkong = _optional_module("numkong")

Hit = tuple[int, float]

DEFAULT_HNSW_THRESHOLD = 20_000
# HNSW parameters (bench/vector.py, bench/index_scale.py). Recall@10 against exact
# float32 search on the synthetic sets (SciFact vectors plus noise), where the int8
# copies alone cap it at 0.992 (100k) and 0.99 (1M), by expansion_search:
#   100k: 256 -> 0.979-0.983, 512 -> 0.985-0.987, 1024 -> 0.988-0.991
#   1M:   256 -> 0.937, 512 -> 0.969, 1024 -> 0.979, 1536 -> 0.981, 2048 -> 0.983
# so the beam widens with the graph (expansion_search_for); latency grows about
# linearly with it (1M: ~3 ms at 1024 on this machine). expansion_add 128 costs
# ~650 CPU-s at 1M; 64 halves that and loses nothing at 100k, but at 1M it drops
# recall to 0.964 at 1024 (connectivity 32 with 64: 0.975), so 128 stays.
# Connectivity 24 (1M, 128): 0.981 at 1024 for +46 % build CPU and ~2x search time.
HNSW_CONNECTIVITY = 16
HNSW_EXPANSION_ADD = 128
HNSW_EXPANSION_SEARCH = 256  # the floor, for graphs up to 50k rows


def expansion_search_for(rows: int) -> int:
    """HNSW search beam for a graph of ``rows`` vectors (wider as the graph grows)."""
    if rows <= 50_000:
        return HNSW_EXPANSION_SEARCH
    if rows <= 250_000:
        return 512
    return 1024


_QUANTIZATIONS = ("f32", "i8", "b1")
_USEARCH_DTYPE = {"f32": ScalarKind.F32, "i8": ScalarKind.I8, "b1": ScalarKind.B1}
_NUMPY_DTYPE: dict[str, type[np.generic]] = {"f32": np.float32, "i8": np.int8, "b1": np.uint8}
_MAGIC = b"HKBVIDX\x01"
_FORMAT_VERSION = 1
_ALIGN = 64
_HEADER_ROOM = 4096
# Filtered graph search: fetching and scoring a stored vector costs ~0.5 us, a
# graph beam several us per unit of width (rough figures from this machine); so
# scan the permitted rows when they are fewer than ~4x the oversampled beam, and
# always when there are only a few.
_GRAPH_COST_PER_RESULT = 4
_ALWAYS_SCAN_ROWS = 1_000
# Graph hits requested per wanted filtered hit, times n / |allowed|. At 2, a 10 %
# filter on the synthetic 100k set recalls 0.94 of the exact filtered top 10.
_OVERSAMPLE = 2
# A graph search wider than this is slower than scanning the permitted rows.
_MAX_OVERSAMPLED = 20_000
# Rows fetched from the graph per exact-scan batch, bounding temporary memory.
_SCAN_BATCH = 65_536
_ENCODE_BATCH = 65_536  # rows quantised per slice


def default_candidates(k: int, quantization: str) -> int:
    """Number of compact candidates re-scored exactly when a rerank callback is given.

    Args:
        k: Number of results wanted.
        quantization: The index's quantization.

    Returns:
        The default ``candidates`` for :meth:`VectorIndex.search`.
    """
    # Sign bits order neighbours coarsely: on SciFact 200 candidates are needed to
    # bring nDCG@10 within 0.001 of float32, where int8 needs none.
    if quantization == "b1":
        return max(200, 20 * k)
    return max(50, 4 * k)


def _encode(vectors: np.ndarray, quantization: str) -> np.ndarray:
    """Turn float32 rows into the compact representation."""
    if len(vectors) > _ENCODE_BATCH:
        # In slices: the float temporaries of one call are ~3x the input.
        out = np.empty(
            (len(vectors), _encode(vectors[:1], quantization).shape[1]), _NUMPY_DTYPE[quantization]
        )
        for start in range(0, len(vectors), _ENCODE_BATCH):
            out[start : start + _ENCODE_BATCH] = _encode(
                vectors[start : start + _ENCODE_BATCH], quantization
            )
        return out
    if quantization == "f32":
        return np.ascontiguousarray(vectors, dtype=np.float32)
    if quantization == "i8":
        # Per-row scaling uses the full int8 range; cosine ignores the scale, while
        # usearch's own cast (x * 127) wastes most of it on normalised 384-d rows
        # whose components rarely exceed 0.3.
        peak = np.abs(vectors).max(axis=1, keepdims=True)
        scale = np.divide(127.0, peak, out=np.zeros_like(peak), where=peak > 0)
        return np.clip(np.rint(vectors * scale), -127, 127).astype(np.int8)
    return np.packbits(vectors > 0, axis=1)


def _inverse_norms(enc: np.ndarray) -> np.ndarray:
    """1 / L2 norm of each compact row (0 for a zero row), so dot products become cosines."""
    norms = np.linalg.norm(enc.astype(np.float32), axis=1)
    return np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0).astype(np.float32)


def _scores(
    rows: np.ndarray, inv_norms: np.ndarray | None, query: np.ndarray, quantization: str, dim: int
) -> np.ndarray:
    """Cosine between the compact query and every compact row.

    ``inv_norms`` are the rows' stored inverse norms, or None to compute them.
    """
    if quantization == "b1":
        bits = np.bitwise_xor(rows, query)
        if hasattr(np, "bitwise_count"):  # numpy >= 2
            differ = np.bitwise_count(bits).sum(axis=1, dtype=np.int32)
        else:  # pragma: no cover - numpy 1.x
            differ = np.unpackbits(bits, axis=1).sum(axis=1, dtype=np.int32)
        # Cosine between the +-1 vectors the bits stand for.
        return cast(np.ndarray, (1.0 - 2.0 * differ / dim).astype(np.float32))
    if quantization == "i8" and _numkong is not None:
        # numpy has no SIMD int8 GEMV; numkong's is ~10x faster than converting to float.
        if inv_norms is None:  # rows fetched from the graph: let the kernel take norms
            angular = _numkong.cdist(rows, query[None, :], metric="angular", out_dtype="float32")
            return cast(np.ndarray, 1.0 - np.asarray(angular).reshape(-1))
        dots = np.asarray(
            _numkong.cdist(rows, query[None, :], metric="dot", out_dtype="float32")
        ).reshape(-1)
    else:
        dots = rows.astype(np.float32, copy=False) @ query.astype(np.float32)
    if inv_norms is None:
        inv_norms = _inverse_norms(rows)
    return cast(np.ndarray, dots * inv_norms * _inverse_norms(query[None, :])[0])


def _scan(
    rows: np.ndarray,
    inv_norms: np.ndarray | None,
    query: np.ndarray,
    count: int,
    quantization: str,
    dim: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top ``count`` of a compact matrix: (row positions, scores), unordered."""
    count = min(count, len(rows))
    if count <= 0:
        return np.empty(0, np.int64), np.empty(0, np.float32)
    scores = _scores(rows, inv_norms, query, quantization, dim)
    if count == len(rows):
        return np.arange(len(rows), dtype=np.int64), scores
    top = np.argpartition(-scores, count - 1)[:count]
    return top.astype(np.int64), scores[top]


def _prefer_scan(permitted: int, want: int, n: int) -> bool:
    """Whether scanning ``permitted`` rows beats a graph search oversampled by n / permitted."""
    oversampled = _OVERSAMPLE * want * n / max(permitted, 1)
    return permitted <= _ALWAYS_SCAN_ROWS or permitted <= _GRAPH_COST_PER_RESULT * oversampled


def _ranked(keys: np.ndarray, scores: np.ndarray, k: int) -> list[Hit]:
    """Sort by score descending, key ascending, and keep ``k``."""
    order = np.lexsort((keys, -scores))[:k]
    return [(int(key), float(score)) for key, score in zip(keys[order], scores[order])]


class _Flat:
    """Compact rows in insertion order plus a sorted key index for lookups.

    A Python dict would cost ~100 bytes per key, a quarter of an int8 row, so
    lookups bisect a sorted key array instead; it is bounded by the HNSW
    threshold, so its O(n) inserts stay well under a millisecond.
    """

    def __init__(self, rows: np.ndarray, inv_norms: np.ndarray, keys: np.ndarray) -> None:
        self.rows, self.inv_norms, self.keys = rows, inv_norms, keys
        self.n = len(keys)
        order = np.argsort(keys, kind="stable")
        self.sorted_keys = np.asarray(keys[order], dtype=np.int64)
        self.sorted_rows = order.astype(np.int64)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Row of each key, or -1 when absent."""
        if not self.n:
            return np.full(len(keys), -1, np.int64)
        pos = np.minimum(np.searchsorted(self.sorted_keys, keys), self.n - 1)
        return np.where(self.sorted_keys[pos] == keys, self.sorted_rows[pos], -1)

    def put(self, keys: np.ndarray, enc: np.ndarray, inv_norms: np.ndarray) -> None:
        """Insert or overwrite rows; ``keys`` are unique."""
        rows = self.lookup(keys)
        old = rows >= 0
        self.rows[rows[old]] = enc[old]
        self.inv_norms[rows[old]] = inv_norms[old]
        new = ~old
        m = int(new.sum())
        if not m:
            return
        if self.n + m > len(self.rows):
            self._grow(max(self.n + m, int(len(self.rows) * 1.25)))
        start = self.n
        self.rows[start : start + m] = enc[new]
        self.inv_norms[start : start + m] = inv_norms[new]
        self.keys[start : start + m] = keys[new]
        self.n += m
        new_keys = keys[new]  # already sorted: callers pass np.unique output
        at = np.searchsorted(self.sorted_keys, new_keys)
        self.sorted_keys = np.insert(self.sorted_keys, at, new_keys)
        self.sorted_rows = np.insert(self.sorted_rows, at, np.arange(start, start + m))

    def _grow(self, capacity: int) -> None:
        def grown(old: np.ndarray) -> np.ndarray:
            fresh = np.empty((capacity, *old.shape[1:]), old.dtype)
            fresh[: self.n] = old[: self.n]
            return fresh

        self.rows, self.inv_norms, self.keys = (
            grown(self.rows),
            grown(self.inv_norms),
            grown(self.keys),
        )

    def delete(self, keys: np.ndarray) -> None:
        """Remove rows; ``keys`` are unique, unknown ones ignored."""
        if not self.n:
            return
        pos = np.minimum(np.searchsorted(self.sorted_keys, keys), self.n - 1)
        pos = pos[self.sorted_keys[pos] == keys]
        if not len(pos):
            return
        dead = np.sort(self.sorted_rows[pos])
        self.sorted_keys = np.delete(self.sorted_keys, pos)
        self.sorted_rows = np.delete(self.sorted_rows, pos)
        new_n = self.n - len(dead)
        # Fill holes below the new end with live rows from the tail, so the matrix
        # stays dense and a scan never meets a tombstone.
        holes = dead[dead < new_n]
        if len(holes):
            tail = np.arange(new_n, self.n)
            movers = tail[~np.isin(tail, dead, assume_unique=True)]
            self.rows[holes] = self.rows[movers]
            self.inv_norms[holes] = self.inv_norms[movers]
            self.keys[holes] = self.keys[movers]
            self.sorted_rows[np.searchsorted(self.sorted_keys, self.keys[holes])] = holes
        self.n = new_n


class VectorIndex:
    """Nearest-neighbour index over L2-normalised float32 rows keyed by int64.

    Args:
        dim: Vector dimension.
        quantization: Compact representation: ``"i8"`` (default), ``"b1"`` or ``"f32"``.
        hnsw_threshold: Above this many rows the exact scan is replaced by HNSW.

    Raises:
        ValueError: On a non-positive dimension, unknown quantization or negative threshold.
    """

    def __init__(
        self, dim: int, *, quantization: str = "i8", hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD
    ) -> None:
        if not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ValueError(f"vector index: dim must be a positive integer, got {dim!r}")
        if quantization not in _QUANTIZATIONS:
            raise ValueError(
                f"vector index: unknown quantization {quantization!r}; use one of {_QUANTIZATIONS}"
            )
        if hnsw_threshold < 0:
            raise ValueError(f"vector index: hnsw_threshold must be >= 0, got {hnsw_threshold}")
        self.dim = int(dim)
        self.quantization = quantization
        self.hnsw_threshold = hnsw_threshold
        self._width = (self.dim + 7) // 8 if quantization == "b1" else self.dim
        # usearch counts b1 dimensions in bits of whole bytes; the zero pad bits never differ.
        self._usearch_ndim = self._width * 8 if quantization == "b1" else self.dim
        self._dtype = _NUMPY_DTYPE[quantization]
        self._flat: _Flat | None = _Flat(
            np.empty((0, self._width), self._dtype), np.empty(0, np.float32), np.empty(0, np.int64)
        )
        self._hnsw: Index | None = None
        self._hnsw_mapped: np.ndarray | None = None  # the file bytes a viewed graph lives in
        self._lock = threading.RLock()

    # -- size and membership -------------------------------------------------------

    def __len__(self) -> int:
        if self._flat is not None:
            return self._flat.n
        return len(cast(Index, self._hnsw))

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, (int, np.integer)) or key < 0:
            return False
        with self._lock:
            if self._flat is not None:
                return bool(self._flat.lookup(np.array([key], np.int64))[0] >= 0)
            return bool(cast(Index, self._hnsw).contains(int(key)))

    @property
    def layout(self) -> str:
        """``"flat"`` (exact scan) or ``"hnsw"`` (graph)."""
        return "flat" if self._flat is not None else "hnsw"

    @property
    def nbytes(self) -> int:
        """Bytes held by the search representation (compact vectors, norms, keys, graph)."""
        if self._flat is not None:
            f = self._flat
            return sum(
                a.nbytes for a in (f.rows, f.inv_norms, f.keys, f.sorted_keys, f.sorted_rows)
            )
        return int(cast(Index, self._hnsw).memory_usage)

    # -- writes ----------------------------------------------------------------------

    def add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Insert rows; a key already present is replaced.

        Args:
            keys: Non-negative int64 keys, one per row; within a batch the last row wins.
            vectors: ``(n, dim)`` float32 L2-normalised rows.

        Raises:
            ValueError: On a dimension or length mismatch, or a negative key.
        """
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(
                f"vector index: expected vectors of shape (n, {self.dim}), got {vectors.shape}"
            )
        if len(keys) != len(vectors):
            raise ValueError(f"vector index: {len(keys)} keys for {len(vectors)} vectors")
        if not len(keys):
            return
        if keys.min() < 0:
            raise ValueError("vector index: keys must be non-negative")
        # Keep the last occurrence of a key repeated within the batch.
        keys, first_from_end = np.unique(keys[::-1], return_index=True)
        enc = _encode(vectors[len(vectors) - 1 - first_from_end], self.quantization)
        with self._lock:
            if self._flat is not None:
                self._flat.put(keys, enc, _inverse_norms(enc))
                if self._flat.n > self.hnsw_threshold:
                    self._build_hnsw()
                return
            index = self._writable_hnsw()
            ukeys = keys.view(np.uint64)
            present = index.contains(ukeys)
            if present.any():
                index.remove(ukeys[present])
            # Thread start-up costs more than a small batch takes to insert.
            index.add(ukeys, enc, threads=0 if len(keys) > 256 else 1)

    def remove(self, keys: Iterable[int]) -> None:
        """Delete keys; unknown keys are ignored.

        Args:
            keys: Keys to delete.
        """
        if isinstance(keys, np.ndarray):
            arr = np.unique(keys.astype(np.int64, copy=False).reshape(-1))
        else:
            arr = np.unique(np.fromiter((int(k) for k in keys), dtype=np.int64))
        arr = arr[arr >= 0]
        if not len(arr):
            return
        with self._lock:
            if self._flat is not None:
                self._flat.delete(arr)
                return
            index = self._writable_hnsw()
            ukeys = arr.view(np.uint64)
            present = index.contains(ukeys)
            if present.any():
                # usearch marks the node deleted and reuses its slot on a later add.
                index.remove(ukeys[present])

    def _build_hnsw(self) -> None:
        flat = cast(_Flat, self._flat)
        index = self._new_hnsw()
        index.add(flat.keys[: flat.n].view(np.uint64), flat.rows[: flat.n], threads=0)
        self._hnsw, self._flat = index, None

    def _new_hnsw(self) -> Index:
        metric = MetricKind.Hamming if self.quantization == "b1" else MetricKind.Cos
        return Index(
            ndim=self._usearch_ndim,
            metric=metric,
            dtype=_USEARCH_DTYPE[self.quantization],
            connectivity=HNSW_CONNECTIVITY,
            expansion_add=HNSW_EXPANSION_ADD,
            expansion_search=HNSW_EXPANSION_SEARCH,
        )

    def _writable_hnsw(self) -> Index:
        """The graph, copied out of its memory-mapped file on the first write."""
        if self._hnsw_mapped is not None:
            owned = self._new_hnsw()
            owned.load(self._hnsw_mapped)
            self._hnsw, self._hnsw_mapped = owned, None
        return cast(Index, self._hnsw)

    # -- search ----------------------------------------------------------------------

    def search(
        self,
        query: np.ndarray,
        k: int,
        *,
        allowed: np.ndarray | None = None,
        rerank: Callable[[np.ndarray], np.ndarray] | None = None,
        candidates: int | None = None,
    ) -> list[Hit]:
        """Top ``k`` rows by cosine similarity.

        Args:
            query: ``(dim,)`` float32 query vector.
            k: Number of results.
            allowed: Permitted keys; exactly ``min(k, |allowed ∩ index|)`` hits come back.
            rerank: Maps an int64 key array to its full float32 vectors ``(len, dim)``;
                when given, the top ``candidates`` compact hits are re-scored and the
                returned scores are exact cosines.
            candidates: Compact hits to re-score (default :func:`default_candidates`).

        Returns:
            ``(key, score)`` pairs, score descending, ties by key ascending.

        Raises:
            ValueError: On a query of the wrong dimension, a negative ``k``, or a
                rerank callback returning the wrong shape.
        """
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(
                f"vector index: query has dimension {q.shape[0]}, index has {self.dim}"
            )
        if k < 0:
            raise ValueError(f"vector index: k must be >= 0, got {k}")
        if k == 0:
            return []
        pool = k
        if rerank is not None:
            pool = max(
                k,
                candidates if candidates is not None else default_candidates(k, self.quantization),
            )
        q_enc = _encode(q[None, :], self.quantization)[0]
        with self._lock:
            if allowed is not None:
                keys, scores = self._search_allowed(q_enc, pool, allowed)
            elif self._flat is not None:
                f = self._flat
                rows, scores = _scan(
                    f.rows[: f.n], f.inv_norms[: f.n], q_enc, pool, self.quantization, self.dim
                )
                keys = f.keys[rows]
            else:
                keys, scores = self._search_graph(q_enc, pool, None)
        if rerank is not None and len(keys):
            scores = self._exact_scores(q, keys, rerank)
        return _ranked(keys, scores, k)

    def _exact_scores(
        self, q: np.ndarray, keys: np.ndarray, rerank: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray:
        full = np.asarray(rerank(np.array(keys, dtype=np.int64)), dtype=np.float32)
        if full.shape != (len(keys), self.dim):
            raise ValueError(
                f"vector index: rerank returned shape {full.shape}, "
                f"expected ({len(keys)}, {self.dim})"
            )
        return cast(np.ndarray, (full @ q) * _inverse_norms(full) * _inverse_norms(q[None])[0])

    def _search_allowed(
        self, q_enc: np.ndarray, pool: int, allowed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        allowed = np.asarray(allowed, dtype=np.int64).reshape(-1)
        # Callers usually pass sorted ids (from SQL); sorting again costs ms at 1M.
        if len(allowed) > 1 and not bool(np.all(allowed[1:] > allowed[:-1])):
            allowed = np.unique(allowed)
        if len(allowed) and allowed[0] < 0:
            allowed = allowed[allowed >= 0]
        if self._flat is not None:
            return self._scan_flat_allowed(q_enc, pool, allowed)
        index = cast(Index, self._hnsw)
        if _prefer_scan(len(allowed), min(pool, len(allowed)), len(index)):
            live = allowed[index.contains(allowed.view(np.uint64))] if len(allowed) else allowed
            return self._scan_keys(q_enc, pool, live)
        return self._search_graph(q_enc, pool, allowed)

    def _scan_flat_allowed(
        self, q_enc: np.ndarray, pool: int, allowed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        f = self._flat
        assert f is not None
        rows = f.lookup(allowed)
        rows = rows[rows >= 0]
        if len(rows) * 4 <= f.n:
            found, scores = _scan(
                f.rows[rows], f.inv_norms[rows], q_enc, pool, self.quantization, self.dim
            )
            return f.keys[rows[found]], scores
        # A wide filter: scoring every row and masking beats copying most of the matrix.
        scores = _scores(f.rows[: f.n], f.inv_norms[: f.n], q_enc, self.quantization, self.dim)
        barred = np.ones(f.n, dtype=bool)
        barred[rows] = False
        scores[barred] = -np.inf
        count = min(pool, len(rows))
        top = np.argpartition(-scores, count - 1)[:count] if count < f.n else np.arange(f.n)
        top = top[np.isfinite(scores[top])]
        return f.keys[top], scores[top]

    def _search_graph(
        self, q_enc: np.ndarray, pool: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Graph search, oversampled for a filter, falling back to an exact scan.

        ``allowed`` is a sorted array of permitted keys (some may be absent), or None.
        """
        index = cast(Index, self._hnsw)
        n = len(index)
        want = min(pool, n)
        if want == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        beam = expansion_search_for(n)
        if index.expansion_search != beam:
            index.expansion_search = beam  # type: ignore[misc]  # usearch has the setter
        # Expect |allowed| / n of the graph's hits to pass the filter; ask for more.
        count = (
            want if allowed is None else math.ceil(_OVERSAMPLE * want * n / max(len(allowed), 1))
        )
        while count <= max(_MAX_OVERSAMPLED, want):
            found = index.search(q_enc, min(count, n))
            keys = np.asarray(found.keys).view(np.int64)
            scores = self._graph_scores(np.asarray(found.distances))
            if allowed is not None:
                at = np.minimum(np.searchsorted(allowed, keys), len(allowed) - 1)
                ok = allowed[at] == keys
                keys, scores = keys[ok], scores[ok]
            if len(keys) >= want:
                return keys[:want], scores[:want]
            if count >= n:
                break
            count *= 4
        # Removals can leave nodes unreachable, a filter may hold absent keys, and a
        # very selective one needs a huge beam: the exact scan is right in all cases.
        if allowed is None:
            live = np.sort(np.asarray(index.keys).view(np.int64))
        else:
            live = allowed[index.contains(allowed.view(np.uint64))]
        return self._scan_keys(q_enc, pool, live)

    def _scan_keys(
        self, q_enc: np.ndarray, pool: int, keys: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact scan over the graph's stored vectors for ``keys`` (all present)."""
        index = cast(Index, self._hnsw)
        best_keys, best_scores = np.empty(0, np.int64), np.empty(0, np.float32)
        for start in range(0, len(keys), _SCAN_BATCH):
            batch = keys[start : start + _SCAN_BATCH]
            got = index.get(batch.view(np.uint64), dtype=_USEARCH_DTYPE[self.quantization])
            rows = np.stack(cast(tuple[np.ndarray, ...], got)).reshape(len(batch), self._width)
            rows = rows.view(self._dtype)
            found, scores = _scan(rows, None, q_enc, pool, self.quantization, self.dim)
            best_keys = np.concatenate([best_keys, batch[found]])
            best_scores = np.concatenate([best_scores, scores])
            if len(best_keys) > pool:
                top = np.argpartition(-best_scores, pool - 1)[:pool]
                best_keys, best_scores = best_keys[top], best_scores[top]
        return best_keys, best_scores

    def _graph_scores(self, distances: np.ndarray) -> np.ndarray:
        if self.quantization == "b1":
            return (1.0 - 2.0 * distances / self.dim).astype(np.float32)
        return (1.0 - distances).astype(np.float32)

    # -- persistence -------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the index atomically (temporary file, fsync, rename).

        Args:
            path: Destination file; replaced only once the new file is complete.
        """
        path = Path(path)
        with self._lock:
            if self._flat is not None:
                f = self._flat
                sections = {
                    "keys": f.keys[: f.n].tobytes(),
                    "rows": f.rows[: f.n].tobytes(),
                    "inv_norms": f.inv_norms[: f.n].tobytes(),
                }
            else:
                sections = {"hnsw": bytes(cast(Index, self._hnsw).save())}
            header: dict[str, Any] = {
                "version": _FORMAT_VERSION,
                "dim": self.dim,
                "quantization": self.quantization,
                "hnsw_threshold": self.hnsw_threshold,
                "layout": self.layout,
                "count": len(self),
                "sections": [],
            }
        offset = _HEADER_ROOM  # sections start after a fixed room, so offsets are known first
        for name, blob in sections.items():
            header["sections"].append(
                {"name": name, "offset": offset, "nbytes": len(blob), "crc32": zlib.crc32(blob)}
            )
            offset += -(-len(blob) // _ALIGN) * _ALIGN
        prefix = encode_header(_MAGIC, header)
        assert len(prefix) <= _HEADER_ROOM, "header outgrew its reserved room"
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(prefix)
                for section, blob in zip(header["sections"], sections.values()):
                    out.seek(section["offset"])
                    out.write(blob)
                last = header["sections"][-1]
                out.truncate(last["offset"] + last["nbytes"])
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path, *, mmap: bool = True) -> VectorIndex:
        """Read an index written by :meth:`save`.

        Args:
            path: File to read.
            mmap: Map the stored arrays (copy-on-write) instead of copying them; a
                graph is copied into private memory on its first write.

        Returns:
            The index.

        Raises:
            ValueError: If the file is truncated, corrupt or of an unknown format; the
                caller should rebuild the index from the tables.
            FileNotFoundError: If the file does not exist.
        """
        path = Path(path)
        size = path.stat().st_size
        try:
            with path.open("rb") as fh:
                header = read_header(fh, _MAGIC, "vector index")
            if header["version"] != _FORMAT_VERSION:
                raise ValueError(f"unsupported format version {header['version']!r}")
            index = cls(
                int(header["dim"]),
                quantization=header["quantization"],
                hnsw_threshold=int(header["hnsw_threshold"]),
            )
            blobs: dict[str, np.ndarray] = {}
            for section in header["sections"]:
                offset, nbytes = int(section["offset"]), int(section["nbytes"])
                if offset + nbytes > size:
                    raise ValueError(
                        f"truncated: {size} bytes, a section ends at {offset + nbytes}"
                    )
                blob = (
                    np.memmap(path, np.uint8, "c", offset, (nbytes,))
                    if mmap and nbytes
                    else np.fromfile(path, np.uint8, nbytes, offset=offset)
                )
                # Check every byte: a corrupt graph could crash usearch, not just mis-rank.
                if zlib.crc32(blob) != section["crc32"]:
                    raise ValueError(f"section {section['name']!r} is corrupt")
                blobs[section["name"]] = blob
            index._restore(header, blobs, mmap)
            return index
        except (
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            IndexError,
            RuntimeError,
            struct.error,
        ) as exc:
            raise ValueError(f"{path}: unreadable vector index ({exc}); rebuild it") from exc

    def _restore(self, header: dict[str, Any], blobs: dict[str, np.ndarray], mmap: bool) -> None:
        count = int(header["count"])
        if header["layout"] == "flat":
            keys = blobs["keys"].view(np.int64)
            inv_norms = blobs["inv_norms"].view(np.float32)
            rows = blobs["rows"].view(self._dtype)
            if not len(keys) == len(inv_norms) == count or len(rows) != count * self._width:
                raise ValueError("section sizes do not match the row count")
            self._flat = _Flat(rows.reshape(count, self._width), inv_norms, keys)
            return
        graph = self._new_hnsw()
        if mmap:
            graph.view(blobs["hnsw"])
            self._hnsw_mapped = blobs["hnsw"]
        else:
            graph.load(blobs["hnsw"])
        if len(graph) != count or graph.ndim != self._usearch_ndim:
            raise ValueError("graph does not match the header")
        self._flat, self._hnsw = None, graph
