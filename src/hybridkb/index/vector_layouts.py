"""The vector index's two layouts and how a query is answered over each.

:class:`VectorLayouts` holds the compact rows (``quantized.FlatRows``) and, above the
threshold, the HNSW graph over their copies, with the lock that guards both, and answers
a query over them: the exact scan, the graph search with its re-scoring and filter
oversampling, and the exact scan of rows the graph does not hold yet. The HNSW
parameters and the beam live here too, beside the only code that builds a graph and
searches it.

Its own module because it is the base the index's other parts build on: the recall
self-check (``vector_selfcheck.py``) measures these searches, the graph building
(``vector_build.py``) fills this graph, and :class:`~hybridkb.index.vector.VectorIndex`
(``vector.py``) adds the writes, the public search and the file on top.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np

from .first_stage import FIT_ROWS, FirstStage, first_stage_width
from .hnsw import Graph, MetricKind, ScalarKind
from .quantized import (
    NUMPY_DTYPE,
    OVERSAMPLE,
    FlatRows,
    cosines,
    encode,
    graph_rows,
    graph_scale,
    inverse_norms,
    prefer_scan,
    scan,
)
from .selection import top
from .turns import CourteousLock

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


def expansion_search_for(rows: int) -> int:
    """HNSW search beam for a graph of ``rows`` vectors (wider as the graph grows)."""
    if rows <= 50_000:
        return HNSW_EXPANSION_SEARCH
    if rows <= 250_000:
        return 512
    return 1024


_QUANTIZATIONS = ("f32", "i8", "b1")
_USEARCH_DTYPE = {"f32": ScalarKind.F32, "i8": ScalarKind.I8, "b1": ScalarKind.B1}
# A graph search wider than this is slower than scanning the permitted rows.
_MAX_OVERSAMPLED = 20_000
# Rows per batch when the graph is built or checked, bounding temporary memory.
SCAN_BATCH = 65_536
# Graph candidates re-scored with the matrix's rows: twice the count asked, and at least
# 100 per 250k rows the graph holds, up to 400 (the copies' coarser steps, and the first
# stage's half width, reorder close neighbours, and the more rows, the more of them
# crowd in between). 100 recovered recall@10 in full on the 100k bench set (see
# quantized.py); on the 1M set (192-axis first stage, beam 1024, the SciFact test
# queries against the index's own exact scan) 100 candidates gave 0.979, 200 0.987 and
# 400 0.9915 for a re-score of ~0.1 ms more (bench/first_stage.py --rescore).
RESCORE_FACTOR = 2
RESCORE_MIN = 100
RESCORE_MIN_ROWS = 250_000
RESCORE_MIN_MAX = 400


class VectorLayouts:
    """The compact rows and the graph of a vector index, and the searches over them.

    Args:
        dim: Vector dimension.
        quantization: Compact representation: ``"i8"`` (default), ``"b1"`` or ``"f32"``.
        hnsw_threshold: Above this many rows the exact scan is replaced by HNSW.

    Raises:
        ValueError: On a non-positive dimension, unknown quantization or negative threshold.
    """

    def __init__(
        self,
        dim: int,
        *,
        quantization: str = "i8",
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
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
        # The rotation of the graph's copies and queries (first_stage.py); None: full rows.
        self._stage: FirstStage | None = None
        self._lock = CourteousLock()  # the deferred graph's builder lets callers go first
        # Decided by the recall self-check (vector_selfcheck.py), read by the graph search:
        # the beam multiplier that reached the target on this machine, and whether to
        # scan exactly instead.
        self.beam_factor = 1
        self.exact_only = False
        # A graph that missed the target on the seeded sample, before any served queries
        # could be measured: searches scan exactly until those queries decide
        # (vector_selfcheck.py), since the sample can be harder than the queries asked.
        self.held_back = False
        # Sorted keys of rows the graph does not hold yet (the deferred graph,
        # vector_build.py): searched exactly until it does.
        self._pending = np.empty(0, np.int64)

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

    # -- the graph -------------------------------------------------------------------

    def _to_exact_scan(self) -> None:
        """Drop the graph for the flat layout (exact scan) and keep it so."""
        self._hnsw, self._hnsw_mapped = None, None
        self._pending = np.empty(0, np.int64)
        self._stage = None
        self.exact_only = True
        self.held_back = False

    @property
    def _graph_ndim(self) -> int:
        """Dimensions of the graph's copies: the first stage's, else the rows'."""
        return self._stage.width if self._stage is not None else self._usearch_ndim

    def _begin_graph(self) -> None:
        """Fit the first stage (when the index gets one) on the rows held now, and the
        norm of the graph's copies: once per graph, before its first row goes in."""
        f = self._rows
        n = f.n
        width = first_stage_width(self.dim, self.quantization)
        self._stage = None
        self.held_back = False  # a new graph is checked anew
        if width is None or not n:
            self._graph_scale = graph_scale(f.inv_norms[:n]) if self.quantization == "i8" else 1.0
            return
        # An even spread of the rows, as floats (a bulk build starts its graph with a
        # whole slice of 65k rows: all of them as float32 would be 100 MB at 384-d).
        sample = slice(0, n, max(1, n // FIT_ROWS))
        unit = f.rows[sample] * f.inv_norms[sample, None]
        self._stage = FirstStage.fit(unit, width)
        self._graph_scale = graph_scale(inverse_norms(encode(self._stage.rotate(unit), "i8")))

    def _graph_copies(self, enc: np.ndarray, inv_norms: np.ndarray) -> np.ndarray:
        """The graph's copies of compact rows: rotated onto the first stage, if any."""
        if self._stage is None:
            return graph_rows(enc, inv_norms, self.quantization, self._graph_scale)
        rotated = encode(self._stage.rotate(enc * inv_norms[:, None]), "i8")
        return graph_rows(rotated, inverse_norms(rotated), "i8", self._graph_scale)

    def _graph_query(self, q_enc: np.ndarray) -> np.ndarray:
        """An encoded query as the graph searches it (rotated onto the first stage, if any)."""
        if self._stage is None:
            return q_enc
        unit = q_enc[None, :] * inverse_norms(q_enc[None, :])[:, None]
        return np.asarray(encode(self._stage.rotate(unit), "i8")[0])

    def _new_hnsw(self) -> Graph:
        return Graph(
            ndim=self._graph_ndim,
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

    def beam_for(self, rows: int, factor: int) -> int:
        """The graph's search beam at ``rows`` rows with beam multiplier ``factor``."""
        return expansion_search_for(rows) * factor

    # -- search primitives -------------------------------------------------------------

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
        if (
            self._hnsw is None
            or self.held_back
            or prefer_scan(len(allowed), min(pool, len(allowed)), len(self._hnsw))
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
        # Read before the graph is searched: the background inserts move rows from the
        # pending keys into the graph (a new array each time), and a row moved between
        # the graph search and a later read would be in neither.
        pending = self._pending
        if len(pending) * 2 >= self._rows.n:
            # The graph holds few of the rows yet (a bulk load it is catching up with).
            if allowed is None:
                return self._scan_all(q_enc, pool)
            return self._scan_allowed(q_enc, pool, allowed)
        n = len(graph)
        want = min(pool, n)
        if want == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        beam = self.beam_for(n, self.beam_factor)
        if graph.expansion_search != beam:
            graph.expansion_search = beam
        wide = rescored_count(want, n)
        q_graph = self._graph_query(q_enc)
        # Expect |allowed| / n of the graph's hits to pass the filter; ask for more.
        count = wide if allowed is None else math.ceil(OVERSAMPLE * want * n / max(len(allowed), 1))
        while count <= max(_MAX_OVERSAMPLED, wide):
            keys, _ = graph.search(q_graph, min(count, n))
            if allowed is not None:
                at = np.minimum(np.searchsorted(allowed, keys), len(allowed) - 1)
                keys = keys[allowed[at] == keys]
            if len(keys) >= want:
                found = self._rescore(q_enc, keys, want)
                return self._with_pending(q_enc, pool, found, pending, allowed)
            if count >= n:
                break
            count *= 4
        # Removals can leave nodes unreachable, a filter may hold absent keys, and a
        # very selective one needs a huge beam: the exact scan is right in all cases.
        if allowed is None:
            return self._scan_all(q_enc, pool)
        return self._scan_allowed(q_enc, pool, allowed)

    def _with_pending(
        self,
        q_enc: np.ndarray,
        pool: int,
        found: tuple[np.ndarray, np.ndarray],
        pending: np.ndarray,
        allowed: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The graph's hits and the exact scores of the (permitted) ``pending`` rows (sorted
        keys, read before the graph was searched), best ``pool``; a row the graph took
        meanwhile is kept once, scored as a pending row."""
        keys = pending
        if allowed is not None:
            keys = keys[np.isin(keys, allowed, assume_unique=True)]
        if not len(keys):
            return found
        at_pending = np.minimum(np.searchsorted(keys, found[0]), len(keys) - 1)
        fresh = keys[at_pending] != found[0]
        found = (found[0][fresh], found[1][fresh])
        f = self._rows
        at = f.lookup(keys)
        rows, scores = scan(f.rows[at], f.inv_norms[at], q_enc, pool, self.quantization, self.dim)
        all_keys = np.concatenate([found[0], keys[rows]])
        all_scores = np.concatenate([found[1], scores])
        if len(all_keys) > pool:
            best = top(all_scores, pool)
            all_keys, all_scores = all_keys[best], all_scores[best]
        return all_keys, all_scores


def rescored_count(want: int, rows: int) -> int:
    """Graph candidates to re-score for the best ``want`` of a graph of ``rows`` rows."""
    floor = RESCORE_MIN * max(1, math.ceil(rows / RESCORE_MIN_ROWS))
    return max(RESCORE_FACTOR * want, min(floor, RESCORE_MIN_MAX))
