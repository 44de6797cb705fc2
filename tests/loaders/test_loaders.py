"""Loaders on real generated files: PDFs from tests/support/pdfgen.py, DOCX from python-docx, text by hand.

Every error test checks the message contract: one line naming the file, the
problem and the fix.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest
from pdfgen import Page, encrypt_pdf, make_pdf, write_pdf

from hybridkb.errors import ExtractionError, UnsupportedFileType
from hybridkb.loaders import (
    SUPPORTED_EXTENSIONS,
    file_sha256,
    iter_files,
    iter_text_blocks,
    load_file,
)
from hybridkb.loaders.encoding import decode_bytes
from hybridkb.loaders.pdf import page_ranges, split_page_paragraphs
from hybridkb.loaders.text import markdown_blocks, text_blocks
from hybridkb.results import FailedFile, SkippedFile

OFF = "; OCR is off: set HYBRIDKB_OCR=true to read scans"


def _error(path: Path, **kwargs: Any) -> str:
    """load_file's one-line error for ``path`` (``kwargs`` go to load_file)."""
    with pytest.raises(ExtractionError) as info:
        load_file(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path.name}: ")
    return message


# --- PDF -------------------------------------------------------------------------


def test_pdf_blocks_keep_page_numbers_from_one(tmp_path: Path) -> None:
    pdf = write_pdf(
        tmp_path / "report.pdf",
        [Page("Alpha page text."), Page("Bravo page text."), Page("Charlie page (text).")],
    )
    loaded = load_file(pdf)
    assert loaded.file_type == "pdf"
    assert loaded.warnings == []
    assert [(b.page, b.text, b.kind) for b in loaded.blocks] == [
        (1, "Alpha page text.", "paragraph"),
        (2, "Bravo page text.", "paragraph"),
        (3, "Charlie page (text).", "paragraph"),
    ]


def test_pdf_text_is_normalised_and_split_into_paragraphs(tmp_path: Path) -> None:
    line = "A full line of body text that runs across the whole width of the page"
    text = f"{line}\n{line}\nand it ends here.\n{line}\nthe second one ends with depre-\nciation."
    pdf = write_pdf(tmp_path / "body.pdf", [Page(text)])
    blocks = load_file(pdf).blocks
    assert [b.page for b in blocks] == [1, 1]
    assert blocks[0].text.endswith("and it ends here.")
    assert blocks[1].text.endswith("the second one ends with depreciation.")


def test_split_page_paragraphs_breaks_after_short_sentence_ends_and_headings() -> None:
    long = "X" + "x" * 59
    text = f"Heading\n{long}\n{long}\nshort end.\n{long}\nlast"
    assert split_page_paragraphs(text) == [
        "Heading",
        f"{long}\n{long}\nshort end.",
        f"{long}\nlast",
    ]


def test_pdf_image_only_pages_are_listed_in_one_warning(tmp_path: Path) -> None:
    pages = [Page("Text one."), Page(image=True), Page("Text three."), Page(rectangle=True), Page()]
    loaded = load_file(write_pdf(tmp_path / "mixed.pdf", pages), ocr=False)
    assert [b.page for b in loaded.blocks] == [1, 3]
    # Page 5 has no content at all: blank, nothing to OCR, so not reported.
    assert loaded.warnings == [
        "pages 2, 4 have no text layer; OCR is off: set HYBRIDKB_OCR=true to read scans"
    ]


def test_pdf_pages_without_fonts_are_judged_by_their_content(tmp_path: Path) -> None:
    drawing = b"0 0 1 rg " + b"10 10 50 50 re f " * 10  # vector art, no resources needed
    pages = [
        Page(resources=False, raw=drawing),
        Page(resources=False, raw=b"q Q"),  # an empty page some producers write
        Page("Words."),
    ]
    loaded = load_file(write_pdf(tmp_path / "art.pdf", pages), ocr=False)
    assert [b.page for b in loaded.blocks] == [3]
    assert loaded.warnings == [
        "page 1 has no text layer; OCR is off: set HYBRIDKB_OCR=true to read scans"
    ]


