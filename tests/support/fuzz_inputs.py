"""The loader fuzzer's inputs: seed files of every format, and seeded mutations of them.

Seeds are generated here (a text PDF, a compressed and an encrypted PDF, a DOCX,
Markdown, UTF-16 and legacy-encoded text, HTML, PPTX, XLSX, CSV and EPUB, and issue 25's
hostile shapes at small sizes: a repeated EPUB spine, a DOCX "image", a shared-string
XLSX, a PDF whose pages share one content stream), then mutated with a seeded
``random.Random``: byte and bit flips, truncation at a random offset, random and
"interesting" insertions (PDF keywords, huge integers, long blank runs), duplicated
and deleted slices, integers swapped for extreme ones, files fed to the wrong
loader, and, for the ZIP formats (DOCX, PPTX, XLSX, EPUB), the same mutations applied
to the XML inside the ZIP so the parsers see broken documents, not just broken ZIPs.

Its own module (apart from loader_fuzz.py, which feeds them to the loaders) because
what the fuzzer tries is one concern and how it runs and reports another.
"""

from __future__ import annotations

import datetime
import io
import random
import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from formatgen import CSV_TEXT, HTML_PAGE, Slide, epub_bytes, pptx_bytes, repack, xlsx_bytes
from hostilegen import (
    docx_with_image,
    epub_spine_repeated,
    pdf_shared_stream,
    xlsx_shared_string_bomb,
)
from pdfgen import Page, encrypt_pdf, make_pdf

# --- seeds -------------------------------------------------------------------------


