"""The packaged all-MiniLM-L6-v2 model end to end (marked: slower, also run in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

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
        kb.storage.query(  # type: ignore[attr-defined]
            "UPDATE hybridkb_collections SET model = 'no-such-model-anywhere' WHERE name = 'Notes'"
        )
    with hybridkb.connect(db, model="fake") as kb:
        with pytest.raises(ModelUnavailable, match="no-such-model-anywhere.*reembed"):
            kb.collection("Notes").search("text")
