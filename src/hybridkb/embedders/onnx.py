"""ONNX Runtime embedder: sentence-transformers vectors without torch at inference time.

The model is exported once, offline, into the cache dir (torch and transformers are
needed for that step only); afterwards this module imports nothing but onnxruntime,
numpy and the ``tokenizers`` library, which keeps a cold start far below torch's import
time. The pipeline reproduces sentence-transformers exactly for Transformer -> mean
Pooling -> (Normalize) models: same fast tokenizer, truncation at the model's
``max_seq_length``, mean over the tokens, L2 normalisation.

Texts are only ever batched with texts of the same token count, so no batch has padding:
the serving graph needs no attention mask and pools inside the graph (see
:func:`_serving_graph`), and batches run concurrently, one ONNX Runtime thread each.

Cache layout (one folder per model id and weights hash, so changed weights re-export)::

    {cache_dir}/onnx/{model-slug}-{sha256(weights)[:16]}/v{EXPORT_VERSION}/
        model-raw.onnx       torch.onnx.export of the transformer (fp32, token vectors)
        model.onnx           the same graph with BERT fusions (Attention, SkipLayerNorm, ...)
        model-serve.onnx     model.onnx without the attention mask, with plain LayerNorms and
                             mean pooling + L2 normalisation inside: what backend ``onnx`` runs
        model-serve-int8-*.onnx   dynamic int8 weights of model-serve.onnx, one per recipe
        .lock                held while exporting, so concurrent exporters wait

Every file is written to a temporary name and moved into place with ``os.replace``, so a
reader never sees half a model, and the export is verified against torch before it is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, MissingDependency, ModelUnavailable, attempt_import
from .sentence import resolve_model_source

# Bump when the export recipe changes so stale cached graphs are not reused.
# v2: the serving graph (no mask, unfused LayerNorms, pooling in the graph).
EXPORT_VERSION = 2
RAW_FILE = "model-raw.onnx"
FUSED_FILE = "model.onnx"
SERVE_FILE = "model-serve.onnx"
# The serving graph's output: (batch, hidden) mean-pooled, unit-length vectors.
POOLED_OUTPUT = "sentence_embedding"
# ORT would fuse the serving graph's Add + LayerNormalization back into its
# SkipLayerNormalization kernel, which is ~4x slower per call on CPU (a scalar loop; the
# unfused pair made int8 MiniLM ~20% faster end to end).
_DISABLED_ORT_FUSIONS = ["SkipLayerNormFusion"]
# Probe texts for export-time verification: different lengths so padding is exercised,
# and one longer than any max_seq_length so truncation is too.
_PROBES = [
    "Hello world.",
    "Mean pooling must ignore padded positions in a batch of unequal lengths.",
    "",
    " ".join(["Depreciation spreads the cost of an asset over its useful life."] * 60),
]
_MIN_EXPORT_COSINE = 0.9999


@dataclass(frozen=True)
class Int8Recipe:
    """How ``onnx-int8`` quantises: dynamic (activation scales per batch), int8 weights.

    Attributes:
        per_channel: one scale per output column instead of per tensor (per tensor drifts
            to cosine ~0.87 on SciFact; per channel stays above 0.988).
        weight_type: ``"s8"`` (QInt8) or ``"u8"`` (QUInt8). Activations are u8, and ORT's
            u8 x s8 GEMM runs on AMX / AVX-512 VNNI where u8 x u8 does not: u8 weights
            were 2.6x slower end to end on a Xeon with AMX.
        op_types: ONNX ops to quantise; ``EmbedLayerNormalization`` is the (fused)
            embedding tables: int8 there shrinks the file from 56 to 22 MB.
        exclude: regular expressions; matching node names stay fp32 (sensitive layers).
    """

    per_channel: bool = True
    weight_type: str = "s8"
    op_types: tuple[str, ...] = ("MatMul", "Attention", "EmbedLayerNormalization")
    exclude: tuple[str, ...] = ()
    name: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        """Short stable id used in the cache file name."""
        text = json.dumps(
            [self.per_channel, self.weight_type, list(self.op_types), list(self.exclude)]
        )
        return (self.name + "-" if self.name else "") + hashlib.sha1(text.encode()).hexdigest()[:8]


# Chosen by bench/embed.py (figures in bench/results/embed.json): on SciFact, per-channel
# int8 everywhere on the serving graph is within 0.005 nDCG@10 of torch fp32 (limit 0.01)
# at ~3.8x its throughput on 2 cores; keeping the embeddings or the FFN outputs fp32
# gained <0.002 nDCG and cost speed or size (measured on the v1 graph).
DEFAULT_INT8 = Int8Recipe(name="pc")


@dataclass(frozen=True)
class ModelSpec:
    """What the sentence-transformers folder says about tokenising and pooling."""

    folder: Path
    weights: Path
    max_seq_length: int
    do_lower_case: bool


def default_cache_dir() -> Path:
    """``$HYBRIDKB_CACHE_DIR``, else ``$XDG_CACHE_HOME/hybridkb`` or ``~/.cache/hybridkb``."""
    explicit = os.environ.get("HYBRIDKB_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "hybridkb"


def model_folder(model_id: str) -> Path:
    """The local folder holding ``model_id`` (packaged copy, a path, or the HF hub cache)."""
    source = resolve_model_source(model_id)
    if os.path.isdir(source):
        return Path(source)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id=source))
    except Exception as exc:  # hub errors: offline, unknown repo, bad id
        raise ModelUnavailable(
            f"cannot find embedding model {model_id!r} locally ({exc}); set HYBRIDKB_MODEL to "
            "an installed sentence-transformers model folder"
        ) from exc


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def read_spec(model_id: str, folder: Path) -> ModelSpec:
    """Check the folder is Transformer -> mean Pooling [-> Normalize] and read its limits."""
    modules_file = folder / "modules.json"
    modules: list[dict[str, Any]] = (
        json.loads(modules_file.read_text(encoding="utf-8")) if modules_file.exists() else []
    )
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind in ("Transformer", "Normalize"):
            continue
        if kind != "Pooling":
            raise ModelUnavailable(
                f"{model_id}: module {kind!r} is not supported by the ONNX backend (only "
                "Transformer, mean Pooling and Normalize are); use HYBRIDKB_EMBEDDING_BACKEND=torch"
            )
        pooling = _read_json(folder / str(module.get("path", "")) / "config.json")
        modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v is True)
        if isinstance(pooling.get("pooling_mode"), str):  # newer configs name the mode
            modes = [f"pooling_mode_{pooling['pooling_mode']}_tokens"]
        if modes != ["pooling_mode_mean_tokens"]:
            raise ModelUnavailable(
                f"{model_id}: pooling {modes or 'unknown'} is not supported by the ONNX backend "
                "(only mean pooling is); use HYBRIDKB_EMBEDDING_BACKEND=torch"
            )
    if not (folder / "tokenizer.json").exists():
        raise ModelUnavailable(
            f"{model_id}: no tokenizer.json (fast tokenizer) in {folder}; the ONNX backend "
            "needs one; use HYBRIDKB_EMBEDDING_BACKEND=torch"
        )
    weights = next(
        (folder / n for n in ("model.safetensors", "pytorch_model.bin") if (folder / n).exists()),
        None,
    )
    if weights is None:
        raise ModelUnavailable(f"{model_id}: no model.safetensors or pytorch_model.bin in {folder}")
    sbert = _read_json(folder / "sentence_bert_config.json")
    config = _read_json(folder / "config.json")
    # Same rule as sentence-transformers: its max_seq_length, else the tokenizer's limit,
    # never beyond the position table.
    limit = sbert.get("max_seq_length") or _read_json(folder / "tokenizer_config.json").get(
        "model_max_length"
    )
    positions = config.get("max_position_embeddings")
    if not isinstance(limit, int | float) or limit <= 0 or limit > 1_000_000:
        limit = positions or 512
    if isinstance(positions, int) and positions > 0:
        limit = min(int(limit), positions)
    return ModelSpec(folder, weights, int(limit), bool(sbert.get("do_lower_case", False)))


def _weights_digest(weights: Path, cache_root: Path) -> str:
    """sha256 of the weights, remembered per (path, size, mtime): hashing costs ~0.3 s."""
    st = weights.stat()
    stamp = f"{weights.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    memo = cache_root / "onnx" / "digests" / (hashlib.sha1(stamp.encode()).hexdigest() + ".txt")
    with contextlib.suppress(OSError):
        digest = memo.read_text(encoding="ascii").strip()
        if re.fullmatch(r"[0-9a-f]{64}", digest):
            return digest
    with weights.open("rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    with contextlib.suppress(OSError):
        _atomic_write(memo, lambda tmp: tmp.write_text(digest, encoding="ascii"))
    return digest


def export_dir(model_id: str, spec: ModelSpec, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The cache folder for this model id and these exact weights."""
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("._")[:80] or "model"
    digest = _weights_digest(spec.weights, root)[:16]
    return root / "onnx" / f"{slug}-{digest}" / f"v{EXPORT_VERSION}"


