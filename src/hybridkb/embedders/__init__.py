"""Embedders: one interface (`Embedder`), loaded once per process per model id."""

from __future__ import annotations

import threading

from .base import Embedder, FakeEmbedder, normalize_rows, validate_vectors

__all__ = ["Embedder", "FakeEmbedder", "get_embedder", "normalize_rows", "validate_vectors"]

_CACHE: dict[tuple[str, str, str], Embedder] = {}
_LOCK = threading.Lock()


def get_embedder(
    model_id: str,
    *,
    device: str = "auto",
    backend: str = "torch",
    batch_size: int = 32,
    cache_dir: str | None = None,
) -> Embedder:
    """Return the embedder for ``model_id``, loading it at most once per process.

    ``fake`` / ``fake:DIM`` give the deterministic test embedder. ``backend`` picks the
    inference engine for real models: ``torch`` (sentence-transformers), ``onnx`` or
    ``onnx-int8`` (ONNX Runtime; exported once from the same weights, cached).
    """
    if model_id == "fake" or model_id.startswith("fake:"):
        dim = int(model_id.split(":", 1)[1]) if ":" in model_id else 64
        key = (model_id, "", "")
    else:
        key = (model_id, device, backend)
    with _LOCK:
        found = _CACHE.get(key)
        if found is not None:
            return found
        embedder: Embedder
        if model_id == "fake" or model_id.startswith("fake:"):
            embedder = FakeEmbedder(dim)
        elif backend.startswith("onnx"):
            from .onnx import OnnxEmbedder

            embedder = OnnxEmbedder(
                model_id,
                quantize=backend == "onnx-int8",
                batch_size=batch_size,
                cache_dir=cache_dir,
            )
        else:
            from .sentence import SentenceTransformerEmbedder

            embedder = SentenceTransformerEmbedder(model_id, device=device, batch_size=batch_size)
        _CACHE[key] = embedder
        return embedder
