"""A reranking stage as a plug-in: a cross-encoder re-scores the fused top of a search.

A cross-encoder reads the query and a passage together, so it judges relevance
better than the two legs, each of which scored query and passage apart; it also
costs a model call per candidate, which is why it runs on the fused top-N only
(``Settings.rerank_depth``) and is off unless a model is set. Nothing ships one
offline: point ``HYBRIDKB_RERANKER`` at a local sentence-transformers cross-encoder
(for example a saved ``cross-encoder/ms-marco-MiniLM-L-6-v2``), or hand any object
with a ``score`` method to :meth:`KnowledgeBase.with_reranker`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigError, ModelUnavailable
from ..results import Hit


@runtime_checkable
class Reranker(Protocol):
    """Scores passages for a query; higher is more relevant (any real scale)."""

    name: str

    def score(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        """One relevance score per text for ``query`` (higher is better), in the order given."""
        ...


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` loaded from a local folder or cached id.

    Loaded on first use, so a knowledge base that never reranks never imports torch.
    """

    def __init__(self, model: str, *, batch_size: int = 32, max_length: int = 512) -> None:
        self.name = model
        self.batch_size = batch_size
        self.max_length = max_length
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            try:
                from sentence_transformers import CrossEncoder
            except ImportError as exc:  # pragma: no cover - a core dependency
                raise ModelUnavailable(
                    f"reranker {self.name!r}: sentence-transformers is not installed "
                    "(pip install sentence-transformers)"
                ) from exc
            try:
                self._model = CrossEncoder(
                    self.name, device="cpu", max_length=self.max_length, local_files_only=True
                )
            except Exception as exc:  # noqa: BLE001 - any load failure is one user error
                raise ModelUnavailable(
                    f"reranker {self.name!r}: cannot load a cross-encoder from it "
                    f"({type(exc).__name__}); set HYBRIDKB_RERANKER to the folder of a saved "
                    "sentence-transformers CrossEncoder"
                ) from exc
        return self._model

    def score(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        """The cross-encoder's score of each (query, text) pair; loads the model on first use."""
        if not texts:
            return []
        model = self._load()
        scores = model.predict(
            [(query, t) for t in texts], batch_size=self.batch_size, show_progress_bar=False
        )
        return [float(s) for s in scores]


def load_reranker(spec: str) -> Reranker:
    """The reranker a setting names: a local folder (or a cached model id) of a
    sentence-transformers cross-encoder."""
    spec = spec.strip()
    if not spec:
        raise ConfigError("HYBRIDKB_RERANKER: empty; set it to a cross-encoder folder or unset it")
    path = Path(spec).expanduser()
    return CrossEncoderReranker(str(path) if path.exists() else spec)


def rerank_hits(reranker: Reranker, query: str, hits: Sequence[Hit], k: int) -> list[Hit]:
    """Re-order ``hits`` by the reranker's score and keep ``k``.

    Each hit's ``score`` becomes the reranker's and ``scores["rerank"]`` shows it; the
    fused score stays in ``scores``. Ties keep the fused order.

    Raises:
        ModelUnavailable: the reranker returned the wrong number of scores or a
            score that is not a finite number.
    """
    if not hits:
        return []
    scores = list(reranker.score(query, [h.text for h in hits]))
    if len(scores) != len(hits) or not all(
        isinstance(s, int | float) and math.isfinite(s) for s in scores
    ):
        raise ModelUnavailable(
            f"reranker {getattr(reranker, 'name', type(reranker).__name__)!r}: returned "
            f"{len(scores)} scores for {len(hits)} passages (or a value that is not a finite "
            "number); fix the reranker"
        )
    order = sorted(range(len(hits)), key=lambda i: (-float(scores[i]), i))[:k]
    return [
        replace(
            hits[i],
            rank=rank,
            score=float(scores[i]),
            scores={**hits[i].scores, "rerank": float(scores[i])},
        )
        for rank, i in enumerate(order, start=1)
    ]
