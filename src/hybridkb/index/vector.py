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

One class holds both layouts and their persistence (over our usual size: the layouts
share every entry point); the compact rows and exact scans live in ``quantized.py``,
the graph in ``hnsw.py``, the recall self-check's measures in ``recall.py`` and the
file framing in ``fileheader.py``.
"""

from __future__ import annotations

import math
import struct
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np

from .fileheader import read_sections, write_sections
from .hnsw import Graph, MetricKind, ScalarKind
from .keyrows import KeyRows
from .quantized import (
    NUMPY_DTYPE,
    OVERSAMPLE,
    FlatRows,
    Hit,
    cosines,
    encode,
    graph_rows,
    graph_scale,
    inverse_norms,
    prefer_scan,
    ranked,
    scan,
)
from .recall import (
    AUDIT_QUERIES,
    AUDIT_REGROWTH,
    RECALL_K,
    RECALL_TARGET,
    QueryLog,
    QuerySet,
    build_environment,
    check,
    exact_neighbours,
    in_background,
    sample_queries,
    stop_if_exiting,
)
from .selection import top

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
SINGLE_THREAD_BUILD_ROWS = 50_000
HNSW_EXPANSION_ADD = 128
HNSW_EXPANSION_SEARCH = 256  # the floor, for graphs up to 50k rows


# The deferred graph's inserts (defer_graph): rows per hold of the lock, sized so that a
# batch takes about GRAPH_BATCH_SECONDS (searches wait at most that long meanwhile).
GRAPH_BATCH_MIN = 64
GRAPH_BATCH_MAX = 16_384
GRAPH_BATCH_SECONDS = 0.1


def expansion_search_for(rows: int) -> int:
    """HNSW search beam for a graph of ``rows`` vectors (wider as the graph grows)."""
    if rows <= 50_000:
        return HNSW_EXPANSION_SEARCH
    if rows <= 250_000:
        return 512
    return 1024


_QUANTIZATIONS = ("f32", "i8", "b1")
_USEARCH_DTYPE = {"f32": ScalarKind.F32, "i8": ScalarKind.I8, "b1": ScalarKind.B1}
_MAGIC = b"HKBVIDX\x01"
# 2: the graph holds copies scaled to one norm (inner product) beside the matrix of
# rows; a version 1 flat file reads as it is, a version 1 graph is rebuilt.
_FORMAT_VERSION = 2
# A graph search wider than this is slower than scanning the permitted rows.
_MAX_OVERSAMPLED = 20_000
# Rows per batch when the graph is built or checked, bounding temporary memory.
_SCAN_BATCH = 65_536
# Graph candidates re-scored with the matrix's rows: twice the count asked, at least
# 100 (the copies' coarser steps reorder close neighbours; 100 recovered recall@10 in
# full on the 100k bench set, see quantized.py).
RESCORE_FACTOR = 2
RESCORE_MIN = 100


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


class VectorIndex:
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

    def __init__(
        self,
        dim: int,
        *,
        quantization: str = "i8",
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
        defer_graph: bool = False,
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
        self._dtype = NUMPY_DTYPE[quantization]
        # The compact rows (both layouts) and, above the threshold, the graph over copies.
        self._rows = FlatRows(
            np.empty((0, self._width), self._dtype), np.empty(0, np.float32), np.empty(0, np.int64)
        )
        self._hnsw: Graph | None = None
        self._hnsw_mapped: np.ndarray | None = None  # the file bytes a viewed graph lives in
        self._graph_scale = 0.0  # the norm of the graph's int8 copies (graph_scale)
        self._lock = threading.RLock()
        # Set by the recall self-check (recall.py): the beam multiplier that reached the
        # target on this machine, the recall measured (on the last check, and on the
        # queries served), and whether to scan exactly instead.
        self.beam_factor = 1
        self.verified_recall: float | None = None
        self.served_recall: float | None = None
        self.exact_only = False
        self.built_on: dict[str, str] | None = None
        self._log = QueryLog(self._width, self._dtype)
        self._audited_rows = 0
        self._audit_thread: threading.Thread | None = None
        # Deferred graph (defer_graph): sorted keys of rows the graph does not hold yet,
        # the thread inserting them, and whether the graph is a first build (checked once
        # it holds every row, as _build_hnsw checks a graph built at once).
        self.defer_graph = defer_graph
        self._pending = np.empty(0, np.int64)
        self._builder: threading.Thread | None = None
        self._fresh_graph = False
        self._stopped = False

    # -- size and membership -------------------------------------------------------

    def __len__(self) -> int:
        return self._rows.n

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, (int, np.integer)) or key < 0:
            return False
        with self._lock:
            return bool(self._rows.lookup(np.array([key], np.int64))[0] >= 0)

    @property
    def layout(self) -> str:
        """``"flat"`` (exact scan) or ``"hnsw"`` (graph)."""
        return "flat" if self._hnsw is None else "hnsw"

    @property
    def nbytes(self) -> int:
        """Bytes held by the search representation (compact rows, norms, keys, graph; a
        graph served from its mapped file counts the file's bytes)."""
        f = self._rows
        own = sum(a.nbytes for a in (f.rows, f.inv_norms, f.keys, f.index.keys, f.index.rows))
        if self._hnsw_mapped is not None:
            return own + self._hnsw_mapped.nbytes
        return own + (self._hnsw.memory_usage if self._hnsw is not None else 0)

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
                    copies = graph_rows(enc, inv, self.quantization, self._graph_scale)
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

    def _build_hnsw(self) -> None:
        rows = self._rows
        n = rows.n
        self._graph_scale = graph_scale(rows.inv_norms[:n]) if self.quantization == "i8" else 1.0
        graph = self._new_hnsw()
        # Small graphs are built on one thread: as fast at this size, and the same graph
        # every time (a multi-threaded build depends on scheduling).
        threads = 1 if n <= SINGLE_THREAD_BUILD_ROWS else 0
        for start in range(0, n, _SCAN_BATCH):  # copies made a batch at a time
            part = slice(start, min(n, start + _SCAN_BATCH))
            copies = graph_rows(
                rows.rows[part], rows.inv_norms[part], self.quantization, self._graph_scale
            )
            graph.add(rows.keys[part], copies, threads=threads)
        self._hnsw = graph
        self.built_on = build_environment(graph.hardware_acceleration)
        self.verify_recall()

    # -- deferred graph (defer_graph) ---------------------------------------------------

    def _start_graph(self) -> None:
        """An empty graph with every row pending; the builder fills it (under the lock)."""
        rows = self._rows
        n = rows.n
        self._graph_scale = graph_scale(rows.inv_norms[:n]) if self.quantization == "i8" else 1.0
        self._hnsw = self._new_hnsw()
        self._fresh_graph = True
        self._pending = np.sort(rows.keys[:n])
        self._start_builder()

    def _start_builder(self) -> None:
        if self._stopped or (self._builder is not None and self._builder.is_alive()):
            return
        self._builder = in_background(self._catch_up, "hybridkb-vector-graph")

    def _catch_up(self) -> None:
        """Insert the pending rows into the graph, a batch per short hold of the lock (sized
        to ~0.1 s, so searches get through), then check a first build's recall."""
        batch = GRAPH_BATCH_MIN
        while True:
            stop_if_exiting()
            with self._lock:
                graph = self._hnsw
                if self._stopped or graph is None or not len(self._pending):
                    break
                keys = self._pending[:batch]
                at = self._rows.lookup(keys)
                copies = graph_rows(
                    self._rows.rows[at],
                    self._rows.inv_norms[at],
                    self.quantization,
                    self._graph_scale,
                )
                began = time.perf_counter()
                self._writable_hnsw().add(keys, copies, threads=0 if len(keys) > 256 else 1)
                self._pending = self._pending[len(keys) :]
                spent = time.perf_counter() - began
            if spent < GRAPH_BATCH_SECONDS / 2:
                batch = min(batch * 2, GRAPH_BATCH_MAX)
            elif spent > GRAPH_BATCH_SECONDS * 2:
                batch = max(batch // 2, GRAPH_BATCH_MIN)
        with self._lock:
            if (
                graph is None
                or graph is not self._hnsw
                or len(self._pending)
                or not self._fresh_graph
            ):
                return
            self._fresh_graph = False
            self.built_on = build_environment(graph.hardware_acceleration)
        self.verify_recall()

    @property
    def pending(self) -> int:
        """Rows the graph does not hold yet (searched exactly meanwhile)."""
        return len(self._pending)

    def wait_for_graph(self, timeout: float | None = None) -> None:
        """Wait until the graph holds every row (benchmarks and tests)."""
        thread = self._builder
        if thread is not None:
            thread.join(timeout)

    def stop(self) -> None:
        """Stop inserting pending rows (the index is being dropped); they stay pending."""
        with self._lock:
            self._stopped = True
        self.wait_for_graph()

    def _with_pending(
        self,
        q_enc: np.ndarray,
        pool: int,
        found: tuple[np.ndarray, np.ndarray],
        allowed: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The graph's hits and the exact scores of the (permitted) pending rows, best ``pool``."""
        keys = self._pending
        if allowed is not None:
            keys = keys[np.isin(keys, allowed, assume_unique=True)]
        if not len(keys):
            return found
        f = self._rows
        at = f.lookup(keys)
        rows, scores = scan(f.rows[at], f.inv_norms[at], q_enc, pool, self.quantization, self.dim)
        all_keys = np.concatenate([found[0], keys[rows]])
        all_scores = np.concatenate([found[1], scores])
        if len(all_keys) > pool:
            best = top(all_scores, pool)
            all_keys, all_scores = all_keys[best], all_scores[best]
        return all_keys, all_scores

    # -- recall self-check (recall.py) -------------------------------------------------

    def _row_batches(self, batch: int = _SCAN_BATCH) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(keys, compact rows) of every stored row, in batches copied under the lock,
        which is held per batch, so a background check lets searches through in between."""
        start = 0
        while True:
            with self._lock:
                rows = self._rows
                if start >= rows.n:
                    return
                part = slice(start, min(rows.n, start + batch))
                found = rows.keys[part].copy(), rows.rows[part].copy()
            yield found
            start += batch

    def _checkable(self) -> Graph | None:
        if len(self._pending):
            return None  # not every row is in the graph yet: checked once it is
        if self._hnsw is None or len(self._hnsw) < 4 * RECALL_K or self.quantization == "b1":
            return None  # flat (exact), too small to measure, or re-ranked sign bits
        return self._hnsw

    def verify_recall(self, *, seed: int = 0) -> float | None:
        """Measure the graph's recall@10 on a seeded sample (and on the queries served so
        far, once :data:`~hybridkb.index.recall.AUDIT_QUERIES` have been) against an
        exact scan, widen the beam until it reaches RECALL_TARGET, else search exactly
        (with a warning).

        Returns the recall reached (None for the flat layout, which is exact)."""
        with self._lock:
            graph = self._checkable()
            if graph is None:
                return None
            rows = next(self._row_batches())[1]
            sets = {
                "sample": encode(sample_queries(rows.astype(np.float32), seed), self.quantization)
            }
            if self._log.seen >= AUDIT_QUERIES:
                sets["served"] = self._log.queries()
            return self._check(graph, sets, start=1)

    def audit(self) -> float | None:
        """Check recall@10 on the queries this index has served (the last
        :data:`~hybridkb.index.recall.AUDIT_QUERIES`), widening the beam from where it is
        or falling back to the exact scan; run in a background thread once that many
        queries have been served, and again when the graph has doubled since.

        Returns the recall reached, or None when there is nothing to check."""
        with self._lock:
            graph = self._checkable()
            if graph is None or self._log.seen < AUDIT_QUERIES:
                return None
            served, start = self._log.queries(), self.beam_factor
        return self._check(graph, {"served": served}, start=start)

    def wait_for_audit(self, timeout: float | None = None) -> None:
        """Wait for a running background audit (benchmarks and tests)."""
        thread = self._audit_thread
        if thread is not None:
            thread.join(timeout)

    def recall_report(self) -> dict[str, Any]:
        """What the self-check decided here: beam, recall measured, exact fallback."""
        with self._lock:
            graph = self._hnsw
            return {
                "layout": self.layout,
                "rows": len(self),
                "exact_only": self.exact_only,
                "beam_factor": self.beam_factor,
                "expansion_search": None
                if graph is None
                else expansion_search_for(len(graph)) * self.beam_factor,
                "verified_recall": self.verified_recall,
                "served_recall": self.served_recall,
                "queries_seen": self._log.seen,
                "kernel": None if graph is None else graph.hardware_acceleration,
                "built_on": self.built_on,
            }

    def _audit_due(self) -> bool:
        graph = self._checkable()
        if graph is None or self._log.seen < AUDIT_QUERIES:
            return False
        if self._audit_thread is not None and self._audit_thread.is_alive():
            return False
        return self.served_recall is None or len(graph) >= AUDIT_REGROWTH * self._audited_rows

    def _start_audit(self) -> None:
        self._audit_thread = in_background(self.audit, "hybridkb-vector-recall-audit")

    def _check(self, graph: Graph, sets: dict[str, np.ndarray], *, start: int) -> float:
        """Run :func:`~hybridkb.index.recall.check` on ``graph`` with beam factors from
        ``start``, then apply the outcome unless the graph was replaced meanwhile."""
        n = len(graph)
        # One pass over the stored rows for every set, in short lock holds so that a
        # background check lets searches through.
        every = np.concatenate(list(sets.values()))
        truth = exact_neighbours(
            self._row_batches(_SCAN_BATCH // 8), every, self.quantization, self.dim
        )
        ends = np.cumsum([len(queries) for queries in sets.values()])
        exact = dict(zip(sets, np.split(np.array(truth, dtype=object), ends[:-1]), strict=True))

        def search(q: np.ndarray, factor: int) -> list[int]:
            # As a search is served: the graph's candidates re-scored with the rows.
            with self._lock:
                graph.expansion_search = expansion_search_for(n) * factor
                keys, _ = graph.search(q, _rescored_count(RECALL_K))
                found, _ = self._rescore(q, keys, RECALL_K)
            return [int(k) for k in found]

        outcome = check(
            search,
            [QuerySet(name, queries, list(exact[name])) for name, queries in sets.items()],
            start=start,
        )
        with self._lock:
            if self._hnsw is not graph:
                return outcome.recall  # replaced (rebuilt, copied for a write): checked anew
            self.verified_recall = round(outcome.recall, 4)
            if "served" in outcome.by_set:
                self.served_recall = outcome.by_set["served"]
                self._audited_rows = n
            if outcome.ok:
                self.beam_factor = outcome.beam_factor
                return outcome.recall
            # Fall back before warning: a warning turned into an error must not keep the graph.
            self._to_exact_scan()
            measured = ", ".join(f"{v:.3f} on the {k} queries" for k, v in outcome.by_set.items())
            warnings.warn(
                f"vector index: HNSW recall@10 {measured} is below {RECALL_TARGET} at "
                f"{n:,} rows on this machine ({graph.hardware_acceleration}) even with a "
                f"{outcome.beam_factor}x beam; searching exactly instead (right, but slower)",
                RuntimeWarning,
                stacklevel=2,
            )
            return outcome.recall

    def _to_exact_scan(self) -> None:
        """Drop the graph for the flat layout (exact scan) and keep it so."""
        self._hnsw, self._hnsw_mapped = None, None
        self._pending = np.empty(0, np.int64)
        self.exact_only = True

    def _new_hnsw(self) -> Graph:
        return Graph(
            ndim=self._usearch_ndim,
            metric=MetricKind.Hamming if self.quantization == "b1" else MetricKind.IP,
            dtype=_USEARCH_DTYPE[self.quantization],
            connectivity=HNSW_CONNECTIVITY,
            expansion_add=HNSW_EXPANSION_ADD,
            expansion_search=HNSW_EXPANSION_SEARCH,
        )

    def _writable_hnsw(self) -> Graph:
        """The graph, copied out of its memory-mapped file on the first write."""
        if self._hnsw_mapped is not None:
            owned = self._new_hnsw()
            owned.load(self._hnsw_mapped.data)
            self._hnsw, self._hnsw_mapped = owned, None
        return cast(Graph, self._hnsw)

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
                if self._hnsw is None:
                    keys, scores = self._scan_all(q_enc, pool)
                else:
                    keys, scores = self._search_graph(q_enc, pool, None)
                    if self._audit_due():
                        self._start_audit()
        if rerank is not None and len(keys):
            scores = self._exact_scores(q, keys, rerank)
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

    def _scan_all(self, q_enc: np.ndarray, pool: int) -> tuple[np.ndarray, np.ndarray]:
        f = self._rows
        rows, scores = scan(
            f.rows[: f.n], f.inv_norms[: f.n], q_enc, pool, self.quantization, self.dim
        )
        return f.keys[rows], scores

    def _rescore(
        self, q_enc: np.ndarray, keys: np.ndarray, count: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The best ``count`` of ``keys`` (found by the graph) by cosine with their rows."""
        f = self._rows
        at = f.lookup(keys)
        live = at >= 0  # the graph and the rows hold the same keys; guard anyway
        keys, at = keys[live], at[live]
        found, scores = scan(f.rows[at], f.inv_norms[at], q_enc, count, self.quantization, self.dim)
        return keys[found], scores

    def _search_allowed(
        self, q_enc: np.ndarray, pool: int, allowed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        allowed = np.asarray(allowed, dtype=np.int64).reshape(-1)
        # Callers usually pass sorted ids (from SQL); sorting again costs ms at 1M.
        if len(allowed) > 1 and not bool(np.all(allowed[1:] > allowed[:-1])):
            allowed = np.unique(allowed)
        if len(allowed) and allowed[0] < 0:
            allowed = allowed[allowed >= 0]
        if self._hnsw is None or prefer_scan(
            len(allowed), min(pool, len(allowed)), len(self._hnsw)
        ):
            return self._scan_allowed(q_enc, pool, allowed)
        return self._search_graph(q_enc, pool, allowed)

    def _scan_allowed(
        self, q_enc: np.ndarray, pool: int, allowed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact scan of the permitted rows (keys absent from the index are skipped)."""
        f = self._rows
        rows = f.lookup(allowed)
        rows = rows[rows >= 0]
        if len(rows) * 4 <= f.n:
            found, scores = scan(
                f.rows[rows], f.inv_norms[rows], q_enc, pool, self.quantization, self.dim
            )
            return f.keys[rows[found]], scores
        # A wide filter: scoring every row and masking beats copying most of the matrix.
        scores = cosines(f.rows[: f.n], f.inv_norms[: f.n], q_enc, self.quantization, self.dim)
        barred = np.ones(f.n, dtype=bool)
        barred[rows] = False
        scores[barred] = -np.inf
        count = min(pool, len(rows))
        best = top(scores, count)
        best = best[np.isfinite(scores[best])]
        return f.keys[best], scores[best]

    def _search_graph(
        self, q_enc: np.ndarray, pool: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Graph search, oversampled for a filter, its candidates re-scored with the rows;
        falling back to an exact scan.

        ``allowed`` is a sorted array of permitted keys (some may be absent), or None.
        """
        graph = cast(Graph, self._hnsw)
        if len(self._pending) * 2 >= self._rows.n:
            # The graph holds few of the rows yet (a bulk load it is catching up with).
            if allowed is None:
                return self._scan_all(q_enc, pool)
            return self._scan_allowed(q_enc, pool, allowed)
        n = len(graph)
        want = min(pool, n)
        if want == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        beam = expansion_search_for(n) * self.beam_factor
        if graph.expansion_search != beam:
            graph.expansion_search = beam
        wide = _rescored_count(want)
        # Expect |allowed| / n of the graph's hits to pass the filter; ask for more.
        count = wide if allowed is None else math.ceil(OVERSAMPLE * want * n / max(len(allowed), 1))
        while count <= max(_MAX_OVERSAMPLED, wide):
            keys, _ = graph.search(q_enc, min(count, n))
            if allowed is not None:
                at = np.minimum(np.searchsorted(allowed, keys), len(allowed) - 1)
                keys = keys[allowed[at] == keys]
            if len(keys) >= want:
                return self._with_pending(q_enc, pool, self._rescore(q_enc, keys, want), allowed)
            if count >= n:
                break
            count *= 4
        # Removals can leave nodes unreachable, a filter may hold absent keys, and a
        # very selective one needs a huge beam: the exact scan is right in all cases.
        if allowed is None:
            return self._scan_all(q_enc, pool)
        return self._scan_allowed(q_enc, pool, allowed)

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
            header: dict[str, Any] = {
                "version": _FORMAT_VERSION,
                "dim": self.dim,
                "quantization": self.quantization,
                "hnsw_threshold": self.hnsw_threshold,
                "exact_only": self.exact_only,
                "beam_factor": self.beam_factor,
                "verified_recall": self.verified_recall,
                "served_recall": self.served_recall,
                "audited_rows": self._audited_rows,
                "built_on": self.built_on,
                "layout": self.layout,
                "graph_scale": self._graph_scale,
                "fresh_graph": self._fresh_graph,
                "count": len(self),
            }
        write_sections(path, _MAGIC, header, sections)

    @classmethod
    def load(cls, path: str | Path, *, mmap: bool = True, defer_graph: bool = False) -> VectorIndex:
        """Read an index written by :meth:`save`.

        Args:
            path: File to read.
            mmap: Map the stored arrays (copy-on-write) instead of copying them; a
                graph is copied into private memory on its first write.
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
        graph = self._new_hnsw()
        if mmap:
            graph.view(blobs["hnsw"].data)
            self._hnsw_mapped = blobs["hnsw"]
        else:
            graph.load(blobs["hnsw"].data)
        pending = blobs["pending"].view(np.int64) if "pending" in blobs else np.empty(0, np.int64)
        if len(graph) + len(pending) != count or graph.ndim != self._usearch_ndim:
            raise ValueError("graph does not match the header")
        self._hnsw = graph
        self._pending = np.array(pending)  # owned: it shrinks as the graph catches up
        self._fresh_graph = bool(header.get("fresh_graph", False))
        self._graph_scale = float(header["graph_scale"])
        self.beam_factor = int(header.get("beam_factor") or 1)
        here = build_environment(graph.hardware_acceleration)
        if self.built_on != here:
            # Built on another CPU or usearch: its recall here is unknown until measured
            # (on the sample now, on the queries served once there are enough of them).
            self.built_on = here
            self.beam_factor = 1
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


def _rescored_count(want: int) -> int:
    """Graph candidates to re-score for the best ``want``."""
    return max(RESCORE_FACTOR * want, RESCORE_MIN)
