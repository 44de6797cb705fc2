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
import io
from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO

from hybridkb.errors import ExtractionError
from hybridkb.loaders.archive import check_zip, invalid
from hybridkb.loaders.encoding import decode_bytes
from hybridkb.normalize import normalize_text
from hybridkb.types import Block

__all__ = ["MAX_CELL_CHARS", "load_csv", "load_xlsx", "row_blocks"]

MAX_CELL_CHARS = 2000  # a cell longer than this is clipped: rows stay readable units
_EMPTY = "no data in any sheet; nothing to add"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # Excel stores 2024 as 2024.0
    return " ".join(str(value).split())[:MAX_CELL_CHARS]


def row_blocks(rows: Iterable[Sequence[Any]], *, section: str | None) -> list[Block]:
    """Turn rows (the first non-empty one is the header) into "header: value" blocks."""
    header: list[str] | None = None
    blocks: list[Block] = []
    for number, raw in enumerate(rows, start=1):
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
            blocks.append(Block(text=text, page=number, section=section, kind="row"))
    if header is not None and not blocks:
        # A sheet of one row: the row is the content (a list of names, a title).
        text = normalize_text(" | ".join(cell for cell in header if cell))
        blocks.append(Block(text=text, page=1, section=section, kind="row"))
    return blocks


def load_xlsx(stream: BinaryIO, *, name: str) -> tuple[list[Block], list[str]]:
    """Rows of every visible sheet, in sheet order.

    Returns:
        The blocks and warnings (hidden sheets skipped).

    Raises:
        ExtractionError: Not an XLSX, broken, password-protected, or no data.
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
                blocks += row_blocks(sheet.iter_rows(values_only=True), section=sheet.title)
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


def load_csv(stream: BinaryIO, *, name: str) -> list[Block]:
    """Rows of a .csv or .tsv file.

    Raises:
        ExtractionError: Binary content or no data.
    """
    text = decode_bytes(stream.read(), name)
    try:
        dialect: Any = csv.Sniffer().sniff(text[:20000], delimiters=",;\t|")
    except csv.Error:  # one column, or too irregular to tell: commas
        dialect = csv.excel_tab if name.lower().endswith(".tsv") else csv.excel
    csv.field_size_limit(10 * 1024 * 1024)
    try:
        blocks = row_blocks(csv.reader(io.StringIO(text), dialect), section=None)
    except csv.Error as exc:
        raise ExtractionError(f"{name}: not readable CSV ({exc}); check the file") from exc
    if not blocks:
        raise ExtractionError(f"{name}: no data; nothing to add")
    return blocks
