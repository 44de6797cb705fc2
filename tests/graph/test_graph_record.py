"""A graph is loaded only as it was built (issue 32, item 2).

Another user who owned the cache folder swapped in an edited ONNX graph and the victim's
next process loaded it: every query got the same vector. Each graph (float32, int8, the
mapped copy and its weights) is now recorded by sha256 when it is written and checked
before a load; one that changed is made again, a changed tokenizer is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tiny_models import make_folder, tiny_config

from hybridkb.embedders import onnx_files, precision
from hybridkb.embedders.onnx import OnnxEmbedder
from hybridkb.embedders.onnx_export import MAPPED_FOLDER, ensure_exported
from hybridkb.embedders.onnx_model import atomic_write
from hybridkb.errors import ModelUnavailable, NotPrivate

TEXTS = ["w1 w2 w3", "w7", "w4 w5 w6 w8"]
CHANGED = "does not match the hash recorded when it was written"


@pytest.fixture
def tiny(tmp_path: Path) -> str:
    """A sentence-transformers folder of a tiny random BERT (its words are w0..w27)."""
    folder, _ = make_folder(tmp_path / "tiny-model", tiny_config())
    return str(folder)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def constant_graph(path: Path, hidden: int) -> None:
    """What the attacker wrote: a graph with the serving graph's input and output that
    gives every text the same unit vector."""
    vector = np.zeros(hidden, np.float32)
    vector[0] = 1.0
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["ids_f"], ["per_text"], axes=[1], keepdims=1),
        helper.make_node("Mul", ["per_text", "zero"], ["nothing"]),
        helper.make_node("Add", ["nothing", "vector"], ["sentence_embedding"]),
    ]
    graph = helper.make_graph(
        nodes,
        "edited",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        [
            numpy_helper.from_array(np.zeros(1, np.float32), "zero"),
            numpy_helper.from_array(vector, "vector"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))


def record_of(folder: Path) -> dict[str, dict[str, object]]:
    data = json.loads((folder / onnx_files.RECORD_FILE).read_text())
    files: dict[str, dict[str, object]] = data["files"]
    return files


def test_a_swapped_serving_graph_is_made_again(
    tiny: str, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = OnnxEmbedder(tiny, cache_dir=cache)
    want = first.embed_documents(TEXTS)
    constant_graph(first.onnx_path, want.shape[1])
    again = OnnxEmbedder(tiny, cache_dir=cache)
    got = again.embed_documents(TEXTS)
    assert not np.allclose(got[0], got[1])  # not the attacker's one vector
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert CHANGED in caplog.text and str(first.onnx_path) in caplog.text


def test_edited_weights_in_the_mapped_copy_are_not_loaded(
    tiny: str, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = OnnxEmbedder(tiny, cache_dir=cache)
    want = first.embed_documents(TEXTS)
    mapped = first.onnx_path.parent / MAPPED_FOLDER
    (data,) = [p for p in mapped.iterdir() if p.name.endswith(".onnx.data")]
    weights = bytearray(data.read_bytes())
    weights[: len(weights) // 2] = bytes(len(weights) // 2)  # half the weights zeroed
    data.write_bytes(weights)
    got = OnnxEmbedder(tiny, cache_dir=cache).embed_documents(TEXTS)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert CHANGED in caplog.text and str(data) in caplog.text


def test_a_swapped_int8_graph_is_quantised_again(tiny: str, cache: Path) -> None:
    int8 = ensure_exported(tiny, quantize=True, cache_dir=cache)
    want = OnnxEmbedder(tiny, quantize=True, cache_dir=cache).embed_documents(TEXTS)
    constant_graph(int8, want.shape[1])
    assert onnx_files.check(int8.parent, int8) == "changed"
    got = OnnxEmbedder(tiny, quantize=True, cache_dir=cache).embed_documents(TEXTS)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert onnx_files.check(int8.parent, int8) == "ok"


def test_a_changed_tokenizer_is_refused_in_one_line(tiny: str, cache: Path) -> None:
    OnnxEmbedder(tiny, cache_dir=cache)
    tokenizer = Path(tiny) / "tokenizer.json"
    vocab = json.loads(tokenizer.read_text())
    vocab["model"]["vocab"] = {word: 5 for word in vocab["model"]["vocab"]}  # every word alike
    tokenizer.write_text(json.dumps(vocab))
    with pytest.raises(ModelUnavailable, match="tokenizer.json: not the tokenizer") as caught:
        OnnxEmbedder(tiny, cache_dir=cache)
    assert "\n" not in str(caught.value) and "hybridkb cache clear" in str(caught.value)


def test_graphs_with_no_record_are_made_again_quietly(
    tiny: str, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Graphs written before records were kept, or by a writer killed before it
    recorded, cannot be vouched for: they are made again (with nothing to warn about)."""
    first = OnnxEmbedder(tiny, cache_dir=cache)
    want = first.embed_documents(TEXTS)
    folder = first.onnx_path.parent
    (folder / onnx_files.RECORD_FILE).unlink()
    constant_graph(first.onnx_path, want.shape[1])  # whatever it holds now
    got = OnnxEmbedder(tiny, cache_dir=cache).embed_documents(TEXTS)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert CHANGED not in caplog.text
    assert {"model-raw.onnx", "model.onnx", "model-serve.onnx"} <= set(record_of(folder))


def test_a_copied_cache_is_hashed_once_and_kept(
    tiny: str, cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file whose identity (inode, times) changed but whose bytes did not (a copied
    cache, a restored backup) is loaded as it is, and its new identity recorded."""
    first = OnnxEmbedder(tiny, cache_dir=cache)
    want = first.embed_documents(TEXTS)
    copy = tmp_path / "copied-cache"
    shutil.copytree(cache, copy, symlinks=True)  # new inodes, same bytes
    folder = copy / first.onnx_path.parent.relative_to(cache)
    served = folder / first.onnx_path.name
    written = served.stat().st_mtime_ns
    got = OnnxEmbedder(tiny, cache_dir=copy).embed_documents(TEXTS)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert served.stat().st_mtime_ns == written  # not made again
    assert CHANGED not in caplog.text
    info = served.stat()
    identity = [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
    assert record_of(folder)[served.name]["identity"] == identity


def test_graphs_and_their_folders_are_private(tiny: str, cache: Path, umask_022: None) -> None:
    OnnxEmbedder(tiny, quantize=True, cache_dir=cache)
    for path in (cache / "onnx").rglob("*"):
        want = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(path.stat().st_mode) == want, path


def test_a_folder_in_the_cache_others_may_write_is_refused(tiny: str, cache: Path) -> None:
    (cache / "onnx").mkdir(parents=True)
    (cache / "onnx").chmod(0o777)
    with pytest.raises(NotPrivate, match=f"{cache / 'onnx'} is writable by other users"):
        OnnxEmbedder(tiny, cache_dir=cache)


def test_an_edited_verdict_cannot_pick_a_recipe_of_its_own(tiny: str, cache: Path) -> None:
    path = precision.verdict_path(tiny, str(cache))
    planted = {"per_channel": False, "weight_type": "u8", "op_types": ["MatMul"], "exclude": []}
    text = json.dumps({"chosen": planted, "trials": []})
    atomic_write(path, lambda tmp: tmp.write_text(text))
    assert precision.choose_int8(tiny, str(cache)) is None  # float32: always right
