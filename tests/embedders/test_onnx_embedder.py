"""The ONNX Runtime embedder: same vectors as sentence-transformers, no torch at run time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hybridkb.embedders import onnx as onnx_mod
from hybridkb.embedders import onnx_export, onnx_model
from hybridkb.errors import ConfigError, MissingDependency, ModelUnavailable

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

SENTENCES = [
    "The decline in value of a depreciating asset is spread over its effective life.",
    "Employees accrue four weeks of annual leave every year.",
    "Pasta on Fridays.",
    "",
    " ".join(["Long texts are truncated at the model's maximum sequence length."] * 40),
    "How do assets lose worth over time?",
]


def make_model_folder(
    root: Path,
    *,
    pooling: dict[str, object] | None = None,
    modules: list[str] | None = None,
    sbert: dict[str, object] | None = None,
) -> Path:
    """A sentence-transformers folder with placeholder weights: enough for read_spec."""
    root.mkdir(parents=True, exist_ok=True)
    kinds = modules or ["Transformer", "Pooling", "Normalize"]
    entries = []
    for i, kind in enumerate(kinds):
        path = "" if kind == "Transformer" else f"{i}_{kind}"
        entries.append(
            {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
        )
        if kind == "Pooling":
            (root / path).mkdir()
            (root / path / "config.json").write_text(
                json.dumps(
                    pooling or {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}
                )
            )
    (root / "modules.json").write_text(json.dumps(entries))
    (root / "sentence_bert_config.json").write_text(
        json.dumps(sbert if sbert is not None else {"max_seq_length": 128})
    )
    (root / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    (root / "tokenizer.json").write_text("{}")
    (root / "model.safetensors").write_bytes(b"weights")
    return root


# -- no model needed ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("pooling", "mode"),
    [
        (None, "mean"),
        ({"pooling_mode": "mean"}, "mean"),
        ({"pooling_mode_cls_token": True}, "cls"),  # bge
        ({"pooling_mode": "cls"}, "cls"),
    ],
)
def test_mean_or_cls_pooling_folder_is_accepted(
    tmp_path: Path, pooling: dict[str, object] | None, mode: str
) -> None:
    spec = onnx_model.read_spec("m", make_model_folder(tmp_path / "m", pooling=pooling))
    assert (spec.max_seq_length, spec.do_lower_case, spec.pooling) == (128, False, mode)


def test_max_seq_length_falls_back_to_tokenizer_capped_by_positions(tmp_path: Path) -> None:
    folder = make_model_folder(tmp_path / "m", sbert={})
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 10**30}))
    assert onnx_model.read_spec("m", folder).max_seq_length == 512


@pytest.mark.parametrize(
    "pooling",
    [
        {"pooling_mode_max_tokens": True},
        {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
        {"pooling_mode": "lasttoken"},
    ],
)
def test_unsupported_pooling_is_refused(tmp_path: Path, pooling: dict[str, object]) -> None:
    folder = make_model_folder(tmp_path / "m", pooling=pooling)
    with pytest.raises(ModelUnavailable, match="only mean or CLS pooling.*BACKEND=torch"):
        onnx_model.read_spec("m", folder)


def test_extra_modules_are_refused(tmp_path: Path) -> None:
    folder = make_model_folder(tmp_path / "m", modules=["Transformer", "Pooling", "Dense"])
    with pytest.raises(ModelUnavailable, match="'Dense' is not supported"):
        onnx_model.read_spec("m", folder)


def test_missing_fast_tokenizer_is_refused(tmp_path: Path) -> None:
    folder = make_model_folder(tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ModelUnavailable, match="tokenizer.json"):
        onnx_model.read_spec("m", folder)


def test_missing_onnxruntime_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependency, match=r"pip install 'hybridkb\[onnx\]'"):
        onnx_mod.OnnxEmbedder("all-MiniLM-L6-v2")


def test_unknown_model_is_an_embedding_mismatch(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match="no-such-model"):
        onnx_mod.OnnxEmbedder("no-such-model", cache_dir=str(tmp_path))


def test_equal_length_batches_have_no_padding() -> None:
    lengths = [5, 9, 5, 9, 9, 3, 5]
    batches = onnx_mod.length_batches(lengths, batch_size=2, max_tokens=1000)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len({lengths[i] for i in b}) == 1 and len(b) <= 2 for b in batches)
    assert [lengths[b[0]] for b in batches] == sorted(
        (lengths[b[0]] for b in batches), reverse=True
    )


def test_token_budget_caps_batches_but_keeps_long_texts() -> None:
    lengths = [5, 9, 5, 9, 9, 3, 5, 300]
    batches = onnx_mod.length_batches(lengths, batch_size=32, max_tokens=18)
    # 300 tokens alone exceed the budget: still one text per call, never dropped.
    assert [[lengths[i] for i in b] for b in batches] == [[300], [9, 9], [9], [5, 5, 5], [3]]


def test_unknown_graph_is_a_config_error(tmp_path: Path) -> None:
    folder = make_model_folder(tmp_path / "m")
    with pytest.raises(ConfigError, match="graph must be one of"):
        onnx_export.ensure_exported(str(folder), graph="fast", cache_dir=tmp_path / "c")


@pytest.mark.parametrize("opset", [17, 18])
def test_serving_graph_pools_and_normalises_inside(tmp_path: Path, opset: int) -> None:
    # A one-node "transformer" (a fused SkipLayerNorm), so no model is needed: the
    # rewrite must unfuse it and append mean pooling + L2 normalisation, in either
    # opset's Reduce* form.
    import onnx
    import onnxruntime as ort

    helper = onnx.helper
    tensor: list[str | int | None] = ["b", "s", 4]
    skip_ln = helper.make_node(
        "SkipLayerNormalization",
        ["x", "skip", "gamma", "beta"],
        ["tokens"],
        domain="com.microsoft",
        epsilon=1e-5,
    )
    graph = helper.make_graph(
        [skip_ln],
        "g",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, tensor) for n in ("x", "skip")],
        [helper.make_tensor_value_info("tokens", onnx.TensorProto.FLOAT, tensor)],
        [
            onnx.numpy_helper.from_array(np.array([1, 2, 3, 4], np.float32), "gamma"),
            onnx.numpy_helper.from_array(np.zeros(4, np.float32), "beta"),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)],
    )
    onnx.save(model, tmp_path / "in.onnx")
    served = onnx_export.serving_graph(onnx, tmp_path / "in.onnx", False, 4)
    assert "SkipLayerNormalization" not in {n.op_type for n in served.graph.node}
    onnx.save(served, tmp_path / "out.onnx")
    rng = np.random.default_rng(0)
    x, skip = rng.normal(size=(2, 2, 3, 4)).astype(np.float32)
    got = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "skip": skip}
    )[0]
    summed = x + skip
    normed = (summed - summed.mean(-1, keepdims=True)) / np.sqrt(
        summed.var(-1, keepdims=True) + 1e-5
    )
    pooled = (normed * np.array([1, 2, 3, 4], np.float32)).mean(axis=1)
    expected = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    assert got.shape == (2, 4)
    assert np.allclose(got, expected, atol=1e-5)


def _matmul_model(path: Path, scale: float) -> None:
    """A one-MatMul model whose weights (64 KB) go to the side file of a mapped copy."""
    import onnx

    helper = onnx.helper
    weights = (np.arange(128 * 128, dtype=np.float32).reshape(128, 128) % 7 - 3) * scale
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["b", 128])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["b", 128])],
        [onnx.numpy_helper.from_array(weights, "w")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _run(path: Path) -> np.ndarray:
    import onnxruntime as ort

    x = np.linspace(-1, 1, 3 * 128, dtype=np.float32).reshape(3, 128)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


def test_the_mapped_copy_computes_what_the_model_file_does(tmp_path: Path) -> None:
    model = tmp_path / "model-serve.onnx"
    _matmul_model(model, 1.0)
    mapped = onnx_export.ensure_mapped(model)
    assert mapped.parent == tmp_path / onnx_export.MAPPED_FOLDER
    data = mapped.with_name(mapped.name + ".data")
    assert data.stat().st_size >= 128 * 128 * 4  # the weights live beside the graph
    assert mapped.stat().st_size < 4096
    assert np.array_equal(_run(mapped), _run(model))
    stamp = mapped.stat().st_mtime_ns
    assert onnx_export.ensure_mapped(model) == mapped  # made once
    assert mapped.stat().st_mtime_ns == stamp
    assert not [p for p in mapped.parent.iterdir() if p.name.startswith(".tmp")]
    data.unlink()  # half a copy is made again, and a killed writer's folder removed
    (mapped.parent / ".tmp-killed").mkdir()
    assert onnx_export.ensure_mapped(model) == mapped
    assert data.exists() and np.array_equal(_run(mapped), _run(model))
    assert not [p for p in mapped.parent.iterdir() if p.name.startswith(".tmp")]


def test_a_rewritten_model_gets_a_new_mapped_copy(tmp_path: Path) -> None:
    model = tmp_path / "model-serve.onnx"
    other = tmp_path / "model-serve-int8-pc-1234abcd.onnx"  # a name the old copy's prefixes
    _matmul_model(model, 1.0)
    _matmul_model(other, 3.0)
    first = onnx_export.ensure_mapped(model)
    kept = onnx_export.ensure_mapped(other)
    _matmul_model(model, 2.0)
    os.utime(model, ns=(1, 1))  # a different file, whatever the clock says
    second = onnx_export.ensure_mapped(model)
    assert second != first and not first.exists()
    assert not first.with_name(first.name + ".data").exists()
    assert np.array_equal(_run(second), _run(model))
    assert kept.exists() and np.array_equal(_run(kept), _run(other))


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path: Path) -> None:
    def boom(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("disk full")

    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(RuntimeError):
        onnx_model.atomic_write(out / "model.onnx", boom)
    assert list(out.iterdir()) == []


def test_concurrent_exporters_export_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_model_folder(tmp_path / "m")
    calls = []

    def slow_export(spec: object, target: Path, model_id: str, step: object) -> dict[str, object]:
        calls.append(model_id)
        time.sleep(0.3)
        onnx_model.atomic_write(target / onnx_model.SERVE_FILE, lambda t: t.write_bytes(b"onnx"))
        return {}

    monkeypatch.setattr(onnx_export, "export_fp32", slow_export)
    paths: list[Path] = []
    workers = [
        threading.Thread(
            target=lambda: paths.append(
                onnx_export.ensure_exported(str(folder), cache_dir=tmp_path / "c")
            )
        )
        for _ in range(3)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(calls) == 1
    assert len(set(paths)) == 1 and paths[0].read_bytes() == b"onnx"


def test_changed_weights_get_a_new_cache_folder(tmp_path: Path) -> None:
    folder = make_model_folder(tmp_path / "m")
    spec = onnx_model.read_spec("m", folder)
    first = onnx_model.export_dir("m", spec, tmp_path / "c")
    (folder / "model.safetensors").write_bytes(b"retrained weights")
    assert onnx_model.export_dir("m", spec, tmp_path / "c") != first


# -- the packaged model ------------------------------------------------------------


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="session")
def fp32(onnx_cache: Path, real_model_name: str) -> onnx_mod.OnnxEmbedder:
    # The first construction exports (torch, ~30 s); the rest of the session reuses it.
    return onnx_mod.OnnxEmbedder(real_model_name, cache_dir=str(onnx_cache), batch_size=4)


@pytest.mark.model
def test_fp32_vectors_match_sentence_transformers(fp32: onnx_mod.OnnxEmbedder) -> None:
    from hybridkb.embedders.sentence import SentenceTransformerEmbedder

    torch_vectors = SentenceTransformerEmbedder(fp32.model_id, device="cpu").embed_documents(
        SENTENCES
    )
    cosines = (fp32.embed_documents(SENTENCES) * torch_vectors).sum(axis=1)
    assert cosines.min() > 0.999


@pytest.mark.model
@pytest.mark.parametrize("workers", [1, 3])
def test_batched_and_parallel_calls_keep_input_order(
    fp32: onnx_mod.OnnxEmbedder, onnx_cache: Path, workers: int
) -> None:
    embedder = onnx_mod.OnnxEmbedder(
        fp32.model_id, cache_dir=str(onnx_cache), batch_size=4, workers=workers
    )
    texts = SENTENCES + ["Pasta on Fridays.", "Pasta on Mondays."]  # equal lengths batch up
    batched = embedder.embed_documents(texts)
    one_by_one = np.stack([embedder.embed_documents([s])[0] for s in texts])
    assert batched.shape == (len(texts), embedder.dim) == (len(texts), 384)
    assert ((batched * one_by_one).sum(axis=1) > 0.99999).all()


@pytest.mark.model
def test_serving_graph_is_mask_free_pooled_and_verified(fp32: onnx_mod.OnnxEmbedder) -> None:
    import onnx

    assert fp32.onnx_path.name == onnx_model.SERVE_FILE
    graph = onnx.load(str(fp32.onnx_path), load_external_data=False).graph
    assert [i.name for i in graph.input] == ["input_ids", "token_type_ids"]
    assert [o.name for o in graph.output] == [onnx_model.POOLED_OUTPUT]
    ops = {n.op_type for n in graph.node}
    assert {"Attention", "LayerNormalization", "ReduceMean"} <= ops
    assert "SkipLayerNormalization" not in ops
    meta = json.loads((fp32.onnx_path.parent / "export.json").read_text())
    assert meta["serving_mask_free"] is True
    assert meta["serving_min_cosine"] >= 0.9999


@pytest.mark.model
def test_serving_graph_keeps_the_mask_when_stripping_fails(
    tmp_path: Path, real_model_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = onnx_export.serving_graph

    def no_strip(
        onnx: object, source: Path, strip_mask: bool, hidden: int, pooling: str = "mean"
    ) -> object:
        if strip_mask:
            raise RuntimeError("unexpected layout")
        return real(onnx, source, strip_mask, hidden, pooling)

    monkeypatch.setattr(onnx_export, "serving_graph", no_strip)
    embedder = onnx_mod.OnnxEmbedder(real_model_name, cache_dir=str(tmp_path))
    meta = json.loads((embedder.onnx_path.parent / "export.json").read_text())
    assert meta["serving_mask_free"] is False and meta["serving_min_cosine"] >= 0.9999
    assert "attention_mask" in embedder._inputs
    assert embedder.embed_documents(SENTENCES).shape == (len(SENTENCES), 384)


@pytest.mark.model
@pytest.mark.parametrize("disabled", [True, False])
def test_ort_does_not_refuse_skip_layer_norm(
    fp32: onnx_mod.OnnxEmbedder, tmp_path: Path, disabled: bool
) -> None:
    # The unfused LayerNorms are the point of the serving graph; ORT re-fuses them
    # unless the session disables that fusion.
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(
        str(fp32.onnx_path),
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=onnx_model.DISABLED_ORT_FUSIONS if disabled else [],
    )
    saved = onnx.load(str(tmp_path / "optimized.onnx"), load_external_data=False)
    fused = any(n.op_type == "SkipLayerNormalization" for n in saved.graph.node)
    assert fused is not disabled


@pytest.mark.model
def test_plain_export_graph_pools_in_numpy(fp32: onnx_mod.OnnxEmbedder, onnx_cache: Path) -> None:
    raw = onnx_mod.OnnxEmbedder(fp32.model_id, cache_dir=str(onnx_cache), graph="raw")
    assert raw.onnx_path.name == onnx_model.RAW_FILE
    cosines = (raw.embed_documents(SENTENCES) * fp32.embed_documents(SENTENCES)).sum(axis=1)
    assert cosines.min() > 0.9999


@pytest.mark.model
def test_rows_are_unit_float32(fp32: onnx_mod.OnnxEmbedder) -> None:
    vectors = fp32.embed_documents(SENTENCES)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert fp32.embed_documents([]).shape == (0, 384)


@pytest.mark.model
def test_embed_query_equals_embed_documents(fp32: onnx_mod.OnnxEmbedder) -> None:
    query = "how do assets lose worth over time?"
    assert np.array_equal(fp32.embed_query(query), fp32.embed_documents([query])[0])


@pytest.mark.model
def test_the_session_runs_the_mapped_copy_with_the_same_vectors(
    fp32: onnx_mod.OnnxEmbedder,
) -> None:
    import onnxruntime as ort

    mapped = onnx_export.ensure_mapped(fp32.onnx_path)
    assert mapped.exists()  # made by the embedder's construction
    plain = onnx_model.session(ort, fp32.onnx_path, 1)
    names = [i.name for i in plain.get_inputs()]
    spec = onnx_model.read_spec(fp32.model_id, onnx_model.model_folder(fp32.model_id))
    ids, _ = onnx_model.encode(onnx_model.load_tokenizer(spec), ["mapped weights"], 256)
    expected = plain.run(None, onnx_model.feed(names, ids, np.ones_like(ids)))[0][0]
    assert np.array_equal(fp32.embed_query("mapped weights"), expected)


@pytest.mark.model
def test_second_construction_reuses_the_export(
    fp32: onnx_mod.OnnxEmbedder, onnx_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = os.stat(fp32.onnx_path).st_mtime_ns

    def no_export(*args: object) -> None:
        raise AssertionError("re-exported a cached model")

    monkeypatch.setattr(onnx_export, "export_fp32", no_export)
    again = onnx_mod.OnnxEmbedder(fp32.model_id, cache_dir=str(onnx_cache))
    assert again.onnx_path == fp32.onnx_path
    assert os.stat(again.onnx_path).st_mtime_ns == before


@pytest.mark.model
def test_int8_is_a_working_approximation_of_fp32(
    fp32: onnx_mod.OnnxEmbedder, onnx_cache: Path
) -> None:
    # Deliberately loose: how close int8 comes depends on the CPU's int8 kernels (0.974 min
    # cosine on an AVX2 EPYC, 0.988 with AMX); whether it is close enough to be used is
    # measured per CPU by embedders.precision, not asserted here.
    int8 = onnx_mod.OnnxEmbedder(fp32.model_id, cache_dir=str(onnx_cache), quantize=True)
    assert int8.onnx_path != fp32.onnx_path
    assert int8.onnx_path.name.startswith("model-serve-int8-")
    assert int8.recipe.precision == "int8" and fp32.recipe.precision == "fp32"
    got = int8.embed_documents(SENTENCES)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)
    assert (got * fp32.embed_documents(SENTENCES)).sum(axis=1).mean() > 0.9


@pytest.mark.model
def test_get_embedder_selects_onnx(
    onnx_cache: Path, real_model_name: str, fp32: onnx_mod.OnnxEmbedder
) -> None:
    from hybridkb.embedders import get_embedder

    embedder = get_embedder(real_model_name, backend="onnx", cache_dir=str(onnx_cache))
    assert isinstance(embedder, onnx_mod.OnnxEmbedder) and embedder.dim == 384


@pytest.mark.model
def test_inference_does_not_import_torch(fp32: onnx_mod.OnnxEmbedder, onnx_cache: Path) -> None:
    script = (
        "import sys\n"
        "from hybridkb.embedders.onnx import OnnxEmbedder\n"
        f"e = OnnxEmbedder({fp32.model_id!r}, cache_dir={str(onnx_cache)!r})\n"
        "assert e.embed_query('hello').shape == (384,)\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules]\n"
        "print(','.join(heavy) or 'clean')\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"
