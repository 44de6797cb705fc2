"""Real files of the formats beyond PDF/DOCX/text, written by the tests themselves with
the libraries people's files come from (python-pptx, openpyxl) or by hand where the
format is plain (HTML, CSV, EPUB's ZIP of XHTML). Byte-for-byte reproducible: fixed
document dates and ZIP entry times, so fuzz seeds never depend on the clock."""

from __future__ import annotations

import datetime
import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field

FIXED = datetime.datetime(2024, 1, 1)


def repack(data: bytes) -> bytes:
    """The same ZIP with every entry stamped 1980-01-01 (mimetype first, stored)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(fixed, src.read(info.filename))
    return out.getvalue()


@dataclass
class Slide:
    title: str
    bullets: Sequence[str] = ()
    notes: str = ""
    table: Sequence[Sequence[str]] = field(default_factory=list)


def pptx_bytes(slides: Sequence[Slide]) -> bytes:
    import pptx
    from pptx.util import Inches

    presentation = pptx.Presentation()
    presentation.core_properties.created = presentation.core_properties.modified = FIXED
    layout = presentation.slide_layouts[1]  # title and content
    for spec in slides:
        slide = presentation.slides.add_slide(layout)
        slide.shapes.title.text = spec.title
        body = slide.placeholders[1].text_frame
        for n, bullet in enumerate(spec.bullets):
            paragraph = body.paragraphs[0] if n == 0 else body.add_paragraph()
            paragraph.text = bullet
        if spec.table:
            rows, cols = len(spec.table), len(spec.table[0])
            shape = slide.shapes.add_table(rows, cols, Inches(1), Inches(4), Inches(6), Inches(1))
            for r, row in enumerate(spec.table):
                for c, value in enumerate(row):
                    shape.table.cell(r, c).text = value
        if spec.notes:
            slide.notes_slide.notes_text_frame.text = spec.notes
    out = io.BytesIO()
    presentation.save(out)
    return repack(out.getvalue())


def xlsx_bytes(sheets: dict[str, Sequence[Sequence[object]]], hidden: Sequence[str] = ()) -> bytes:
    import openpyxl

    workbook = openpyxl.Workbook()
    workbook.properties.created = workbook.properties.modified = FIXED
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(list(row))
        if title in hidden:
            sheet.sheet_state = "hidden"
    out = io.BytesIO()
    workbook.save(out)
    return repack(out.getvalue())


def epub_bytes(chapters: Sequence[tuple[str, str]]) -> bytes:
    """An EPUB 3 of (title, XHTML body) chapters, in spine order."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as book:

        def put(name: str, text: str) -> None:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED
            book.writestr(info, text)

        put("mimetype", "application/epub+zip")
        put(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>",
        )
        items = "".join(
            f'<item id="c{n}" href="text/ch{n}.xhtml" media-type="application/xhtml+xml"/>'
            for n in range(len(chapters))
        )
        spine = "".join(f'<itemref idref="c{n}"/>' for n in range(len(chapters)))
        put(
            "OEBPS/content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            f"<manifest>{items}</manifest><spine>{spine}</spine></package>",
        )
        for n, (title, body) in enumerate(chapters):
            put(
                f"OEBPS/text/ch{n}.xhtml",
                '<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml">'
                f"<head><title>{title}</title></head><body>{body}</body></html>",
            )
    return out.getvalue()


HTML_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Harbour tax guide</title>
<style>body { font: 12px sans-serif }</style><script>track("visit")</script></head>
<body>
<header class="site"><a href="/">Home</a> <a href="/about">About us</a></header>
<nav><ul><li><a href="/a">Menu item one</a></li><li><a href="/b">Menu item two</a></li></ul></nav>
<main>
  <article>
    <header><h1>Depreciation of equipment</h1></header>
    <p>Laptops and phones are <em>written off</em> over three years.</p>
    <div>Text in a div<br>with a line break.</div>
    <h2>Rates</h2>
    <table><tr><th>Asset</th><th>Years</th></tr><tr><td>Desk</td><td>10</td></tr></table>
    <ul><li>Keep every receipt.</li><li>Ask before selling an asset.</li></ul>
    <p hidden>Hidden draft text.</p>
  </article>
</main>
<aside>Related: how to file late</aside>
<footer>Copyright 2024 Harbour Tax Office</footer>
</body></html>
"""

CSV_TEXT = "year;category;amount\n2023;rent;14400\n2024;rent;15000\n2024;laptop;1899\n"
