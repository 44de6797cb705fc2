"""Embedders a client brings (``KnowledgeBase.with_embedder``, a LangChain model): the
owner embeds with them by asking the client, over the same connection, mid-call.

A model object cannot cross processes, and the owner decides what to embed (it
chunks, skips unchanged documents, embeds the query of a hybrid search). So while a
call of such a client runs, the owner's knowledge base has, for each model id the
client declared, a :class:`ClientEmbedder` whose ``embed_documents``/``embed_query``
send ``{"embed": texts, "model": id}`` (or ``"embed_query"``) on the connection and
read the vectors back; the client's link answers those lines until the call's own
answer comes. Vectors are checked for shape and normalised on arrival.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from hybridkb.embedders import normalize_rows
from hybridkb.errors import EmbeddingMismatch

__all__ = ["Ask", "ClientEmbedder", "answer_embedding"]

Ask = Callable[[dict[str, Any]], Any]


class ClientEmbedder:
    """An embedder that lives in the calling client (see the module docstring)."""

    def __init__(self, model_id: str, dim: int, ask: Ask) -> None:
        self.model_id = model_id
        self.dim = int(dim)
        self._ask = ask
        self._lock = threading.Lock()  # one question at a time on the connection

    def _vectors(self, message: dict[str, Any], rows: int) -> np.ndarray:
        with self._lock:
            found = self._ask(message)
        array = np.asarray(found, dtype=np.float32).reshape(-1, self.dim) if found else None
        if array is None or array.shape != (rows, self.dim):
            raise EmbeddingMismatch(
                f"{self.model_id}: the client sent vectors of the wrong shape; expected "
                f"{rows} x {self.dim}"
            )
        return normalize_rows(array)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """The vectors of ``texts``, asked of the client that owns the model."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._vectors({"embed": list(texts), "model": self.model_id}, len(texts))

    def embed_query(self, text: str) -> np.ndarray:
        """The query vector of ``text``, asked of the client that owns the model."""
        vector: np.ndarray = self._vectors({"embed_query": text, "model": self.model_id}, 1)[0]
        return vector


def answer_embedding(question: dict[str, Any], embedders: dict[str, Any]) -> list[Any] | None:
    """The client's answer to an owner's ``embed``/``embed_query`` line (None if the
    line is not one)."""
    if "embed" not in question and "embed_query" not in question:
        return None
    embedder = embedders[str(question.get("model"))]
    if "embed" in question:
        rows = embedder.embed_documents([str(t) for t in question["embed"]])
    else:
        rows = np.asarray(embedder.embed_query(str(question["embed_query"])))[None, :]
    return [[float(x) for x in row] for row in np.asarray(rows, dtype=np.float32)]
