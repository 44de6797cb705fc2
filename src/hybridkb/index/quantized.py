"""Quantized vectors and exact scans over them: what both layouts of the vector index share.

Vectors are stored compactly: ``"i8"`` (per-row scaled int8), ``"b1"`` (sign bits) or
``"f32"``; scores are cosines between compact vectors, computed with numkong's SIMD
kernels where available (numpy otherwise).
"""

from __future__ import annotations

import importlib
from typing import Any, cast

import numpy as np

from ..results import RankedHits
from .fileheader import SearchPages
from .keyrows import KeyRows
from .selection import top

Hit = tuple[int, float]

NUMPY_DTYPE: dict[str, type[np.generic]] = {"f32": np.float32, "i8": np.int8, "b1": np.uint8}
_ENCODE_BATCH = 65_536  # rows quantised per slice
# Filtered graph search: fetching and scoring a stored vector costs ~0.5 us, a
# graph beam several us per unit of width (rough figures from this machine); so
# scan the permitted rows when they are fewer than ~4x the oversampled beam, and
# always when there are only a few.
_GRAPH_COST_PER_RESULT = 4
_ALWAYS_SCAN_ROWS = 1_000
# Graph hits requested per wanted filtered hit, times n / |allowed|. At 2, a 10 %
# filter on the synthetic 100k set recalls 0.94 of the exact filtered top 10.
OVERSAMPLE = 2


def optional_module(name: str) -> Any:
    """The module ``name`` if it can be imported, else None (a faster kernel when present)."""
    try:
        return importlib.import_module(name)
    except ImportError:  # pragma: no cover - depends on the installed usearch
        return None


# SIMD int8 kernels: a dependency of usearch >= 2.26, absent before (numpy fallback).
NUMKONG = optional_module("numkong")


def encode(vectors: np.ndarray, quantization: str) -> np.ndarray:
    """Turn float32 rows into the compact representation."""
    if len(vectors) > _ENCODE_BATCH:
        # In slices: the float temporaries of one call are ~3x the input.
        out = np.empty(
            (len(vectors), encode(vectors[:1], quantization).shape[1]), NUMPY_DTYPE[quantization]
        )
        for start in range(0, len(vectors), _ENCODE_BATCH):
            out[start : start + _ENCODE_BATCH] = encode(
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
        return np.asarray(np.clip(np.rint(vectors * scale), -127, 127), dtype=np.int8)
    return np.asarray(np.packbits(vectors > 0, axis=1))


def inverse_norms(enc: np.ndarray) -> np.ndarray:
    """1 / L2 norm of each compact row (0 for a zero row), so dot products become cosines."""
    norms = np.linalg.norm(enc.astype(np.float32), axis=1)
    return np.asarray(np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0), np.float32)


