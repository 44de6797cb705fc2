"""OCR for PDF pages that have no text layer (scans, photographed receipts).

Pages are rendered with pypdfium2 (a default dependency: it also extracts PDF text)
and read by RapidOCR (rapidocr-onnxruntime), whose wheel ships the PP-OCRv4
detection and recognition models (Chinese and Latin script): nothing is downloaded
at run time, so it works offline on Linux, macOS and Windows. RapidOCR comes with
the ``ocr`` extra (``pip install 'hybridkb[ocr]'``), not the default install: with
OpenCV it adds about 250 MB, and it does not install on Python 3.13 or newer.

The engine is loaded once per process (0.6 s) and used under a lock: ingest runs
files on a thread pool, and ONNX Runtime already uses every core for one page.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hybridkb.loaders.pdfium import PDFIUM_LOCK
from hybridkb.loaders.respace import respace, respace_available
from hybridkb.text.analysis import detect_language

__all__ = [
    "OCR_INSTALL",
    "TARGET_PIXELS",
    "TextLine",
    "lines_to_paragraphs",
    "ocr_available",
    "ocr_pdf_pages",
]

# The extra's rapidocr-onnxruntime has no wheel for Python 3.13+. Its successor rapidocr 3.x
# installs there and reads scans offline with the models in its wheel (checked with 3.10 on
# 3.13.0), but returns another result type: until loaders read it, say so instead of an
# install line that installs nothing.
OCR_INSTALL = (
    "pip install 'hybridkb[ocr]'"
    if sys.version_info < (3, 13)
    else "Python 3.12 or older (the ocr extra's rapidocr-onnxruntime does not install on 3.13+)"
)
# Long side of the rendered page in pixels (about 120 dpi for A4 or Letter). Measured
# by bench/ocr.py on 200 dpi scans: 1000 px gave a lower character error rate than
# 1600 or 2000 (0.6% vs 10% on a LaTeX page: at higher resolution PP-OCR's recogniser
# drops the spaces between words) at 2-3x the speed.
TARGET_PIXELS = 1000
_MAX_SCALE = 4.0
_MIN_SCORE = 0.5  # recognition confidence below this is mostly noise from drawings

_engine: Any = None
_engine_lock = threading.Lock()


@dataclass(frozen=True)
class TextLine:
    """One recognised piece of text and its box on the page, in pixels."""

    text: str
    left: float
    top: float
    right: float
    bottom: float

    @property
    def height(self) -> float:
        """The line's height in pixels (bottom minus top)."""
        return self.bottom - self.top


def ocr_available() -> bool:
    """True when the OCR extra (rapidocr-onnxruntime) and pypdfium2 are installed."""
    return all(
        importlib.util.find_spec(name) is not None for name in ("rapidocr_onnxruntime", "pypdfium2")
    )


def _get_engine() -> Any:
    global _engine
    if _engine is None:
        from rapidocr_onnxruntime import RapidOCR

        _engine = RapidOCR()
    return _engine


def _same_line(line: list[TextLine], piece: TextLine) -> bool:
    last = line[-1]
    overlap = min(last.bottom, piece.bottom) - max(last.top, piece.top)
    return overlap > 0.5 * min(last.height, piece.height)


