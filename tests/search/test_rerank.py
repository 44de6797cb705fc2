"""The reranking plug-in: a cross-encoder re-scores the fused top of a search."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from rerankers import WordCount

import hybridkb
from hybridkb.cli.commands import main
from hybridkb.errors import ConfigError, ModelUnavailable
from hybridkb.search.rerank import CrossEncoderReranker, Reranker

NOTES = [
    "The harbour lease runs for ten years and is renewed in spring.",
    "Harbour dues are paid each quarter to the port authority.",
    "The lease of the harbour office ends when the pier is rebuilt.",
    "Annual leave is four weeks; the harbour closes in winter.",
]


@pytest.fixture
def notes(kb: hybridkb.KnowledgeBase) -> hybridkb.KnowledgeBase:
    kb.collection("Notes", create=True).add_texts(NOTES, ids=[f"n{i}" for i in range(len(NOTES))])
    return kb


def test_a_reranker_reorders_the_fused_top_and_shows_its_score(
    notes: hybridkb.KnowledgeBase,
) -> None:
    plain = notes.search("harbour lease", k=4)
    assert all(h.scores["rerank"] is None for h in plain)
    judge = WordCount("winter")
    reranked = notes.with_reranker(judge).search("harbour lease", k=2)
    assert reranked[0].document_id == "n3"  # the only passage that says "winter"
    assert [h.rank for h in reranked] == [1, 2]
    assert reranked[0].score == reranked[0].scores["rerank"] == 1.0
    fused = {h.document_id: h.scores["fused"] for h in plain}
    assert reranked[0].scores["fused"] == fused["n3"]  # the fused score is kept beside it
    # Ties (score 0 for the rest) keep the fused order.
    assert reranked[1].document_id == next(h.document_id for h in plain if h.document_id != "n3")
    assert judge.calls == [4]  # rerank_depth (30) candidates, but only 4 passages exist


def test_rerank_depth_bounds_what_the_reranker_sees(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake", rerank_depth=2) as kb:
        kb.collection("Notes", create=True).add_texts(NOTES, ids=[f"n{i}" for i in range(4)])
        judge = WordCount("winter")
        hits = kb.with_reranker(judge).search("harbour lease", k=1, mode="keyword")
        assert judge.calls == [2]
        plain = kb.search("harbour lease", k=2, mode="keyword")
        assert hits[0].document_id in {h.document_id for h in plain}


def test_rerank_false_skips_it_and_true_requires_one(notes: hybridkb.KnowledgeBase) -> None:
    judge = WordCount("winter")
    with_judge = notes.with_reranker(judge)
    assert [h.document_id for h in with_judge.search("harbour lease", k=4, rerank=False)] == [
        h.document_id for h in notes.search("harbour lease", k=4)
    ]
    assert judge.calls == []
    with pytest.raises(ConfigError, match="no reranker is set; set HYBRIDKB_RERANKER"):
        notes.search("harbour lease", rerank=True)
    with pytest.raises(ConfigError, match="rerank: expected true, false"):
        notes.search("harbour lease", rerank="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="has no name and score"):
        notes.with_reranker(object())  # type: ignore[arg-type]


def test_a_reranker_that_answers_wrong_is_a_clear_error(notes: hybridkb.KnowledgeBase) -> None:
    class Short:
        name = "short"

        def score(self, query: str, texts: Sequence[str]) -> list[float]:
            return [1.0]

    class NotANumber(Short):
        def score(self, query: str, texts: Sequence[str]) -> list[float]:
            return [float("nan")] * len(texts)

    for bad in (Short(), NotANumber()):
        with pytest.raises(ModelUnavailable, match="reranker .* fix the reranker"):
            notes.with_reranker(bad).search("harbour lease")


@pytest.mark.model  # the first search loads sentence-transformers, torch with it (~6 s)
def test_a_missing_reranker_folder_is_named_when_first_used(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake", reranker=str(missing)) as kb:
        kb.collection("Notes", create=True).add_texts(NOTES[:1])
        assert kb.search("harbour", rerank=False)  # adding and plain search need no model
        with pytest.raises(ModelUnavailable, match="no-such-model.*HYBRIDKB_RERANKER"):
            kb.search("harbour")


def test_cli_rerank_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "kb.duckdb")
    with hybridkb.connect(db, model="fake") as kb:
        kb.collection("Notes", create=True).add_texts(NOTES)
    assert main(["--db", db, "search", "Notes", "harbour", "--no-rerank"]) == 0
    capsys.readouterr()
    assert main(["--db", db, "search", "Notes", "harbour", "--rerank"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HYBRIDKB_RERANKER" in err


def _tiny_cross_encoder(folder: Path) -> Path:
    """A randomly initialised two-layer BERT cross-encoder with a 40-word vocabulary."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch").manual_seed(0)
    words = sorted({w.strip(".;,").lower() for note in NOTES for w in note.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizer(str(folder / "vocab.txt"))
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.model  # torch and transformers
def test_a_saved_cross_encoder_reranks_through_the_setting(tmp_path: Path) -> None:
    model = _tiny_cross_encoder(tmp_path / "tiny-cross-encoder")
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake", reranker=str(model)) as kb:
        kb.collection("Notes", create=True).add_texts(NOTES, ids=[f"n{i}" for i in range(4)])
        hits = kb.search("harbour lease", k=4)
    direct = CrossEncoderReranker(str(model)).score("harbour lease", [h.text for h in hits])
    assert isinstance(CrossEncoderReranker(str(model)), Reranker)
    assert [h.scores["rerank"] for h in hits] == pytest.approx(list(direct), abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
