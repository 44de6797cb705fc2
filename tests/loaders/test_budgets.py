"""Every input within budget (issues 25 and 32): one bad file fails alone, every file is
charged where its cost is produced (markup, blocks and cells included), large text files
of every plain format stream.

The crafted files come from tests/support/hostilegen.py at small sizes, checked against
lowered budgets (``FileLimits`` or ``HYBRIDKB_MAX_FILE_*``); the full-size files, in a
child process under a memory cap, are in test_hostile_suite.py.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from formatgen import epub_bytes, xlsx_bytes
from hostilegen import (
    docx_with_headers,
    docx_with_image,
    docx_with_paragraphs,
    epub_big_dat,
    epub_chapter_of,
    epub_spine_repeated,
    html_paragraphs,
    pdf_pdfium_rejects,
    pdf_shared_stream,
    pptx_with_image,
    xlsx_far_cells,
    xlsx_shared_string_bomb,
)

import hybridkb
from hybridkb.errors import ExtractionError
from hybridkb.ingest import pipeline as ingest
from hybridkb.loaders import FileLimits, load_file, text
from hybridkb.loaders import webpage as html
from hybridkb.loaders.budget import BLOCK_CHARS, BudgetExceeded, FileBudget, counting_zip_reads
from hybridkb.loaders.ocr import ocr_available
from hybridkb.loaders.sheets import load_csv
from hybridkb.loaders.text import markdown_blocks, stream_markdown
from hybridkb.results import Block, LoadedFile

needs_ocr = pytest.mark.skipif(not ocr_available(), reason="the OCR extra is not installed")


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


def _over(path: Path, limits: FileLimits, setting: str) -> str:
    with pytest.raises(BudgetExceeded) as caught:
        load_file(path, limits=limits)
    message = str(caught.value)
    assert message.startswith(f"{path.name}: over the ") and "\n" not in message
    assert f"raise HYBRIDKB_MAX_FILE_{setting} to read it" in message
    return message


# -- 1. one bad file never sinks the folder -------------------------------------------------


def _good_and(folder: Path, name: str, data: bytes) -> None:
    folder.mkdir()
    (folder / "good.txt").write_text("Lemurs live on Madagascar.\n")
    _write(folder, name, data)


@needs_ocr
def test_a_pdf_pdfium_refuses_fails_alone_and_the_folder_is_added(
    tmp_path: Path, kb: hybridkb.KnowledgeBase
) -> None:
    # pypdf repairs the missing /Root, PDFium refuses the file: OCR raised PdfiumError
    # out of add and the good file beside it was lost.
    _good_and(tmp_path / "in", "bad.pdf", pdf_pdfium_rejects())
    report = kb.create_collection("C").add(tmp_path / "in")
    assert [f.filename for f in report.added] == ["good.txt"]
    [failed] = report.failed
    assert failed.filename == "bad.pdf" and "\n" not in failed.error
    assert failed.error.startswith("bad.pdf: no text layer (a scan), and OCR could not read it")
    assert "PdfiumError" in failed.error


@pytest.mark.parametrize(
    "error",
    [
        KeyError("word/document.xml"),
        RecursionError("maximum recursion depth exceeded"),
        MemoryError(),
        zipfile.BadZipFile("Bad CRC-32"),
        ValueError("bad\nvalue"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_any_exception_a_parser_raises_is_that_files_one_line_failure(
    tmp_path: Path,
    kb: hybridkb.KnowledgeBase,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
) -> None:
    from hybridkb.loaders import text

    def broken(lines: object, **_: object) -> object:
        raise error

    monkeypatch.setattr(text, "iter_markdown_blocks", broken)
    _good_and(tmp_path / "in", "notes.md", b"# Title\n\nSome text.\n")
    report = kb.create_collection("C").add(tmp_path / "in")
    assert [f.filename for f in report.added] == ["good.txt"]
    [failed] = report.failed
    assert failed.filename == "notes.md" and "\n" not in failed.error
    assert failed.error.startswith("notes.md: ")
    assert (
        ("memory" in failed.error)
        if isinstance(error, MemoryError)
        else (type(error).__name__ in failed.error)
    )


# -- 2. one budget per file, charged where the bytes are produced ----------------------------


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("image.docx", lambda: docx_with_image(12)),
        ("image.pptx", lambda: pptx_with_image(12)),
        ("big.epub", lambda: epub_big_dat(6)),
        ("headers.docx", lambda: docx_with_headers(8, 2)),
    ],
)
def test_zip_parts_are_charged_whatever_their_name(
    tmp_path: Path, name: str, make: Callable[[], bytes]
) -> None:
    path = _write(tmp_path, name, make())
    message = _over(path, FileLimits(archive_mb=4), "ARCHIVE_MB")
    assert "MB uncompressed, limit 4 MB" in message
    load_file(path, limits=FileLimits(archive_mb=64, xml_mb=64))  # within budget it reads


def test_a_chapter_the_spine_repeats_is_charged_each_time(tmp_path: Path) -> None:
    path = _write(tmp_path, "spine.epub", epub_spine_repeated(600, 20))
    _over(path, FileLimits(archive_mb=4), "ARCHIVE_MB")  # 600 reads of ~20 KB
    _over(path, FileLimits(xml_mb=4), "XML_MB")
    _over(path, FileLimits(text_chars=1_000_000), "TEXT_CHARS")
    assert len(load_file(_write(tmp_path, "once.epub", epub_spine_repeated(1, 20))).blocks) == 1


def test_xml_parsed_whole_is_charged_apart_from_media(tmp_path: Path) -> None:
    # Millions of one-letter paragraphs: a tree ~20x the XML, whatever the text.
    paragraphs = _write(tmp_path, "paragraphs.docx", docx_with_paragraphs(3))
    message = _over(paragraphs, FileLimits(xml_mb=2), "XML_MB")
    assert "word/document.xml" in message
    # Media is not XML: a 12 MB "image" passes an XML budget of 2 MB.
    load_file(_write(tmp_path, "image.docx", docx_with_image(12)), limits=FileLimits(xml_mb=2))


def test_shared_strings_are_clipped_before_each_cell_is_built(tmp_path: Path) -> None:
    # One 512 KB shared string in 2,000 cells: each cell used to split all of it.
    path = _write(tmp_path, "strings.xlsx", xlsx_shared_string_bomb(512, 200, 10))
    loaded = load_file(path)
    assert len(loaded.blocks) == 199 and max(len(b.text) for b in loaded.blocks) < 45_000
    _over(path, FileLimits(text_chars=1_000_000), "TEXT_CHARS")
    _over(path, FileLimits(rows=50), "ROWS")


def test_a_sheet_and_a_csv_are_charged_per_row(tmp_path: Path) -> None:
    rows: list[list[object]] = [["n", "word"], *([n, "lemur"] for n in range(1000))]
    xlsx = _write(tmp_path, "rows.xlsx", xlsx_bytes({"Sheet": rows}))
    csv = _write(tmp_path, "rows.csv", "".join(f"{a},{b}\n" for a, b in rows).encode())
    for path in (xlsx, csv):
        assert "more than 100 rows" in _over(path, FileLimits(rows=100), "ROWS")
        assert len(load_file(path, limits=FileLimits(rows=1001)).blocks) == 1000


def test_pdf_pages_and_shared_content_are_charged_each_use(tmp_path: Path) -> None:
    path = _write(tmp_path, "shared.pdf", pdf_shared_stream(60, text=True, lines=400))
    _over(path, FileLimits(pages=50), "PAGES")
    # 60 pages drawing one ~21 KB stream: 1.2 MB drawn, though stored once.
    _over(path, FileLimits(pdf_content_mb=1), "PDF_CONTENT_MB")
    _over(path, FileLimits(text_chars=100_000), "TEXT_CHARS")
    assert load_file(path, limits=FileLimits(pages=60, pdf_content_mb=2)).blocks


@needs_ocr
def test_pages_sent_to_ocr_are_counted_before_any_is_rendered(tmp_path: Path) -> None:
    path = _write(tmp_path, "drawings.pdf", pdf_shared_stream(30, text=False))
    message = _over(path, FileLimits(ocr_pages=10), "OCR_PAGES")
    assert "30 pages without a text layer to OCR, limit 10" in message


def test_each_block_costs_more_than_its_text(tmp_path: Path) -> None:
    # A million one-letter paragraphs are a million blocks, not a million characters.
    path = _write(tmp_path, "tiny.md", b"a\n\n" * 1000)
    assert "more than 10,000 characters" in _over(path, FileLimits(text_chars=10_000), "TEXT_CHARS")
    assert len(load_file(path, limits=FileLimits(text_chars=60_000)).blocks) == 1000


def test_an_html_page_is_charged_as_the_markup_it_parses(tmp_path: Path) -> None:
    # Streamed, a page still makes libxml2 hold its open elements and a tag's attributes.
    path = html_paragraphs(tmp_path / "page.html", 2)
    assert "parsing page.html brings the markup" in _over(path, FileLimits(xml_mb=1), "XML_MB")
    small = _write(tmp_path, "small.html", b"<p>a</p>" * 10_000)
    assert len(load_file(small, limits=FileLimits(xml_mb=1)).blocks) == 10_000


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("page.html", b"<p>a</p>" * 100_000),
        ("book.epub", epub_chapter_of(b"<p>a</p>", 1)),
        ("notes.md", b"a\n\n" * 100_000),
        ("notes.txt", b"a\n\n" * 100_000),
    ],
)
def test_blocks_are_charged_as_they_are_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, data: bytes
) -> None:
    # A page of 6 MB of <p>a</p> made 800,000 blocks (and a tree) before the budget saw one.
    made = 0

    def counted(*args: Any, **kwargs: Any) -> Block:
        nonlocal made
        made += 1
        return Block(*args, **kwargs)

    monkeypatch.setattr(html, "Block", counted)
    monkeypatch.setattr(text, "Block", counted)
    path = _write(tmp_path, name, data)
    _over(path, FileLimits(text_chars=1_000_000), "TEXT_CHARS")
    assert made <= 1_000_000 // (BLOCK_CHARS + 1) + 1  # none past the budget


def test_cells_are_charged_empty_ones_too(tmp_path: Path) -> None:
    # 100 rows whose one cell is in the last column: 16,384 cells each.
    wide = _write(tmp_path, "wide.xlsx", xlsx_far_cells(100, corner=False))
    assert "more than 1,000,000 cells" in _over(wide, FileLimits(cells=1_000_000), "CELLS")
    assert len(load_file(wide, limits=FileLimits(cells=2_000_000)).blocks) == 101
    commas = _write(tmp_path, "commas.csv", b"a" + b"," * 200_000 + b"\n" + b"b,c\n" * 10)
    _over(commas, FileLimits(cells=100_000), "CELLS")


def test_a_sheet_is_read_to_its_last_cell_not_its_declared_size(tmp_path: Path) -> None:
    # It declares A1:XFD1048576 and has a cell at XFD1048576: read-only openpyxl padded
    # every row between to 16,384 empty cells (17 billion), which only the time budget ended.
    path = _write(tmp_path, "corner.xlsx", xlsx_far_cells(0, corner=True))
    loaded = load_file(path, limits=FileLimits(rows=1_100_000, cells=20_000))
    assert [(b.page, b.text) for b in loaded.blocks] == [
        (2, "name: lemur; value: 1"),
        (1_048_576, "column 16384: z"),
    ]


def test_parsing_time_is_charged_at_every_step() -> None:
    ticks = iter([0.0, 1.0, 11.0])
    budget = FileBudget("slow.csv", FileLimits(seconds=10), clock=lambda: next(ticks))
    budget.charge_rows()
    with pytest.raises(BudgetExceeded, match="over the time budget .*HYBRIDKB_MAX_FILE_SECONDS"):
        budget.charge_rows()


def test_zip_reads_outside_a_load_are_not_charged(tmp_path: Path) -> None:
    data = epub_bytes([("One", "<p>text</p>")])
    budget = FileBudget("book.epub", FileLimits())
    with counting_zip_reads(budget):
        zipfile.ZipFile(io.BytesIO(data)).read("mimetype")
    charged = budget.archive_bytes
    assert charged == len("application/epub+zip")
    zipfile.ZipFile(io.BytesIO(data)).read("mimetype")
    assert budget.archive_bytes == charged


@pytest.mark.parametrize(
    ("setting", "name", "body", "error"),
    [
        (
            "HYBRIDKB_MAX_FILE_ROWS",
            "rows.csv",
            "".join(f"{n},lemur\n" for n in range(50)),
            "rows.csv: over the row budget (more than 10 rows); "
            "raise HYBRIDKB_MAX_FILE_ROWS to read it",
        ),
        (
            "HYBRIDKB_MAX_FILE_CELLS",
            "wide.csv",
            "name,a,b,c,d,e\nlemur,1,2,3,4,5\n",
            "wide.csv: over the cell budget (more than 10 cells); "
            "raise HYBRIDKB_MAX_FILE_CELLS to read it",
        ),
    ],
)
def test_budgets_come_from_the_settings_and_name_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str, name: str, body: str, error: str
) -> None:
    monkeypatch.setenv(setting, "10")
    folder = tmp_path / "in"
    _good_and(folder, name, body.encode())
    with hybridkb.connect(tmp_path / "budgets.duckdb", model="fake") as base:
        report = base.create_collection("C").add(folder)
    assert [f.filename for f in report.added] == ["good.txt"]
    [failed] = report.failed
    assert failed.error == error and failed.code == "over_budget"


# -- 3. Markdown and CSV stream like .txt ---------------------------------------------------

MARKDOWN = """---
title: Notes
---
Intro line
still intro