def _atomic_write(target: Path, write: Callable[[Path], object]) -> None:
    """Let ``write`` fill a temp file next to ``target``, then move it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def _export_lock(folder: Path) -> Iterator[None]:
    """Exclusive lock across processes; the OS drops it if the holder dies."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
            import msvcrt

            while True:
                try:
                    msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
                    break
                except OSError:  # LK_LOCK gives up after ~10 s; an export takes longer
                    time.sleep(1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((_normalize(a) * _normalize(b)).sum(axis=1), dtype=np.float32)


def _normalize(vectors: np.ndarray) -> np.ndarray:
    # Same epsilon as torch.nn.functional.normalize, which sentence-transformers uses.
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.asarray(vectors / np.maximum(norms, 1e-12), dtype=np.float32)


def _export_fp32(spec: ModelSpec, folder: Path, model_id: str) -> dict[str, Any]:
    """torch.onnx.export the transformer, fuse it for ORT, verify both against torch."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise MissingDependency(
            f"exporting {model_id} to ONNX needs torch and transformers (once, then cached); "
            "run: pip install sentence-transformers"
        ) from exc
    import inspect
    import warnings

    # Eager attention exports the plain MatMul/Softmax pattern ORT's BERT fusion recognises
    # (the SDPA export was slower and does not fuse).
    model = AutoModel.from_pretrained(str(spec.folder), attn_implementation="eager")
    model = model.float().eval()
    wants_types = "token_type_ids" in inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if wants_types else [])

    class Wrapper(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(names, args, strict=True))).last_hidden_state  # type: ignore[no-any-return]

    tokenizer = _load_tokenizer(spec)
    ids, mask = _encode(tokenizer, [spec_text(t, spec) for t in _PROBES], spec.max_seq_length)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    with torch.inference_mode():
        tensors = [torch.from_numpy(feeds[n]) for n in names]
        reference = _mean_pool(
            model(**dict(zip(names, tensors, strict=True))).last_hidden_state.numpy(), mask
        )

    ort = attempt_import("onnxruntime", "onnx")
    raw = folder / RAW_FILE

    def write_raw(tmp: Path) -> None:
        dynamic = {n: {0: "batch", 1: "sequence"} for n in [*names, "token_embeddings"]}
        with warnings.catch_warnings(), torch.no_grad():
            # TracerWarnings about shape checks are expected; they must not fail under -W error.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Wrapper(model),
                tuple(torch.from_numpy(feeds[n][:2, :16].copy()) for n in names),
                str(tmp),
                dynamo=False,  # the dynamo exporter needs onnxscript and does not fuse as well
                input_names=names,
                output_names=["token_embeddings"],
                dynamic_axes=dynamic,
                opset_version=17,
                do_constant_folding=True,
            )
        got = _mean_pool(_session(ort, tmp, 1).run(None, _feed(names, ids, mask))[0], mask)
        worst = float(_cosines(got, reference).min())
        if worst < _MIN_EXPORT_COSINE:
            raise ModelUnavailable(
                f"{model_id}: the ONNX export does not reproduce torch (cosine {worst:.4f}); "
                "use HYBRIDKB_EMBEDDING_BACKEND=torch"
            )

    _atomic_write(raw, write_raw)
    meta: dict[str, Any] = {"inputs": names, "fused": False}

    def write_fused(tmp: Path) -> None:
        from onnxruntime.transformers.optimizer import optimize_model

        config = _read_json(spec.folder / "config.json")
        optimized = optimize_model(
            str(raw),
            model_type="bert",
            num_heads=int(config.get("num_attention_heads", 0)),
            hidden_size=int(config.get("hidden_size", 0)),
            opt_level=0,  # python fusions only: the file must stay hardware-neutral
        )
        optimized.save_model_to_file(str(tmp))
        got = _mean_pool(_session(ort, tmp, 1).run(None, _feed(names, ids, mask))[0], mask)
        meta["fused_ops"] = {
            k: v for k, v in optimized.get_fused_operator_statistics().items() if v
        }
        meta["fused_min_cosine"] = float(_cosines(got, reference).min())
        if meta["fused_min_cosine"] >= _MIN_EXPORT_COSINE:
            meta["fused"] = True
        else:  # a fusion that changes the numbers is worse than none: keep the plain graph
            tmp.write_bytes(raw.read_bytes())

    _atomic_write(folder / FUSED_FILE, write_fused)
    hidden = int(_read_json(spec.folder / "config.json").get("hidden_size", 0) or 0)

    def write_serving(tmp: Path) -> None:
        # Each probe alone: the serving graph only ever sees batches without padding.
        def worst(path: Path) -> float:
            session = _session(ort, path, 1)
            inputs = [i.name for i in session.get_inputs()]
            got = np.concatenate(
                [
                    session.run(None, _feed(inputs, ids[i : i + 1, :n], mask[i : i + 1, :n]))[0]
                    for i, n in enumerate(mask.sum(axis=1))
                ]
            )
            return float(_cosines(got, reference).min())

        onnx = attempt_import("onnx", "onnx")

        def build(strip: bool) -> float:
            onnx.save(_serving_graph(onnx, folder / FUSED_FILE, strip, hidden), tmp)
            return worst(tmp)

        errors: list[str] = []

        def attempt(strip: bool) -> float:
            try:
                return build(strip)
            except Exception as exc:  # noqa: BLE001 - ORT rejects a layout we did not expect
                errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                return -1.0

        # Mask-free only when the fusion gave the structure _serving_graph edits.
        strip = bool(meta["fused"])
        cosine = attempt(strip)
        if cosine < _MIN_EXPORT_COSINE and strip:
            strip = False  # keep the mask input (fed all ones)
            cosine = attempt(strip)
        meta["serving_min_cosine"] = cosine
        if cosine < _MIN_EXPORT_COSINE:
            why = errors[-1] if cosine == -1.0 and errors else f"cosine {cosine:.4f}"
            raise ModelUnavailable(
                f"{model_id}: the ONNX serving graph does not reproduce torch ({why}); "
                "use HYBRIDKB_EMBEDDING_BACKEND=torch"
            )
        meta["serving_mask_free"] = strip

    _atomic_write(folder / SERVE_FILE, write_serving)
    return meta


def _serving_graph(onnx: Any, source: Path, strip_mask: bool, hidden: int) -> Any:
    """``source`` rewritten for batches without padding (each measured, bench/embed.py).

    Together these made int8 MiniLM 1.38x faster than on the fused graph (bench/embed.py,
    ``int8-fused-graph``); one by one, measured separately:

    * ``strip_mask``: the attention mask leaves the graph (fused graphs only). With a
      mask ORT's Attention kernel builds and adds a (batch, seq, seq) mask per layer;
      without padding that is pure overhead (~7%).
    * SkipLayerNormalization becomes Add + LayerNormalization (~20%; see
      _DISABLED_ORT_FUSIONS).
    * Mean pooling and L2 normalisation happen in the graph, so a run returns (batch,
      hidden) instead of copying every token vector out to numpy (~2%). A plain mean is
      right because no batch is padded.
    """
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    model = onnx.load(str(source))
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    nodes = []
    for node in graph.node:
        if strip_mask and node.op_type == "Attention":
            del node.input[3:]  # mask_index; past and extra inputs are unused by BERT
        elif strip_mask and node.op_type == "EmbedLayerNormalization":
            del node.input[7:]  # the mask; its mask_index output stays (required) but unused
        elif strip_mask and node.op_type == "Cast" and node.input[0] == "attention_mask":
            continue
        if node.op_type == "SkipLayerNormalization" and not any(node.output[1:]):
            epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-12)
            summed = node.input[0]
            if len(node.input) > 4 and node.input[4]:  # bias
                nodes.append(helper.make_node("Add", [summed, node.input[4]], [f"{node.name}_b"]))
                summed = f"{node.name}_b"
            nodes.append(helper.make_node("Add", [summed, node.input[1]], [f"{node.name}_s"]))
            nodes.append(
                helper.make_node(
                    "LayerNormalization",
                    [f"{node.name}_s", node.input[2], node.input[3]],
                    [node.output[0]],
                    name=f"{node.name}_LayerNorm",
                    axis=-1,
                    epsilon=epsilon,
                )
            )
            continue
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    if strip_mask:
        for value in [i for i in graph.input if i.name == "attention_mask"]:
            graph.input.remove(value)
    tokens = graph.output[0].name
    graph.initializer.append(numpy_helper.from_array(np.array(1e-12, np.float32), "l2_floor"))

    def reduce(op: str, source: str, target: str, keepdims: int) -> Any:
        if opset < 18:  # axes became an input in opset 18
            return helper.make_node(op, [source], [target], axes=[1], keepdims=keepdims)
        return helper.make_node(op, [source, "pool_axis"], [target], keepdims=keepdims)

    if opset >= 18:
        graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "pool_axis"))
    graph.node.extend(
        [
            reduce("ReduceMean", tokens, "pooled", 0),
            reduce("ReduceL2", "pooled", "pooled_norm", 1),
            # Same floor as torch.nn.functional.normalize, which sentence-transformers uses.
            helper.make_node("Max", ["pooled_norm", "l2_floor"], ["pooled_norm_floor"]),
            helper.make_node("Div", ["pooled", "pooled_norm_floor"], [POOLED_OUTPUT]),
        ]
    )
    del graph.output[:]
    graph.output.append(
        helper.make_tensor_value_info(
            POOLED_OUTPUT, onnx.TensorProto.FLOAT, ["batch", hidden or "hidden"]
        )
    )
    return model


def _quantize(fp32: Path, target: Path, recipe: Int8Recipe) -> None:
    """Dynamic int8 quantisation of ``fp32`` into ``target`` (no torch needed)."""
    onnx = attempt_import("onnx", "onnx")
    quantization = attempt_import("onnxruntime.quantization", "onnx")
    graph_nodes = [n.name for n in onnx.load(str(fp32), load_external_data=False).graph.node]
    exclude = [n for n in graph_nodes if any(re.search(p, n) for p in recipe.exclude)]
    weight_type = (
        quantization.QuantType.QInt8
        if recipe.weight_type == "s8"
        else quantization.QuantType.QUInt8
    )

    def write(tmp: Path) -> None:
        # quantize_dynamic logs a pre-processing hint meant for static (calibrated) quantisation.
        logging.getLogger().addFilter(_drop_preprocess_hint)
        try:
            quantization.quantize_dynamic(
                str(fp32),
                str(tmp),
                weight_type=weight_type,
                per_channel=recipe.per_channel,
                op_types_to_quantize=list(recipe.op_types),
                nodes_to_exclude=exclude,
                # Fused contrib ops have no ONNX shape inference; their tensors are float.
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        finally:
            logging.getLogger().removeFilter(_drop_preprocess_hint)

    _atomic_write(target, write)


def _drop_preprocess_hint(record: logging.LogRecord) -> bool:
    return "pre-processing before quantization" not in record.getMessage()


def ensure_exported(
    model_id: str,
    *,
    quantize: bool | Int8Recipe = False,
    graph: str = "serve",
    cache_dir: str | os.PathLike[str] | None = None,
    spec: ModelSpec | None = None,
) -> Path:
    """Return the cached .onnx file for ``model_id``, exporting it first if needed.

    Args:
        model_id: sentence-transformers model name or folder.
        quantize: ``True`` for the default int8 recipe, an :class:`Int8Recipe`, or ``False``.
        graph: which fp32 graph to run or quantise: ``"serve"`` (the backend's),
            ``"fused"`` (BERT fusions, with mask) or ``"raw"`` (the plain export); the
            last two are for comparison in bench/embed.py.
        cache_dir: cache root; default ``~/.cache/hybridkb``.
        spec: the model's spec if already read.
    """
    spec = spec or read_spec(model_id, model_folder(model_id))
    folder = export_dir(model_id, spec, cache_dir)
    recipe = DEFAULT_INT8 if quantize is True else quantize or None
    files = {"serve": SERVE_FILE, "fused": FUSED_FILE, "raw": RAW_FILE}
    if graph not in files:
        raise ConfigError(f"graph must be one of {sorted(files)}, not {graph!r}")
    fp32 = folder / files[graph]
    target = folder / f"{fp32.stem}-int8-{recipe.key}.onnx" if recipe else fp32
    if target.exists():
        return target
    with _export_lock(folder):
        if target.exists():  # another process finished it while we waited
            return target
        for stale in folder.glob(".*.tmp"):  # left by a killed exporter; we hold the lock
            stale.unlink(missing_ok=True)
        if not (folder / SERVE_FILE).exists():
            meta = _export_fp32(spec, folder, model_id)
            meta.update(model_id=model_id, max_seq_length=spec.max_seq_length)
            _atomic_write(
                folder / "export.json", lambda t: t.write_text(json.dumps(meta, indent=1))
            )
        if recipe:
            _quantize(fp32, target, recipe)
    return target


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


def _session(ort: Any, path: Path, threads: int) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # Idle threads sleep instead of spinning: on a shared or busy machine spinning workers
    # steal the cores the busy ones need (int8 on 2 cores at load 8: 2.4x torch, not 1.8x;
    # at load 5, spinning cost 17% again).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(
        str(path),
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=_DISABLED_ORT_FUSIONS,
    )


def _load_tokenizer(spec: ModelSpec) -> Any:
    tokenizers = attempt_import("tokenizers", "onnx")
    tokenizer = tokenizers.Tokenizer.from_file(str(spec.folder / "tokenizer.json"))
    # tokenizer.json may carry its own padding/truncation (MiniLM's says pad to 128):
    # sentence-transformers ignores those and truncates at max_seq_length, pads per batch.
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=spec.max_seq_length)
    return tokenizer


def spec_text(text: str, spec: ModelSpec) -> str:
    return text.lower() if spec.do_lower_case else text


def _encode(tokenizer: Any, texts: list[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask, right-padded to the longest text."""
    rows = [e.ids[:max_len] for e in tokenizer.encode_batch(texts)]
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def _feed(names: list[str], ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    # Single sequences have type id 0 everywhere, as the tokenizer would say.
    values = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    return {n: values[n] for n in names}


def _mean_pool(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    weights = mask[..., None].astype(np.float32)
    summed = np.einsum("bsh,bsk->bh", tokens.astype(np.float32), weights)
    return np.asarray(summed / np.maximum(weights.sum(axis=1), 1e-9), dtype=np.float32)


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
        self.batch_size = max(1, int(batch_size))
        self.max_batch_tokens = max(1, int(max_batch_tokens))
        self._spec = read_spec(model_id, model_folder(model_id))
        self.onnx_path = ensure_exported(
            model_id, quantize=quantize, graph=graph, cache_dir=cache_dir, spec=self._spec
        )
        self.workers = max(1, int(workers or physical_cores()))
        self.threads = max(1, int(threads))
        self._session = _session(ort, self.onnx_path, self.threads)
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._tokenizer = _load_tokenizer(self._spec)
        # encode_batch_fast (tokenizers >= 0.21) skips the character offsets we never use.
        self._encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()
        self.max_tokens = self._spec.max_seq_length
        hidden = self._session.get_outputs()[0].shape[-1]
        self.dim = hidden if isinstance(hidden, int) else 0
        if not self.dim:  # symbolic in the graph: ask the model
            self.dim = int(self.embed_documents(["dim"]).shape[1])

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            # A forked child inherits the pool object but not its threads: make a new one.
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="hybridkb-onnx")
                self._pool_pid = os.getpid()
            return self._pool

    def _run(self, ids: np.ndarray) -> np.ndarray:
        """Unit vectors for one batch of equal-length token rows."""
        mask = np.ones_like(ids)
        out = self._session.run(None, _feed(self._inputs, ids, mask))[0]
        if out.ndim == 3:  # the plain export returns token vectors
            return _normalize(_mean_pool(out, mask))
        return np.asarray(out, dtype=np.float32)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """Return an (n, dim) float32 array in input order, rows L2-normalised."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = [e.ids for e in self._encode([spec_text(t, self._spec) for t in texts])]
        batches = length_batches([len(r) for r in rows], self.batch_size, self.max_batch_tokens)
        token_ids = [np.array([rows[i] for i in b], dtype=np.int64) for b in batches]
        results: Iterator[np.ndarray]
        if len(batches) == 1 or self.workers == 1:
            results = map(self._run, token_ids)
        else:  # longest first, so the last calls to finish are short ones
            results = self._executor().map(self._run, token_ids)
        out = np.empty((0, 0), dtype=np.float32)
        for batch, vectors in zip(batches, results, strict=True):
            if not out.size:
                out = np.empty((len(texts), vectors.shape[-1]), dtype=np.float32)
            out[batch] = vectors
        return out

    def embed_query(self, text: str) -> np.ndarray:
        """Return a (dim,) float32 vector, L2-normalised."""
        return np.asarray(self.embed_documents([text])[0], dtype=np.float32)
