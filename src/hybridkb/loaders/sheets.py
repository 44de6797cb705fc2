"""Spreadsheet loaders (XLSX, CSV/TSV): each row as "header: value" text.

A row like ``2024 | 1200`` means nothing to a reader or a search engine; "year:
2024; amount: 1200" keeps each number next to its name, so "amount in 2024" finds
it. The first non-empty row is the header (columns without one are "column N").
Each row is one block whose ``page`` is its row number in the sheet (1-based, as
the spreadsheet shows it) and whose ``section`` is the sheet name, so a citation
reads "Budget, row 14"; every row is a chunk of its own, so that citation is exact.

XLSX is read by openpyxl in read-only mode (rows streamed, not the whole workbook
in memory), with the values Excel last calculated for formulas. CSV dialect (comma,
semicolon, tab) is sniffed; the encoding is detected as for text files.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, BinaryIO

from hybridkb.errors import ExtractionError
from hybridkb.loaders.archive import check_zip, invalid
from hybridkb.loaders.budget import FileBudget
from hybridkb.loaders.lines import iter_lines
from hybridkb.normalize import normalize_text
from hybridkb.results import Block

__all__ = [
    "MAX_CELL_CHARS",
    "iter_row_blocks",
    "load_csv",
    "load_xlsx",
    "row_blocks",
    "stream_csv",
]

MAX_CELL_CHARS = 2000  # a cell longer than this is clipped: rows stay readable units
_EMPTY = "no data in any sheet; nothing to add"
_SNIFF_CHARS = 20_000
_MAX_FIELD_CHARS = 10 * 1024 * 1024  # one CSV field (or line) at most


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # Excel stores 2024 as 2024.0
    # Clip before splitting: every cell using one shared string of megabytes holds the
    # same str, and splitting all of it per cell made a 176 KB XLSX take gigabytes.
    text = str(value)[: 2 * MAX_CELL_CHARS]
    return " ".join(text.split())[:MAX_CELL_CHARS]


def iter_row_blocks(
    rows: Iterable[Sequence[Any]], *, section: str | None, budget: FileBudget | None = None
) -> Iterator[Block]:
    """Yield "header: value" blocks of rows (the first non-empty one is the header).

    ``budget`` is charged for every row and cell read (empty ones too: they cost a
    read) and the text of each block, as the rows come.
    """
    header: list[str] | None = None
    yielded = False
    for number, raw in enumerate(rows, start=1):
        if budget is not None:
            budget.charge_rows()
            budget.charge_cells(len(raw))
        cells = [_cell(value) for value in raw]
        if not any(cells):
            continue
        if header is None:
            header = cells
            continue
        names = header + [""] * (len(cells) - len(header))
        pairs = [
            f"{name or f'column {index}'}: {value}"
            for index, (name, value) in enumerate(zip(names, cells, strict=False), start=1)
            if value
        ]
        text = normalize_text("; ".join(pairs))
        if text:
            if budget is not None:
                budget.charge_text(len(text))
            yielded = True
            yield Block(text=text, page=number, section=section, kind="row")
    if header is not None and not yielded:
        # A sheet of one row: the row is the content (a list of names, a title).
        text = normalize_text(" | ".join(cell for cell in header if cell))
        yield Block(text=text, page=1, section=section, kind="row")


def row_blocks(rows: Iterable[Sequence[Any]], *, section: str | None) -> list[Block]:
    """Turn rows (the first non-empty one is the header) into "header: value" blocks."""
    return list(iter_row_blocks(rows, section=section))


def load_xlsx(
    stream: BinaryIO, *, name: str, budget: FileBudget | None = None
) -> tuple[list[Block], list[str]]:
    """Rows of every visible sheet, in sheet order.

    Rows are streamed by openpyxl (read-only) and charged to ``budget`` as they come;
    the caller charges the ZIP parts openpyxl opens (a sheet listed twice, twice).

    Returns:
        The blocks and warnings (hidden sheets skipped).

    Raises:
        ExtractionError: Not an XLSX, broken, password-protected, or no data.
        BudgetExceeded: More rows, text or time than ``budget`` allows.
    """
    if stream.read(8) == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1":
        raise ExtractionError(
            f"{name}: not a valid .xlsx (an old .xls or a password-protected file); "
            "save it as .xlsx without a password"
        )
    stream.seek(0)
    check_zip(stream, name, kind=".xlsx", required="xl/workbook.xml")
    import openpyxl

    blocks: list[Block] = []
    hidden: list[str] = []
    try:
        workbook = openpyxl.load_workbook(stream, read_only=True, data_only=True)
        try:
            for sheet in workbook.worksheets:
                if sheet.sheet_state != "visible":
                    hidden.append(sheet.title)
                    continue
                # Read-only mode trusts the sheet's declared size and pads every row to it
                # (a 1.5 KB file declaring A1:XFD1048576 is 16 billion empty cells): each
                # row is read as far as its last cell instead, and no row past the last.
                sheet.reset_dimensions()
                rows = sheet.iter_rows(values_only=True)
                blocks += iter_row_blocks(rows, section=sheet.title, budget=budget)
        finally:
            workbook.close()
    except ExtractionError:
        raise
    except Exception as exc:  # openpyxl raises KeyError, ValueError, lxml errors...
        raise invalid(name, ".xlsx", f"{type(exc).__name__}: {str(exc)[:80]}") from exc
    if not blocks:
        raise ExtractionError(f"{name}: {_EMPTY}")
    warnings = [f"hidden sheets skipped: {', '.join(hidden)}"] if hidden else []
    return blocks, warnings


def stream_csv(stream: BinaryIO, *, name: str, budget: FileBudget | None = None) -> Iterator[Block]:
    """Row blocks of a .csv or .tsv file of any size, read and decoded as they are needed.

    Raises:
        ExtractionError: Binary content, unreadable CSV, or no data.
        BudgetExceeded: More rows, text or time than ``budget`` allows.
    """
    lines = iter_lines(stream, name, max_line_chars=_MAX_FIELD_CHARS)
    head: list[str] = []
    size = 0
    for line in lines:  # the dialect is sniffed from the first 20,000 characters
        head.append(line)
        size += len(line)
        if size >= _SNIFF_CHARS:
            break
    try:
        dialect: Any = csv.Sniffer().sniff("".join(head)[:_SNIFF_CHARS], delimiters=",;\t|")
    except csv.Error:  # one column, or too irregular to tell: commas
        dialect = csv.excel_tab if name.lower().endswith(".tsv") else csv.excel
    csv.field_size_limit(_MAX_FIELD_CHARS)
    yielded = False
    try:
        reader = csv.reader(itertools.chain(head, lines), dialect)
        for block in iter_row_blocks(reader, section=None, budget=budget):
            yielded = True
            yield block
    except csv.Error as exc:
        raise ExtractionError(f"{name}: not readable CSV ({exc}); check the file") from exc
    if not yielded:
        raise ExtractionError(f"{name}: no data; nothing to add")


def load_csv(stream: BinaryIO, *, name: str, budget: FileBudget | None = None) -> list[Block]:
    """Rows of a .csv or .tsv file.

    Raises:
        ExtractionError: Binary content or no data.
        BudgetExceeded: More rows, text or time than ``budget`` allows.
    """
    return list(stream_csv(stream, name=name, budget=budget))
