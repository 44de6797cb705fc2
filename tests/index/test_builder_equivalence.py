"""The torch-free graph of the packaged all-MiniLM-L6-v2 against sentence-transformers and
against the torch export it replaced (marked: needs torch, which stays in the dev extra)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hybridkb.embedders import onnx_build, onnx_model, onnx_torch
from hybridkb.embedders.onnx import OnnxEmbedder

pytestmark = pytest.mark.model

MODEL = "all-MiniLM-L6-v2"
LONG = " ".join(["Depreciation spreads the cost of an asset over its useful life."] * 40)
PROBES = [
    "Hello world.",
    "",
    "a",
    "?",
    "s.40-880",
    "How do assets lose worth over time?",
    "Employees accrue four weeks of annual leave every year.",
    "Our cafeteria serves pasta on Fridays.",
    "The decline in value of a depreciating asset is spread over its effective life.",
    "Vitamin D supplementation reduces the risk of fractures in older adults.",
    "ALDH1 expression is associated with poorer prognosis for breast cancer primary tumors.",
    "0-dimensional biomaterials show inductive properties.",
    "CRISPR-Cas9 edits genomes by cutting DNA at sites chosen by a guide RNA.",
    "The mitochondria is the powerhouse of the cell.",
    "SELECT * FROM documents WHERE id = 42;",
    "def embed(texts: list[str]) -> np.ndarray: ...",
    "https://example.com/path?query=1&other=two",
    "Mean pooling must ignore padded positions in a batch of unequal lengths.",
    "UPPER CASE TEXT IS LOWERED BY THE TOKENIZER",
    "Emojis 🙂🚀 and symbols ©®™ are rare in training data.",
    "Tab\tseparated\tvalues\nand new lines",
    "   leading and trailing spaces   ",
    "Die Abschreibung verteilt die Kosten eines Vermögenswerts über seine Nutzungsdauer.",
    "La dépréciation répartit le coût d'un actif sur sa durée de vie utile.",
    "La amortización distribuye el costo de un activo a lo largo de su vida útil.",
    "L'ammortamento ripartisce il costo di un bene lungo la sua vita utile.",
    "A depreciação distribui o custo de um ativo ao longo de sua vida útil.",
    "Амортизация распределяет стоимость актива на срок его полезного использования.",
    "減価償却は資産の取得費用を耐用年数にわたって配分する。",
    "折旧将资产成本分摊到其使用寿命内。",
    "감가상각은 자산의 비용을 내용연수에 걸쳐 배분한다.",
    "الاستهلاك يوزع تكلفة الأصل على مدى عمره الإنتاجي.",
    "פחת מפזר את עלות הנכס על פני אורך חייו.",
    "मूल्यह्रास किसी संपत्ति की लागत को उसके उपयोगी जीवन में फैलाता है।",
    "Η απόσβεση κατανέμει το κόστος ενός περιουσιακού στοιχείου.",
    "Amortyzacja rozkłada koszt środka trwałego na okres jego użytkowania.",
    "Çeşitli dillerde yazılmış metinler de aynı şekilde gömülür.",
    "Tiếng Việt có dấu: khấu hao tài sản cố định.",
    "ค่าเสื่อมราคากระจายต้นทุนของสินทรัพย์",
    LONG,
    " ".join(f"token{i}" for i in range(400)),
    "word " * 300,
    "Ünïcödé àccénts everywhere, façade naïve coöperate.",
    "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Is the tax deductible if the asset is used for private purposes?",
    "Capital gains tax applies when you dispose of a CGT asset.",
    "GST is a broad-based tax of 10% on most goods and services.",
    "Interest rates were left unchanged by the central bank this month.",
    "Photosynthesis converts light energy into chemical energy.",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """Vectors of the built graph served as the backend serves it (fp32, fresh cache)."""
    cache = tmp_path_factory.mktemp("cache")
    embedder = OnnxEmbedder(MODEL, cache_dir=str(cache))
    assert '"graph_from": "onnx_build"' in (embedder.onnx_path.parent / "export.json").read_text()
    return embedder.embed_documents(PROBES)


def test_probe_set_covers_truncation() -> None:
    spec = onnx_model.read_spec(MODEL, onnx_model.model_folder(MODEL))
    tokenizer = onnx_model.load_tokenizer(spec)
    longest = max(len(e.ids) for e in tokenizer.encode_batch(PROBES))
    assert len(PROBES) >= 50 and longest == spec.max_seq_length == 256


def test_built_graph_matches_sentence_transformers(built: np.ndarray) -> None:
    from sentence_transformers import SentenceTransformer

    from hybridkb.embedders.sentence import resolve_model_source

    model = SentenceTransformer(resolve_model_source(MODEL), device="cpu")
    want = model.encode(PROBES, convert_to_numpy=True, normalize_embeddings=True)
    cosines = onnx_model.cosines(built, np.asarray(want))
    assert float(cosines.min()) >= 0.9999, [
        (PROBES[i][:40], float(c)) for i, c in enumerate(cosines) if c < 0.9999
    ]


def test_built_graph_matches_the_torch_export(tmp_path: Path) -> None:
    """The raw graphs (token vectors, padded batches) of the builder and of torch.onnx.export."""
    import onnxruntime as ort

    spec = onnx_model.read_spec(MODEL, onnx_model.model_folder(MODEL))
    tokenizer = onnx_model.load_tokenizer(spec)
    ids, mask = onnx_model.encode(tokenizer, PROBES, spec.max_seq_length)
    onnx_build.write_graph(spec.folder, tmp_path / "built.onnx")
    names, _ = onnx_torch.export_with_torch(spec, tmp_path / "torch.onnx", MODEL, ids, mask, "")

    def pooled(path: Path) -> np.ndarray:
        session = onnx_model.session(ort, path, 1)
        inputs = [i.name for i in session.get_inputs()]
        return onnx_model.mean_pool(session.run(None, onnx_model.feed(inputs, ids, mask))[0], mask)

    assert names == onnx_build.INPUTS
    cosines = onnx_model.cosines(pooled(tmp_path / "built.onnx"), pooled(tmp_path / "torch.onnx"))
    assert float(cosines.min()) >= 0.9999
