"""A search's ranked legs as arrays, and the thread that runs one leg beside another.

The search path holds a few hundred candidates per query; as arrays (collection ids,
chunk keys, scores) they are merged, united and fused without a Python object per
candidate, which on a slow core was most of a hybrid search after its two legs.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
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


class WayTimes:
    """How long a kind of leg kept its caller waiting, run in a thread and in the caller:
    the caller's time from handing the leg over to holding its result (the caller's own
    leg included, the same either way), the last :attr:`KEEP` of each way."""

    # The best of the last three: a search that loaded an index, met a busy core or raced
    # a background thread for the GIL (a row cache filling: a thread's leg then took
    # 40-70 ms at 100k chunks against 2 in the caller) misleads until two better ones
    # came, not for as long as it is remembered.
    KEEP = 3
    # One search in this many takes the slower way, so a change (a model loaded, a busier
    # machine, a grown collection) is noticed; rare enough to stay out of a p95.
    EXPLORE_EVERY = 32

    def __init__(self) -> None:
        self.spans: dict[bool, deque[float]] = {
            True: deque(maxlen=self.KEEP),
            False: deque(maxlen=self.KEEP),
        }
        self.searches = 0

    def add(self, threaded: bool, seconds: float) -> None:
        self.spans[threaded].append(seconds)

    def typical(self, threaded: bool) -> float | None:
        """A way's best recent span (None before :attr:`KEEP` of them)."""
        spans = self.spans[threaded]
        return min(spans) if len(spans) == self.KEEP else None

    def next_is_threaded(self) -> bool:
        """Whether the next leg of this kind gets a thread: the ways in turn (a thread
        first) until both are measured, then the faster, and now and then the other."""
        self.searches += 1
        thread, caller = self.typical(True), self.typical(False)
        if thread is None or caller is None:
            return len(self.spans[True]) <= len(self.spans[False])
        faster = thread <= caller
        return faster if self.searches % self.EXPLORE_EVERY else not faster


class Pending(Generic[T]):
    """A call handed to a thread of its own (or already made, when none could start)."""

    def __init__(self, fn: Callable[[], T], waited: Callable[[float], None] | None = None) -> None:
        self._fn: Callable[[], T] | None = fn
        self._waited = waited  # told the seconds from now until the caller has the value
        self._began = time.perf_counter()
        self._value: T | None = None
        self._error: BaseException | None = None
        self.thread: threading.Thread | None = None  # the thread running it, if any

    def run(self) -> None:
        """Make the call now (in its own thread, or in the caller's), keeping its value or
        exception for :meth:`result`; a call already made is not made again."""
        fn, self._fn = self._fn, None
        if fn is None:
            return
        try:
            self._value = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
            self._error = exc

    def wait(self) -> None:
        """Block until the call finished and its thread ended (its outcome stays for
        :meth:`result`); a call no thread took is made here and now. The caller waits
        on the thread's join alone: a ``threading.Event`` is a Python-level lock wrapper
        that a stop signal's exception could leave held, and the leg's thread, setting it,
        would then never end (``lifecycle.py``)."""
        if self.thread is not None:
            self.thread.join()
        else:
            self.run()

    def result(self) -> T:
        """The call's value, or its exception, raised here."""
        self.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._waited is not None:
            waited, self._waited = self._waited, None
            waited(time.perf_counter() - self._began)
        return cast(T, self._value)


class Helper:
    """Runs a search's second leg beside the first, in a thread that ends with the search:
    a library's search leaves no thread running (issue 33). Concurrent searches never wait
    for each other's; where no thread can start, the leg runs in the caller.

    A thread pays only when the leg outlasts what it costs: its start, its joiner's
    wake-up, and the two legs taking turns at the GIL between the calls that release it.
    The vector side of a search whose query vector comes from a model (milliseconds)
    gains; that of a precomputed vector on a small collection (a tenth of a millisecond)
    loses (SciFact: a search 1.16 ms with the thread, 0.95 in the caller, on a machine
    whose threads start in 0.04 ms). Which way is faster depends on the machine, its load
    and the leg, so it is measured as searches run, per ``kind`` of leg (:class:`WayTimes`),
    and a leg whose kind runs faster in the caller waits for the caller instead
    (:meth:`Pending.result` runs it then)."""

    def __init__(self) -> None:
        self.kinds: dict[Hashable, WayTimes] = {}

    def start(self, fn: Callable[[], T], kind: Hashable = None) -> Pending[T]:
        """Run ``fn`` in a thread of its own, or later in the caller when legs of its
        ``kind`` are measured to be faster there (also when no thread can start).
        Without a ``kind`` it always gets a thread."""
        threaded = True
        waited: Callable[[float], None] | None = None
        if kind is not None:
            times = self.kinds.get(kind)
            if times is None:
                if len(self.kinds) >= MAX_KINDS:
                    self.kinds.clear()
                times = self.kinds[kind] = WayTimes()
            threaded = times.next_is_threaded()
            waited = partial(times.add, threaded)
        job = Pending(fn, waited)
        if not threaded:
            return job  # runs in the caller, when its result is asked for
        thread = threading.Thread(target=job.run, name="hybridkb-search-leg", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no thread to spare
            job.run()
            return job
        job.thread = thread
        return job


# Kinds of legs remembered at once (a kind is a search's embedders): more is a leak.
MAX_KINDS = 64

HELPER = Helper()
