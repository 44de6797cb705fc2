"""The vector index checks its own recall where it runs.

An HNSW graph's recall depends on how it was built and searched on this machine
(usearch picks SIMD kernels per CPU; a snapshot may come from another machine). So
after a build, and after loading a snapshot built on another CPU or usearch version,
the index measures recall@10 on a fixed, seeded sample against an exact scan of its
own compact vectors, widens the search beam while that is below the target, and
falls back to the exact scan (always right, slower) with a warning if it cannot
reach it.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

import numpy as np

RECALL_TARGET = 0.98
RECALL_K = 10
SAMPLE_QUERIES = 200
# Exact scoring work per check (rows x queries), so a 1M-row check stays ~1 s.
SAMPLE_WORK = 20_000_000
BEAM_FACTORS = (1, 2, 4)


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
    """The outcome of one check: the recall reached and the beam factor that reached it."""

    recall: float
    beam_factor: int
    ok: bool


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


def measure(found: list[set[int]], exact: list[set[int]]) -> float:
    return float(np.mean([len(f & e) / RECALL_K for f, e in zip(found, exact, strict=True)]))


def check(search: Any, exact: list[set[int]], queries: np.ndarray) -> RecallCheck:
    """Widen the beam (``search(query, beam_factor) -> keys``) until recall reaches the
    target; report the best reached."""
    best = RecallCheck(0.0, BEAM_FACTORS[0], False)
    for factor in BEAM_FACTORS:
        found = [set(search(q, factor)) for q in queries]
        recall = measure(found, exact)
        if recall > best.recall:
            best = RecallCheck(recall, factor, recall >= RECALL_TARGET)
        if recall >= RECALL_TARGET:
            return RecallCheck(recall, factor, True)
    return best
