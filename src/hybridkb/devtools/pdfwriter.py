"""A tiny, dependency-free PDF writer (used by the demo and the tests).

Real PDFs cannot be checked into the tests (licences, size), and a PDF library
used to *write* the fixtures would share bugs with the one that reads them. This
writes the few object kinds a loader must tell apart, by hand, per ISO 32000:
pages with a text layer, pages that only draw (a rectangle or an image, the shape
of a scanned page), and pages with no content at all. Encryption is the one thing
delegated to pypdf, because hand-writing RC4/AES would test nothing useful.

Example:
    >>> data = make_pdf([Page("Hello"), Page(image=True), Page()])
    >>> data.startswith(b"%PDF-1.4")
    True
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Page", "encrypt_pdf", "make_pdf", "scan_pdf", "write_pdf"]

_LINE_HEIGHT = 14
# A 2x2 RGB image: enough for a page to "have content" without any text.
_IMAGE_PIXELS = bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255])


@dataclass(frozen=True)
class Page:
    """One page to write.

    Attributes:
        text: Text lines separated by ``\\n``; an empty line leaves a paragraph gap.
            None writes no text operators at all (no text layer).
        image: Paint a small image XObject, as a scanner would.
        rectangle: Paint a filled rectangle (vector drawing without text).
        resources: Give the page the shared font and image resources; False writes
            an empty resource dictionary (a page that cannot show text or images).
        raw: Content-stream operators appended as they are (e.g. ``b"q Q"``).
    """

    text: str | None = None
    image: bool = False
    rectangle: bool = False
    resources: bool = True
    raw: bytes = b""


def _pdf_string(line: str) -> bytes:
    """Encode a line as a PDF literal string in WinAnsiEncoding."""
    out = bytearray(b"(")
    for byte in line.encode("cp1252"):
        if byte in b"()\\":
            out += b"\\" + bytes([byte])
        elif 32 <= byte < 127:
            out.append(byte)
        else:
            out += b"\\%03o" % byte
    return bytes(out + b")")


def _content_stream(page: Page) -> bytes:
    ops: list[bytes] = []
    if page.rectangle:
        ops.append(b"0.5 g 72 300 200 100 re f")
    if page.image:
        ops.append(b"q 120 0 0 120 300 500 cm /Im1 Do Q")
    if page.text is not None:
        ops.append(b"BT /F1 11 Tf %d TL 72 740 Td" % _LINE_HEIGHT)
        for line in page.text.split("\n"):
            # A new line (T*) per source line; an empty source line is only a move,
            # which leaves the vertical gap a reader sees as a paragraph break.
            ops.append(_pdf_string(line) + b" Tj T*" if line else b"T*")
        ops.append(b"ET")
    if page.raw:
        ops.append(page.raw)
    return b"\n".join(ops)


def make_pdf(pages: Sequence[Page]) -> bytes:
    """Build a complete PDF (header, objects, xref table, trailer) in memory.

    Args:
        pages: The pages, in order. ``Page()`` is a page with no content stream.

    Returns:
        The bytes of a valid PDF 1.4 file.
    """
    objects: list[bytes] = []  # objects[i] is object number i + 1

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in once the page tree number is known
    page_tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    image = add(
        b"<< /Type /XObject /Subtype /Image /Width 2 /Height 2 /ColorSpace /DeviceRGB "
        b"/BitsPerComponent 8 /Length %d >>\nstream\n"
        % len(_IMAGE_PIXELS)
        + _IMAGE_PIXELS
        + b"\nendstream"
    )
    resources = b"<< /Font << /F1 %d 0 R >> /XObject << /Im1 %d 0 R >> >>" % (font, image)
    kids: list[int] = []
    for page in pages:
        contents = b""
        stream = _content_stream(page)
        if stream:
            ref = add(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
            contents = b" /Contents %d 0 R" % ref
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources %s%s >>"
                % (page_tree, resources if page.resources else b"<< >>", contents)
            )
        )
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % page_tree
    objects[page_tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )

    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")  # binary comment marks the file as binary
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n"
        % (len(objects) + 1, catalog, xref)
    )
    return out.getvalue()


def write_pdf(path: Path, pages: Sequence[Page]) -> Path:
    """Write :func:`make_pdf` output to ``path`` and return the path."""
    path.write_bytes(make_pdf(pages))
    return path


def encrypt_pdf(
    data: bytes,
    user_password: str,
    *,
    owner_password: str | None = None,
    algorithm: str = "AES-256",
) -> bytes:
    """Return an encrypted copy of a PDF (pypdf does the cryptography).

    Args:
        data: An unencrypted PDF.
        user_password: Password needed to open the copy ("" opens without asking).
        owner_password: Password for permissions; defaults to a different value so
            the copy really is protected.
        algorithm: pypdf algorithm name: "RC4-40", "RC4-128", "AES-128", "AES-256".
    """
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password, owner_password or user_password + "-owner", algorithm=algorithm)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def scan_pdf(data: bytes, *, dpi: int = 200) -> bytes:
    """Return an image-only copy of a PDF, as a scanner would make it: each page
    rendered to a grayscale picture at ``dpi``, no text layer. Needs the OCR extra
    (pypdfium2 renders, Pillow writes); tests and bench/ocr.py measure OCR with it.
    """
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(data)
    try:
        images = [page.render(scale=dpi / 72).to_pil().convert("L") for page in document]
    finally:
        document.close()
    out = io.BytesIO()
    images[0].save(out, "PDF", resolution=dpi, save_all=True, append_images=images[1:])
    return out.getvalue()
