"""Crafted files that cost their reader far more than their size (issue 25), written by
the tests themselves: small on disk, huge when parsed. Big parts are streamed into the
ZIP in 1 MB pieces, so making a 300 MB "image" costs the test no memory.

Each generator takes its size as an argument: CI runs small variants against lowered
budgets (HYBRIDKB_MAX_FILE_*), the slow suite and bench/budgets.py the full ones.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

# tests/ is on sys.path (pytest's rootdir-relative "prepend" import mode; bench/ puts it
# there too), so the test helpers import as top-level modules, as mypy resolves them.
from formatgen import Slide, epub_bytes, pptx_bytes, xlsx_bytes

_MB = 1024 * 1024
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def _put_stream(archive: zipfile.ZipFile, name: str, pieces: Iterable[bytes]) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    with archive.open(info, "w", force_zip64=True) as out:
        for piece in pieces:
            out.write(piece)


def _repeat(piece: bytes, total: int) -> Iterable[bytes]:
    block = piece * max(1, _MB // len(piece))
    written = 0
    while written < total:
        yield block
        written += len(block)


def _extend(
    base: bytes,
    *,
    rels: str,
    relationships: list[tuple[str, str]],
    content_types: list[str],
    parts: dict[str, Iterable[bytes]],
) -> bytes:
    """``base`` (a ZIP) with ``parts`` added and reachable: relationships (type, target)
    appended to the ``rels`` part and entries added to [Content_Types].xml."""
    source = zipfile.ZipFile(io.BytesIO(base))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == rels:
                extra = "".join(
                    f'<Relationship Id="rIdBig{n}" Type="{_REL}/{kind}" Target="{target}"/>'
                    for n, (kind, target) in enumerate(relationships)
                )
                data = data.replace(b"</Relationships>", extra.encode() + b"</Relationships>")
            elif info.filename == "[Content_Types].xml":
                data = data.replace(b"</Types>", "".join(content_types).encode() + b"</Types>")
            archive.writestr(info.filename, data)
        for name, pieces in parts.items():
            _put_stream(archive, name, pieces)
    return out.getvalue()


def _docx_base() -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph("A small document with a crafted part.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def docx_with_image(image_mb: int) -> bytes:
    """A DOCX whose document links a zero-filled "image" of ``image_mb`` MB (~1 MB per GB)."""
    return _extend(
        _docx_base(),
        rels="word/_rels/document.xml.rels",
        relationships=[("image", "media/big.png")],
        content_types=['<Default Extension="png" ContentType="image/png"/>'],
        parts={"word/media/big.png": _repeat(b"\0", image_mb * _MB)},
    )


def docx_with_headers(count: int, header_mb: int) -> bytes:
    """A DOCX with ``count`` header parts of ``header_mb`` MB of text each."""
    head = f'<w:hdr xmlns:w="{_W}"><w:p><w:r><w:t>'.encode()
    tail = b"</w:t></w:r></w:p></w:hdr>"
    parts: dict[str, Iterable[bytes]] = {
        f"word/header{n}.xml": [head, *_repeat(b"header ", header_mb * _MB), tail]
        for n in range(count)
    }
    kind = "application/vnd.openxmlformats-officedocument.wordprocessingml.header+xml"
    return _extend(
        _docx_base(),
        rels="word/_rels/document.xml.rels",
        relationships=[("header", f"header{n}.xml") for n in range(count)],
        content_types=[
            f'<Override PartName="/word/header{n}.xml" ContentType="{kind}"/>' for n in range(count)
        ],
        parts=parts,
    )


def pptx_with_image(image_mb: int) -> bytes:
    """A PPTX whose presentation links a zero-filled "image" of ``image_mb`` MB."""
    return _extend(
        pptx_bytes([Slide("A small deck", ["with a crafted part"])]),
        rels="ppt/_rels/presentation.xml.rels",
        relationships=[("image", "media/big.png")],
        content_types=['<Default Extension="png" ContentType="image/png"/>'],
        parts={"ppt/media/big.png": _repeat(b"\0", image_mb * _MB)},
    )


def epub_spine_repeated(times: int, chapter_kb: int) -> bytes:
    """An EPUB whose spine lists its one chapter (``chapter_kb`` KB of text) ``times`` times."""
    body = "<p>" + "word " * (chapter_kb * 1024 // 5) + "</p>"
    book = epub_bytes([("Chapter", body)])
    source = zipfile.ZipFile(io.BytesIO(book))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename.endswith(".opf"):
                data = data.replace(b'<itemref idref="c0"/>', b'<itemref idref="c0"/>' * times)
            archive.writestr(info, data)
    return out.getvalue()


def epub_big_dat(chapter_mb: int) -> bytes:
    """An EPUB whose spine names a chapter called big.dat of ``chapter_mb`` MB."""
    book = epub_bytes([("Chapter", "<p>a short chapter</p>")])
    source = zipfile.ZipFile(io.BytesIO(book))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename.endswith(".opf"):
                data = data.replace(b"text/ch0.xhtml", b"big.dat")
            if not info.filename.endswith(".xhtml"):
                archive.writestr(info, data)
        head = b'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>'
        _put_stream(archive, "OEBPS/big.dat", [head, *_repeat(b"word ", chapter_mb * _MB)])
    return out.getvalue()


def xlsx_shared_string_bomb(string_kb: int, rows: int, cols: int) -> bytes:
    """An XLSX whose ``rows`` x ``cols`` cells all use one shared string of ``string_kb`` KB."""
    base = xlsx_bytes({"Sheet": [["a"]]})
    source = zipfile.ZipFile(io.BytesIO(base))
    names = source.namelist()
    out = io.BytesIO()
    letters = [chr(ord("A") + c % 26) * (1 + c // 26) for c in range(cols)]
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            if info.filename in ("xl/sharedStrings.xml", "xl/worksheets/sheet1.xml"):
                continue
            data = source.read(info.filename)
            if info.filename == "[Content_Types].xml" and "xl/sharedStrings.xml" not in names:
                data = data.replace(
                    b"</Types>",
                    b'<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
                    b'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/></Types>',
                )
            if info.filename == "xl/_rels/workbook.xml.rels" and b"sharedStrings" not in data:
                data = data.replace(
                    b"</Relationships>",
                    f'<Relationship Id="rIdSS" Type="{_REL}/sharedStrings" '
                    'Target="sharedStrings.xml"/></Relationships>'.encode(),
                )
            archive.writestr(info, data)
        ns = b"http://schemas.openxmlformats.org/spreadsheetml/2006/main"
        _put_stream(
            archive,
            "xl/sharedStrings.xml",
            [
                b'<sst xmlns="' + ns + b'" count="1" uniqueCount="1"><si><t>',
                *_repeat(b"ab ", string_kb * 1024),
                b"</t></si></sst>",
            ],
        )

        def sheet() -> Iterable[bytes]:
            yield b'<worksheet xmlns="' + ns + b'"><sheetData>'
            for r in range(1, rows + 1):
                cells = "".join(f'<c r="{c}{r}" t="s"><v>0</v></c>' for c in letters)
                yield f'<row r="{r}">{cells}</row>'.encode()
            yield b"</sheetData></worksheet>"

        _put_stream(archive, "xl/worksheets/sheet1.xml", sheet())
    return out.getvalue()


def pdf_shared_stream(pages: int, *, text: bool, lines: int = 400) -> bytes:
    """A PDF of ``pages`` pages all drawing one content stream: ``lines`` lines of text
    (``text``) or, without a font, ``lines`` filled rectangles (pages OCR would read)."""
    if text:
        ops = (
            b"BT /F1 1 Tf 20 780 Td "
            + b"".join(b"(Shared line %d of every page) Tj 0 -1.5 Td " % n for n in range(lines))
            + b"ET"
        )
        resources = b"<< /Font << /F1 3 0 R >> >>"
    else:
        ops = b"".join(
            b"0.5 g %d %d 40 8 re f " % (20 + n % 10 * 50, 20 + n // 10 * 10) for n in range(lines)
        )
        resources = b"<< >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # page tree, filled below
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(ops) + ops + b"\nendstream",
    ]
    first_page = len(objects) + 1
    kids = b" ".join(b"%d 0 R" % (first_page + n) for n in range(pages))
    objects[1] = b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages
    for _ in range(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources "
            + resources
            + b" /Contents 4 0 R >>"
        )
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def pdf_pdfium_rejects() -> bytes:
    """A one-page drawing PDF whose trailer lacks /Root: pypdf finds the catalog anyway,
    PDFium refuses the file, so OCR cannot open what the text step accepted."""
    return pdf_shared_stream(1, text=False, lines=40).replace(b"/Root", b"/Xoot")


def write_lines(path: Path, line: bytes, total_bytes: int, *, prefix: bytes = b"") -> Path:
    """A text file of ``prefix`` then ``line`` repeated to ``total_bytes``, in 1 MB pieces."""
    with path.open("wb") as out:
        out.write(prefix)
        for piece in _repeat(line, total_bytes):
            out.write(piece)
    return path


def docx_with_paragraphs(body_mb: int) -> bytes:
    """A DOCX whose document.xml is ``body_mb`` MB of one-letter paragraphs: few bytes of
    text, millions of XML elements (a tree many times the part's size)."""
    source = zipfile.ZipFile(io.BytesIO(_docx_base()))
    out = io.BytesIO()
    paragraph = b"<w:p><w:r><w:t>a</w:t></w:r></w:p>"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            if info.filename != "word/document.xml":
                archive.writestr(info.filename, source.read(info.filename))
        _put_stream(
            archive,
            "word/document.xml",
            [f'<w:document xmlns:w="{_W}"><w:body>'.encode(),
             *_repeat(paragraph, body_mb * _MB), b"</w:body></w:document>"],
        )  # fmt: skip
    return out.getvalue()


# -- issue 32: HTML, whole-loaded text, sheets and CSV ------------------------------------------


def html_paragraphs(path: Path, mb: int) -> Path:
    """A page of ``mb`` MB of one-letter paragraphs: millions of elements and blocks."""
    return write_lines(path, b"<p>a</p>", mb * _MB, prefix=b"<html><body>")


def html_nested(path: Path, mb: int) -> Path:
    """A page of ``mb`` MB of <div> never closed: millions of elements open at once."""
    return write_lines(path, b"<div>", mb * _MB, prefix=b"<html><body>")


def html_attributes(path: Path, mb: int) -> Path:
    """A page whose one paragraph carries ``mb`` MB of distinct attributes."""
    with path.open("wb") as out:
        out.write(b"<html><body><p")
        written = n = 0
        while written < mb * _MB:
            piece = "".join(f" a{n + k}" for k in range(10_000)).encode()
            out.write(piece)
            written += len(piece)
            n += 10_000
        out.write(b">The one paragraph.</p></body></html>")
    return path


def epub_chapter_of(unit: bytes, mb: int) -> bytes:
    """An EPUB whose one chapter is ``unit`` (markup) repeated to ``mb`` MB."""
    book = epub_bytes([("Chapter", "<p>short</p>")])
    source = zipfile.ZipFile(io.BytesIO(book))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            if not info.filename.endswith(".xhtml"):
                archive.writestr(info, source.read(info.filename))
        head = b'<html xmlns="http://www.w3.org/1999/xhtml"><body>'
        pieces = [head, *_repeat(unit, mb * _MB), b"</body></html>"]
        _put_stream(archive, "OEBPS/text/ch0.xhtml", pieces)
    return out.getvalue()


def pptx_with_paragraphs(mb: int) -> bytes:
    """A PPTX whose one slide holds ``mb`` MB of one-letter paragraphs."""
    base = pptx_bytes([Slide("A small deck", ["first"])])
    source = zipfile.ZipFile(io.BytesIO(base))
    out = io.BytesIO()
    paragraph = b"<a:p><a:r><a:t>a</a:t></a:r></a:p>"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == "ppt/slides/slide1.xml":
                head, _, tail = data.partition(b"</a:p>")
                _put_stream(archive, info.filename, [head, b"</a:p>", *_repeat(paragraph, mb * _MB), tail])  # fmt: skip
            else:
                archive.writestr(info, data)
    return out.getvalue()


def xlsx_far_cells(rows: int, *, corner: bool) -> bytes:
    """An XLSX declaring A1:XFD1048576 whose ``rows`` rows each hold one cell in the last
    column; with ``corner``, one more row at the last row number (1,048,576)."""
    base = xlsx_bytes({"Sheet": [["name", "value"], ["lemur", 1]]})
    source = zipfile.ZipFile(io.BytesIO(base))
    far = "".join(
        f'<row r="{r}"><c r="XFD{r}" t="inlineStr"><is><t>far</t></is></c></row>'
        for r in range(3, 3 + rows)
    )
    if corner:
        far += '<row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t>z</t></is></c></row>'
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == "xl/worksheets/sheet1.xml":
                data = re.sub(
                    rb'<dimension ref="[^"]*"/>', b'<dimension ref="A1:XFD1048576"/>', data
                )
                data = data.replace(b"</sheetData>", far.encode() + b"</sheetData>")
            archive.writestr(info, data)
    return out.getvalue()
