"""How the vector index's graph comes to hold its rows: built at once, or in the background.

:class:`GraphBuilding` adds to the self-checking layouts (``vector_selfcheck.py``) the
two ways a graph is made once the rows pass the threshold: built at once and checked
(``_build_hnsw``), or, for the storage's indexes (``defer_graph``), started empty with
every row pending and filled by a background thread a short lock hold at a time, while
searches scan the pending rows exactly. Its own module because the builder thread, its
batch sizing and its stop are one piece of machinery apart from the searches.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .recall import build_environment, in_background, stop_if_exiting
from .vector_layouts import (
    DEFAULT_HNSW_THRESHOLD,
    SCAN_BATCH,
    SINGLE_THREAD_BUILD_ROWS,
)
from .vector_selfcheck import RecallSelfCheck

# The deferred graph's inserts (defer_graph): rows per hold of the lock, sized so that a
# batch takes about GRAPH_BATCH_SECONDS (searches wait at most that long meanwhile).
GRAPH_BATCH_MIN = 64
GRAPH_BATCH_MAX = 16_384
GRAPH_BATCH_SECONDS = 0.1


class GraphBuilding(RecallSelfCheck):
    """Self-checking vector layouts that build their graph (arguments as
    :class:`~hybridkb.index.vector.VectorIndex`)."""

    def __init__(
        self,
        dim: int,
        *,
        quantization: str = "i8",
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
        defer_graph: bool = False,
    ) -> None:
        super().__init__(dim, quantization=quantization, hnsw_threshold=hnsw_threshold)
        # Deferred graph (defer_graph): the thread inserting the pending rows, whether the
        # graph is a first build (checked once it holds every row, as _build_hnsw checks a
        # graph built at once), and whether the index is being dropped.
        self.defer_graph = defer_graph
        self._builder: threading.Thread | None = None
        self._fresh_graph = False
        self._stopped = False

    def _build_hnsw(self) -> None:
        rows = self._rows
        n = rows.n
        self._begin_graph()
        graph = self._new_hnsw()
        # Small graphs are built on one thread: as fast at this size, and the same graph
        # every time (a multi-threaded build depends on scheduling).
        threads = 1 if n <= SINGLE_THREAD_BUILD_ROWS else 0
        for start in range(0, n, SCAN_BATCH):  # copies made a batch at a time
            part = slice(start, min(n, start + SCAN_BATCH))
            copies = self._graph_copies(rows.rows[part], rows.inv_norms[part])
            graph.add(rows.keys[part], copies, threads=threads)
        self._hnsw = graph
        self.built_on = build_environment(graph.hardware_acceleration)
        self.verify_recall()

    # -- deferred graph (defer_graph) ---------------------------------------------------

    def _start_graph(self) -> None:
        """An empty graph with every row pending; the builder fills it (under the lock)."""
        rows = self._rows
        n = rows.n
        self._begin_graph()
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
                copies = self._graph_copies(self._rows.rows[at], self._rows.inv_norms[at])
                began = time.perf_counter()
                self._writable_hnsw().add(keys, copies, threads=0 if len(keys) > 256 else 1)
                self._pending = self._pending[len(keys) :]
                spent = time.perf_counter() - began
            # The writes and searches that queued behind this batch go before the next.
            self._lock.step_aside(GRAPH_BATCH_SECONDS)
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
