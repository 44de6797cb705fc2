"""DOCX loader: paragraphs and tables in document order, under their heading path.

Headings ("Title", "Heading N" styles) are kept as their own blocks and give every
following block a ``section`` such as "Intro > Details", so chunks never mix two
sections and search results can say where they came from. Tables become one block
of "cell | cell" rows. DOCX has no reliable page numbers (pagination happens in
the word processor), so ``page`` is always None.

The file is checked as a ZIP before python-docx sees it: a DOCX is a ZIP of XML,
and python-docx would happily inflate a zip bomb into memory.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from typing import Any, BinaryIO

from hybridkb.errors import ExtractionError
from hybridkb.loaders.text import MAX_TITLE_CHARS
from hybridkb.normalize import normalize_text
from hybridkb.types import Block, LoadedFile

__all__ = ["MAX_PART_BYTES", "load_docx"]

MAX_PART_BYTES = 200 * 1024 * 1024  # declared size of one XML part
_BOMB_RATIO = 200  # with more than _BOMB_MIN_BYTES, a ratio no real XML reaches
_BOMB_MIN_BYTES = 50 * 1024 * 1024
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_HEADING = re.compile(r"heading\s*(\d)", re.IGNORECASE)
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _invalid(name: str, cause: str) -> ExtractionError:
    return ExtractionError(f"{name}: not a valid .docx ({cause}); re-save it from Word/LibreOffice")


def _check_package(stream: BinaryIO, name: str) -> None:
    """Reject files that are not a DOCX ZIP, or whose XML would inflate absurdly."""
    head = stream.read(8)
    stream.seek(0)
    if not head:
        raise _invalid(name, "empty file, 0 bytes")
    if head == _OLE_MAGIC:
        # Word 97-2003 files and password-protected DOCX are both OLE containers.
        raise ExtractionError(
            f"{name}: not a valid .docx (an old .doc or a password-protected file); "
            "re-save it from Word/LibreOffice as .docx without a password"
        )
    if not zipfile.is_zipfile(stream):
        raise _invalid(name, "not a ZIP archive")
    stream.seek(0)
    try:
        with zipfile.ZipFile(stream) as archive:
            infos = archive.infolist()
    # zipfile raises NotImplementedError for an unknown "zip file version" (found by fuzzing).
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError) as exc:
        raise _invalid(name, f"broken ZIP: {exc}") from exc
    names = {info.filename for info in infos}
    if "word/document.xml" not in names:
        raise _invalid(name, "a ZIP without word/document.xml")
    for info in infos:
        # Only parts python-docx parses into memory matter; media is read lazily.
        if not info.filename.endswith((".xml", ".rels")):
            continue
        # zipfile stops inflating at the declared size, so declared sizes bound memory.
        size = info.file_size
        ratio = size / max(info.compress_size, 1)
        if size > MAX_PART_BYTES or (size > _BOMB_MIN_BYTES and ratio > _BOMB_RATIO):
            raise ExtractionError(
                f"{name}: {info.filename} would expand to {size // (1024 * 1024)} MB "
                f"({ratio:.0f}x compression, a possible zip bomb); refused, check the file"
            )


def _iter_body(element: Any) -> Iterator[Any]:
    """Yield w:p and w:tbl elements in document order, looking inside content controls."""
    for child in element.iterchildren():
        if child.tag in (f"{_W}p", f"{_W}tbl"):
            yield child
        elif child.tag == f"{_W}sdt":
            content = child.find(f"{_W}sdtContent")
            if content is not None:
                yield from _iter_body(content)


def _cell_text(cell: Any) -> str:
    # Every paragraph below the cell, nested tables included (cell.text skips them).
    from docx.text.paragraph import Paragraph

    return " ".join(
        " ".join(Paragraph(p, cell).text.split()) for p in cell._tc.iter(f"{_W}p")
    ).strip()


def _table_text(table: Any) -> str:
    rows: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            # A merged cell is returned once per grid column it spans.
            if cell._tc is previous:
                continue
            previous = cell._tc
            cells.append(" ".join(_cell_text(cell).split()))
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


class _StyleLevels:
    """Heading level per paragraph style id (None = not a heading), cached.

    ``paragraph.style`` searches the styles part on every call; documents with
    tens of thousands of paragraphs use a handful of styles.
    """

    def __init__(self, document: Any) -> None:
        self._document = document
        self._levels: dict[str | None, int | None] = {}

    def level(self, paragraph: Any) -> int | None:
        style_id = paragraph._p.style
        if style_id not in self._levels:
            style_name = paragraph.style.name if paragraph.style is not None else ""
            self._levels[style_id] = _heading_level(style_name or "")
        return self._levels[style_id]


def _heading_level(style_name: str) -> int | None:
    # Word stores built-in style names in English whatever the UI language.
    if style_name.strip().lower() == "title":
        return 0
    match = _HEADING.fullmatch(style_name.strip())
    return int(match.group(1)) if match else None


def _extract(document: Any) -> list[Block]:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    levels = _StyleLevels(document)
    path: list[tuple[int, str]] = []  # (level, title) of the open headings
    blocks: list[Block] = []
    for element in _iter_body(document.element.body):
        section = " > ".join(title for _, title in path) or None
        if element.tag == f"{_W}tbl":
            text = normalize_text(_table_text(Table(element, document)))
            if text:
                blocks.append(Block(text=text, section=section, kind="table"))
            continue
        paragraph = Paragraph(element, document)
        text = normalize_text(paragraph.text)
        if not text:
            continue
        level = levels.level(paragraph)
        if level is None:
            blocks.append(Block(text=text, section=section, kind="paragraph"))
            continue
        while path and path[-1][0] >= level:
            path.pop()
        # Clipped: the path is copied into every later chunk's section (see loaders.text).
        path.append((level, " ".join(text.split())[:MAX_TITLE_CHARS].rstrip()))
        section = " > ".join(title for _, title in path)
        blocks.append(Block(text=text, section=section, kind="heading"))
    return blocks


def load_docx(stream: BinaryIO, *, name: str) -> LoadedFile:
    """Extract paragraphs, headings and tables from a .docx file in document order.

    Args:
        stream: The opened .docx (seekable, at its start).
        name: The file's name, for messages.

    Returns:
        Blocks of kind "heading", "paragraph" or "table", each with its heading
        path as ``section``; ``page`` is None.

    Raises:
        ExtractionError: Not a DOCX (empty, not a ZIP, no word/document.xml, an old
            .doc), a part that would inflate beyond 200 MB, or no text at all.
    """
    _check_package(stream, name)
    stream.seek(0)
    import docx  # python-docx; imported here so `import hybridkb.loaders` stays light

    try:
        document = docx.Document(stream)
        blocks = _extract(document)
    except Exception as exc:  # python-docx/lxml raise KeyError, ValueError, XMLSyntaxError...
        text = " ".join(str(exc).split())[:80]
        raise _invalid(
            name, f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        ) from exc
    if not blocks:
        raise ExtractionError(f"{name}: empty document (no text); nothing to add")
    return LoadedFile(blocks=blocks, file_type="docx")
