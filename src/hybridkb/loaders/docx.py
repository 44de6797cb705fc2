"""DOCX loader: paragraphs, tables and text boxes in document order, under their heading path.

Headings ("Title", "Heading N" styles, or a style with an outline level) are kept
as their own blocks and give every following block a ``section`` such as "Intro >
Details", so chunks never mix two sections and search results can say where they
came from. Tables become one block of "cell | cell" rows. Headers, footers,
footnotes and endnotes are blocks of their own sections ("Header", "Footer",
"Footnotes"), each distinct text once. Tracked changes read as accepted. DOCX has
no reliable page numbers (pagination happens in the word processor), so ``page``
is always None.

python-docx opens the package and parses its XML safely; the text is read by
walking that XML, because python-docx's table API raises on grids Word accepts.
The file is checked as a ZIP before python-docx sees it: a DOCX is a ZIP of XML,
and python-docx would happily inflate a zip bomb into memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from hybridkb.errors import ExtractionError
from hybridkb.loaders.archive import MAX_PART_BYTES, check_zip, invalid
from hybridkb.loaders.budget import BudgetExceeded, FileBudget, FileLimits
from hybridkb.loaders.text import HeadingPath
from hybridkb.normalize import normalize_text
from hybridkb.results import Block, LoadedFile

__all__ = ["MAX_PART_BYTES", "load_docx"]

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_HEADING = re.compile(r"heading\s*(\d)", re.IGNORECASE)
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _invalid(name: str, cause: str) -> ExtractionError:
    return invalid(name, ".docx", cause)


def _check_package(stream: BinaryIO, name: str) -> None:
    """Reject files that are not a DOCX ZIP, or whose XML would inflate absurdly."""
    if stream.read(8) == _OLE_MAGIC:
        # Word 97-2003 files and password-protected DOCX are both OLE containers.
        raise ExtractionError(
            f"{name}: not a valid .docx (an old .doc or a password-protected file); "
            "re-save it from Word/LibreOffice as .docx without a password"
        )
    stream.seek(0)
    check_zip(stream, name, kind=".docx", required="word/document.xml")


_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_TEXT_BOX = f"{_W}txbxContent"
# Subtrees whose text is not part of the paragraph: text boxes become their own blocks,
# mc:Fallback repeats mc:Choice for old readers, deleted revisions are gone.
_SKIP = frozenset({_TEXT_BOX, f"{_MC}Fallback", f"{_W}del", f"{_W}moveFrom"})
_BREAKS = frozenset({f"{_W}br", f"{_W}cr"})
_PART_LABELS = (
    ("/word/header", "header", "Header"),
    ("/word/footer", "footer", "Footer"),
    ("/word/footnotes", "footnote", "Footnotes"),
    ("/word/endnotes", "footnote", "Endnotes"),
)


def _walk(element: Any, skip: frozenset[str]) -> Iterator[Any]:
    """Yield ``element``'s descendants in document order, not entering ``skip`` tags.

    An explicit stack, not recursion: a hostile file can nest elements thousands deep.
    """
    stack = [iter(element)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            continue
        yield child
        if child.tag not in skip:
            stack.append(iter(child))


def _paragraph_text(paragraph: Any) -> str:
    """The visible text of a w:p: runs, tabs and breaks; inserted text kept, deleted not."""
    parts: list[str] = []
    for node in _walk(paragraph, _SKIP):
        if node.tag == f"{_W}t":
            parts.append(node.text or "")
        elif node.tag == f"{_W}tab":
            parts.append("\t")
        elif node.tag in _BREAKS:
            parts.append("\n")
        elif node.tag == f"{_W}noBreakHyphen":
            parts.append("-")
    return "".join(parts)


def _text_boxes(paragraph: Any) -> list[str]:
    # Only the first copy (mc:Choice); mc:Fallback holds the same box for old readers.
    boxes = [
        node for node in _walk(paragraph, frozenset({f"{_MC}Fallback"})) if node.tag == _TEXT_BOX
    ]
    texts = (
        " ".join(_paragraph_text(p) for p in _walk(box, _SKIP) if p.tag == f"{_W}p")
        for box in boxes
    )
    return [text for text in texts if text.strip()]


def _table_rows(table: Any) -> list[str]:
    """``cell | cell`` per row, read from the XML so any grid Word accepts reads.

    python-docx's ``row.cells`` maps cells onto the grid and raises on offset or
    inconsistent grids ("no tc element at grid_offset=1") that Word opens; the XML
    holds each cell once, merged or not. A nested table's text stays in its cell.
    """
    rows: list[str] = []
    for row in _walk(table, frozenset({f"{_W}tr"})):
        if row.tag != f"{_W}tr":  # rows of nested tables are not reached: tr is not entered
            continue
        cells = [
            _cell_text(cell) for cell in _walk(row, frozenset({f"{_W}tc"})) if cell.tag == f"{_W}tc"
        ]
        if any(cells):
            rows.append(" | ".join(cells))
    return rows


def _cell_text(cell: Any) -> str:
    merge = cell.find(f"{_W}tcPr/{_W}vMerge")
    if merge is not None and merge.get(f"{_W}val") != "restart":
        return ""  # a vertical merge's continuation: Word shows the first cell's text only
    paragraphs = (p for p in _walk(cell, _SKIP) if p.tag == f"{_W}p")
    return " ".join(" ".join(_paragraph_text(p).split()) for p in paragraphs).strip()


def _iter_body(element: Any) -> Iterator[Any]:
    """Yield the top-level w:p and w:tbl of a story in order, inside content controls too."""
    for node in _walk(element, frozenset({f"{_W}p", f"{_W}tbl"})):
        if node.tag in (f"{_W}p", f"{_W}tbl"):  # not entered, so never a nested one
            yield node


def _style_levels(document: Any) -> dict[str, int]:
    """Heading level by paragraph style id: "Title" is 0, "Heading N" or an outline level N."""
    levels: dict[str, int] = {}
    for style in document.styles.element.iterchildren(f"{_W}style"):
        style_id = style.get(f"{_W}styleId")
        name_element = style.find(f"{_W}name")
        name = name_element.get(f"{_W}val", "") if name_element is not None else ""
        level = _heading_level(name)
        outline = style.find(f"{_W}pPr/{_W}outlineLvl")
        if level is None and outline is not None:
            value = outline.get(f"{_W}val", "")
            level = int(value) + 1 if value.isdigit() and int(value) < 9 else None
        if style_id and level is not None:
            levels[style_id] = level
    return levels


def _paragraph_level(paragraph: Any, levels: dict[str, int]) -> int | None:
    style = paragraph.find(f"{_W}pPr/{_W}pStyle")
    return levels.get(style.get(f"{_W}val", "")) if style is not None else None


def _heading_level(style_name: str) -> int | None:
    # Word stores built-in style names in English whatever the UI language.
    if style_name.strip().lower() == "title":
        return 0
    match = _HEADING.fullmatch(style_name.strip())
    return int(match.group(1)) if match else None


def _story_blocks(story: Any, levels: dict[str, int]) -> list[Block]:
    """Blocks of one story (the body, a header, a footnote), each under its heading path."""
    path = HeadingPath()
    blocks: list[Block] = []
    for element in _iter_body(story):
        section = path.section
        if element.tag == f"{_W}tbl":
            text = normalize_text("\n".join(_table_rows(element)))
            if text:
                blocks.append(Block(text=text, section=section, kind="table"))
            continue
        text = normalize_text(_paragraph_text(element))
        level = _paragraph_level(element, levels) if text else None
        if level is not None:
            path.enter(level, " ".join(text.split()))
            section = path.section
            blocks.append(Block(text=text, section=section, kind="heading"))
        elif text:
            blocks.append(Block(text=text, section=section, kind="paragraph"))
        for box in _text_boxes(element):
            boxed = normalize_text(box)
            if boxed:
                blocks.append(Block(text=boxed, section=section, kind="text box"))
    return blocks


def _side_blocks(document: Any, levels: dict[str, int]) -> list[Block]:
    """Headers, footers, footnotes and endnotes, each text once, under its own section.

    They are searchable but kept out of the body's chunks: a footer repeated on every
    page belongs to no page's passage.
    """
    from docx.oxml.parser import parse_xml  # python-docx's parser: no entities, no network

    blocks: list[Block] = []
    seen: set[str] = set()
    for part in sorted(document.part.package.iter_parts(), key=lambda p: str(p.partname)):
        name = str(part.partname)
        label = next((lab for prefix, *lab in _PART_LABELS if name.startswith(prefix)), None)
        if label is None:
            continue
        kind, section = label
        root = part.element if hasattr(part, "element") else parse_xml(part.blob)
        stories = (
            [root]
            if kind != "footnote"
            else [
                note
                for note in root.iterchildren()
                # ids -1 and 0 are the separator lines Word puts in every footnotes part
                if note.get(f"{_W}type") in (None, "normal")
            ]
        )
        for story in stories:
            for block in _story_blocks(story, levels):
                if block.text not in seen:
                    seen.add(block.text)
                    blocks.append(Block(text=block.text, section=section, kind=kind))
    return blocks


def _extract(document: Any) -> list[Block]:
    levels = _style_levels(document)
    body = _story_blocks(document.element.body, levels)
    return body + _side_blocks(document, levels)


def load_docx(stream: BinaryIO, *, name: str, budget: FileBudget | None = None) -> LoadedFile:
    """Extract paragraphs, headings and tables from a .docx file in document order.

    Args:
        stream: The opened .docx (seekable, at its start).
        name: The file's name, for messages.
        budget: Charged for the text; the caller charges the ZIP parts python-docx
            reads (all of them, media included) with ``counting_zip_reads``.

    Returns:
        Blocks of kind "heading", "paragraph", "table" or "text box" with their
        heading path as ``section``, then "header", "footer" and "footnote" blocks;
        ``page`` is None.

    Raises:
        ExtractionError: Not a DOCX (empty, not a ZIP, no word/document.xml, an old
            .doc), a part that would inflate beyond 200 MB, or no text at all.
    """
    budget = budget or FileBudget(name, FileLimits())
    _check_package(stream, name)
    stream.seek(0)
    import docx  # python-docx; imported here so `import hybridkb.loaders` stays light

    try:
        document = docx.Document(stream)
        blocks = _extract(document)
    except BudgetExceeded:
        raise
    except Exception as exc:  # python-docx/lxml raise KeyError, ValueError, XMLSyntaxError...
        text = " ".join(str(exc).split())[:80]
        raise _invalid(
            name, f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        ) from exc
    budget.charge_text(sum(len(block.text) for block in blocks))
    if not blocks:
        raise ExtractionError(f"{name}: empty document (no text); nothing to add")
    return LoadedFile(blocks=blocks, file_type="docx")