def _compressed_pdf(data: bytes) -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    for page in writer.pages:
        page.compress_content_streams()
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _docx_seed() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Annual report", level=0)
    document.add_paragraph("Opening paragraph with an accent: café, and a soft\u00adhyphen.")
    document.add_heading("Income", level=1)
    document.add_paragraph("Salary and wages are reported on line one.")
    table = document.add_table(rows=2, cols=2)
    for row, values in zip(table.rows, [("item", "amount"), ("rent", "1200")], strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    table.cell(0, 0).add_table(rows=1, cols=1).cell(0, 0).text = "nested"
    document.add_heading("Deductions", level=2)
    document.add_paragraph("Depreciation of equipment over five years.")
    # No wall clock in a seed: fixed document dates, and the ZIP repacked with fixed
    # entry times (python-docx stamps both with the current time).
    fixed = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    props = document.core_properties
    props.created = props.modified = props.last_printed = fixed
    out = io.BytesIO()
    document.save(out)
    return repack(out.getvalue())


MARKDOWN_SEED = """---
title: Fuzz seed
tags: [a, b]
---
# Heading one #

Paragraph with *emphasis* and `code`.

Setext heading
--------------

```python
def f(x):
    return x  # indented
```

| a | b |
|---|:-:|
| 1 | 2 |

* * *

## Sub heading
Text under it.
~~~
unclosed fence
"""

TEXT_SEED = (
    "Article 1\n\nAll human beings are born free and equal in dignity and rights.\r\n"
    "They are endowed with reason and conscience.\n\n\u00fcber \u00e9t\u00e9 \u4e2d\u6587\n"
)


def make_seeds() -> dict[str, bytes]:
    """Name (with the extension that picks the loader) -> seed bytes."""
    pdf = make_pdf(
        [
            Page("Tax return 2023\n\nIncome from salary was reported.\nDepreciation (five years)."),
            Page(image=True),
            Page(),
            Page("Second text page with (parentheses) and \\backslash.", rectangle=True),
        ]
    )
    return {
        "text.pdf": pdf,
        "compressed.pdf": _compressed_pdf(pdf),
        "encrypted.pdf": encrypt_pdf(pdf, "", algorithm="RC4-128"),
        "doc.docx": _docx_seed(),
        "doc.md": MARKDOWN_SEED.encode("utf-8"),
        "utf16.txt": TEXT_SEED.encode("utf-16"),  # with BOM
        "utf16le.txt": TEXT_SEED.encode("utf-16-le"),  # without BOM
        "latin.txt": TEXT_SEED.replace("\u4e2d\u6587", "").encode("cp1252"),
        "page.html": HTML_PAGE.encode("utf-8"),
        "deck.pptx": pptx_bytes(
            [Slide("Budget", ["Rent rises"], notes="Why", table=[["a", "b"], ["1", "2"]])]
        ),
        "sheet.xlsx": xlsx_bytes({"Costs": [["item", "amount"], ["rent", 1200], ["desk", 90.5]]}),
        "rows.csv": CSV_TEXT.encode("utf-8"),
        "book.epub": epub_bytes([("One", "<h1>Start</h1><p>Text of the first chapter.</p>")]),
        # Issue 25's shapes, small: repeated references and parts read whatever their name.
        "spine.epub": epub_spine_repeated(50, 2),
        "image.docx": docx_with_image(1),
        "strings.xlsx": xlsx_shared_string_bomb(64, 20, 5),
        "shared.pdf": pdf_shared_stream(200, text=True, lines=50),
    }


# --- mutations ---------------------------------------------------------------------

_TOKENS = [
    b"obj", b"endobj", b"stream\n", b"endstream", b"<<", b">>", b"[", b"]", b"(", b")",
    b"/Length 999999999", b"/Count 2147483647", b"/Kids [1 0 R]", b"/Parent 2 0 R",
    b"/Filter /FlateDecode", b"/Filter /LZWDecode", b"/Encrypt 1 0 R", b"xref",
    b"trailer", b"startxref", b"%%EOF", b"%PDF-1.7", b"R", b"\\", b"\x00", b"\xff\xfe",
    b"\xef\xbb\xbf", b"\r", b"\n\n", b" " * 4096, b"\t" * 1024, b"#" * 7, b"```", b"|---|",
    b"<w:p>", b"</w:p>", b"<w:tbl>", b"<w:t>", b"&#0;", b"&amp;", b"<!DOCTYPE x [<!ENTITY a 'b'>]>",
    b"w:val=\"Heading9\"", b"\xc3", b"\xe2\x80", b"\xed\xa0\x80", b"\x00" * 64,
]  # fmt: skip
_EXTREME = [
    b"0",
    b"-1",
    b"1",
    b"65535",
    b"2147483648",
    b"9223372036854775808",
    b"1" * 40,
    b"99999999",
]
_DIGITS = re.compile(rb"\d+")


def _flip(data: bytearray, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] = rng.randrange(256)


def _bitflip(data: bytearray, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def _truncate(data: bytearray, rng: random.Random) -> None:
    del data[rng.randrange(len(data)) :]


def _insert(data: bytearray, rng: random.Random) -> None:
    at = rng.randrange(len(data) + 1)
    blob = rng.choice(_TOKENS) if rng.random() < 0.6 else rng.randbytes(rng.randint(1, 64))
    data[at:at] = blob


def _duplicate(data: bytearray, rng: random.Random) -> None:
    start = rng.randrange(len(data))
    piece = data[start : start + rng.randint(1, 2048)]
    at = rng.randrange(len(data) + 1)
    data[at:at] = piece * rng.randint(1, 8)


def _delete(data: bytearray, rng: random.Random) -> None:
    start = rng.randrange(len(data))
    del data[start : start + rng.randint(1, 512)]


def _integer(data: bytearray, rng: random.Random) -> None:
    numbers = list(_DIGITS.finditer(data))
    if numbers:
        match = rng.choice(numbers)
        data[match.start() : match.end()] = rng.choice(_EXTREME)


_MUTATORS: list[Callable[[bytearray, random.Random], None]] = [
    _flip, _bitflip, _truncate, _insert, _duplicate, _delete, _integer,
]  # fmt: skip


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Apply one to three random mutations."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if not out:
            out += rng.randbytes(rng.randint(1, 16))
        rng.choice(_MUTATORS)(out, rng)
    return bytes(out)


_MAIN_PART = {
    ".docx": "word/document.xml",
    ".pptx": "ppt/slides/slide1.xml",
    ".xlsx": "xl/worksheets/sheet1.xml",
    ".epub": "OEBPS/text/ch0.xhtml",
}
_ZIPPED = frozenset(_MAIN_PART)


def mutate_zip_parts(data: bytes, rng: random.Random, ext: str = ".docx") -> bytes:
    """Mutate the XML inside a ZIP format and zip it again, so the ZIP itself stays valid."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        parts = {info.filename: archive.read(info) for info in archive.infolist()}
    xml = [n for n in parts if n.endswith((".xml", ".rels", ".xhtml", ".opf"))]
    main = _MAIN_PART[ext]
    name = main if main in parts and rng.random() < 0.6 else rng.choice(xml)
    parts[name] = mutate_bytes(parts[name], rng)
    if rng.random() < 0.05:
        del parts[rng.choice(list(parts))]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for part, body in parts.items():
            # A fixed entry time: writestr(name) would stamp the wall clock into the bytes.
            info = zipfile.ZipInfo(part, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, body)
    return out.getvalue()


def mutations(seeds: dict[str, bytes], n: int, seed: int) -> Iterator[tuple[int, str, str, bytes]]:
    """Yield ``(index, seed name, extension, mutated bytes)`` n times, reproducibly."""
    rng = random.Random(seed)
    names = sorted(seeds)
    for index in range(n):
        name = names[index % len(names)]
        data = seeds[name]
        ext = Path(name).suffix
        roll = rng.random()
        if roll < 0.03:  # a valid file of another type under this extension
            data = seeds[rng.choice(names)]
        elif ext in _ZIPPED and roll < 0.55:
            data = mutate_zip_parts(data, rng, ext)
        else:
            data = mutate_bytes(data, rng)
        yield index, name, ext, data
