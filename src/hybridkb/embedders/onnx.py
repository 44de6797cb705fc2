"""ONNX Runtime embedder: sentence-transformers vectors without torch at inference time.

The model's graph is built once, offline, into the cache dir from its own files (no
torch; :mod:`.onnx_build`); afterwards this module imports nothing but onnxruntime,
numpy and the ``tokenizers`` library, which keeps a cold start far below torch's import
time. The pipeline reproduces sentence-transformers for Transformer -> mean or CLS
Pooling -> (Normalize) models: same fast tokenizer, truncation at the model's
``max_seq_length``, the same pooling, L2 normalisation.

Texts are only ever batched with texts of the same token count, so no batch has padding:
the serving graph needs no attention mask and pools inside the graph (see
:func:`serving_graph`), and batches run concurrently, one ONNX Runtime thread each.

Cache layout (one folder per model id and weights hash, so changed weights re-export)::

    {cache_dir}/onnx/{model-slug}-{sha256(weights)[:16]}/v{EXPORT_VERSION}/
        model-raw.onnx       the transformer's graph (fp32, token vectors), built by
                             onnx_build.py (or torch.onnx.export for other models)
        model.onnx           the same graph with BERT fusions (Attention, SkipLayerNorm, ...)
        model-serve.onnx     model.onnx without the attention mask, with plain LayerNorms and
                             mean pooling + L2 normalisation inside: what backend ``onnx`` runs
        model-serve-int8-*.onnx   dynamic int8 weights of model-serve.onnx, one per recipe
        .lock                held while exporting, so concurrent exporters wait
        mapped/              what a session loads: copies of those with the weights in a
                             side file that ONNX Runtime memory-maps (``ensure_mapped``)
        graphs.json          the sha256 of each graph above (mapped copies included) and of
                             the tokenizer, checked before a load (``onnx_files``)

Every file is written to a temporary name and moved into place with ``os.replace``, so a
reader never sees half a model, and each graph is verified against the first before it is kept.
Every folder here is private (0700, checked: ``private_files.private_folder``), every file 0600.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MissingDependency, attempt_import
from ..lifecycle import map_in_threads
from .onnx_export import DEFAULT_INT8, Int8Recipe, ensure_exported, ensure_mapped
from .onnx_model import (
    feed,
    load_tokenizer,
    model_folder,
    normalize,
    pool,
    read_spec,
    session,
    spec_text,
)
from .recipe import Recipe


def physical_cores() -> int:
    """Physical cores this process may use (hyper-threads don't help GEMM-bound inference)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        usable = os.cpu_count() or 1
    cores = 0
    with contextlib.suppress(OSError):
        pairs = set()
        physical = ""
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "physical id":
                physical = value.strip()
            elif key.strip() == "core id":
                pairs.add((physical, value.strip()))
        cores = len(pairs)
    if not cores:
        with contextlib.suppress(ImportError):
            import psutil

            cores = psutil.cpu_count(logical=False) or 0
    return max(1, min(usable, cores or usable))


def length_batches(lengths: list[int], batch_size: int, max_tokens: int) -> list[list[int]]:
    """Group text indices of equal token count, longest first: batches are never padded.

    A batch holds at most ``batch_size`` texts and at most ``max_tokens`` tokens, but
    always at least one text.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (
            lengths[i] != lengths[current[0]]
            or len(current) >= batch_size
            or (len(current) + 1) * lengths[i] > max_tokens
        ):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


class OnnxEmbedder:
    """A sentence-transformers mean-pooling model run by ONNX Runtime on CPU.

    Texts are tokenised, grouped by token count (:func:`length_batches`: no padding) and
    the groups run concurrently on ``workers`` threads, each ONNX call on ``threads``
    intra-op threads. On 2 cores (bench/embed.py) one thread per call and a call per core
    were 1.5x faster than one call spread over both cores (no per-operator hand-over,
    which stalls whenever a busy machine preempts one of the threads), and batches of
    <= 256 tokens 1.65x faster than batches of 32 texts (a batch's activations stay in the
    core's L2 cache).

    Args:
        model_id: sentence-transformers model name or folder (the packaged
            ``all-MiniLM-L6-v2`` by default elsewhere).
        quantize: ``True`` for int8 weights (:data:`DEFAULT_INT8`), an
            :class:`Int8Recipe`, or ``False`` for fp32.
        batch_size: at most this many texts per ONNX call.
        max_batch_tokens: at most this many tokens per ONNX call (at least one text).
        cache_dir: where exports are kept; default ``~/.cache/hybridkb``.
        workers: ONNX calls in flight at once; default the physical cores.
        threads: intra-op threads per call.
        graph: ``"serve"`` (default), or ``"fused"`` / ``"raw"`` for comparison
            (see :func:`ensure_exported`).
    """

    def __init__(
        self,
        model_id: str,
        *,
        quantize: bool | Int8Recipe = False,
        batch_size: int = 32,
        max_batch_tokens: int = 256,
        cache_dir: str | os.PathLike[str] | None = None,
        workers: int | None = None,
        threads: int = 1,
        graph: str = "serve",
    ) -> None:
        ort = attempt_import("onnxruntime", "onnx")
        self.model_id = model_id
        int8 = DEFAULT_INT8 if quantize is True else quantize or None
        self.recipe = (
            Recipe("onnx", "int8", int8=int8.to_dict(), int8_key=int8.key)
            if int8
            else Recipe("onnx", "fp32")
        )
        self.batch_size = max(1, int(batch_size))
        self.max_batch_tokens = max(1, int(max_batch_tokens))
        self._spec = read_spec(model_id, model_folder(model_id))
        self.onnx_path = ensure_exported(
            model_id, quantize=quantize, graph=graph, cache_dir=cache_dir, spec=self._spec
        )
        self.workers = max(1, int(workers or physical_cores()))
        self.threads = max(1, int(threads))
        try:
            served = ensure_mapped(self.onnx_path)  # loads ~4x faster (ensure_mapped says why)
        except (OSError, MissingDependency):
            # A cache that cannot take the copy, or no `onnx` package to write it (inference
            # needs only onnxruntime): the same model from its own file, slower to load.
            served = self.onnx_path
        # Two sessions, each made when first needed: a lone call (a query, a small add)
        # gets every core, since nothing else runs beside it (a short query on 2 cores:
        # int8 5.7 -> 4.4 ms p50, fp32 10.3 -> 7.4 ms); the calls of a large add run
        # ``workers`` at a time with ``threads`` each (see the class docstring). A search
        # process only ever makes the first.
        self._ort, self._served = ort, served
        self._sessions: dict[int, Any] = {}
        self._sessions_lock = threading.Lock()
        self.lone_threads = max(self.threads, physical_cores())
        first = self._session(self.lone_threads)
        self._inputs = [i.name for i in first.get_inputs()]
        self._tokenizer = load_tokenizer(self._spec)
        # encode_batch_fast (tokenizers >= 0.21) skips the character offsets we never use.
        self._encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        self.max_tokens = self._spec.max_seq_length
        hidden = first.get_outputs()[0].shape[-1]
        self.dim = hidden if isinstance(hidden, int) else 0
        if not self.dim:  # symbolic in the graph: ask the model
            self.dim = int(self.embed_documents(["dim"]).shape[1])

    def _session(self, threads: int) -> Any:
        with self._sessions_lock:
            found = self._sessions.get(threads)
            if found is None:
                found = self._sessions[threads] = session(self._ort, self._served, threads)
            return found

    def _run(self, ids: np.ndarray, threads: int) -> np.ndarray:
        """Unit vectors for one batch of equal-length token rows."""
        mask = np.ones_like(ids)
        out = self._session(threads).run(None, feed(self._inputs, ids, mask))[0]
        if out.ndim == 3:  # the plain export returns token vectors
            return normalize(pool(out, mask, self._spec.pooling))
        return np.asarray(out, dtype=np.float32)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """Return an (n, dim) float32 array in input order, rows L2-normalised."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = [e.ids for e in self._encode([spec_text(t, self._spec) for t in texts])]
        batches = length_batches([len(r) for r in rows], self.batch_size, self.max_batch_tokens)
        token_ids = [np.array([rows[i] for i in b], dtype=np.int64) for b in batches]
        results: Iterable[np.ndarray]
        if len(batches) == 1:
            results = [self._run(token_ids[0], self.lone_threads)]
        elif self.workers == 1:
            results = (self._run(ids, self.threads) for ids in token_ids)
        else:  # longest first, so the last calls to finish are short ones
            # Threads of this call only: a library's add leaves none running (issue 33);
            # starting them costs microseconds beside a batch's milliseconds.
            results = map_in_threads(
                lambda ids: self._run(ids, self.threads), token_ids, self.workers, "hybridkb-onnx"
            )
        out = np.empty((0, 0), dtype=np.float32)
        for batch, vectors in zip(batches, results, strict=True):
            if not out.size:
                out = np.empty((len(texts), vectors.shape[-1]), dtype=np.float32)
            out[batch] = vectors
        return out

    def embed_query(self, text: str) -> np.ndarray:
        """Return a (dim,) float32 vector, L2-normalised."""
        return np.asarray(self.embed_documents([text])[0], dtype=np.float32)
