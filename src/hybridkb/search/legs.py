"""A search's ranked legs as arrays, and the thread that runs one leg beside another.

The search path holds a few hundred candidates per query; as arrays (collection ids,
chunk keys, scores) they are merged, united and fused without a Python object per
candidate, which on a slow core was most of a hybrid search after its two legs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

import numpy as np

from ..results import RankedHits

Key = tuple[int, int]  # (collection id, chunk key)
T = TypeVar("T")


@dataclass(frozen=True)
class Leg:
    """A ranked leg: parallel arrays, best first (score descending, then collection id
    and chunk key ascending)."""

    cids: np.ndarray  # int64
    keys: np.ndarray  # int64
    scores: np.ndarray  # float64
    # Known to be in the order merged() gives (one collection's, sorted by the index).
    ordered: bool = field(default=False, compare=False)

    def __len__(self) -> int:
        return len(self.keys)

    @staticmethod
    def of(cid: int, ranked: Sequence[tuple[int, float]]) -> Leg:
        """One collection's leg as a backend returned it (best first)."""
        n = len(ranked)
        if isinstance(ranked, RankedHits) and len(ranked.key_array) == n:
            # The index's own arrays, sorted by score then key, as merged() sorts.
            return Leg(
                np.full(n, cid, np.int64), ranked.key_array, ranked.score_array, ordered=True
            )
        keys = np.fromiter((key for key, _ in ranked), np.int64, n)
        scores = np.fromiter((score for _, score in ranked), np.float64, n)
        return Leg(np.full(n, cid, np.int64), keys, scores)

    @staticmethod
    def merged(legs: Sequence[Leg], limit: int) -> Leg:
        """The best ``limit`` of several legs, ties by collection id and key."""
        if not legs:
            return Leg(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
        if len(legs) == 1 and legs[0].ordered:  # sorted already: the sort keeps it
            leg = legs[0]
            if len(leg) <= limit:
                return leg
            return Leg(leg.cids[:limit], leg.keys[:limit], leg.scores[:limit], ordered=True)
        if len(legs) == 1:  # one collection's leg: nothing to concatenate
            cids, keys, scores = legs[0].cids, legs[0].keys, legs[0].scores
        else:
            cids, keys, scores = (
                np.concatenate([getattr(leg, name) for leg in legs])
                for name in ("cids", "keys", "scores")
            )
        best = np.lexsort((keys, cids, -scores))[:limit]
        return Leg(cids[best], keys[best], scores[best])

    def pairs(self, rows: Iterable[int] | None = None) -> list[tuple[Key, float]]:
        """``((collection id, key), score)`` of every entry, or of the given positions."""
        at = np.arange(len(self)) if rows is None else np.fromiter(rows, np.intp)
        return list(
            zip(
                zip(self.cids[at].tolist(), self.keys[at].tolist(), strict=True),
                self.scores[at].tolist(),
                strict=True,
            )
        )


def union(*legs: Leg) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Every (collection id, key) of the legs once, in order of first appearance, and
    each leg's entries as positions in that order."""
    if len(legs) == 2:
        found = _union_of_two(*legs)
        if found is not None:
            return found
    cids = np.concatenate([leg.cids for leg in legs])
    keys = np.concatenate([leg.keys for leg in legs])
    if not len(keys):
        return cids, keys, [np.empty(0, np.intp) for _ in legs]
    by_pair = np.lexsort((keys, cids))  # stable: a pair's first appearance comes first
    sc, sk = cids[by_pair], keys[by_pair]
    starts = np.ones(len(keys), dtype=bool)
    starts[1:] = (sc[1:] != sc[:-1]) | (sk[1:] != sk[:-1])
    first = by_pair[starts]  # where each distinct pair first appears
    seen = np.argsort(first, kind="stable")
    rank = np.empty(len(first), np.intp)
    rank[seen] = np.arange(len(first))
    where = np.empty(len(keys), np.intp)
    where[by_pair] = rank[np.cumsum(starts) - 1]
    ends = np.cumsum([len(leg) for leg in legs])[:-1]
    kept = first[seen]
    return cids[kept], keys[kept], np.split(where, ends)


def _union_of_two(a: Leg, b: Leg) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]] | None:
    """:func:`union` of two legs of one collection whose keys are distinct within each
    (what a search fuses), by bisection: a fifth of the general way. None otherwise."""
    if not len(a) or not len(b):
        return None
    cid = a.cids[0]
    if not ((a.cids == cid).all() and (b.cids == cid).all()):
        return None
    order = np.argsort(a.keys, kind="stable")
    sk = a.keys[order]
    sb = np.sort(b.keys)
    if (sk[1:] == sk[:-1]).any() or (sb[1:] == sb[:-1]).any():
        return None
    pos = np.minimum(np.searchsorted(sk, b.keys), len(sk) - 1)
    hit = sk[pos] == b.keys
    fresh = ~hit
    b_at = np.empty(len(b), np.intp)
    b_at[hit] = order[pos[hit]]
    b_at[fresh] = len(a) + np.arange(int(fresh.sum()))
    cids = np.concatenate([a.cids, b.cids[fresh]])
    keys = np.concatenate([a.keys, b.keys[fresh]])
    return cids, keys, [np.arange(len(a), dtype=np.intp), b_at]


