"""The vector index's recall self-check: when to measure the graph, and what follows.

:class:`RecallSelfCheck` adds to the layouts (``vector_layouts.py``) the graph's check
of its own recall@10 where it runs: on a seeded sample after a build or a snapshot from
another machine, and on the queries served, in a background thread, once there are
enough of them. The queries served decide once there are enough of them, the sample
until then. A check picks the narrowest beam that reaches the target; where none does:

* on the sample alone, the graph is **held back**: searches scan exactly and the graph
  waits for the served queries to decide. The sample (midpoints of two stored rows)
  can be far harder than the queries people ask: on the 1M bench set it measured 0.953
  where the SciFact test queries got 0.9915 at the same beam (bench/first_stage.py), and
  dropping the graph on its word made every later search a 20 ms scan;
* on the served queries, the graph is dropped for the exact scan (with a warning).

The measures themselves live in ``recall.py``; this module holds the index's side (its
state, the lock holds, applying the outcome), so the check reads in one place apart from
the searches it measures.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from .hnsw import Graph
from .quantized import encode
from .recall import (
    AUDIT_QUERIES,
    AUDIT_REGROWTH,
    RECALL_K,
    RECALL_TARGET,
    QueryLog,
    QuerySet,
    check,
    exact_neighbours,
    in_background,
    sample_queries,
)
from .vector_layouts import DEFAULT_HNSW_THRESHOLD, SCAN_BATCH, VectorLayouts, rescored_count


class RecallSelfCheck(VectorLayouts):
    """Vector layouts whose graph checks its own recall (arguments as :class:`VectorLayouts`)."""

    def __init__(
        self,
        dim: int,
        *,
        quantization: str = "i8",
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
    ) -> None:
        super().__init__(dim, quantization=quantization, hnsw_threshold=hnsw_threshold)
        # The recall measured (on the last check, and on the queries served), where the
        # graph was built or last checked, and the sample of served queries.
        self.verified_recall: float | None = None
        self.served_recall: float | None = None
        self.built_on: dict[str, str] | None = None
        self._log = QueryLog(self._width, self._dtype)
        self._audited_rows = 0
        self._audit_thread: threading.Thread | None = None

    def _row_batches(self, batch: int = SCAN_BATCH) -> Iterator[tuple[np.ndarray, np.ndarray]]:
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
        """Measure the graph's recall@10 against an exact scan on the queries served so
        far, once :data:`~hybridkb.index.recall.AUDIT_QUERIES` have been, else on a
        seeded sample, and apply the outcome (the module docstring says how).

        Returns the recall reached (None for the flat layout, which is exact)."""
        with self._lock:
            graph = self._checkable()
            if graph is None:
                return None
            if self._log.seen >= AUDIT_QUERIES:
                sets = {"served": self._log.queries()}
            else:
                rows = next(self._row_batches())[1]
                sample = sample_queries(rows.astype(np.float32), seed)
                sets = {"sample": encode(sample, self.quantization)}
            return self._check(graph, sets)

    def audit(self) -> float | None:
        """Check recall@10 on the queries this index has served (the last
        :data:`~hybridkb.index.recall.AUDIT_QUERIES`): choose the narrowest beam that
        reaches the target on them, else fall back to the exact scan; run in a background
        thread once that many queries have been served, and again when the graph has
        doubled since.

        Returns the recall reached, or None when there is nothing to check."""
        with self._lock:
            graph = self._checkable()
            if graph is None or self._log.seen < AUDIT_QUERIES:
                return None
            served = self._log.queries()
        return self._check(graph, {"served": served})

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
                "held_back": self.held_back,
                "beam_factor": self.beam_factor,
                "expansion_search": None
                if graph is None
                else self.beam_for(len(graph), self.beam_factor),
                "verified_recall": self.verified_recall,
                "served_recall": self.served_recall,
                "queries_seen": self._log.seen,
                "kernel": None if graph is None else graph.hardware_acceleration,
                "built_on": self.built_on,
                # The width of the graph's copies: half the rows' with a first stage.
                "graph_ndim": None if graph is None else self._graph_ndim,
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

    def _check(self, graph: Graph, sets: dict[str, np.ndarray]) -> float:
        """Run :func:`~hybridkb.index.recall.check` on ``graph``, then apply the outcome
        unless the graph was replaced meanwhile."""
        n = len(graph)
        # One pass over the stored rows for every set, in short lock holds so that a
        # background check lets searches through.
        every = np.concatenate(list(sets.values()))
        truth = exact_neighbours(
            self._row_batches(SCAN_BATCH // 8), every, self.quantization, self.dim
        )
        ends = np.cumsum([len(queries) for queries in sets.values()])
        exact = dict(zip(sets, np.split(np.array(truth, dtype=object), ends[:-1]), strict=True))

        def search(q: np.ndarray, factor: int) -> list[int]:
            # As a search is served: the graph's candidates re-scored with the rows.
            with self._lock:
                graph.expansion_search = self.beam_for(n, factor)
                keys, _ = graph.search(self._graph_query(q), rescored_count(RECALL_K, n))
                found, _ = self._rescore(q, keys, RECALL_K)
            return [int(k) for k in found]

        outcome = check(
            search, [QuerySet(name, queries, list(exact[name])) for name, queries in sets.items()]
        )
        self._rows.pages.release()  # the exact pass mapped every row
        with self._lock:
            if self._hnsw is not graph:
                return outcome.recall  # replaced (rebuilt, copied for a write): checked anew
            self.verified_recall = round(outcome.recall, 4)
            if "served" in outcome.by_set:
                self.served_recall = outcome.by_set["served"]
                self._audited_rows = n
            if outcome.ok:
                self.beam_factor, self.held_back = outcome.beam_factor, False
                return outcome.recall
            if "served" not in sets:
                self.held_back = True  # until the queries served can decide
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