def cosines(
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
    if quantization == "i8" and NUMKONG is not None:
        # numpy has no SIMD int8 GEMV; numkong's is ~10x faster than converting to float.
        if inv_norms is None:  # rows fetched from the graph: let the kernel take norms
            angular = NUMKONG.cdist(rows, query[None, :], metric="angular", out_dtype="float32")
            return cast(np.ndarray, 1.0 - np.asarray(angular).reshape(-1))
        dots = np.asarray(
            NUMKONG.cdist(rows, query[None, :], metric="dot", out_dtype="float32")
        ).reshape(-1)
    else:
        dots = rows.astype(np.float32, copy=False) @ query.astype(np.float32)
    if inv_norms is None:
        inv_norms = inverse_norms(rows)
    return cast(np.ndarray, dots * inv_norms * inverse_norms(query[None, :])[0])


def scan(
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
    scores = cosines(rows, inv_norms, query, quantization, dim)
    if count == len(rows):
        return np.arange(len(rows), dtype=np.int64), scores
    best = top(scores, count)
    return best, scores[best]


def prefer_scan(permitted: int, want: int, n: int) -> bool:
    """Whether scanning ``permitted`` rows beats a graph search oversampled by n / permitted."""
    oversampled = OVERSAMPLE * want * n / max(permitted, 1)
    return permitted <= _ALWAYS_SCAN_ROWS or permitted <= _GRAPH_COST_PER_RESULT * oversampled


def ranked(keys: np.ndarray, scores: np.ndarray, k: int) -> list[Hit]:
    """Sort by score descending, key ascending, and keep ``k``."""
    order = np.lexsort((keys, -scores))[:k]
    best_keys = np.asarray(keys[order], dtype=np.int64)
    best_scores = np.asarray(scores[order], dtype=np.float64)
    # tolist() gives the Python ints and floats int() and float() of each element would,
    # in one call (the per-element conversions were ~15 us of a 100-deep leg).
    out = RankedHits(zip(best_keys.tolist(), best_scores.tolist(), strict=True))
    out.key_array, out.score_array = best_keys, best_scores
    return out


class FlatRows:
    """Compact rows in insertion order plus a sorted key index for lookups
    (:class:`~.keyrows.KeyRows`: a Python dict would cost ~100 bytes per key, a quarter of
    an int8 row). Its inserts are O(n) (16 bytes a row moved: ~1 ms at 100k rows, ~15 ms
    at 1M on a 2-core EPYC), small beside embedding what is added; the first write after
    a snapshot load also copies the mapped rows (they are read-only).
    """

    def __init__(
        self,
        rows: np.ndarray,
        inv_norms: np.ndarray,
        keys: np.ndarray,
        lookup: KeyRows | None = None,
    ) -> None:
        self.rows, self.inv_norms, self.keys = rows, inv_norms, keys
        self.n = len(keys)
        # As saved (no sort at load), else sorted now.
        self.index = lookup if lookup is not None else KeyRows.of(keys)
        # Rows mapped from a big snapshot give back what a search mapped (until a write
        # copies them).
        self.pages = SearchPages([rows, inv_norms])

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Row of each key, or -1 when absent."""
        return self.index.lookup(keys)

    def put(self, keys: np.ndarray, enc: np.ndarray, inv_norms: np.ndarray) -> None:
        """Insert or overwrite rows; ``keys`` are unique."""
        rows = self.lookup(keys)
        old = rows >= 0
        new = ~old
        m = int(new.sum())
        if self.n + m > len(self.rows):
            self._grow(max(self.n + m, int(len(self.rows) * 1.25)))  # copies mapped rows too
        else:
            self._own()
        self.rows[rows[old]] = enc[old]
        self.inv_norms[rows[old]] = inv_norms[old]
        if not m:
            return
        start = self.n
        self.rows[start : start + m] = enc[new]
        self.inv_norms[start : start + m] = inv_norms[new]
        self.keys[start : start + m] = keys[new]
        self.n += m
        self.index.insert(keys[new], np.arange(start, start + m))

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` rows (never shrinks)."""
        if capacity > len(self.rows):
            self._grow(capacity)

    def _own(self) -> None:
        """Copy rows mapped read-only from a snapshot before writing over them."""
        if not self.rows.flags.writeable:
            self._grow(len(self.rows))

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
        self.pages = SearchPages([])

    def delete(self, keys: np.ndarray) -> None:
        """Remove rows; ``keys`` are unique, unknown ones ignored."""
        dead = np.sort(self.index.pop(keys))
        if not len(dead):
            return
        new_n = self.n - len(dead)
        self._own()
        # Fill holes below the new end with live rows from the tail, so the matrix
        # stays dense and a scan never meets a tombstone.
        holes = dead[dead < new_n]
        if len(holes):
            tail = np.arange(new_n, self.n)
            movers = tail[~np.isin(tail, dead, assume_unique=True)]
            self.rows[holes] = self.rows[movers]
            self.inv_norms[holes] = self.inv_norms[movers]
            self.keys[holes] = self.keys[movers]
            self.index.move(self.keys[holes], holes)
        self.n = new_n


def top_per_query(
    rows: np.ndarray, queries: np.ndarray, k: int, quantization: str, dim: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top ``k`` rows for each compact query at once: (row positions, scores), each
    of shape (queries, k) (fewer columns when there are fewer rows)."""
    if quantization == "i8" and NUMKONG is not None:
        sims = 1.0 - np.asarray(NUMKONG.cdist(rows, queries, metric="angular", out_dtype="float32"))
    else:
        r = rows.astype(np.float32)
        q = queries.astype(np.float32)
        sims = (r @ q.T) * inverse_norms(rows)[:, None] * inverse_norms(queries)[None, :]
    k = min(k, len(rows))
    best = np.argpartition(-sims, k - 1, axis=0)[:k].T
    return best.astype(np.int64), np.take_along_axis(sims.T, best, axis=1).astype(np.float32)


# -- the graph's copies -----------------------------------------------------------------
# The HNSW graph keeps its own copy of every row. Cosine over int8 costs usearch's
# kernels ~4x an int8 dot product on AVX2, so the graph searches by inner product over
# copies scaled to one norm (whose order is the cosine's up to rounding), and the
# candidates it finds are re-scored with the rows above (scaled per row to their peak:
# finer steps than one norm for all rows allows). On 100k SciFact-like rows, beam 512,
# AVX2: search CPU -30 %, recall@10 against exact float32 0.9853 for the cosine graph
# and for this one (0.9797 without the re-scoring).


def graph_scale(inv_norms: np.ndarray) -> float:
    """The norm of the graph's int8 copies: the smallest row norm, so that no copy of a
    row present now clips (a later row with a sharper peak clips a little: its copy only
    guides the search, its score comes from its own row)."""
    norms = 1.0 / inv_norms[inv_norms > 0]
    return float(norms.min()) if len(norms) else 127.0


def graph_rows(
    enc: np.ndarray, inv_norms: np.ndarray, quantization: str, scale: float
) -> np.ndarray:
    """The graph's copies of compact rows: int8 scaled to norm ``scale``, float32 unit
    rows (inner product = cosine), sign bits as they are."""
    if quantization == "b1":
        return enc
    if quantization == "f32":
        return np.asarray(enc * inv_norms[:, None], dtype=np.float32)
    out = np.empty(enc.shape, np.int8)
    for start in range(0, len(enc), _ENCODE_BATCH):
        part = slice(start, start + _ENCODE_BATCH)
        factor = (np.float32(scale) * inv_norms[part])[:, None]
        out[part] = np.clip(np.rint(enc[part] * factor), -127, 127)
    return out