def test_pdf_single_missing_text_layer_is_worded_in_singular(tmp_path: Path) -> None:
    pages = [Page("Text."), Page(image=True, rectangle=True)]
    loaded = load_file(write_pdf(tmp_path / "one.pdf", pages), ocr=False)
    assert loaded.warnings == [
        "page 2 has no text layer; OCR is off: set HYBRIDKB_OCR=true to read scans"
    ]


def test_pdf_many_pages_without_text_are_reported_as_ranges(tmp_path: Path) -> None:
    pages = [Page("Cover.")] + [Page(rectangle=True)] * 300 + [Page("Back.")] + [Page(image=True)]
    loaded = load_file(write_pdf(tmp_path / "long.pdf", pages), ocr=False)
    assert loaded.warnings == [
        "pages 2-301, 303 have no text layer; OCR is off: set HYBRIDKB_OCR=true to read scans"
    ]


def test_page_ranges_compresses_runs() -> None:
    assert page_ranges([1]) == "1"
    assert page_ranges([3, 7, 8, 9, 12, 13]) == "3, 7-9, 12-13"


def test_pdf_without_any_text_layer_says_how_to_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdf = write_pdf(tmp_path / "scan.pdf", [Page(image=True), Page(rectangle=True)])
    with pytest.raises(ExtractionError) as off:
        load_file(pdf, ocr=False)
    assert str(off.value) == f"scan.pdf: no text layer (a scan){OFF}"
    monkeypatch.setattr("hybridkb.loaders.pdf.ocr_available", lambda: False)
    assert _error(pdf) == (
        "scan.pdf: no text layer (a scan); install OCR with pip install 'hybridkb[ocr]' "
        "and add it again"
    )


def test_pdf_of_blank_pages_has_nothing_to_add(tmp_path: Path) -> None:
    pdf = write_pdf(tmp_path / "blank.pdf", [Page(), Page()])
    assert "nothing to add" in _error(pdf)


@pytest.mark.parametrize("algorithm", ["AES-256", "RC4-128"])
def test_encrypted_pdf_without_password_names_the_setting(tmp_path: Path, algorithm: str) -> None:
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(encrypt_pdf(make_pdf([Page("Secret text.")]), "s3cret", algorithm=algorithm))
    assert _error(pdf) == "report.pdf: encrypted; set HYBRIDKB_PDF_PASSWORD or remove the password"


@pytest.mark.parametrize("algorithm", ["AES-256", "AES-128", "RC4-128"])
def test_encrypted_pdf_opens_with_the_right_password(tmp_path: Path, algorithm: str) -> None:
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(encrypt_pdf(make_pdf([Page("Secret text.")]), "s3cret", algorithm=algorithm))
    assert [b.text for b in load_file(pdf, pdf_password="s3cret").blocks] == ["Secret text."]


def test_encrypted_pdf_with_wrong_password_says_it_was_rejected(tmp_path: Path) -> None:
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(encrypt_pdf(make_pdf([Page("Secret text.")]), "s3cret"))
    assert _error(pdf, pdf_password="guess") == (
        "report.pdf: encrypted and the password was rejected; check HYBRIDKB_PDF_PASSWORD"
    )


def test_pdf_with_only_an_owner_password_opens_without_one(tmp_path: Path) -> None:
    pdf = tmp_path / "restricted.pdf"
    pdf.write_bytes(encrypt_pdf(make_pdf([Page("Open text.")]), "", owner_password="owner"))
    assert [b.text for b in load_file(pdf).blocks] == ["Open text."]


