"""Tiny BERT-like model folders (config, random weights, vocabulary) for the ONNX builder and first-use tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", *[f"w{i}" for i in range(28)]]


Config = dict[str, Any]


def tiny_config(**overrides: Any) -> Config:
    config: Config = {
        "model_type": "bert",
        "vocab_size": len(VOCAB),
        "hidden_size": 16,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "intermediate_size": 32,
        "max_position_embeddings": 40,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "hidden_act": "gelu",
        "pad_token_id": 0,
    }
    config.update(overrides)
    return config


def random_weights(config: Config, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, inner = int(config["hidden_size"]), int(config["intermediate_size"])

    def w(*shape: int) -> np.ndarray:
        return rng.normal(scale=0.3, size=shape).astype(np.float32)

    out = {
        "embeddings.word_embeddings.weight": w(int(config["vocab_size"]), h),
        "embeddings.position_embeddings.weight": w(int(config["max_position_embeddings"]), h),
        "embeddings.token_type_embeddings.weight": w(int(config["type_vocab_size"]), h),
        "embeddings.LayerNorm.weight": 1 + w(h),
        "embeddings.LayerNorm.bias": w(h),
    }
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        for name, (rows, cols) in {
            "attention.self.query": (h, h),
            "attention.self.key": (h, h),
            "attention.self.value": (h, h),
            "attention.output.dense": (h, h),
            "intermediate.dense": (inner, h),
            "output.dense": (h, inner),
        }.items():
            out[f"{p}{name}.weight"], out[f"{p}{name}.bias"] = w(rows, cols), w(rows)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            out[f"{p}{norm}.weight"], out[f"{p}{norm}.bias"] = 1 + w(h), w(h)
    return out


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], dtype: str = "F32") -> None:
    """The safetensors layout, written by hand: header length, JSON header, raw tensors."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, array in tensors.items():
        if dtype == "BF16":  # keep the upper half of each float32 (values become bf16's)
            blob = (array.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            blob = array.astype({"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    # An integer buffer, as BERT checkpoints carry position_ids: the builder skips it.
    ids = np.arange(4, dtype="<i8").tobytes()
    header["embeddings.position_ids"] = {
        "dtype": "I64",
        "shape": [1, 4],
        "data_offsets": [offset, offset + len(ids)],
    }
    blobs.append(ids)
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def stored(array: np.ndarray, dtype: str) -> np.ndarray:
    """What the file holds for ``array`` in ``dtype``, as float32 (the reference's input)."""
    if dtype == "BF16":
        return ((array.astype(np.float32).view(np.uint32) >> 16) << 16).view(np.float32)
    return array.astype(np.float16).astype(np.float32) if dtype == "F16" else array


def make_folder(
    root: Path,
    config: Config,
    *,
    prefix: str = "",
    dtype: str = "F32",
    pooling: str = "mean",
    seed: int = 0,
) -> tuple[Path, dict[str, np.ndarray]]:
    """A sentence-transformers folder around a random tiny model, with a WordLevel
    tokenizer.json; returns it and the weights as the file stores them."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    root.mkdir(parents=True)
    weights = random_weights(config, seed)
    write_safetensors(
        root / "model.safetensors", {prefix + k: v for k, v in weights.items()}, dtype
    )
    (root / "config.json").write_text(json.dumps(config))
    tokenizer = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.save(str(root / "tokenizer.json"))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
        {
            "idx": 2,
            "name": "2",
            "path": "2_Normalize",
            "type": "sentence_transformers.models.Normalize",
        },
    ]
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(
        json.dumps({f"pooling_mode_{'cls_token' if pooling == 'cls' else 'mean_tokens'}": True})
    )
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 24}))
    return root, {k: stored(v, dtype) for k, v in weights.items()}
