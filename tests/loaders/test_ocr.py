"""OCR of scanned PDF pages: layout assembly as a pure function, then the real engine
on scans the test makes itself (a text PDF rendered to an image-only PDF)."""

from __future__ import annotations

import difflib
import importlib.util
import re
from pathlib import Path

import pytest
from pdfgen import Page, make_pdf, scan_pdf

from hybridkb.kb import KnowledgeBase
from hybridkb.loaders import load_file
from hybridkb.loaders.ocr import TextLine, lines_to_paragraphs, ocr_available
from hybridkb.loaders.respace import respace

needs_ocr = pytest.mark.skipif(not ocr_available(), reason="the ocr extra is not installed")

TEXT = (
    "Depreciation of office equipment\n"
    "Laptops are written off over three years.\n"
    "Desks and chairs over ten years."
)


def _line(text: str, left: float, top: float, height: float = 20) -> TextLine:
    return TextLine(text, left, top, left + 10 * len(text), top + height)


def test_pieces_on_one_line_join_left_to_right_and_gaps_split_paragraphs() -> None:
    pieces = [
        _line("Total:", 10, 100),
        _line("Invoice 42", 10, 10),
        _line("120 EUR", 200, 102),  # same line, detected a little lower
        _line("Due in 30 days.", 10, 125),
        _line("Thank you.", 10, 200),  # a gap of more than a line: new paragraph
    ]
    assert lines_to_paragraphs(pieces) == [
        "Invoice 42",
        "Total: 120 EUR\nDue in 30 days.",
        "Thank you.",
    ]


def test_no_pieces_no_paragraphs() -> None:
    assert lines_to_paragraphs([]) == []


def _character_error_rate(expected: str, got: str) -> float:
    want, have = " ".join(expected.split()), " ".join(got.split())
    matcher = difflib.SequenceMatcher(a=want, b=have, autojunk=False)
    return 1 - 2 * sum(b.size for b in matcher.get_matching_blocks()) / (len(want) + len(have))


@needs_ocr
def test_a_scanned_pdf_is_read_with_its_page_numbers_and_a_warning(tmp_path: Path) -> None:
    scan = tmp_path / "receipt.pdf"
    scan.write_bytes(scan_pdf(make_pdf([Page("Cover page with a text layer."), Page(TEXT)])))
    loaded = load_file(scan)
    assert loaded.warnings == ["pages 1-2 were read by OCR (no text layer)"]
    assert {b.page for b in loaded.blocks} == {1, 2}
    page_two = "\n".join(b.text for b in loaded.blocks if b.page == 2)
    # A loose bound: recognition may differ in a space or a letter between CPUs.
    assert _character_error_rate(TEXT, page_two) < 0.15, page_two
    assert "depreciation" in page_two.lower()


@needs_ocr
def test_only_pages_without_a_text_layer_are_read_by_ocr(tmp_path: Path) -> None:
    scanned_page = scan_pdf(make_pdf([Page(TEXT)]))
    import io

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(make_pdf([Page("A typed first page.")]))))
    writer.append(PdfReader(io.BytesIO(scanned_page)))
    path = tmp_path / "mixed.pdf"
    with path.open("wb") as out:
        writer.write(out)
    loaded = load_file(path)
    assert loaded.blocks[0].text == "A typed first page." and loaded.blocks[0].page == 1
    assert all(b.page == 2 for b in loaded.blocks[1:]) and len(loaded.blocks) > 1
    assert loaded.warnings == ["page 2 was read by OCR (no text layer)"]


@needs_ocr
def test_scanned_pdf_is_searchable_through_a_collection(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = tmp_path / "scan.pdf"
    path.write_bytes(scan_pdf(make_pdf([Page(TEXT)])))
    coll = kb.create_collection("Scans")
    report = coll.add([path])
    assert report.added and "read by OCR" in report.added[0].warnings[0]
    hit = coll.search("laptops written off", k=1, mode="keyword")[0]
    assert hit.metadata["page"] == 1 and "aptops" in hit.text


def test_two_columns_are_read_column_by_column_under_a_spanning_title() -> None:
    pieces = [_line("A two column paper title across the page", 10, 0)]
    for row in range(4):
        top = 40 + 25 * row
        pieces.append(_line(f"left {row} text", 10, top))  # 10..150
        pieces.append(_line(f"right {row} text", 300, top))  # 300..450
    pieces.append(_line("A closing line that runs across both columns", 10, 200))
    assert lines_to_paragraphs(pieces) == [
        "A two column paper title across the page",
        "left 0 text\nleft 1 text\nleft 2 text\nleft 3 text",
        "right 0 text\nright 1 text\nright 2 text\nright 3 text",
        "A closing line that runs across both columns",
    ]


def test_a_ragged_right_margin_is_not_a_column() -> None:
    pieces = [_line("a long line of body text here", 10, 25 * n) for n in range(6)]
    pieces += [_line("short", 10, 150)]
    assert lines_to_paragraphs(pieces) == ["\n".join(p.text for p in pieces)]


# -- spaces between words ----------------------------------------------------------------

DENSE = (
    "Effective life of depreciating assets\n"
    "The effective life of a depreciating asset is how long it can be used by any entity\n"
    "for a taxable purpose, or for the purpose of producing exempt income, having regard\n"
    "to the wear and tear you reasonably expect from your expected circumstances of use.\n"
    "You can choose to self-assess the effective life of an asset or to use the effective\n"
    "life determined by the Commissioner. Travel expenses for work are claimed per trip."
)
needs_word_list = pytest.mark.skipif(
    importlib.util.find_spec("wordninja") is None,
    reason="the ocr extra's word list (wordninja) is not installed",
)


@needs_word_list
def test_respace_splits_glued_english_words_and_leaves_words_names_and_codes() -> None:
    assert respace("Theeffectivelifeofadepreciatingasset") == (
        "The effective life of a depreciating asset"
    )
    assert respace("Commissioner.Travel expenses, use,or Ltd,4") == (
        "Commissioner. Travel expenses, use, or Ltd, 4"
    )
    kept = "Commissioner INVOICE 2024-117 e.g. U.S. 1,200.00 EUR self-assess v2 C++"
    assert respace(kept) == kept
    # Names and foreign words are not cut into the list's fragments ("Hua rde st"); Latin
    # "sodales" still reads as "so dales", which is why only English pages are respaced.
    for word in ("Huardest", "Rupia", "ornare", "fames"):
        assert respace(word) == word


@needs_ocr
@needs_word_list
def test_a_scanned_page_reads_back_with_spaces_between_words(tmp_path: Path) -> None:
    """The recogniser glues Latin words at this size ("Theeffectivelifeof..."): a
    phrase of the page must be found as words, as keyword search needs them."""
    path = tmp_path / "scan.pdf"
    path.write_bytes(scan_pdf(make_pdf([Page(DENSE)])))
    text = " ".join(b.text for b in load_file(path).blocks)
    words = re.findall(r"[a-z]+", text.lower())
    wanted = re.findall(r"[a-z]+", DENSE.lower())
    found = sum(w in set(words) for w in wanted) / len(wanted)
    assert found > 0.95, text
    assert "effective life of depreciating assets" in " ".join(words), text  # the title
