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
from hybridkb.errors import EmbeddingMismatch, MissingDependency

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


@pytest.mark.parametrize("pooling", [None, {"pooling_mode": "mean"}])
def test_mean_pooling_folder_is_accepted(tmp_path: Path, pooling: dict[str, object] | None) -> None:
    spec = onnx_mod.read_spec("m", make_model_folder(tmp_path / "m", pooling=pooling))
    assert (spec.max_seq_length, spec.do_lower_case) == (128, False)


def test_max_seq_length_falls_back_to_tokenizer_capped_by_positions(tmp_path: Path) -> None:
    folder = make_model_folder(tmp_path / "m", sbert={})
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 10**30}))
    assert onnx_mod.read_spec("m", folder).max_seq_length == 512


@pytest.mark.parametrize(
    "pooling",
    [
        {"pooling_mode_cls_token": True},
        {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
        {"pooling_mode": "lasttoken"},
    ],
)
def test_unsupported_pooling_is_refused(tmp_path: Path, pooling: dict[str, object]) -> None:
    folder = make_model_folder(tmp_path / "m", pooling=pooling)
    with pytest.raises(EmbeddingMismatch, match="only mean pooling.*BACKEND=torch"):
        onnx_mod.read_spec("m", folder)


def test_extra_modules_are_refused(tmp_path: Path) -> None:
    folder = make_model_folder(tmp_path / "m", modules=["Transformer", "Pooling", "Dense"])
    with pytest.raises(EmbeddingMismatch, match="'Dense' is not supported"):
        onnx_mod.read_spec("m", folder)


def test_missing_fast_tokenizer_is_refused(tmp_path: Path) -> None:
    folder = make_model_folder(tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(EmbeddingMismatch, match="tokenizer.json"):
        onnx_mod.read_spec("m", folder)


def test_missing_onnxruntime_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependency, match=r"pip install 'hybridkb\[onnx\]'"):
        onnx_mod.OnnxEmbedder("all-MiniLM-L6-v2")


def test_unknown_model_is_an_embedding_mismatch(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingMismatch, match="no-such-model"):
        onnx_mod.OnnxEmbedder("no-such-model", cache_dir=str(tmp_path))


def test_equal_length_batches_have_no_padding() -> None:
    lengths = [5, 9, 5, 9, 9, 3, 5]
    batches = onnx_mod.length_batches(lengths, batch_size=2, max_padding=0.0)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len({lengths[i] for i in b}) == 1 and len(b) <= 2 for b in batches)
    assert [lengths[b[0]] for b in batches] == sorted(
        (lengths[b[0]] for b in batches), reverse=True
    )


def test_full_padding_allowance_gives_plain_sorted_batches() -> None:
    lengths = [5, 9, 5, 9, 9, 3, 5]
    batches = onnx_mod.length_batches(lengths, batch_size=3, max_padding=1.0)
    assert [[lengths[i] for i in b] for b in batches] == [[9, 9, 9], [5, 5, 5], [3]]


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path: Path) -> None:
    def boom(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        onnx_mod._atomic_write(tmp_path / "model.onnx", boom)
    assert list(tmp_path.iterdir()) == []


def test_concurrent_exporters_export_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_model_folder(tmp_path / "m")
    calls = []

    def slow_export(spec: object, target: Path, model_id: str) -> dict[str, object]:
        calls.append(model_id)
        time.sleep(0.3)
        onnx_mod._atomic_write(target / onnx_mod.FUSED_FILE, lambda t: t.write_bytes(b"onnx"))
        return {}

    monkeypatch.setattr(onnx_mod, "_export_fp32", slow_export)
    paths: list[Path] = []
    workers = [
        threading.Thread(
            target=lambda: paths.append(
                onnx_mod.ensure_exported(str(folder), cache_dir=tmp_path / "c")
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
    spec = onnx_mod.read_spec("m", folder)
    first = onnx_mod.export_dir("m", spec, tmp_path / "c")
    (folder / "model.safetensors").write_bytes(b"retrained weights")
    assert onnx_mod.export_dir("m", spec, tmp_path / "c") != first


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
@pytest.mark.parametrize("max_padding", [0.0, 1.0])
def test_length_sorting_keeps_input_order(
    fp32: onnx_mod.OnnxEmbedder, onnx_cache: Path, max_padding: float
) -> None:
    # 0: equal-length batches (no padding); 1: sorted batches of 4 padded to their longest.
    embedder = onnx_mod.OnnxEmbedder(
        fp32.model_id, cache_dir=str(onnx_cache), batch_size=4, max_padding=max_padding
    )
    texts = SENTENCES + ["Pasta on Fridays.", "Pasta on Mondays."]  # equal lengths batch up
    batched = embedder.embed_documents(texts)
    one_by_one = np.stack([embedder.embed_documents([s])[0] for s in texts])
    assert batched.shape == (len(texts), embedder.dim) == (len(texts), 384)
    assert ((batched * one_by_one).sum(axis=1) > 0.99999).all()


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
def test_second_construction_reuses_the_export(
    fp32: onnx_mod.OnnxEmbedder, onnx_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = os.stat(fp32.onnx_path).st_mtime_ns

    def no_export(*args: object) -> None:
        raise AssertionError("re-exported a cached model")

    monkeypatch.setattr(onnx_mod, "_export_fp32", no_export)
    again = onnx_mod.OnnxEmbedder(fp32.model_id, cache_dir=str(onnx_cache))
    assert again.onnx_path == fp32.onnx_path
    assert os.stat(again.onnx_path).st_mtime_ns == before


@pytest.mark.model
def test_int8_stays_close_to_fp32(fp32: onnx_mod.OnnxEmbedder, onnx_cache: Path) -> None:
    int8 = onnx_mod.OnnxEmbedder(fp32.model_id, cache_dir=str(onnx_cache), quantize=True)
    assert int8.onnx_path != fp32.onnx_path
    cosines = (int8.embed_documents(SENTENCES) * fp32.embed_documents(SENTENCES)).sum(axis=1)
    assert cosines.min() > 0.98


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
