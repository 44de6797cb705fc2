"""Embedders: one interface (`Embedder`), loaded once per process per model and recipe.

ONNX Runtime is the default inference path: it imports in a fraction of torch's time
and runs 1.7x faster on 2 cores in float32. The graph of a BERT-family model is built
from its own files without torch (onnx_build.py); torch (sentence-transformers, the
``sentence-transformers`` extra) exports other models once, and serves models that
cannot be exported, with a warning.
"""

from __future__ import annotations

import threading
import warnings
from importlib.util import find_spec

from ..errors import MissingDependency, ModelUnavailable, NotExportable
from ..lifecycle import process_owned
from .base import TORCH_EXTRA, Embedder, FakeEmbedder, normalize_rows, validate_vectors
from .progress import preparation
from .recipe import FP32_ONNX, Recipe, cache_key, recipe_of

__all__ = [
    "BACKENDS",
    "Embedder",
    "FakeEmbedder",
    "Recipe",
    "cache_key",
    "get_embedder",
    "normalize_rows",
    "recipe_of",
    "validate_vectors",
]

# auto: ONNX, int8 where measured faster and equivalent on this CPU (precision.py).
BACKENDS = ("auto", "onnx", "onnx-int8", "torch")

_CACHE: dict[tuple[str, ...], Embedder] = {}
# Keys of ``auto`` embedders loaded in float32 while int8 was still being judged.
_STAND_INS: set[tuple[str, ...]] = set()
_LOCK = threading.Lock()


def get_embedder(
    model_id: str,
    *,
    device: str = "auto",
    backend: str = "auto",
    batch_size: int = 32,
    cache_dir: str | None = None,
    recipe: Recipe | None = None,
) -> Embedder:
    """Return the embedder for ``model_id``, loading it at most once per process.

    ``fake`` / ``fake:DIM`` give the deterministic test embedder. ``recipe`` is the one a
    collection was made with: its vectors' precision wins over ``backend`` (an int8
    collection is always queried with its own int8 recipe; a float32 one with float32,
    by ONNX unless ``backend`` is ``torch``). Without a recipe (a new collection),
    ``backend`` decides: ``auto`` (ONNX; int8 only where measured better on this CPU),
    ``onnx`` (float32), ``onnx-int8`` (the default int8 recipe) or ``torch``.

    With ``auto`` and no verdict on int8 for this CPU yet, the float32 graph serves at
    once, and int8 is judged in the background (:mod:`.judge`) where a program owns the
    process (:func:`hybridkb.lifecycle.own_process`: the CLI, ``hybridkb mcp``; a library's
    first use starts no process, and ``hybridkb setup`` judges); once the verdict is in,
    the next call loads what it chose. Collections keep the recipe they were made with.
    """
    if model_id == "fake" or model_id.startswith("fake:"):
        dim = int(model_id.split(":", 1)[1]) if ":" in model_id else 64
        with _LOCK:
            return _CACHE.setdefault((model_id,), FakeEmbedder(dim))
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    family = recipe.family if recipe else ""
    key = (model_id, device, backend, family)
    with _LOCK:
        found = _CACHE.get(key)
        if found is not None and key in _STAND_INS and _judged(model_id, cache_dir):
            found = None  # int8 was judged since: load what the verdict chose
        if found is None:
            _STAND_INS.discard(key)
            with preparation():  # one message and one bar for an export and the int8 trials
                found = _load(model_id, device, backend, batch_size, cache_dir, recipe)
            stand_in = backend == "auto" and recipe is None and recipe_of(found) == FP32_ONNX
            if stand_in and not _judged(model_id, cache_dir):
                _STAND_INS.add(key)
                if process_owned():  # a library's first use starts no process
                    _judge_later(model_id, cache_dir)
            _CACHE[key] = found
        return found


def _judged(model_id: str, cache_dir: str | None) -> bool:
    from .precision import verdict_ready

    return verdict_ready(model_id, cache_dir)


def _judge_later(model_id: str, cache_dir: str | None) -> None:
    # Imported here: `python -m hybridkb.embedders.judge` imports this package first.
    from .judge import judge_later

    try:
        judge_later(model_id, cache_dir)
    except OSError as exc:  # no process to spare, a cache that cannot take the log
        warnings.warn(
            f"{model_id}: int8 not judged ({exc}); float32 serves; `hybridkb setup` judges it",
            RuntimeWarning,
            stacklevel=4,
        )


def _load(
    model_id: str,
    device: str,
    backend: str,
    batch_size: int,
    cache_dir: str | None,
    recipe: Recipe | None,
) -> Embedder:
    if recipe is not None and recipe.precision == "int8":
        return _onnx_int8(model_id, batch_size, cache_dir, recipe)
    if backend != "torch":
        try:
            return _onnx(model_id, backend if recipe is None else "onnx", batch_size, cache_dir)
        except (NotExportable, MissingDependency) as exc:
            if find_spec("sentence_transformers") is None:  # torch is an extra: say which
                if isinstance(exc, MissingDependency):
                    raise
                raise MissingDependency(
                    f"{exc.args[0] if exc.args else exc}; or serve it with torch: "
                    f"pip install 'hybridkb[{TORCH_EXTRA}]'"
                ) from exc
            warnings.warn(
                f"{model_id}: using sentence-transformers (torch), not ONNX Runtime: {exc}",
                RuntimeWarning,
                stacklevel=4,
            )
    from .sentence import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(model_id, device=device, batch_size=batch_size)


def _onnx(model_id: str, backend: str, batch_size: int, cache_dir: str | None) -> Embedder:
    from .onnx import OnnxEmbedder
    from .onnx_export import DEFAULT_INT8, Int8Recipe

    quantize: bool | Int8Recipe = False
    if backend == "onnx-int8":
        quantize = DEFAULT_INT8
    elif backend == "auto":
        from .precision import choose_int8, verdict_ready

        # Not judged yet: float32 now, judged in the background (get_embedder).
        if verdict_ready(model_id, cache_dir):
            quantize = choose_int8(model_id, cache_dir) or False
    return OnnxEmbedder(model_id, quantize=quantize, batch_size=batch_size, cache_dir=cache_dir)


def _onnx_int8(model_id: str, batch_size: int, cache_dir: str | None, recipe: Recipe) -> Embedder:
    from .onnx import OnnxEmbedder
    from .onnx_export import Int8Recipe

    try:
        return OnnxEmbedder(
            model_id,
            quantize=Int8Recipe.from_dict(recipe.int8),
            batch_size=batch_size,
            cache_dir=cache_dir,
        )
    except (NotExportable, MissingDependency) as exc:
        raise ModelUnavailable(
            f"{model_id}: this collection's vectors are int8 ({recipe.int8_key}), which needs "
            f"ONNX Runtime ({exc}); install hybridkb with its default dependencies, or "
            "re-embed the collection"
        ) from exc
