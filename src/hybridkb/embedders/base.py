"""The embedder interface, a deterministic fake, and vector validation."""

from __future__ import annotations

import functools
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
# Words of a text whose squared counts sum below 2**24, exact in float32 in any order.
_EXACT_WORDS = 4096
_BLOCK_TEXTS = 1024


@functools.lru_cache(maxsize=1 << 16)
def _word_hash(word: str) -> int:
    """A word's 64-bit hash (words repeat: a bulk add hashes each once)."""
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")


class FakeEmbedder:
    """Deterministic bag-of-hashed-words embedder: no model, same text -> same vector.

    Texts sharing words get similar vectors, so ranking tests behave sensibly.
    Use ``model="fake"`` (64 dims) or ``model="fake:DIM"``.
    """

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.model_id = "fake" if dim == 64 else f"fake:{dim}"
        self.recipe = Recipe("fake", "fp32")

    def _vectors(self, texts: list[str]) -> np.ndarray:
        """The rows of ``texts``: each word adds +-1 to one of ``dim`` slots, then L2.

        Sums of +-1 are whole numbers, exact in any order, so one bincount over every
        word of every text gives the rows that adding the words one at a time in
        float32 gave, and the same norms while a row's squares sum below 2**24 (at most
        4096 words): bit for bit what the word-by-word loop gave, at half the CPU."""
        words = [_TOKEN.findall(text.lower()) for text in texts]
        lengths = np.fromiter(map(len, words), np.intp, len(words))
        all_words = [w for ws in words for w in ws]
        hashes = np.fromiter(map(_word_hash, all_words), np.uint64, len(all_words))
        rows = np.repeat(np.arange(len(texts), dtype=np.intp), lengths)
        slots = rows * self.dim + (hashes % np.uint64(self.dim)).astype(np.intp)
        signs = np.where((hashes >> np.uint64(32)) & np.uint64(1), 1.0, -1.0)
        counts = np.bincount(slots, weights=signs, minlength=len(texts) * self.dim)
        out = counts.astype(np.float32).reshape(len(texts), self.dim)
        norms = np.sqrt(np.square(counts).reshape(out.shape).sum(axis=1).astype(np.float32))
        for i in np.flatnonzero(lengths > _EXACT_WORDS):
            norms[i] = np.linalg.norm(out[i])  # float32 partial sums may round: as before
        empty = norms == 0.0
        out[empty, 0] = norms[empty] = 1.0  # empty text still needs a valid unit vector
        unit: np.ndarray = out / norms[:, None]
        return unit

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # A block at a time: the float64 counts of a block are its only temporaries.
        blocks = range(0, len(texts), _BLOCK_TEXTS)
        return np.concatenate([self._vectors(texts[i : i + _BLOCK_TEXTS]) for i in blocks])

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self._vectors([text])[0]
        return vector


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
