"""Large plain-text files are streamed window by window, staged, then switched in with one transaction."""

from __future__ import annotations

from pathlib import Path

import pytest

import hybridkb
from hybridkb.ingest import pipeline as ingest


def _big_text(path: Path, paragraphs: int) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for i in range(paragraphs):
            out.write(f"Paragraph {i} talks about item{i} and shared matters in some detail.\n\n")
    return path


def test_large_text_is_streamed_and_equals_a_normal_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _big_text(tmp_path / "big.txt", 3000)
    with hybridkb.connect(tmp_path / "normal.duckdb", model="fake") as kb:
        normal = kb.create_collection("Big")
        normal.add(path)
        expected = [
            (h.text, h.metadata["char_start"])
            for h in normal.search("item2999", k=3, mode="keyword")
        ]
        expected_count = normal.describe().chunks
    monkeypatch.setattr(ingest, "STREAM_BYTES", 10_000)
    monkeypatch.setattr(ingest, "WINDOW_CHARS", 20_000)
    with hybridkb.connect(tmp_path / "stream.duckdb", model="fake") as kb:
        coll = kb.create_collection("Big")
        report = coll.add(path)
        assert report.added[0].chunks == coll.describe().chunks
        hits = coll.search("item2999", k=3, mode="keyword")
        assert "Paragraph 2999 " in hits[0].text
        # Offsets stay global: the chunk text is the slice of the document at char_start.
        doc_text = "\n\n".join(p for p in path.read_text().split("\n\n") if p.strip())
        top = hits[0]
        assert doc_text[top.metadata["char_start"] : top.metadata["char_end"]] == top.text
        assert abs(coll.describe().chunks - expected_count) <= expected_count * 0.05
        assert expected and "Paragraph 2999 " in expected[0][0]
        # Re-adding the unchanged file does nothing; changing it replaces everything.
        assert len(coll.add(path).unchanged) == 1
        _big_text(path, 100)
        coll.add(path)
        assert all("item2999" not in h.text for h in coll.search("item2999", k=50, mode="keyword"))
