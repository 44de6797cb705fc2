"""The embedder interface, a deterministic fake, and vector validation."""

from __future__ import annotations

import hashlib
import re
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import EmbeddingMismatch
from .recipe import Recipe


@runtime_checkable
class Embedder(Protocol):
    """Turns text into L2-normalised float32 vectors of a fixed dimension."""

    model_id: str
    dim: int

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """Return an (n, dim) float32 array, rows L2-normalised."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Return a (dim,) float32 vector, L2-normalised."""
        ...


# The extra that brings torch and sentence-transformers (pyproject.toml): for models the
# torch-free graph builder cannot read, and for HYBRIDKB_EMBEDDING_BACKEND=torch.
TORCH_EXTRA = "sentence-transformers"

_TOKEN = re.compile(r"\w+", re.UNICODE)


class FakeEmbedder:
    """Deterministic bag-of-hashed-words embedder: no model, same text -> same vector.

    Texts sharing words get similar vectors, so ranking tests behave sensibly.
    Use ``model="fake"`` (64 dims) or ``model="fake:DIM"``.
    """

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.model_id = "fake" if dim == 64 else f"fake:{dim}"
        self.recipe = Recipe("fake", "fp32")

    def _one(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        for token in _TOKEN.findall(text.lower()):
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            h = int.from_bytes(digest, "little")
            vec[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            # Empty text still needs a valid unit vector.
            vec[0] = 1.0
            norm = 1.0
        return vec / norm

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._one(t) for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise rows (float32); zero rows are left as zero for validation to catch."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(norms > 0, vectors / norms, vectors)
    return out.astype(np.float32)


def validate_vectors(vectors: np.ndarray, dim: int, *, what: str = "vectors") -> np.ndarray:
    """Refuse vectors that would poison a table: wrong shape, NaN/inf, or zero norm.

    One NaN element makes every cosine scan of a DuckDB table fail (measured), so
    this runs before anything is written.
    """
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise EmbeddingMismatch(
            f"{what}: expected dimension {dim}, got shape {tuple(arr.shape)}; "
            "use the collection's own embedding model"
        )
    if not np.isfinite(arr).all():
        raise EmbeddingMismatch(
            f"{what}: contains NaN or infinite values; check the embedding model"
        )
    norms = np.linalg.norm(arr, axis=1)
    if (norms < 1e-12).any():
        raise EmbeddingMismatch(f"{what}: contains a zero-norm vector; check the embedding model")
    return arr