class MovingAverage:
    """An exponentially weighted mean of durations (None before the first)."""

    WEIGHT = 0.1  # of the newest: about the last twenty searches count

    def __init__(self) -> None:
        self.value: float | None = None

    def add(self, seconds: float) -> None:
        self.value = (
            seconds if self.value is None else self.value + self.WEIGHT * (seconds - self.value)
        )


class Pending(Generic[T]):
    """A call handed to a thread of its own (or already made, when none could start)."""

    def __init__(self, fn: Callable[[], T], cost: MovingAverage | None = None) -> None:
        self._fn: Callable[[], T] | None = fn
        self._cost = cost  # where the call's duration is added, if anywhere
        self._value: T | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self.thread: threading.Thread | None = None  # the thread running it, if any

    def run(self, before_done: Callable[[], None] | None = None) -> None:
        """Make the call now (in its own thread, or in the caller's when none could start),
        keeping its value or exception for :meth:`result`; ``before_done`` runs just before
        waiters wake."""
        fn, self._fn = self._fn, None
        try:
            if fn is not None:
                began = time.perf_counter()
                self._value = fn()
                if self._cost is not None:
                    self._cost.add(time.perf_counter() - began)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
            self._error = exc
        finally:
            if before_done is not None:
                before_done()
            self._done.set()

    def wait(self) -> None:
        """Block until the call finished and its thread ended (its outcome stays for
        :meth:`result`); a call no thread took is made here and now."""
        if self.thread is None and not self._done.is_set():
            self.run()
        self._done.wait()
        if self.thread is not None:
            self.thread.join()

    def result(self) -> T:
        """The call's value, or its exception, raised here."""
        self.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return cast(T, self._value)


class Helper:
    """Runs a search's second leg beside the first, in a thread that ends with the search:
    a library's search leaves no thread running (issue 33). Concurrent searches never wait
    for each other's; where no thread can start, the leg runs in the caller.

    A thread pays only when the leg outlasts what starting and joining it costs: the
    vector side of a search whose query vector comes from a slow model (milliseconds)
    does, that of a cached or precomputed vector on a small collection (a tenth of a
    millisecond) does not, and starting a thread costs 0.05-0.6 ms by the machine and its
    load. Both are measured here as searches run (moving averages, per ``kind`` of leg),
    and a leg known to be cheaper than a thread waits for the caller instead
    (:meth:`Pending.result` runs it then)."""

    def __init__(self) -> None:
        self.start_cost = MovingAverage()
        self.leg_cost: dict[Hashable, MovingAverage] = {}

    def start(self, fn: Callable[[], T], kind: Hashable = None) -> Pending[T]:
        """Run ``fn`` in a thread of its own, or later in the caller when legs of its
        ``kind`` take less time than a thread costs (also when no thread can start).
        Without a ``kind`` it always gets a thread."""
        cost = None if kind is None else self.leg_cost.get(kind)
        if cost is None and kind is not None:
            if len(self.leg_cost) >= MAX_KINDS:
                self.leg_cost.clear()
            cost = self.leg_cost[kind] = MovingAverage()
        job = Pending(fn, cost)
        # A thread costs its start and the wake-up of its joiner: about twice the start.
        if cost is not None and cost.value is not None:
            if cost.value < 2 * (self.start_cost.value or 0.0):
                return job  # runs in the caller, when its result is asked for
        thread = threading.Thread(target=job.run, name="hybridkb-search-leg", daemon=True)
        began = time.perf_counter()
        try:
            thread.start()
        except RuntimeError:  # no thread to spare
            job.run()
            return job
        self.start_cost.add(time.perf_counter() - began)
        job.thread = thread
        return job


# Kinds of legs remembered at once (a kind is a search's embedders): more is a leak.
MAX_KINDS = 64

HELPER = Helper()
