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
* **hnsw** (above the threshold): the same matrix plus a usearch HNSW graph over
  copies of its rows scaled to one norm and searched by inner product (cheaper
  than cosine, same order up to rounding; ``quantized.graph_rows``), updated
  incrementally. The graph's candidates are re-scored with the matrix's rows, so
  scores are the same cosines as the flat layout's. Filters scan the permitted rows
  exactly when they are few, and otherwise search the graph with growing
  oversampling, falling back to the exact scan, so a filter never starves the
  result. Matrix and graph are ~60 % of float32 at 384-d (the graph alone ~35 %).

Vectors are stored compactly (``quantization``): ``"i8"`` (per-row scaled int8,
27 % of float32 with keys and norms, the default: on SciFact its nDCG@10 is
within 0.001 of float32 with no re-rank at all), ``"b1"`` (sign bits, 5 %, needs
the ``rerank`` callback and 200 candidates to get there, and fails on noisier
data) or ``"f32"``. Scores are cosines between the compact vectors; pass
``rerank`` to get exact cosines from the full vectors for the top candidates.

The graph checks its own recall@10 where it runs (``recall.py``): after a build and
after loading a snapshot built on another CPU or usearch version, on a seeded sample,
and once it has served 64 unfiltered queries, on those, in a background thread. It
widens its beam until both reach 0.98 against its own exact scan, or else searches
exactly from then on, with a warning.

A lock serialises every call, so one index can serve several threads (the background
check takes it in short holds).

One class, :class:`VectorIndex`, is the index; it is built in layers, each in its own
module and each adding to the one below: ``vector_layouts.py`` (the rows, the graph and
the searches over them), ``vector_selfcheck.py`` (the recall self-check),
``vector_build.py`` (building the graph, at once or in the background) and this module
(the writes, the public search and the file). The compact rows and exact scans live in
``quantized.py``, the graph in ``hnsw.py``, the recall self-check's measures in
``recall.py`` and the file framing in ``fileheader.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import numpy as np

from .fileheader import read_sections, write_sections
from .first_stage import restored_stage
from .keyrows import KeyRows
from .quantized import FlatRows, Hit, encode, inverse_norms, ranked
from .recall import build_environment
from .vector_build import GraphBuilding

_MAGIC = b"HKBVIDX\x01"
# 2: the graph holds copies scaled to one norm (inner product) beside the matrix of
# rows; a version 1 flat file reads as it is, a version 1 graph is rebuilt.
_FORMAT_VERSION = 2


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


