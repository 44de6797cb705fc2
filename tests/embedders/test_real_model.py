"""The packaged all-MiniLM-L6-v2 model end to end (marked: slower, also run in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest
from internals import sql_rows

import hybridkb
from hybridkb.errors import ModelUnavailable

pytestmark = pytest.mark.model


def test_semantic_search_with_the_packaged_model(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb") as kb:
        coll = kb.create_collection("Tax Documents")
        assert (coll.describe().embedding_model, coll.describe().dim) == ("all-MiniLM-L6-v2", 384)
        coll.add_texts(
            [
                "The decline in value of a depreciating asset is spread over its effective life.",
                "Employees accrue four weeks of annual leave every year.",
                "Our cafeteria serves pasta on Fridays.",
            ],
            ids=["tax", "leave", "food"],
        )
        # No shared words with the tax text: only the vectors can find it.
        assert (
            coll.search("how do assets lose worth over time?", k=1, mode="vector")[0].document_id
            == "tax"
        )
        assert coll.search("holiday entitlement", k=1)[0].document_id == "leave"


def test_a_collection_whose_model_cannot_load_says_so(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add_texts(["text"], ids=["a"])
        sql_rows(
            kb,
            "UPDATE hybridkb_collections SET model = 'no-such-model-anywhere' WHERE name = 'Notes'",
        )
    with hybridkb.connect(db, model="fake") as kb:
        with pytest.raises(ModelUnavailable, match="no-such-model-anywhere.*reembed"):
            kb.collection("Notes").search("text")


def test_the_demo_answers_each_question_with_the_passage_that_answers_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hybridkb.devtools import demo

    assert demo.main(["--db", str(tmp_path / "demo.duckdb")]) == 0
    out = capsys.readouterr().out
    answers = {
        block.splitlines()[0]: block.splitlines()[1] for block in out.split("\n? ")[1:]
    }  # question line -> its first hit's citation line
    assert (
        "ITAA 1997 extract.pdf p.1" in answers['"what do my tax documents say about depreciation?"']
    )
    assert "ITAA 1997 extract.pdf p.2" in answers['"s.40-880"']
    assert "Sick leave" in answers['"how much sick leave do I get"']
    for question in (
        '"what do my tax documents say about depreciation?"',
        '"how much sick leave do I get"',
    ):
        assert 0 < float(answers[question].split()[1]) < 1  # hybrid scores read as 0..1
