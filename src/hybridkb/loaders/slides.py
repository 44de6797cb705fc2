"""PPTX loader: one page per slide, the slide title as its section, notes included.

Read with python-pptx. Text frames, tables and grouped shapes are read in the
slide's shape order; each text frame is one block, each table one "cell | cell"
block. Speaker notes are a block of their own on the slide's page, under the
section "<title> > Notes", because they often say what the slide only hints at.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

from hybridkb.errors import ExtractionError
from hybridkb.loaders.archive import check_zip, invalid
from hybridkb.loaders.budget import BudgetExceeded, FileBudget, FileLimits
from hybridkb.loaders.text import MAX_TITLE_CHARS
from hybridkb.normalize import normalize_text
from hybridkb.results import Block

__all__ = ["load_pptx"]


def _shapes(shapes: Any) -> Iterator[Any]:
    """Every shape, groups opened (iteratively: groups may nest deeply)."""
    stack = [iter(shapes)]
    while stack:
        shape = next(stack[-1], None)
        if shape is None:
            stack.pop()
        elif getattr(shape, "shape_type", None) == 6:  # MSO_SHAPE_TYPE.GROUP
            stack.append(iter(shape.shapes))
        else:
            yield shape


def _frame_text(frame: Any) -> str:
    return "\n".join(
        " ".join("".join(run.text for run in paragraph.runs).split())
        for paragraph in frame.paragraphs
    )


def _table_text(table: Any) -> str:
    rows = []
    for row in table.rows:
        cells = [" ".join(cell.text.split()) for cell in row.cells]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _slide_blocks(slide: Any, number: int) -> list[Block]:
    title_shape = slide.shapes.title
    title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
    section = title[:MAX_TITLE_CHARS].rstrip() or f"Slide {number}"
    blocks: list[Block] = []
    for shape in _shapes(slide.shapes):
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            text, kind = title, "heading"
        elif getattr(shape, "has_table", False):
            text, kind = _table_text(shape.table), "table"
        elif getattr(shape, "has_text_frame", False):
            text, kind = _frame_text(shape.text_frame), "paragraph"
        else:
            continue
        text = normalize_text(text)
        if text:
            blocks.append(Block(text=text, page=number, section=section, kind=kind))
    if slide.has_notes_slide:
        frame = slide.notes_slide.notes_text_frame
        notes = normalize_text(_frame_text(frame)) if frame is not None else ""
        if notes:
            blocks.append(
                Block(text=notes, page=number, section=f"{section} > Notes", kind="notes")
            )
    return blocks


def load_pptx(stream: BinaryIO, *, name: str, budget: FileBudget | None = None) -> list[Block]:
    """Blocks of every slide, slide number as page.

    ``budget`` is charged for each slide (a page) and its text; the caller charges
    the ZIP parts python-pptx reads with ``counting_zip_reads``.

    Raises:
        ExtractionError: Not a PPTX, broken, or no text on any slide.
        BudgetExceeded: More slides, text or time than ``budget`` allows.
    """
    budget = budget or FileBudget(name, FileLimits())
    check_zip(stream, name, kind=".pptx", required="ppt/presentation.xml")
    import pptx

    try:
        presentation = pptx.Presentation(stream)
        blocks: list[Block] = []
        for number, slide in enumerate(presentation.slides, start=1):
            budget.charge_pages()
            slide_blocks = _slide_blocks(slide, number)
            budget.charge_text(sum(len(block.text) for block in slide_blocks))
            blocks += slide_blocks
    except BudgetExceeded:
        raise
    except Exception as exc:  # python-pptx raises KeyError, ValueError, lxml errors...
        raise invalid(name, ".pptx", f"{type(exc).__name__}: {str(exc)[:80]}") from exc
    if not blocks:
        raise ExtractionError(f"{name}: no text on any slide; nothing to add")
    return blocks