class VectorIndex(GraphBuilding):
    """Nearest-neighbour index over L2-normalised float32 rows keyed by int64.

    Args:
        dim: Vector dimension.
        quantization: Compact representation: ``"i8"`` (default), ``"b1"`` or ``"f32"``.
        hnsw_threshold: Above this many rows the exact scan is replaced by HNSW.
        defer_graph: Insert rows into the graph in a background thread (the storage's
            indexes: a bulk write costs the rows only, and searches scan the rows the
            graph does not hold yet exactly, so results never wait for the graph).

    Raises:
        ValueError: On a non-positive dimension, unknown quantization or negative threshold.
    """

    # Rows the loaded file's graph did not hold (0 for an index built here): what was
    # inserted since is progress a save keeps (derived.CollectionIndexes.saved_generation).
    pending_in_file = 0

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
        enc = encode(vectors[len(vectors) - 1 - first_from_end], self.quantization)
        inv = inverse_norms(enc)
        with self._lock:
            if self._hnsw is not None:
                graph = self._writable_hnsw()
                present = graph.contains(keys)
                if present.any():
                    graph.remove(keys[present])
                if self.defer_graph:
                    self._pending = merged_keys(self._pending, keys)
                    self._start_builder()
                else:
                    copies = self._graph_copies(enc, inv)
                    # Thread start-up costs more than a small batch takes to insert.
                    graph.add(keys, copies, threads=0 if len(keys) > 256 else 1)
            self._rows.put(keys, enc, inv)
            if self._hnsw is None and self._rows.n > self.hnsw_threshold and not self.exact_only:
                if self.defer_graph:
                    self._start_graph()
                else:
                    self._build_hnsw()

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows at once (a bulk build), instead of growing by copies."""
        with self._lock:
            self._rows.reserve(rows)

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
            self._rows.delete(arr)
            if len(self._pending):
                self._pending = self._pending[~np.isin(self._pending, arr)]
            if self._hnsw is not None:
                graph = self._writable_hnsw()
                present = graph.contains(arr)
                if present.any():
                    # usearch marks the node deleted and reuses its slot on a later add.
                    graph.remove(arr[present])

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
        q_enc = encode(q[None, :], self.quantization)[0]
        with self._lock:
            if allowed is not None:
                keys, scores = self._search_allowed(q_enc, pool, allowed)
            else:
                self._log.record(q_enc)  # the self-check's sample of real queries
                if self._hnsw is None or self.held_back:
                    keys, scores = self._scan_all(q_enc, pool)
                else:
                    keys, scores = self._search_graph(q_enc, pool, None)
                if self._audit_due():  # a held-back graph waits for this audit
                    self._start_audit()
        if rerank is not None and len(keys):
            scores = self._exact_scores(q, keys, rerank)
        self._rows.pages.release()
        return ranked(keys, scores, k)

    def directions(self, keys: np.ndarray) -> np.ndarray | None:
        """Float32 rows pointing where the stored vectors of ``keys`` point (f32 exactly,
        i8 up to rounding), or None when the index cannot say (b1, a missing key)."""
        if self.quantization == "b1":
            return None
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        with self._lock:
            at = self._rows.lookup(keys)
            if (at < 0).any():
                return None
            found = self._rows.rows.take(at, axis=0)
        self._rows.pages.release()  # the copy is this caller's
        # Converted outside the lock, from the gathered copy (not a view of the rows).
        return found.astype(np.float32, copy=False)

    def _exact_scores(
        self, q: np.ndarray, keys: np.ndarray, rerank: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray:
        full = np.asarray(rerank(np.array(keys, dtype=np.int64)), dtype=np.float32)
        if full.shape != (len(keys), self.dim):
            raise ValueError(
                f"vector index: rerank returned shape {full.shape}, "
                f"expected ({len(keys)}, {self.dim})"
            )
        return cast(np.ndarray, (full @ q) * inverse_norms(full) * inverse_norms(q[None])[0])

    # -- persistence -------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the index atomically (temporary file, fsync, rename).

        Args:
            path: Destination file; replaced only once the new file is complete.
        """
        path = Path(path)
        with self._lock:
            f = self._rows
            sections = {
                "keys": f.keys[: f.n].tobytes(),
                "rows": f.rows[: f.n].tobytes(),
                "inv_norms": f.inv_norms[: f.n].tobytes(),
                "sorted_keys": f.index.keys.tobytes(),
                "sorted_rows": f.index.rows.tobytes(),
            }
            if self._hnsw is not None:
                sections["hnsw"] = self._hnsw.save()
                sections["pending"] = self._pending.tobytes()
                if self._stage is not None:
                    sections.update(self._stage.sections())
            header: dict[str, Any] = {
                "version": _FORMAT_VERSION,
                "dim": self.dim,
                "quantization": self.quantization,
                "hnsw_threshold": self.hnsw_threshold,
                "exact_only": self.exact_only,
                "held_back": self.held_back,
                "beam_factor": self.beam_factor,
                "verified_recall": self.verified_recall,
                "served_recall": self.served_recall,
                "audited_rows": self._audited_rows,
                "built_on": self.built_on,
                "layout": self.layout,
                "graph_scale": self._graph_scale,
                "graph_ndim": self._graph_ndim if self._hnsw is not None else None,
                "fresh_graph": self._fresh_graph,
                "count": len(self),
            }
        write_sections(path, _MAGIC, header, sections)

    @classmethod
    def load(cls, path: str | Path, *, mmap: bool = True, defer_graph: bool = False) -> VectorIndex:
        """Read an index written by :meth:`save`.

        Args:
            path: File to read.
            mmap: Map the stored arrays (read-only) instead of copying them; rows and
                graph are copied into private memory on their first write.
            defer_graph: As the constructor's; rows saved before the graph held them
                are inserted in the background from now on (else at once).

        Returns:
            The index.

        Raises:
            ValueError: If the file is truncated, corrupt or of an unknown format; the
                caller should rebuild the index from the tables.
            FileNotFoundError: If the file does not exist.
        """
        path = Path(path)
        try:
            header, blobs = read_sections(path, _MAGIC, "vector index", mmap=mmap)
            version = header["version"]
            if version not in (1, _FORMAT_VERSION) or (version == 1 and header["layout"] != "flat"):
                raise ValueError(f"unsupported format version {version!r} ({header['layout']})")
            index = cls(
                int(header["dim"]),
                quantization=header["quantization"],
                hnsw_threshold=int(header["hnsw_threshold"]),
                defer_graph=defer_graph,
            )
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
        # Plain ndarray views of the maps: indexing a np.memmap runs Python on every call.
        blobs = {name: np.asarray(blob) for name, blob in blobs.items()}
        keys = blobs["keys"].view(np.int64)
        inv_norms = blobs["inv_norms"].view(np.float32)
        rows = blobs["rows"].view(self._dtype)
        if not len(keys) == len(inv_norms) == count or len(rows) != count * self._width:
            raise ValueError("section sizes do not match the row count")
        lookup = None
        if "sorted_keys" in blobs:
            lookup = KeyRows(
                blobs["sorted_keys"].view(np.int64), blobs["sorted_rows"].view(np.int64)
            )
            lookup.check(keys)  # a damaged lookup would serve wrong rows; fail here instead
        self._rows = FlatRows(rows.reshape(count, self._width), inv_norms, keys, lookup)
        self.exact_only = bool(header.get("exact_only", False))
        self.verified_recall = header.get("verified_recall")
        self.built_on = header.get("built_on")
        if header["layout"] == "flat":
            self.served_recall = header.get("served_recall")
            return
        self._stage = restored_stage(header.get("graph_ndim"), blobs, self.dim, self._usearch_ndim)
        graph = self._new_hnsw()
        if mmap:
            graph.view(blobs["hnsw"].data)
            self._hnsw_mapped = blobs["hnsw"]
        else:
            graph.load(blobs["hnsw"].data)
        pending = blobs["pending"].view(np.int64) if "pending" in blobs else np.empty(0, np.int64)
        if len(graph) + len(pending) != count or graph.ndim != self._graph_ndim:
            raise ValueError("graph does not match the header")
        self._hnsw = graph
        self._pending = np.array(pending)  # owned: it shrinks as the graph catches up
        self.pending_in_file = len(pending)
        self._fresh_graph = bool(header.get("fresh_graph", False))
        self._graph_scale = float(header["graph_scale"])
        self.beam_factor = int(header.get("beam_factor") or 1)
        self.held_back = bool(header.get("held_back", False))
        here = build_environment(graph.hardware_acceleration)
        if self.built_on != here:
            # Built on another CPU or usearch: its recall here is unknown until measured
            # (on the sample now, on the queries served once there are enough of them).
            self.built_on = here
            self.beam_factor = 1
            self.held_back = False
            self.verified_recall = None
            self.verify_recall()
        else:
            self.served_recall = header.get("served_recall")
            self._audited_rows = int(header.get("audited_rows") or 0)
        if len(self._pending):
            if self.defer_graph:
                self._start_builder()
            else:
                self._catch_up()


def merged_keys(sorted_keys: np.ndarray, more: np.ndarray) -> np.ndarray:
    """The sorted distinct union of sorted distinct ``sorted_keys`` and ``more``."""
    if not len(sorted_keys):
        return np.unique(more)
    both = np.sort(np.concatenate([sorted_keys, more]), kind="stable")  # two sorted runs
    return both[np.concatenate(([True], both[1:] != both[:-1]))]
