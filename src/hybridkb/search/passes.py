"""A hybrid search's two passes on arrays: the legs fused, the vector leg re-scored after
Rocchio feedback, the legs fused again, and each leg's ranks of the winners.

Split from ``hybrid.py`` (which orchestrates) so that each reads in one sitting. A search
holds a few hundred candidates: every numpy call here costs about a microsecond whatever
its size, so the common case (one collection, each leg's keys distinct, every candidate
still stored) is read off what the union already knows instead of being checked again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..embedders import cache_key
from ..settings import Settings
from ..storage.base import Storage
from . import fusion
from .legs import Key, Leg, union

Ranks = dict[Any, tuple[int, float]]


@dataclass(frozen=True)
class Fusion:
    """Two legs fused: every candidate once (``cids``, ``keys``, in order of first
    appearance, keyword leg first), its fused ``scores`` and where each leg's entries sit
    among the candidates (``kw_first``: the keyword leg's entry i is candidate i).
    ``squashed``: the scores are z-scores, reported through :func:`fusion.logistic` (only
    the hits' are: the ranking needs none of them); ``ties``: the tie-breaks of the
    ranking after the score (RRF's best single-leg rank)."""

    cids: np.ndarray
    keys: np.ndarray
    scores: np.ndarray
    kw_at: np.ndarray
    vec_at: np.ndarray
    kw_first: bool = False
    squashed: bool = False
    ties: tuple[np.ndarray, ...] = ()
    kw_part: tuple[np.ndarray, float] | None = None  # the keyword leg's standard scores

    @cached_property
    def ranking(self) -> np.ndarray:
        """The candidates' positions, best first (see :func:`fusion.order`)."""
        return fusion.order(self.scores, *self.ties)

    def leading(self, n: int) -> np.ndarray:
        """The first ``n`` positions of :attr:`ranking`; the first alone without sorting
        every candidate (feedback needs one)."""
        if n == 1 and not self.ties and len(self.scores) and "ranking" not in self.__dict__:
            best = int(np.argmax(self.scores))  # the first of the best, as a stable sort
            if self.scores[best] == self.scores[best]:  # not NaN (a sort puts NaN last)
                return np.array([best], np.intp)
        return self.ranking[:n]

    def reported(self, at: np.ndarray) -> list[float]:
        """The fused scores of the candidates at positions ``at``, as hits report them."""
        found = self.scores[at]
        values: list[float] = (fusion.logistic(found) if self.squashed else found).tolist()
        return values


@dataclass(frozen=True)
class Listed:
    """A ranking given as positions (``feedback_leg``'s callers fused on their own)."""

    ranking: np.ndarray

    def leading(self, n: int) -> np.ndarray:
        return self.ranking[:n]


def fuse(kw: Leg, vec: Leg, depth: int, settings: Settings) -> Fusion:
    """The fusion of two legs, ``settings.fusion`` ways."""
    cids, keys, (kw_at, vec_at) = union(kw, vec)
    kw_first = bool((kw_at == np.arange(len(kw_at))).all())
    return fused(kw, vec, cids, keys, kw_at, vec_at, depth, settings, kw_first)


def refuse(
    first: Fusion, kw: Leg, vec: Leg, at: np.ndarray, depth: int, settings: Settings
) -> Fusion:
    """:func:`fuse` of ``kw`` with a vector leg over ``first``'s candidates (``at``: their
    positions there, distinct): the union is read off those positions instead of
    matching keys again, in the order :func:`union` gives (keyword leg first, then the
    vector leg's new candidates in its order)."""
    n_kw = len(kw)
    if not first.kw_first:  # repeated keyword keys
        return fuse(kw, vec, depth, settings)
    fresh = at >= n_kw  # the first n_kw candidates are the keyword leg's, in its order
    vec_at = at.copy()
    vec_at[fresh] = n_kw + np.arange(int(np.count_nonzero(fresh)))
    cids = np.concatenate([kw.cids, vec.cids[fresh]])
    keys = np.concatenate([kw.keys, vec.keys[fresh]])
    return fused(kw, vec, cids, keys, first.kw_at, vec_at, depth, settings, True, first.kw_part)


def fused(
    kw: Leg,
    vec: Leg,
    cids: np.ndarray,
    keys: np.ndarray,
    kw_at: np.ndarray,
    vec_at: np.ndarray,
    depth: int,
    settings: Settings,
    kw_first: bool = False,
    kw_part: tuple[np.ndarray, float] | None = None,
) -> Fusion:
    """The fusion of two legs whose union (``cids``, ``keys``, each leg's positions in
    it) is known; ``kw_part``: the keyword leg's standard scores, when a fusion of the
    same keyword leg computed them."""
    at, n = (kw_at, vec_at), len(keys)
    if settings.fusion == "rrf":
        scores, best_rank = fusion.rrf_scores(at, n, k=settings.rrf_k)
        return Fusion(cids, keys, scores, kw_at, vec_at, kw_first, ties=(best_rank,))
    # A keyword leg shorter than the depth holds every match: non-matches score 0, so in
    # a small collection the best keyword hit does not sink a near-tied second one.
    floors = [0.0 if len(kw) < depth else None, None]
    values = (kw.scores, vec.scores)
    if settings.fusion == "weighted":
        scores = fusion.weighted_scores(values, at, n, floors=floors)
        return Fusion(cids, keys, scores, kw_at, vec_at, kw_first)
    # Without a floor a leg's standard scores do not depend on the other leg: the
    # second pass reuses the keyword leg's.
    if kw_part is None or floors[0] is not None:
        kw_part = fusion.standard_scores(kw.scores, floors[0], n - len(kw)) if len(kw) else None
    vec_part = fusion.standard_scores(vec.scores, None, n - len(vec)) if len(vec) else None
    raw = fusion.zscore_sum([kw_part, vec_part], at, n, [0.5, 0.5])
    return Fusion(cids, keys, raw, kw_at, vec_at, kw_first, squashed=True, kw_part=kw_part)


Part = tuple[np.ndarray | None, np.ndarray, np.ndarray]  # positions (None: all), rows, norms


def feedback(
    storage: Storage,
    targets: Sequence[Any],
    qvecs: Mapping[str, np.ndarray],
    cids: np.ndarray,
    keys: np.ndarray,
    ranked: Fusion | Listed,
    weight: float,
    depth: int,
    chunks: int = 1,
) -> tuple[Leg, np.ndarray]:
    """The vector leg after Rocchio feedback (see ``hybrid.feedback_leg``) on arrays:
    candidates ``(cids, keys)``, ``ranked`` the first pass's fused ranking. Also returns
    where the leg's entries sit among the candidates."""
    n = len(keys)
    scores = np.full(n, -np.inf, np.float32)
    parts, every = _candidate_rows(storage, targets, cids, keys)
    for model, found in parts.items():
        raw = np.asarray(qvecs[model], dtype=np.float32)
        q: np.ndarray = raw / np.float32(max(float(np.sqrt(raw @ raw)), 1e-12))
        tops = best_rows(found, ranked, n, chunks)
        if tops:
            # The mean of one row is that row: no array built from the list.
            mean = tops[0] if len(tops) == 1 else np.mean(tops, axis=0, dtype=np.float32)
            shifted = q + np.float32(weight) * mean
            q = shifted / np.float32(max(float(np.sqrt(shifted @ shifted)), 1e-12))
        for at, rows, norms in found:
            if at is None:
                scores = (rows @ q) / norms
            else:
                scores[at] = (rows @ q) / norms
    if every:  # one collection's: its order is by score, then key
        best = np.lexsort((keys, -scores))[:depth]
    else:
        # Deleted since ranked: never scored, so still -inf, and left out.
        kept = np.flatnonzero(scores > -np.inf)
        best = kept[np.lexsort((keys[kept], cids[kept], -scores[kept]))[:depth]]
    return Leg(cids[best], keys[best], scores[best].astype(np.float64)), best


def _candidate_rows(
    storage: Storage, targets: Sequence[Any], cids: np.ndarray, keys: np.ndarray
) -> tuple[dict[str, list[Part]], bool]:
    """Per model and recipe: (positions, rows, norms) of its collections' candidates, and
    whether every candidate has its row. Rows are not normalised (a cosine is the dot
    product over the norm): one matrix per collection; positions None: every candidate,
    in order (one collection)."""
    n = len(keys)
    parts: dict[str, list[Part]] = {}
    one = bool(n) and bool((cids == cids[0]).all())  # one collection: no grouping
    every = one  # every candidate gets a score (none deleted since ranked)
    by_id = {t.coll.id: t for t in targets}
    for cid in [int(cids[0])] if one else sorted(set(cids.tolist())):
        at: np.ndarray | None = None if one else np.flatnonzero(cids == cid)
        target = by_id[cid]
        wanted = keys if at is None else keys[at]
        rows = np.asarray(storage.vector_directions(target.coll, wanted.tolist()), np.float32)
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
        ok = norms > 0  # a chunk deleted since its leg was ranked has a zero row
        if not ok.all():
            at = np.flatnonzero(ok) if at is None else at[ok]
            rows, norms, every = rows[ok], norms[ok], False
        parts.setdefault(cache_key(target.embedder), []).append((at, rows, norms))
    return parts, every


def best_rows(found: list[Part], ranked: Fusion | Listed, n: int, chunks: int) -> list[np.ndarray]:
    """Unit rows of the first ``chunks`` candidates of ``ranked`` among ``found``."""
    if len(found) == 1 and found[0][0] is None:  # every candidate, at its own position
        _, rows, norms = found[0]
        return [rows[pos] / norms[pos] for pos in ranked.leading(chunks).tolist()]
    part = np.full(n, -1, np.intp)
    row = np.zeros(n, np.intp)
    for i, (at, _, _) in enumerate(found):
        at = np.arange(n) if at is None else at
        part[at], row[at] = i, np.arange(len(at))
    tops: list[np.ndarray] = []
    for pos in ranked.ranking.tolist():
        if part[pos] >= 0:
            _, rows, norms = found[part[pos]]
            tops.append(rows[row[pos]] / norms[row[pos]])
            if len(tops) == chunks:
                break
    return tops


def ranks_of(leg: Leg, at: np.ndarray, top: np.ndarray, identity: bool = False) -> Ranks:
    """(1-based rank in ``leg``, score) of the candidates at positions ``top``
    (``identity``: the leg's entry i is candidate i)."""
    if identity:
        r = top[top < len(leg)]
    else:
        rank = np.full(int(at.max(initial=-1)) + 1 if len(at) else 0, -1, np.intp)
        rank[at[::-1]] = np.arange(len(at))[::-1]  # a repeated key keeps its first rank
        r = rank[top[top < len(rank)]]
        r = r[r >= 0]
    return dict(
        zip(
            zip(leg.cids[r].tolist(), leg.keys[r].tolist(), strict=True),
            zip((r + 1).tolist(), leg.scores[r].tolist(), strict=True),
            strict=True,
        )
    )


def hybrid_ranking(
    storage: Storage,
    targets: Sequence[Any],
    qvecs: Mapping[str, np.ndarray],
    kw: Leg,
    vec: Leg,
    k: int,
    depth: int,
    settings: Settings,
) -> tuple[list[tuple[Key, float]], Ranks, Ranks]:
    """The fused top ``k`` (after vector feedback), and each leg's ranks of them."""
    first = result = fuse(kw, vec, depth, settings)
    if settings.vector_feedback > 0 and len(first.keys):
        vec, at = feedback(
            storage, targets, qvecs, first.cids, first.keys, first,
            settings.vector_feedback, depth,
        )  # fmt: skip
        result = refuse(first, kw, vec, at, depth, settings)
    top = result.ranking[:k]
    ranked = list(
        zip(
            zip(result.cids[top].tolist(), result.keys[top].tolist(), strict=True),
            result.reported(top),
            strict=True,
        )
    )
    return (
        ranked,
        ranks_of(kw, result.kw_at, top, identity=result.kw_first),
        ranks_of(vec, result.vec_at, top),
    )
