"""The vector index checks its own recall where it runs, on the queries it is asked.

An HNSW graph's recall depends on the data, on the queries and on how the graph was
built and searched here (usearch picks SIMD kernels per CPU; a snapshot may come
from another machine). So the index measures recall@10 against an exact scan of its
own compact vectors and takes the narrowest search beam that reaches the target; where
none does, it scans exactly (always right, slower). It measures on two query sets:

* a seeded synthetic sample (the normalised mean of two stored rows), right after a
  build and after loading a snapshot built on another CPU or usearch version;
* the queries it has actually served (:class:`QueryLog`), once :data:`AUDIT_QUERIES`
  have been seen, in a background thread (:meth:`VectorIndex.audit`).

The second is needed because no synthetic sample stands in for every query
distribution (``bench/search.py`` section ``scale``): on a 100k collection whose
vectors are unrelated to the queries asked of it, the synthetic sample measured
0.99-1.0 at the default beam where those queries got 0.62, while on a collection
related to its queries the synthetic sample was the harder of the two (1M: 0.953
against 0.9915 at the same beam). So the served queries decide once there are enough
of them, and a graph that misses only on the sample is held back, not dropped
(``vector_selfcheck.py``).
"""

from __future__ import annotations

import atexit
import platform
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from .quantized import top_per_query

RECALL_TARGET = 0.98
RECALL_K = 10
SAMPLE_QUERIES = 200
# Exact scoring work per check (rows x queries), so a 1M-row check stays ~1 s.
SAMPLE_WORK = 20_000_000
BEAM_FACTORS = (1, 2, 4)
# Served queries kept, and needed before they are checked: 64 queries x 10 neighbours
# estimate recall@10 to about +-0.01, and keeping them costs 64 rows (25 KB at 384-d).
AUDIT_QUERIES = 64
# A check of served queries is repeated once the graph has doubled since the last one.
AUDIT_REGROWTH = 2.0


class InterpreterExiting(Exception):
    """The interpreter is exiting: a background check gives up between two steps."""


_EXITING = threading.Event()
_BACKGROUND: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def in_background(target: Callable[[], object], name: str) -> threading.Thread:
    """Run ``target`` in a daemon thread that the interpreter's exit stops and waits for
    (a daemon thread still inside native code while Python finalises can crash it)."""

    def run() -> None:
        try:
            target()
        except InterpreterExiting:
            pass

    thread = threading.Thread(target=run, name=name, daemon=True)
    _BACKGROUND.add(thread)
    thread.start()
    return thread


def stop_if_exiting() -> None:
    """Raise :class:`InterpreterExiting` in a background thread once the interpreter exits
    (call it between two steps of background work)."""
    if _EXITING.is_set() and threading.current_thread() in _BACKGROUND:
        raise InterpreterExiting


@atexit.register
def _stop_background_checks() -> None:
    _EXITING.set()
    for thread in list(_BACKGROUND):
        thread.join(timeout=10)  # each step is short: a batch of rows or one search


def build_environment(isa: str) -> dict[str, str]:
    """What a snapshot records about where its graph was built."""
    try:
        from importlib.metadata import version

        usearch = version("usearch")
    except Exception:  # noqa: BLE001 - metadata missing: the check runs anyway
        usearch = "unknown"
    return {"usearch": usearch, "isa": isa, "machine": platform.machine()}


@dataclass
class RecallCheck:
    """The outcome of one check: the beam factor chosen and the recall of each query set
    at it (the lowest of them decided)."""

    recall: float
    beam_factor: int
    ok: bool
    by_set: dict[str, float] = field(default_factory=dict)


@dataclass
class QuerySet:
    """Compact queries and the keys of their exact top :data:`RECALL_K`."""

    name: str
    queries: np.ndarray
    exact: list[set[int]]


def sample_queries(vectors: np.ndarray, seed: int = 0, count: int | None = None) -> np.ndarray:
    """Seeded query vectors near the data: the normalised mean of two stored rows."""
    n = len(vectors)
    count = count or max(20, min(SAMPLE_QUERIES, SAMPLE_WORK // max(n, 1)))
    rng = np.random.default_rng(seed)
    a = vectors[rng.integers(0, n, count)].astype(np.float32)
    b = vectors[rng.integers(0, n, count)].astype(np.float32)
    a /= np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b /= np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    q = a + b
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    return q


def exact_neighbours(
    batches: Iterable[tuple[np.ndarray, np.ndarray]],
    queries: np.ndarray,
    quantization: str,
    dim: int,
) -> list[set[int]]:
    """Keys of the exact top :data:`RECALL_K` of each compact query over (keys, compact
    rows) batches: what the graph is measured against."""
    best_keys = np.empty((len(queries), 0), np.int64)
    best_scores = np.empty((len(queries), 0), np.float32)
    for keys, rows in batches:
        stop_if_exiting()
        if not len(keys):
            continue
        found, scores = top_per_query(rows, queries, RECALL_K, quantization, dim)
        best_keys = np.concatenate([best_keys, keys[found]], axis=1)
        best_scores = np.concatenate([best_scores, scores], axis=1)
        keep = np.argsort(-best_scores, axis=1, kind="stable")[:, :RECALL_K]
        best_keys = np.take_along_axis(best_keys, keep, axis=1)
        best_scores = np.take_along_axis(best_scores, keep, axis=1)
    return [set(row.tolist()) for row in best_keys]


def measure(found: list[set[int]], exact: list[set[int]]) -> float:
    """Mean recall@``RECALL_K`` of ``found`` against the ``exact`` answers, query by query."""
    return float(
        np.mean(
            [len(f & e) / max(min(RECALL_K, len(e)), 1) for f, e in zip(found, exact, strict=True)]
        )
    )


def check(search: Callable[[np.ndarray, int], list[int]], sets: list[QuerySet]) -> RecallCheck:
    """Widen the beam (``search(query, beam_factor) -> keys``) until every query set
    reaches the target; else report the best factor reached (by its lowest set)."""
    factors = BEAM_FACTORS
    best = RecallCheck(0.0, factors[0], False)

    def searched(query: np.ndarray, factor: int) -> set[int]:
        stop_if_exiting()
        return set(search(query, factor))

    for factor in factors:
        by_set = {
            s.name: round(measure([searched(q, factor) for q in s.queries], s.exact), 4)
            for s in sets
        }
        recall = min(by_set.values())
        if recall >= RECALL_TARGET:
            return RecallCheck(recall, factor, True, by_set)
        if recall > best.recall:
            best = RecallCheck(recall, factor, False, by_set)
    return best


class QueryLog:
    """The last :data:`AUDIT_QUERIES` unfiltered queries an index served (compact rows),
    so its recall can be checked on the queries it is really asked."""

    def __init__(self, width: int, dtype: type[np.generic]) -> None:
        self._rows = np.zeros((AUDIT_QUERIES, width), dtype)
        self._next = 0
        self.seen = 0  # queries recorded since the index was built or loaded
        self._lock = threading.Lock()

    def record(self, query: np.ndarray) -> None:
        """Keep ``query``, replacing the oldest past :data:`AUDIT_QUERIES` of them (thread-safe)."""
        with self._lock:
            self._rows[self._next] = query
            self._next = (self._next + 1) % AUDIT_QUERIES
            self.seen += 1

    def queries(self) -> np.ndarray:
        """A copy of the kept queries (up to :data:`AUDIT_QUERIES`)."""
        with self._lock:
            return self._rows[: min(self.seen, AUDIT_QUERIES)].copy()
