"""Ingest of real generated PDF and DOCX files through the facade."""

from __future__ import annotations

from pathlib import Path

import pytest
from docx import Document
from pdfgen import Page, encrypt_pdf, make_pdf, write_pdf

import hybridkb


def _docx(path: Path) -> Path:
    doc = Document()
    doc.add_heading("Tax notes", level=1)
    doc.add_heading("Depreciation", level=2)
    doc.add_paragraph("Laptops depreciate over two years under the prime cost method.")
    table = doc.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Asset", "Effective life"
    table.cell(1, 0).text, table.cell(1, 1).text = "Laptop", "2 years"
    doc.save(str(path))
    return path


def test_pdf_pages_are_numbered_from_one_and_cited(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    pdf = write_pdf(
        tmp_path / "ITAA 1997.pdf",
        [
            Page("Introduction to the act."),
            Page("Depreciation of assets uses the decline in value."),
        ],
    )
    coll = kb.create_collection("Tax Documents")
    report = coll.add(pdf)
    assert [f.filename for f in report.added] == ["ITAA 1997.pdf"] and not report.added[0].warnings
    hit = coll.search("decline in value", k=1, mode="keyword")[0]
    assert (hit.filename, hit.page) == ("ITAA 1997.pdf", 2)
    page_two = coll.search("act", k=5, where={"page": 2}, mode="vector")
    assert page_two and {h.page for h in page_two} == {2}


def test_pages_without_text_are_listed_as_a_warning(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    pdf = write_pdf(
        tmp_path / "mixed.pdf", [Page("Text page."), Page(image=True), Page("More text.")]
    )
    report = kb.create_collection("Scans").add(pdf)
    assert len(report.added) == 1
    assert any("2" in w and "text layer" in w for w in report.added[0].warnings)


def test_bad_pdfs_fail_alone_with_the_fix(
    kb: hybridkb.KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = write_pdf(tmp_path / "good.pdf", [Page("Good text about depreciation.")])
    scan = write_pdf(tmp_path / "scan.pdf", [Page(image=True), Page(rectangle=True)])
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(encrypt_pdf(make_pdf([Page("Secret depreciation schedule.")]), "s3cret"))
    truncated = tmp_path / "truncated.pdf"
    truncated.write_bytes(make_pdf([Page("Cut short.")])[:200])
    coll = kb.create_collection("Tax")
    report = coll.add([good, scan, locked, truncated])
    assert [f.filename for f in report.added] == ["good.pdf"]
    errors = {f.filename: f.error for f in report.failed}
    assert "OCR" in errors["scan.pdf"]
    assert "HYBRIDKB_PDF_PASSWORD" in errors["locked.pdf"]
    assert "truncated.pdf" in errors["truncated.pdf"]
    assert coll.describe().documents == 1


def test_encrypted_pdf_opens_with_the_password_setting(tmp_path: Path) -> None:
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(encrypt_pdf(make_pdf([Page("Secret depreciation schedule.")]), "s3cret"))
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake", pdf_password="wrong") as kb:
        report = kb.create_collection("Tax").add(locked)
        assert "rejected" in report.failed[0].error
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake", pdf_password="s3cret") as kb:
        report = kb.collection("Tax").add(locked)
        assert [f.filename for f in report.added] == ["locked.pdf"]


def test_docx_sections_and_tables_are_searchable(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    coll = kb.create_collection("Notes")
    coll.add(_docx(tmp_path / "notes.docx"))
    hit = coll.search("prime cost method", k=1, mode="keyword")[0]
    assert hit.section and "Depreciation" in hit.section
    table_hit = coll.search("effective life laptop", k=1, mode="keyword")[0]
    assert "Laptop" in table_hit.text and "2 years" in table_hit.text


def test_broken_docx_files_fail_clearly(kb: hybridkb.KnowledgeBase, tmp_path: Path) -> None:
    import zipfile

    empty = tmp_path / "empty.docx"
    empty.write_bytes(b"")
    fake = tmp_path / "fake.docx"
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("hello.txt", "not a word document")
    coll = kb.create_collection("Notes")
    report = coll.add([empty, fake])
    assert {f.filename for f in report.failed} == {"empty.docx", "fake.docx"}
    assert all(f.filename in f.error for f in report.failed)


def test_mixed_language_collection_finds_german_with_a_german_query(
    kb: hybridkb.KnowledgeBase,
) -> None:
    coll = kb.create_collection("Verträge")
    coll.add_texts(
        [
            "Der Mieter zahlt die Nebenkosten monatlich. Die Kündigungsfrist beträgt drei Monate.",
            "The tenant pays the service charges monthly. The notice period is three months.",
            "租户每月支付服务费。通知期为三个月。多线程编程很难。",
        ],
        ids=["de", "en", "zh"],
    )
    assert set(coll.describe().languages) == {"de", "en", "zh"}
    assert coll.search("Kündigungsfristen", k=1, mode="keyword")[0].document_id == "de"
    assert coll.search("线程", k=1, mode="keyword")[0].document_id == "zh"
    assert coll.search("notice periods", k=1, mode="keyword")[0].document_id == "en"


def test_code_like_tokens_are_searchable(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Tax")
    coll.add_texts(
        ["See s.40-880 of ITAA 1997 for business costs.", "C++ and v2 APIs are unrelated."],
        ids=["tax", "code"],
    )
    assert coll.search("s.40-880", k=1, mode="keyword")[0].document_id == "tax"
    assert coll.search("1997", k=1, mode="keyword")[0].document_id == "tax"
    assert coll.search("C++", k=1, mode="keyword")[0].document_id == "code"
