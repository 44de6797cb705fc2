"""BEIR evaluation: loading, metrics against hand-computed values, reuse of the loaded corpus."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import hybridkb
from hybridkb.cli.commands import main
from hybridkb.devtools.evaluate import (
    FINGERPRINT_ID,
    collection_name,
    load_beir,
    ndcg_at_k,
    recall_at_k,
    run_eval,
)
from hybridkb.errors import ConfigError

CONTRACT_KEYS = {"ndcg@10", "recall@100", "queries", "mode", "p50_ms", "p95_ms"}

# Ten documents with disjoint vocabularies, so a keyword search is exact.
DOCS = {
    "d0": ("Glacier hydrology", "Meltwater channels carve moulins through glacier ice sheets."),
    "d1": ("Volcanic soils", "Andisols form from volcanic ash and retain phosphorus strongly."),
    "d2": ("", "Honeybee colonies communicate forage locations through waggle dances."),
    "d3": ("Coral bleaching", "Thermal stress expels zooxanthellae from reef-building corals."),
    "d4": ("Quantum dots", "Semiconductor nanocrystals emit size-tunable fluorescence."),
    "d5": ("Tidal energy", "Lagoon barrages harvest electricity from ocean tides."),
    "d6": ("Sourdough microbiology", "Lactobacilli and wild yeasts leaven rye bread dough."),
    "d7": ("Bird migration", "Arctic terns navigate pole-to-pole using magnetoreception."),
    "d8": ("Permafrost carbon", "Thawing tundra releases methane from frozen peat."),
    "d9": ("Origami engineering", "Folded metamaterials deploy satellite solar arrays compactly."),
}
QUERIES = {
    "q1": "moulins meltwater glacier",
    "q2": "waggle dances honeybee forage",
    "q3": "magnetoreception terns migration",
    "q4": "andisols phosphorus volcanic",
    "q5": "not judged, never evaluated",
}
QRELS = [("q1", "d0", 1), ("q2", "d2", 2), ("q3", "d7", 1), ("q4", "d1", 1), ("q9", "d3", 1)]


def write_beir(folder: Path, docs: dict[str, tuple[str, str]] = DOCS) -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for _id, (title, text) in docs.items():
            fh.write(json.dumps({"_id": _id, "title": title, "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for _id, text in QUERIES.items():
            fh.write(json.dumps({"_id": _id, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in QRELS]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    return write_beir(tmp_path / "tinybeir")


# -- metrics --------------------------------------------------------------------------------


def test_ndcg_single_relevant_at_rank_2() -> None:
    assert ndcg_at_k(["a", "b", "c"], {"b": 1}) == pytest.approx(1 / math.log2(3))


def test_ndcg_graded_relevance_uses_linear_gain_and_ideal_from_qrels() -> None:
    # DCG = 1/log2(2) + 2/log2(4) = 2; ideal grades [2, 1, 1] -> 2 + 1/log2(3) + 1/log2(4).
    value = ndcg_at_k(["a", "b", "c", "d"], {"a": 1, "c": 2, "x": 1, "z": 0})
    assert value == pytest.approx(2 / (2 + 1 / math.log2(3) + 0.5))
    assert value == pytest.approx(0.638788, abs=1e-6)


def test_ndcg_edges() -> None:
    ranked = [f"n{i}" for i in range(10)] + ["hit"]
    assert ndcg_at_k(ranked, {"hit": 1}, k=10) == 0.0
    assert ndcg_at_k(ranked, {"hit": 1}, k=11) == pytest.approx(1 / math.log2(12))
    assert ndcg_at_k(["a"], {"a": 0}) == 0.0  # no relevant document
    assert ndcg_at_k(["a", "a", "b"], {"b": 1}) == pytest.approx(
        1 / math.log2(3)
    )  # repeats ignored
    assert ndcg_at_k(["b", "a"], {"a": 1, "b": 1}) == pytest.approx(1.0)


def test_recall() -> None:
    assert recall_at_k(["a", "b"], {"a": 1, "c": 1, "d": 0}) == 0.5
    assert recall_at_k(["x", "a"], {"a": 1}, k=1) == 0.0
    assert recall_at_k(["x", "a"], {"a": 1}, k=2) == 1.0
    assert recall_at_k(["x"], {"a": 0}) == 0.0


# -- loading ------------------------------------------------------------------------------------


def test_load_beir(beir: Path) -> None:
    data = load_beir(beir, "test")
    assert data.corpus["d2"] == ("", DOCS["d2"][1])
    assert data.queries["q5"] == QUERIES["q5"]
    assert data.qrels["q2"] == {"d2": 2}
    assert set(data.qrels) == {"q1", "q2", "q3", "q4", "q9"}


def test_load_beir_errors_name_the_file(beir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="available splits: test"):
        load_beir(beir, "dev")
    with pytest.raises(ConfigError, match="not a folder"):
        load_beir(tmp_path / "nowhere")
    with (beir / "corpus.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("{broken\n")
    with pytest.raises(ConfigError, match=r"corpus.jsonl:11: not valid JSON"):
        load_beir(beir)


def test_a_corpus_line_nested_too_deeply_is_refused_in_one_line(beir: Path) -> None:
    """A crafted corpus: json.loads of the line raised RecursionError (a traceback)."""
    with (beir / "corpus.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match=r"corpus.jsonl:11: nested more than 20 levels deep"):
        load_beir(beir)


# -- run_eval -------------------------------------------------------------------------------------


def test_keyword_mode_on_a_perfect_match_corpus_scores_1(beir: Path, tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "eval.duckdb", model="fake") as kb:
        result = run_eval(kb, beir, mode="keyword")
        assert CONTRACT_KEYS <= set(result)
        assert result["ndcg@10"] == 1.0 and result["recall@100"] == 1.0
        assert result["queries"] == 4 and result["missing_queries"] == 1
        assert result["mode"] == "keyword" and result["reused"] is False
        assert 0 <= result["p50_ms"] <= result["p95_ms"]
        assert result["collection"] == "eval:tinybeir" == collection_name(beir)
        coll = kb.collection("eval:tinybeir")
        assert coll.count() == len(DOCS) + 1  # the corpus plus the fingerprint marker
        assert coll.get("d2") is not None and coll.get(FINGERPRINT_ID) is not None


@pytest.mark.parametrize("mode", ["hybrid", "vector", "filter"])
def test_every_mode_reports_the_contract(beir: Path, tmp_path: Path, mode: str) -> None:
    with hybridkb.connect(tmp_path / "eval.duckdb", model="fake") as kb:
        result = run_eval(kb, beir, mode=mode)
        recipe = kb.record(result["collection"]).recipe
    assert CONTRACT_KEYS <= set(result) and result["mode"] == mode
    assert 0.0 <= result["ndcg@10"] <= 1.0 and result["queries"] == 4
    # Which numeric recipe made the vectors, and on which CPU: figures differ by both.
    assert result["recipe"] == recipe
    assert result["cpu"]["model"] and isinstance(result["cpu"]["flags"], list)
    if mode != "filter":
        assert result["ndcg@10"] > 0.5  # the fake embedder shares words between query and doc


def test_second_run_reuses_the_collection(
    beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "eval.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        first = run_eval(kb, beir, mode="keyword")
    assert first["reused"] is False and first["load"]["added"] == len(DOCS)

    def no_adds(*args: object, **kwargs: object) -> None:
        raise AssertionError("a reused corpus must not be added again")

    with monkeypatch.context() as m:
        m.setattr(hybridkb.Collection, "add_texts", no_adds)
        with hybridkb.connect(db, model="fake") as kb:
            second = run_eval(kb, beir, mode="keyword")
    assert second["reused"] is True and second["ndcg@10"] == first["ndcg@10"]


def test_changed_corpus_is_topped_up_and_stale_documents_removed(
    beir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "eval.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        run_eval(kb, beir, mode="keyword")
    docs = {k: v for k, v in DOCS.items() if k != "d9"}
    docs["d10"] = ("Extra", "Mycorrhizal fungi trade nutrients with roots.")
    write_beir(beir, docs)
    with hybridkb.connect(db, model="fake") as kb:
        result = run_eval(kb, beir, mode="keyword")
        assert result["reused"] is False
        assert result["load"] == {
            "reused": False, "added": 1, "unchanged": 9, "failed": 0, "removed": 1,
        }  # fmt: skip
        coll = kb.collection("eval:tinybeir")
        assert coll.get("d9") is None and coll.get("d10") is not None


def test_changed_chunking_rebuilds_the_collection(beir: Path, tmp_path: Path) -> None:
    db = tmp_path / "eval.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        run_eval(kb, beir, mode="keyword")
    with hybridkb.connect(db, model="fake", chunk_size=400, chunk_overlap=50) as kb:
        result = run_eval(kb, beir, mode="keyword")
        assert result["reused"] is False and result["load"]["added"] == len(DOCS)
        assert kb.describe("eval:tinybeir").chunking["size"] == 400


def test_bad_arguments(beir: Path, tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "eval.duckdb", model="fake") as kb:
        with pytest.raises(ConfigError, match="mode"):
            run_eval(kb, beir, mode="fuzzy")
        with pytest.raises(ConfigError, match="k_docs"):
            run_eval(kb, beir, k_docs=5)


def test_cli_eval_json(
    beir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    db = str(tmp_path / "cli.duckdb")
    assert main(["--db", db, "eval", str(beir), "--mode", "keyword", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert CONTRACT_KEYS <= set(result) and result["ndcg@10"] == 1.0
    assert main(["--db", db, "eval", str(beir), "--mode", "keyword"]) == 0
    out = capsys.readouterr().out
    assert "reused" in out and "nDCG@10     1.0000" in out and "p50" in out
    assert main(["--db", db, "eval", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.startswith("hybridkb: ")
