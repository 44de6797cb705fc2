"""What export and runtime share about an ONNX sentence-transformers model: the model
folder and its limits, the cache folder of its exports, sessions, tokenising, pooling."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelUnavailable, NotExportable, attempt_import
from ..locations import CACHE_FIX
from ..private_files import private_folder
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
DISABLED_ORT_FUSIONS = ["SkipLayerNormFusion"]
# Probe texts for export-time verification: different lengths so padding is exercised,
# and one longer than any max_seq_length so truncation is too.
PROBES = [
    "Hello world.",
    "Mean pooling must ignore padded positions in a batch of unequal lengths.",
    "",
    " ".join(["Depreciation spreads the cost of an asset over its useful life."] * 60),
]
MIN_EXPORT_COSINE = 0.9999


@dataclass(frozen=True)
class ModelSpec:
    """What the sentence-transformers folder says about tokenising and pooling."""

    folder: Path
    weights: Path
    max_seq_length: int
    do_lower_case: bool
    pooling: str = "mean"  # or "cls": the first token's vector


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


def read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def read_spec(model_id: str, folder: Path) -> ModelSpec:
    """Check the folder is Transformer -> mean or CLS Pooling [-> Normalize] and read its
    limits. Vectors are always L2-normalised (search ranks by cosine either way)."""
    modules_file = folder / "modules.json"
    modules: list[dict[str, Any]] = (
        json.loads(modules_file.read_text(encoding="utf-8")) if modules_file.exists() else []
    )
    pooling = "mean"
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind in ("Transformer", "Normalize"):
            continue
        if kind != "Pooling":
            raise NotExportable(
                f"{model_id}: module {kind!r} is not supported by the ONNX backend (only "
                "Transformer, mean Pooling and Normalize are); use HYBRIDKB_EMBEDDING_BACKEND=torch"
            )
        config = read_json(folder / str(module.get("path", "")) / "config.json")
        modes = sorted(k for k, v in config.items() if k.startswith("pooling_mode") and v is True)
        if isinstance(config.get("pooling_mode"), str):  # newer configs name the mode
            named = str(config["pooling_mode"])
            known = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens"}
            modes = [known.get(named, f"pooling_mode_{named}")]
        if modes not in (["pooling_mode_mean_tokens"], ["pooling_mode_cls_token"]):
            raise NotExportable(
                f"{model_id}: pooling {modes or 'unknown'} is not supported by the ONNX backend "
                "(only mean or CLS pooling is); use HYBRIDKB_EMBEDDING_BACKEND=torch"
            )
        pooling = "cls" if modes == ["pooling_mode_cls_token"] else "mean"
    if not (folder / "tokenizer.json").exists():
        raise NotExportable(
            f"{model_id}: no tokenizer.json (fast tokenizer) in {folder}; the ONNX backend "
            "needs one; use HYBRIDKB_EMBEDDING_BACKEND=torch"
        )
    weights = next(
        (folder / n for n in ("model.safetensors", "pytorch_model.bin") if (folder / n).exists()),
        None,
    )
    if weights is None:
        raise ModelUnavailable(f"{model_id}: no model.safetensors or pytorch_model.bin in {folder}")
    sbert = read_json(folder / "sentence_bert_config.json")
    config = read_json(folder / "config.json")
    # Same rule as sentence-transformers: its max_seq_length, else the tokenizer's limit,
    # never beyond the position table.
    limit = sbert.get("max_seq_length") or read_json(folder / "tokenizer_config.json").get(
        "model_max_length"
    )
    positions = config.get("max_position_embeddings")
    if not isinstance(limit, int | float) or limit <= 0 or limit > 1_000_000:
        limit = positions or 512
    if isinstance(positions, int) and positions > 0:
        limit = min(int(limit), positions)
    lower = bool(sbert.get("do_lower_case", False))
    return ModelSpec(folder, weights, int(limit), lower, pooling)


def weights_digest(weights: Path, cache_root: Path) -> str:
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
        atomic_write(memo, lambda tmp: tmp.write_text(digest, encoding="ascii"))
    return digest


def export_dir(model_id: str, spec: ModelSpec, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The cache folder for this model id and these exact weights, made where missing;
    it and every folder above it up to the cache folder pass the private-folder rule.

    Raises:
        NotPrivate: a folder on the way is a link, another user's, or writable by others.
    """
    root = (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()).absolute()
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("._")[:80] or "model"
    private_folder(root / "onnx" / "digests", secret=False, fix=CACHE_FIX, within=root)
    digest = weights_digest(spec.weights, root)[:16]
    folder = root / "onnx" / f"{slug}-{digest}" / f"v{EXPORT_VERSION}"
    return private_folder(folder, secret=False, fix=CACHE_FIX, within=root)


def atomic_write(target: Path, write: Callable[[Path], object]) -> None:
    """Let ``write`` fill a temp file next to ``target``, then move it into place."""
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o600)  # a writer that made the file anew made it as the umask allows
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((normalize(a) * normalize(b)).sum(axis=1), dtype=np.float32)


def normalize(vectors: np.ndarray) -> np.ndarray:
    # Same epsilon as torch.nn.functional.normalize, which sentence-transformers uses.
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.asarray(vectors / np.maximum(norms, 1e-12), dtype=np.float32)


def session(ort: Any, path: Path, threads: int) -> Any:
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
        disabled_optimizers=DISABLED_ORT_FUSIONS,
    )


def load_tokenizer(spec: ModelSpec) -> Any:
    tokenizers = attempt_import("tokenizers", "onnx")
    tokenizer = tokenizers.Tokenizer.from_file(str(spec.folder / "tokenizer.json"))
    # tokenizer.json may carry its own padding/truncation (MiniLM's says pad to 128):
    # sentence-transformers ignores those and truncates at max_seq_length, pads per batch.
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=spec.max_seq_length)
    return tokenizer


def spec_text(text: str, spec: ModelSpec) -> str:
    return text.lower() if spec.do_lower_case else text


def encode(tokenizer: Any, texts: list[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask, right-padded to the longest text."""
    rows = [e.ids[:max_len] for e in tokenizer.encode_batch(texts)]
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def feed(names: list[str], ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    # Single sequences have type id 0 everywhere, as the tokenizer would say.
    values = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    return {n: values[n] for n in names}


def mean_pool(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    weights = mask[..., None].astype(np.float32)
    summed = np.einsum("bsh,bsk->bh", tokens.astype(np.float32), weights)
    return np.asarray(summed / np.maximum(weights.sum(axis=1), 1e-9), dtype=np.float32)


def pool(tokens: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """One vector per text: the mean over its tokens, or its first token's for ``cls``."""
    if pooling == "cls":
        return np.asarray(tokens[:, 0, :], dtype=np.float32)
    return mean_pool(tokens, mask)