Setext Title
============

## Table

| a | b |
|---|---|
| 1 | 2 |

```python
def f():

    return 1
```

* * *

```text
unclosed fence
"""


def test_streamed_markdown_reads_as_the_whole_file_did(tmp_path: Path) -> None:
    path = _write(tmp_path, "notes.md", MARKDOWN.replace("\n", "\r\n").encode())
    with path.open("rb") as stream:
        streamed = list(stream_markdown(stream, name="notes.md"))
    assert streamed == markdown_blocks(MARKDOWN)
    assert [b.kind for b in streamed] == [
        "paragraph",
        "paragraph",
        "heading",
        "heading",
        "table",
        "code",
        "code",
    ]


def test_a_huge_unclosed_fence_is_handed_on_in_pieces(tmp_path: Path) -> None:
    from hybridkb.loaders.text import iter_markdown_blocks

    lines = iter(["```", *(f"line {n}" for n in range(10_000))])
    blocks = list(iter_markdown_blocks(lines, max_block_chars=5_000))
    assert len(blocks) > 10 and max(len(b.text) for b in blocks) < 5_100
    assert sum(b.text.count("line ") for b in blocks) == 10_000


def test_csv_rows_stream_with_quoted_line_breaks(tmp_path: Path) -> None:
    data = 'name;note\r\nalpha;"two\r\nlines"\r\nbeta;plain\r\n'.encode("utf-16")
    blocks = load_csv(io.BytesIO(data), name="rows.csv")
    assert [b.text for b in blocks] == ["name: alpha; note: two lines", "name: beta; note: plain"]
    with pytest.raises(ExtractionError, match="empty file"):
        load_csv(io.BytesIO(b" \n \n"), name="blank.csv")


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("big.md", "".join(f"## Part {n}\n\nLemurs number {n}.\n\n" for n in range(300))),
        ("big.csv", "n,animal\n" + "".join(f"{n},lemur {n}\n" for n in range(300))),
    ],
)
def test_large_markdown_and_csv_are_streamed_through_add(
    tmp_path: Path,
    kb: hybridkb.KnowledgeBase,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    body: str,
) -> None:
    monkeypatch.setattr(ingest, "STREAM_BYTES", 1_000)
    monkeypatch.setattr(ingest, "WINDOW_CHARS", 2_000)
    read_whole: list[str] = []
    real = load_file  # what ingest.py calls

    def counted(*a: Any, **k: Any) -> LoadedFile:
        read_whole.append("x")
        return real(*a, **k)

    monkeypatch.setattr(ingest, "load_file", counted)
    path = _write(tmp_path, name, body.encode())
    coll = kb.create_collection("C")
    report = coll.add(path)
    assert [f.filename for f in report.added] == [name] and not read_whole
    assert coll.describe().chunks >= 100
    hits = coll.search("lemur 299" if name.endswith(".csv") else "Part 299", k=1, mode="keyword")
    assert hits and "299" in hits[0].text