def test_truncated_pdf_is_an_extraction_error(tmp_path: Path) -> None:
    data = make_pdf([Page(f"Page {n} has some text.") for n in range(1, 6)])
    pdf = tmp_path / "cut.pdf"
    for cut in (12, 100, len(data) // 3, len(data) // 2, len(data) - 60, len(data) - 8):
        pdf.write_bytes(data[:cut])
        message = _error(pdf)
        assert "corrupt or truncated PDF (" in message
        assert message.endswith("; re-export or repair it")


def test_corrupt_pdf_never_leaks_a_library_exception(tmp_path: Path) -> None:
    data = make_pdf([Page("Some text."), Page("More text.")])
    pdf = tmp_path / "noise.pdf"
    for start in range(40, len(data) - 40, max(1, len(data) // 25)):
        pdf.write_bytes(data[:start] + bytes(range(256))[:40] + data[start + 40 :])
        try:
            load_file(pdf)
        except ExtractionError as exc:
            assert str(exc).startswith("noise.pdf: ")


def test_non_pdf_bytes_with_pdf_extension_are_refused(tmp_path: Path) -> None:
    pdf = tmp_path / "page.pdf"
    pdf.write_text("<html>not a pdf</html>")
    assert _error(pdf) == "page.pdf: not a PDF (no %PDF- header); check the file"
    pdf.write_bytes(b"")
    assert "re-export or repair it" in _error(pdf)


# --- DOCX ------------------------------------------------------------------------


def _docx(path: Path) -> Path:
    import docx

    document = docx.Document()
    document.add_paragraph("Preamble before any heading.")
    document.add_heading("Intro", level=1)
    document.add_paragraph("Intro text.")
    document.add_heading("Details", level=2)
    document.add_paragraph("Detail text with  spaces\u00ad.")
    table = document.add_table(rows=2, cols=3)
    for row, values in zip(table.rows, [("a", "b", "c"), ("1", "2", "3")], strict=False):
        for cell, value in zip(row.cells, values, strict=False):
            cell.text = value
    document.add_paragraph("After the table.")
    document.add_heading("Next", level=1)
    document.add_paragraph("")  # empty paragraphs are dropped
    document.add_paragraph("Next text.")
    document.save(str(path))
    return path


def test_docx_headings_build_section_paths_in_document_order(tmp_path: Path) -> None:
    loaded = load_file(_docx(tmp_path / "guide.docx"))
    assert loaded.file_type == "docx"
    assert [(b.kind, b.section, b.text) for b in loaded.blocks] == [
        ("paragraph", None, "Preamble before any heading."),
        ("heading", "Intro", "Intro"),
        ("paragraph", "Intro", "Intro text."),
        ("heading", "Intro > Details", "Details"),
        ("paragraph", "Intro > Details", "Detail text with spaces."),
        ("table", "Intro > Details", "a | b | c\n1 | 2 | 3"),
        ("paragraph", "Intro > Details", "After the table."),
        ("heading", "Next", "Next"),
        ("paragraph", "Next", "Next text."),
    ]
    assert all(b.page is None for b in loaded.blocks)


def test_docx_merged_cells_appear_once_per_row(tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    table = document.add_table(rows=2, cols=3)
    merged = table.cell(0, 0).merge(table.cell(0, 1))
    merged.text = "wide"
    table.cell(0, 2).text = "x"
    for cell, value in zip(table.rows[1].cells, "123", strict=False):
        cell.text = value
    document.save(str(tmp_path / "merged.docx"))
    assert load_file(tmp_path / "merged.docx").blocks[0].text == "wide | x\n1 | 2 | 3"


def test_empty_docx_file_is_not_a_valid_docx(tmp_path: Path) -> None:
    path = tmp_path / "blank.docx"
    path.write_bytes(b"")
    assert _error(path) == (
        "blank.docx: not a valid .docx (empty file, 0 bytes); re-save it from Word/LibreOffice"
    )


def test_zip_that_is_not_a_docx_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "archive.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    message = _error(path)
    assert "not a valid .docx (a ZIP without word/document.xml)" in message
    assert message.endswith("; re-save it from Word/LibreOffice")


def test_non_zip_docx_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.docx"
    path.write_text("plain text pretending to be a docx")
    assert _error(path) == (
        "notes.docx: not a valid .docx (not a ZIP archive); re-save it from Word/LibreOffice"
    )


def test_old_doc_or_protected_docx_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "legacy.docx"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512)
    assert "without a password" in _error(path)


def test_broken_docx_xml_becomes_an_extraction_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types")
        archive.writestr("word/document.xml", "<w:document")
    message = _error(path)
    assert message.startswith("broken.docx: not a valid .docx (")
    assert message.endswith("; re-save it from Word/LibreOffice")


def _with_declared_size(path: Path, member: str, size: int) -> None:
    """Rewrite the central directory so ``member`` claims ``size`` uncompressed bytes."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    offset = data.find(b"PK\x01\x02")
    while offset != -1:
        name_length = struct.unpack_from("<H", data, offset + 28)[0]
        if data[offset + 46 : offset + 46 + name_length] == name:
            struct.pack_into("<I", data, offset + 24, size)
        offset = data.find(b"PK\x01\x02", offset + 4)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("declared_mb", [250, 60])
def test_docx_zip_bomb_is_refused_before_inflating(tmp_path: Path, declared_mb: int) -> None:
    path = _docx(tmp_path / "bomb.docx")
    _with_declared_size(path, "word/document.xml", declared_mb * 1024 * 1024)
    message = _error(path)
    assert f"word/document.xml would expand to {declared_mb} MB" in message
    assert "zip bomb" in message


def test_docx_without_text_has_nothing_to_add(tmp_path: Path) -> None:
    import docx

    docx.Document().save(str(tmp_path / "void.docx"))
    assert _error(tmp_path / "void.docx").endswith("nothing to add")


# --- text and Markdown -------------------------------------------------------------


def test_txt_paragraphs_are_separated_by_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("First line\nstill first.\n\n\n  \nSecond.\r\n\r\nThird  one.\n")
    loaded = load_file(path)
    assert loaded.file_type == "txt"
    assert [(b.text, b.page, b.section, b.kind) for b in loaded.blocks] == [
        ("First line\nstill first.", None, None, "paragraph"),
        ("Second.", None, None, "paragraph"),
        ("Third one.", None, None, "paragraph"),
    ]


@pytest.mark.parametrize(
    ("name", "content"),
    [("empty.txt", b""), ("blank.txt", b"  \n\t\n  "), ("blank16.txt", "  \n ".encode("utf-16"))],
)
def test_empty_and_whitespace_only_text_has_nothing_to_add(
    tmp_path: Path, name: str, content: bytes
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert _error(path) == f"{name}: empty file; nothing to add"


@pytest.mark.parametrize(
    "content",
    [
        bytes(range(256)) * 8,
        b"\x89PNG\r\n\x1a\n" + bytes(range(200)),
        b"\x01\x02\x03\x04 abc \x05\x06\x07\x08\x0e\x0f" * 50,
    ],
)
def test_binary_junk_is_not_text(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "junk.txt"
    path.write_bytes(content)
    assert _error(path) == "junk.txt: binary content, not text; check the file"


@pytest.mark.parametrize(
    "encoding", ["utf-8-sig", "utf-16", "utf-16-le-bom", "utf-16-be-bom", "utf-32"]
)
def test_text_with_a_byte_order_mark_is_decoded(tmp_path: Path, encoding: str) -> None:
    text = "Grüße, 世界! Straße.\n\nZweiter Absatz."
    if encoding == "utf-16-le-bom":
        data = codecs.BOM_UTF16_LE + text.encode("utf-16-le")
    elif encoding == "utf-16-be-bom":
        data = codecs.BOM_UTF16_BE + text.encode("utf-16-be")
    else:
        data = text.encode(encoding)
    path = tmp_path / "greeting.txt"
    path.write_bytes(data)
    assert [b.text for b in load_file(path).blocks] == ["Grüße, 世界! Straße.", "Zweiter Absatz."]


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("Die Würde des Menschen ist unantastbar. Größe, Straße, Äpfel und Öl.", "latin-1"),
        ("« Tous les êtres humains naissent libres » — “quoted” text…", "cp1252"),
        ("Wszyscy ludzie rodzą się wolni i równi pod względem swej godności. Łódź żółw.", "cp1250"),
        ("Все люди рождаются свободными и равными в своем достоинстве и правах.", "cp1251"),
        ("café", "latin-1"),
        ("plain ascii utf-16 without a byte order mark", "utf-16-le"),
        ("plain ascii utf-16 without a byte order mark", "utf-16-be"),
        ("utf-8 wörds 中文 without a BOM", "utf-8"),
    ],
)
def test_legacy_and_bomless_encodings_are_detected(text: str, encoding: str) -> None:
    assert decode_bytes(text.encode(encoding), "x.txt") == text


def test_mostly_utf8_with_a_stray_byte_keeps_the_utf8_text() -> None:
    data = ("naïve café résumé " * 20).encode() + b"\xff"
    assert decode_bytes(data, "x.txt").startswith("naïve café résumé")


_MARKDOWN = """\
Intro line before headings.

# Guide

Some *text*
over two lines.

## Install

```bash
pip install hybridkb

    indented line kept
```

| col | other |
|-----|:-----:|
| 1   | 2     |

~~~
tilde fence
~~~

Setext Title
============

# Second
text under second
"""


def test_markdown_keeps_heading_paths_code_and_tables_whole() -> None:
    blocks = markdown_blocks(_MARKDOWN)
    assert [(b.kind, b.section, b.text) for b in blocks] == [
        ("paragraph", None, "Intro line before headings."),
        ("heading", "Guide", "Guide"),
        ("paragraph", "Guide", "Some *text*\nover two lines."),
        ("heading", "Guide > Install", "Install"),
        ("code", "Guide > Install", "```bash\npip install hybridkb\n\n    indented line kept\n```"),
        ("table", "Guide > Install", "| col | other |\n|-----|:-----:|\n| 1 | 2 |"),
        ("code", "Guide > Install", "~~~\ntilde fence\n~~~"),
        ("heading", "Setext Title", "Setext Title"),
        ("heading", "Second", "Second"),
        ("paragraph", "Second", "text under second"),
    ]


def test_markdown_unclosed_fence_runs_to_the_end(tmp_path: Path) -> None:
    blocks = markdown_blocks("# A\n\n```\ncode\n\n# not a heading\n")
    assert blocks[-1].kind == "code"
    assert "# not a heading" in blocks[-1].text
    assert [b.section for b in blocks] == ["A", "A"]


def test_markdown_front_matter_is_not_a_heading() -> None:
    blocks = markdown_blocks("---\ntitle: Notes\ntags: [a]\n---\n\nBody.\n")
    assert [(b.kind, b.section, b.text) for b in blocks] == [
        ("paragraph", None, "title: Notes\ntags: [a]"),
        ("paragraph", None, "Body."),
    ]


def test_markdown_file_loads_through_load_file(tmp_path: Path) -> None:
    path = tmp_path / "README.MARKDOWN"
    path.write_text(_MARKDOWN, encoding="utf-8")
    loaded = load_file(path)
    assert loaded.file_type == "md"
    assert loaded.blocks == markdown_blocks(_MARKDOWN)


# --- dispatch, discovery, hashing ------------------------------------------------------


def test_unsupported_extension_lists_the_supported_ones(tmp_path: Path) -> None:
    path = tmp_path / "x.odt"
    path.write_bytes(b"PK")
    with pytest.raises(UnsupportedFileType) as info:
        load_file(path)
    assert str(info.value) == (
        "x.odt: unsupported file type .odt; supported: .csv, .docx, .epub, .htm, .html, .markdown,"
        " .md, .pdf, .pptx, .text, .tsv, .txt, .xhtml, .xlsm, .xlsx"
    )


def test_extension_dispatch_is_case_insensitive(tmp_path: Path) -> None:
    write_pdf(tmp_path / "UPPER.PDF", [Page("Upper case name.")])
    (tmp_path / "NOTES.TXT").write_text("Shouting.")
    assert load_file(tmp_path / "UPPER.PDF").file_type == "pdf"
    assert load_file(tmp_path / "NOTES.TXT").file_type == "txt"
    assert {
        ".pdf", ".docx", ".md", ".markdown", ".txt", ".text", ".html", ".htm", ".xhtml",
        ".pptx", ".xlsx", ".xlsm", ".csv", ".tsv", ".epub",
    } == SUPPORTED_EXTENSIONS  # fmt: skip


def test_load_file_of_missing_path_says_so(tmp_path: Path) -> None:
    assert _error(tmp_path / "gone.txt") == "gone.txt: no such file or folder; check the path"


def test_iter_files_reports_missing_paths(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pdf"
    assert list(iter_files([missing])) == [
        FailedFile(
            filename="nope.pdf",
            error="nope.pdf: no such file or folder; check the path",
            code="ingest_error",
            path=str(missing),
        )
    ]


def _tree(root: Path) -> None:
    (root / "b").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "b" / "c.md").write_text("c")
    (root / "b" / "d.PDF").write_bytes(b"%PDF-")
    (root / "b" / "skip.xyz").write_text("x")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "h.txt").write_text("h")
    (root / ".dot.txt").write_text("h")


def test_iter_files_walks_folders_sorted_keeping_supported_visible_files(tmp_path: Path) -> None:
    _tree(tmp_path / "docs")
    found = list(iter_files([str(tmp_path / "docs")]))
    root = (tmp_path / "docs").resolve()
    assert [f for f in found if isinstance(f, Path)] == [
        root / "a.txt",
        root / "b" / "c.md",
        root / "b" / "d.PDF",
    ]
    # What a folder walk passes over is said, not dropped: hidden entries once each
    # (not their contents), other types with what is supported.
    skipped = [(f.filename, f.reason.split(";")[0]) for f in found if isinstance(f, SkippedFile)]
    assert skipped == [
        (".dot.txt", "hidden (a name starting with '.')"),
        (".hidden", "hidden (a name starting with '.')"),
        ("skip.xyz", "unsupported type .xyz"),
    ]


def test_iter_files_yields_named_unsupported_files_and_duplicates_once(tmp_path: Path) -> None:
    _tree(tmp_path)
    named = tmp_path / "b" / "skip.xyz"
    found = list(
        iter_files([named, tmp_path / "a.txt", tmp_path, str(tmp_path / "b" / ".." / "a.txt")])
    )
    root = tmp_path.resolve()
    paths = [f for f in found if isinstance(f, Path)]
    assert paths == [named.resolve(), root / "a.txt", root / "b" / "c.md", root / "b" / "d.PDF"]


def test_iter_files_expands_the_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "n.txt").write_text("n")
    assert list(iter_files(["~/n.txt"])) == [(tmp_path / "n.txt").resolve()]


def test_iter_files_follows_symlinks_without_looping(tmp_path: Path) -> None:
    _tree(tmp_path / "docs")
    try:
        os.symlink(tmp_path / "docs", tmp_path / "docs" / "b" / "loop", target_is_directory=True)
        os.symlink(tmp_path / "docs" / "a.txt", tmp_path / "docs" / "b" / "alias.txt")
        os.symlink(tmp_path / "gone.txt", tmp_path / "docs" / "dangling.txt")
    except (OSError, NotImplementedError):
        pytest.skip("symlinks not available on this platform")
    found = list(iter_files([tmp_path / "docs"]))
    root = (tmp_path / "docs").resolve()
    paths = [f for f in found if isinstance(f, Path)]
    assert paths == [root / "a.txt", root / "b" / "c.md", root / "b" / "d.PDF"]
    failed = [f for f in found if isinstance(f, FailedFile)]
    assert [f.filename for f in failed] == ["dangling.txt"]


def test_file_sha256_matches_hashlib_for_multi_block_files(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    data = os.urandom(3 * (1 << 20) + 123)
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()


# --- streaming huge text -----------------------------------------------------------


def test_iter_text_blocks_matches_whole_file_loading(tmp_path: Path) -> None:
    text = "".join(f"Paragraph {i} line one,\r\nline two.\r\n\r\n" for i in range(200))
    path = tmp_path / "big.txt"
    path.write_bytes(text.encode("utf-16"))
    # Tiny reads put "\r\n" pairs, surrogate halves and blank lines across read boundaries.
    streamed = list(iter_text_blocks(path, read_size=7))
    assert streamed == text_blocks(text)


def test_iter_text_blocks_cuts_paragraphs_that_outgrow_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "oneline.txt"
    path.write_text("word " * 5000)
    blocks = list(iter_text_blocks(path, read_size=1000, max_block_chars=2000))
    assert all(len(b.text) <= 2000 for b in blocks)
    assert " ".join(b.text for b in blocks).split() == ["word"] * 5000


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"  \n\n ", "empty file; nothing to add"), (bytes(range(256)) * 4, "binary content")],
)
def test_iter_text_blocks_refuses_empty_and_binary(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "odd.txt"
    path.write_bytes(content)
    with pytest.raises(ExtractionError, match=problem):
        list(iter_text_blocks(path))


def test_pdfgen_writes_a_pdf_pypdf_reads_strictly() -> None:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(make_pdf([Page("Hi (there) \\ café"), Page()])), strict=True)
    assert len(reader.pages) == 2
    assert reader.pages[0].extract_text().strip() == "Hi (there) \\ café"


def test_iter_files_reports_unusable_paths_instead_of_crashing(tmp_path: Path) -> None:
    found = list(iter_files([tmp_path / ("x" * 5000), "bad\x00name.txt"]))
    assert all(isinstance(f, FailedFile) and "check the path" in f.error for f in found)
    assert len(found) == 2


def test_iter_files_reports_a_self_referencing_symlink(tmp_path: Path) -> None:
    try:
        os.symlink(tmp_path / "self.txt", tmp_path / "self.txt")
    except (OSError, NotImplementedError):
        pytest.skip("symlinks not available on this platform")
    (found,) = list(iter_files([tmp_path]))
    assert isinstance(found, FailedFile) and found.filename == "self.txt"


# --- running headers and footers ----------------------------------------------------


def test_running_headers_and_page_numbers_are_left_out_and_said(tmp_path: Path) -> None:
    body = [
        "Depreciation of laptops follows the prime cost method.",
        "Rent is deductible in the year it is paid.",
        "Annual Report 2024 is also named in the body here.",
        "Travel costs need a logbook.",
    ]
    pages = [
        Page(f"Annual Report 2024\n\n{text}\n\nHarbour Leasing Ltd - page {n}")
        for n, text in enumerate(body, start=1)
    ]
    loaded = load_file(write_pdf(tmp_path / "report.pdf", pages))
    texts = [b.text for b in loaded.blocks]
    assert texts == body  # the same words inside a page stay
    assert [b.page for b in loaded.blocks] == [1, 2, 3, 4]
    assert loaded.warnings == [
        "left out running headers/footers repeated on most pages: "
        "'Annual Report 2024', 'Harbour Leasing Ltd - page 1'"
    ]


def test_lines_repeated_on_too_few_pages_or_alone_on_a_page_stay(tmp_path: Path) -> None:
    two_pages = [Page("Chapter\n\nFirst page text."), Page("Chapter\n\nSecond page text.")]
    loaded = load_file(write_pdf(tmp_path / "two.pdf", two_pages))
    assert all(b.text.startswith("Chapter\n") for b in loaded.blocks) and loaded.warnings == []
    only_line = [Page("Background")] * 3
    loaded = load_file(write_pdf(tmp_path / "slides.pdf", only_line))
    assert [b.text for b in loaded.blocks] == ["Background"] * 3 and loaded.warnings == []


# --- HTML, streamed -----------------------------------------------------------------


def test_a_hidden_table_is_dropped_like_any_hidden_element(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(
        "<p>Shown.</p><table hidden><tr><td>secret</td></tr></table>"
        "<table role='navigation'><tr><td>menu</td></tr></table>"
        "<table><tr><td>kept</td><td>cells <b>and</b> all</td></tr></table><p>After.</p>"
    )
    blocks = load_file(page).blocks
    assert [(b.text, b.kind) for b in blocks] == [
        ("Shown.", "paragraph"),
        ("kept | cells and all", "table"),
        ("After.", "paragraph"),
    ]


def test_a_page_is_read_as_it_is_decoded_whatever_its_charset_says(tmp_path: Path) -> None:
    # The bytes are decoded once (UTF-8 here); a declaration or a <meta> naming another
    # charset cannot make the parser decode them again.
    page = tmp_path / "page.xhtml"
    page.write_bytes(
        '<?xml version="1.0" encoding="iso-8859-1"?><html><head>'
        '<meta charset="windows-1251"><title>T</title></head>'
        "<body><main><h1>Été</h1><p>Déjà vu ☃</p></main></body></html>".encode()
    )
    blocks = load_file(page).blocks
    assert [(b.text, b.section) for b in blocks] == [("Été", "Été"), ("Déjà vu ☃", "Été")]
