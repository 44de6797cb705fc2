"""The crafted hostile files of issues 25 and 32, as cases: the file each writes, the
budget (``HYBRIDKB_MAX_FILE_*``) it must hit and the environment that lowers it.

Its own module because two runners share the cases: the hostile-file suite
(tests/loaders/test_hostile_suite.py) adds each in a capped child process, and
bench/budgets.py measures the full sizes. ``SMALL`` are the CI variants against lowered
budgets, ``FULL`` the attack's sizes at the default budgets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hostilegen import (
    docx_with_headers,
    docx_with_image,
    docx_with_paragraphs,
    epub_big_dat,
    epub_chapter_of,
    epub_spine_repeated,
    html_attributes,
    html_nested,
    html_paragraphs,
    pdf_pdfium_rejects,
    pdf_shared_stream,
    pptx_with_image,
    pptx_with_paragraphs,
    write_lines,
    xlsx_far_cells,
    xlsx_shared_string_bomb,
)


@dataclass(frozen=True)
class Crafted:
    name: str
    make: Callable[[Path], object]  # writes the file at the path
    setting: str | None  # the HYBRIDKB_MAX_FILE_* it must name; None: another one-line error
    env: dict[str, str] = field(default_factory=dict)
    needs_ocr: bool = False
    expect: str = ""  # a phrase of the error when ``setting`` is None
    readable: bool = False  # read within its budgets: added, in bounded memory


def _bytes(make: Callable[[], bytes]) -> Callable[[Path], object]:
    return lambda path: path.write_bytes(make()) and None


def _csv(mb: int) -> Callable[[Path], object]:
    return lambda path: write_lines(path, b"2024,rent,14400,flat\n", mb << 20) and None


def _lines(line: bytes, mb: int) -> Callable[[Path], object]:
    return lambda path: write_lines(path, line, mb << 20)


SMALL = [
    Crafted(
        "spine.epub",
        _bytes(lambda: epub_spine_repeated(600, 200)),
        "TEXT_CHARS",
        {"HYBRIDKB_MAX_FILE_TEXT_CHARS": "5000000"},
    ),
    Crafted(
        "image.docx",
        _bytes(lambda: docx_with_image(64)),
        "ARCHIVE_MB",
        {"HYBRIDKB_MAX_FILE_ARCHIVE_MB": "32"},
    ),
    Crafted(
        "image.pptx",
        _bytes(lambda: pptx_with_image(64)),
        "ARCHIVE_MB",
        {"HYBRIDKB_MAX_FILE_ARCHIVE_MB": "32"},
    ),
    Crafted(
        "chapter.epub",
        _bytes(lambda: epub_big_dat(64)),
        "ARCHIVE_MB",
        {"HYBRIDKB_MAX_FILE_ARCHIVE_MB": "32"},
    ),
    Crafted(
        "headers.docx",
        _bytes(lambda: docx_with_headers(8, 8)),
        "ARCHIVE_MB",  # the XML budget raised: here the archive budget is the one tried
        {"HYBRIDKB_MAX_FILE_ARCHIVE_MB": "32", "HYBRIDKB_MAX_FILE_XML_MB": "1000"},
    ),
    Crafted(
        "paragraphs.docx",
        _bytes(lambda: docx_with_paragraphs(12)),
        "XML_MB",
        {"HYBRIDKB_MAX_FILE_XML_MB": "8"},
    ),
    Crafted(
        "strings.xlsx",
        _bytes(lambda: xlsx_shared_string_bomb(512, 400, 20)),
        "TEXT_CHARS",
        {"HYBRIDKB_MAX_FILE_TEXT_CHARS": "5000000"},
    ),
    Crafted("rows.csv", _csv(20), "ROWS", {"HYBRIDKB_MAX_FILE_ROWS": "10000"}),
    Crafted(
        "shared.pdf",
        _bytes(lambda: pdf_shared_stream(3000, text=True, lines=9000)),
        "PDF_CONTENT_MB",
    ),
    Crafted(
        "drawings.pdf",
        _bytes(lambda: pdf_shared_stream(300, text=False)),
        "OCR_PAGES",
        needs_ocr=True,
    ),
    Crafted(
        "repaired.pdf",
        _bytes(pdf_pdfium_rejects),
        None,
        needs_ocr=True,
        expect="OCR could not read it (PdfiumError",
    ),
    # issue 32: the attack's page (48 MB of <p>a</p>: 1.84 GB, then an XPath error); then
    # one-letter paragraphs, elements never closed and one tag's attributes, parsed
    Crafted("attack.html", lambda path: html_paragraphs(path, 45), "XML_MB"),
    Crafted(
        "paragraphs.html",
        lambda path: html_paragraphs(path, 6),
        "TEXT_CHARS",
        {"HYBRIDKB_MAX_FILE_TEXT_CHARS": "10000000"},
    ),
    Crafted("nested.html", lambda path: html_nested(path, 4), None, expect="no text in the page"),
    Crafted("attributes.html", lambda path: html_attributes(path, 4), None, readable=True),
    Crafted(
        "paragraphs.epub",
        _bytes(lambda: epub_chapter_of(b"<p>a</p>", 6)),
        "TEXT_CHARS",
        {"HYBRIDKB_MAX_FILE_TEXT_CHARS": "10000000"},
    ),
    Crafted("paragraphs.pptx", _bytes(lambda: pptx_with_paragraphs(4)), None, readable=True),
    Crafted(
        "letters.md",
        _lines(b"a\n\n", 8),
        "TEXT_CHARS",
        {"HYBRIDKB_MAX_FILE_TEXT_CHARS": "5000000"},
    ),
    Crafted(
        "letters.txt",
        _lines(b"a\n\n", 8),
        "TEXT_CHARS",
        {"HYBRIDKB_MAX_FILE_TEXT_CHARS": "5000000"},
    ),
    # streamed (over 16 MB): charged like the rest, a streamed file's text 20x
    Crafted(
        "unbroken.txt",
        _lines(b"word ", 24),
        "TEXT_CHARS",
        {"HYBRIDKB_MAX_FILE_TEXT_CHARS": "1000000"},
    ),
    Crafted(
        "commas.csv",
        _lines(b"," * ((1 << 20) - 1) + b"\n", 20),
        "CELLS",
        {"HYBRIDKB_MAX_FILE_CELLS": "5000000"},
    ),
    # a 1.5 KB sheet declaring A1:XFD1048576: its last row, not 16 billion empty cells
    Crafted(
        "corner.xlsx",
        _bytes(lambda: xlsx_far_cells(0, corner=True)),
        "ROWS",
        {"HYBRIDKB_MAX_FILE_SECONDS": "60"},
    ),
    Crafted(
        "wide.xlsx",
        _bytes(lambda: xlsx_far_cells(200, corner=False)),
        "CELLS",
        {"HYBRIDKB_MAX_FILE_CELLS": "1000000"},
    ),
]

FULL = [
    Crafted("spine.epub", _bytes(lambda: epub_spine_repeated(600, 2048)), "XML_MB"),
    Crafted("image.docx", _bytes(lambda: docx_with_image(1200)), "ARCHIVE_MB"),
    Crafted("image.pptx", _bytes(lambda: pptx_with_image(1200)), "ARCHIVE_MB"),
    Crafted("chapter.epub", _bytes(lambda: epub_big_dat(1024)), "ARCHIVE_MB"),
    Crafted("headers.docx", _bytes(lambda: docx_with_headers(40, 45)), "XML_MB"),
    Crafted("paragraphs.docx", _bytes(lambda: docx_with_paragraphs(48)), "XML_MB"),
    Crafted("strings.xlsx", _bytes(lambda: xlsx_shared_string_bomb(2048, 2000, 20)), "TEXT_CHARS"),
    Crafted("rows.csv", _csv(400), "ROWS"),
    # the most markup the XML budget admits (16 MB); 48 MB of <p>a</p> took 1.84 GB
    Crafted("paragraphs.html", lambda path: html_paragraphs(path, 15), "TEXT_CHARS"),
    Crafted("nested.html", lambda path: html_nested(path, 15), None, expect="no text in the page"),
    Crafted("attributes.html", lambda path: html_attributes(path, 15), None, readable=True),
    Crafted("paragraphs.epub", _bytes(lambda: epub_chapter_of(b"<p>a</p>", 15)), "TEXT_CHARS"),
    Crafted("paragraphs.pptx", _bytes(lambda: pptx_with_paragraphs(14)), None, readable=True),
    Crafted("letters.md", _lines(b"a\n\n", 15), "TEXT_CHARS"),
    Crafted("letters.txt", _lines(b"a\n\n", 15), "TEXT_CHARS"),
    Crafted("corner.xlsx", _bytes(lambda: xlsx_far_cells(0, corner=True)), "ROWS"),
]