def _gutters(pieces: Sequence[TextLine]) -> tuple[list[float], float]:
    """Where text columns start (left to right, the first column excluded), and the
    tolerance for a line's ragged or padded edges.

    A column start is an x in the middle 40% of the text's width where at least a
    fifth of the narrow lines (and 3) begin, with as many lines ending before it: the
    left edges of a column line up, the right edges of the one before stop short of
    them. Detection boxes are padded, so neighbouring columns may touch or overlap by
    a few pixels: edges are compared with a tolerance of 2% of the width, not exactly.
    """
    left, right = min(p.left for p in pieces), max(p.right for p in pieces)
    width = right - left
    tolerance = 0.02 * width
    narrow = [p for p in pieces if p.right - p.left < 0.5 * width]
    needed = max(3, len(narrow) // 5)
    if width <= 0 or len(narrow) < 2 * needed:
        return [], tolerance
    starts: list[float] = []
    for start in sorted(p.left for p in narrow):
        if not left + 0.3 * width <= start <= left + 0.7 * width:
            continue
        if starts and start - starts[-1] <= 2 * tolerance:
            continue  # the same column start seen again
        aligned = sum(abs(p.left - start) <= tolerance for p in narrow)
        before = sum(p.right <= start + tolerance and p.left < start - tolerance for p in narrow)
        if aligned >= needed and before >= needed:
            starts.append(start)
    return starts, tolerance


def _lines(pieces: Sequence[TextLine]) -> list[list[TextLine]]:
    lines: list[list[TextLine]] = []
    for piece in sorted(pieces, key=lambda p: (p.top, p.left)):
        if lines and _same_line(lines[-1], piece):
            lines[-1].append(piece)
        else:
            lines.append([piece])
    return lines


def _paragraphs(lines: list[list[TextLine]], typical: float) -> list[str]:
    paragraphs: list[list[str]] = [[]]
    previous_bottom: float | None = None
    for line in lines:
        top = min(p.top for p in line)
        if previous_bottom is not None and top - previous_bottom > typical:
            paragraphs.append([])
        paragraphs[-1].append(" ".join(p.text for p in sorted(line, key=lambda p: p.left)))
        previous_bottom = max(p.bottom for p in line)
    return ["\n".join(lines_of) for lines_of in paragraphs if lines_of]


def lines_to_paragraphs(pieces: Sequence[TextLine]) -> list[str]:
    """Arrange recognised pieces into lines (left to right) and lines into paragraphs.

    Pieces whose boxes overlap vertically by more than half a line height form one
    line; a vertical gap larger than the median line height starts a new paragraph,
    as a reader sees a blank line. Text in columns is read column by column: pieces
    that span the gutter (a title, a full-width figure caption) cut the page into
    bands, and each band is read left column first.
    """
    if not pieces:
        return []
    heights = sorted(max(p.height for p in line) for line in _lines(pieces))
    typical = heights[len(heights) // 2]
    starts, tolerance = _gutters(pieces)
    if not starts:
        return _paragraphs(_lines(pieces), typical)
    return _read_by_columns(pieces, Columns(starts, tolerance), typical)


class Columns:
    """The text columns of a page: each starts at a gutter and ends at the next, widened
    by the tolerance for ragged or padded edges."""

    def __init__(self, starts: list[float], tolerance: float) -> None:
        self.lefts = [float("-inf"), *(start - tolerance for start in starts)]
        self.rights = [*(start + tolerance for start in starts), float("inf")]

    def of(self, piece: TextLine) -> int | None:
        """The column a piece lies in, or None for a piece that crosses a gutter."""
        lefts = self.lefts
        for index, (low, high) in enumerate(zip(lefts, self.rights, strict=True)):
            if (
                piece.left >= low
                and piece.right <= high
                and (index + 1 == len(lefts) or piece.left < lefts[index + 1])
            ):
                return index
        return None


def _read_by_columns(pieces: Sequence[TextLine], columns: Columns, typical: float) -> list[str]:
    """Paragraphs top to bottom: each run of pieces inside columns (a band) is read left
    column first; each run of pieces across a gutter (full-width text) as it stands."""
    paragraphs: list[str] = []
    ordered = sorted(pieces, key=lambda p: (p.top, p.left))
    for spanning, run in itertools.groupby(ordered, key=lambda p: columns.of(p) is None):
        band = list(run)
        if spanning:
            paragraphs.extend(_paragraphs(_lines(band), typical))
            continue
        for index in range(len(columns.lefts)):
            in_column = [p for p in band if columns.of(p) == index]
            paragraphs.extend(_paragraphs(_lines(in_column), typical))
    return paragraphs


def _read_page(engine: Any, page: Any, long_side: int) -> list[str]:
    width, height = page.get_size()
    scale = min(_MAX_SCALE, long_side / max(width, height, 1.0))
    image = page.render(scale=scale).to_numpy()
    # The angle classifier only helps with text upside down; scans are upright and it
    # costs a tenth of the time.
    result, _ = engine(image, use_cls=False)
    pieces = [
        TextLine(
            text=str(text).strip(),
            left=min(x for x, _ in box),
            top=min(y for _, y in box),
            right=max(x for x, _ in box),
            bottom=max(y for _, y in box),
        )
        for box, text, score in result or []
        # A lone "?" or "|" is what the recogniser makes of a photo or a rule line.
        if float(score) >= _MIN_SCORE and any(ch.isalnum() for ch in str(text))
    ]
    return lines_to_paragraphs(with_spaces(pieces))


def with_spaces(pieces: list[TextLine]) -> list[TextLine]:
    """The pieces of an English page with the spaces the recogniser dropped put back
    (loaders/respace.py); other pages, or without the word list, as they are
    (bench/ocr.py: word error rate on the generated scans 0.165 before, 0.013 after)."""
    if not pieces or not respace_available():
        return pieces
    if detect_language(" ".join(p.text for p in pieces)[:4000]) != "en":
        return pieces
    return [replace(p, text=respace(p.text)) for p in pieces]


def ocr_pdf_pages(
    data: bytes,
    pages: Sequence[int],
    *,
    password: str | None = None,
    long_side: int = TARGET_PIXELS,
    before_page: Callable[[], None] | None = None,
) -> tuple[dict[int, list[str]], dict[int, str]]:
    """OCR the given 1-based pages of a PDF, each rendered ``long_side`` pixels long.

    ``before_page`` is called before each page (the file's time budget is checked
    there; an exception it raises stops the OCR).

    Returns:
        Paragraphs per page that was read, and the cause per page that could not be
        (a rendering or recognition error, or PDFium refusing the whole file, which
        pypdf may have repaired), so one bad page loses only itself.
    """
    import pypdfium2 as pdfium

    read: dict[int, list[str]] = {}
    failed: dict[int, str] = {}
    with PDFIUM_LOCK, _engine_lock:
        try:
            document = pdfium.PdfDocument(data, password=password)
        except Exception as exc:  # noqa: BLE001 - PdfiumError: pypdf repaired what PDFium cannot
            cause = f"{type(exc).__name__}: {exc}"[:120]
            return {}, dict.fromkeys(pages, cause)
        try:
            engine = _get_engine()
            for number in pages:
                if before_page is not None:
                    before_page()
                try:
                    read[number] = _read_page(engine, document[number - 1], long_side)
                except Exception as exc:  # noqa: BLE001 - a page is lost, not the file
                    failed[number] = f"{type(exc).__name__}: {exc}"[:120]
        finally:
            document.close()
    return read, failed
