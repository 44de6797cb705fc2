"""One budget per file: what reading it may cost, charged where the cost is produced.

A crafted file costs its reader far more than its size: a 14 KB EPUB listing one
chapter 600 times, a 1 MB DOCX holding a zero-filled "image" of a gigabyte, a PDF of
3,000 pages sharing one content stream. Guessing from names and declared sizes
missed each of these, so every loader charges a :class:`FileBudget` as it produces:

- uncompressed bytes read from a ZIP (DOCX, PPTX, XLSX, EPUB), every part each time
  it is opened, whatever its name (see :func:`counting_zip_reads`), and apart the XML
  among them that python-docx, python-pptx and the EPUB reader hold as a tree: one-letter
  paragraphs make a tree ~20x the XML (20 MB of them took 430 MB);
- characters of extracted text;
- pages with a text layer, and pages sent to OCR, separately;
- bytes of PDF content stream drawn, a stream shared by many pages at each use;
- spreadsheet and CSV rows, and apart their cells (empty ones too);
- wall time, checked at each of the charges above.

Going over raises :class:`BudgetExceeded`, one line naming the file, the budget and
the setting that raises it. The defaults (:class:`FileLimits`) pass real large files
(a 1,000-page PDF, a 100k-row spreadsheet, a DOCX full of photos) and stop crafted
ones within seconds and well under 1 GB of memory.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import IO, Any, TypeVar

from hybridkb.errors import ExtractionError
from hybridkb.results import Block

__all__ = [
    "BudgetExceeded",
    "FileBudget",
    "FileLimits",
    "ReadingClock",
    "counting_zip_reads",
    "timed_while_read",
]

_MB = 1024 * 1024
# What a block costs besides its text, in characters of the text budget: a Block and its
# share of chunking take a few hundred bytes, so a million one-letter paragraphs (a DOCX
# of 28 MB of XML) must not pass as a million characters (it took DuckDB out of memory).
BLOCK_CHARS = 50
STREAMED_TEXT_FACTOR = 20


class BudgetExceeded(ExtractionError):
    """A file costs more to read than its budget allows (one line: file, budget, setting)."""

    code = "over_budget"


@dataclass(frozen=True)
class FileLimits:
    """What reading one file may cost (settings ``HYBRIDKB_MAX_FILE_*``)."""

    # Uncompressed ZIP parts read, every read counted. zipfile inflates a part into one
    # bytes object grown by concatenation (twice its size at the end) and python-docx and
    # python-pptx hold every part, so 256 MB keeps the worst file under 1 GB.
    archive_mb: int = 256
    # XML parts parsed into a tree: 14 MB of one-letter paragraphs peaked at 472 MB in a
    # whole add, 28 MB took DuckDB out of memory under a 1.5 GB cap. HTML pages are
    # charged too: streamed, a page still makes libxml2 hold its open elements and a
    # tag's attributes at once (16 MB of one tag's attributes take ~350 MB).
    xml_mb: int = 16
    text_chars: int = 50_000_000  # a 1,000-page book is ~3 million
    pages: int = 5_000  # PDF pages whose text layer is read
    ocr_pages: int = 100  # PDF pages read by OCR (~1 s each)
    pdf_content_mb: int = 256  # content streams drawn; a 1,000-page report has ~35 MB
    rows: int = 1_000_000  # spreadsheet and CSV rows
    # Cells, empty ones too: each costs a read whatever it holds, and a row may have
    # 16,384 (a 1.5 KB XLSX declaring A1:XFD1048576 read 16 billion).
    cells: int = 50_000_000
    seconds: float = 300.0  # wall time spent parsing, checked at every charge

    def streamed(self) -> FileLimits:
        """The limits of a file streamed block by block (text, Markdown, CSV over 16 MB).

        Only one block is held, so its text costs time and disk, not memory: it may be
        STREAMED_TEXT_FACTOR times the text budget (a 500 MB log passes the defaults).
        """
        return replace(self, text_chars=self.text_chars * STREAMED_TEXT_FACTOR)


class FileBudget:
    """The running cost of reading one file, against its :class:`FileLimits`."""

    def __init__(
        self, name: str, limits: FileLimits, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.name = name
        self.limits = limits
        self.archive_bytes = 0
        self.xml_bytes = 0
        self.text_chars = 0
        self.pages = 0
        self.ocr_pages = 0
        self.content_bytes = 0
        self.rows = 0
        self.cells = 0
        self.blocks = 0
        self._clock = clock
        self._started = clock()

    def _over(self, what: str, setting: str, detail: str) -> BudgetExceeded:
        return BudgetExceeded(
            f"{self.name}: over the {what} budget ({detail}); "
            f"raise HYBRIDKB_MAX_FILE_{setting} to read it"
        )

    def check_time(self) -> None:
        """Raise once parsing this file has taken longer than ``limits.seconds``."""
        elapsed = self._clock() - self._started
        if elapsed > self.limits.seconds:
            raise self._over(
                "time", "SECONDS", f"still parsing after {elapsed:.0f} s of {self.limits.seconds:g}"
            )

    def charge_archive(self, part: str, size: int) -> None:
        """Charge ``size`` uncompressed bytes of the ZIP part ``part``, about to be read."""
        self.archive_bytes += size
        limit = self.limits.archive_mb * _MB
        if self.archive_bytes > limit:
            raise self._over(
                "archive",
                "ARCHIVE_MB",
                f"reading {part} brings the parts read to {self.archive_bytes // _MB} MB "
                f"uncompressed, limit {self.limits.archive_mb} MB",
            )
        self.check_time()

    def charge_xml(self, part: str, size: int) -> None:
        """Charge ``size`` bytes of markup in ``part`` (an XML part, an HTML page) to parse."""
        self.xml_bytes += size
        limit = self.limits.xml_mb * _MB
        if self.xml_bytes > limit:
            raise self._over(
                "XML",
                "XML_MB",
                f"parsing {part} brings the markup parsed to {self.xml_bytes // _MB} MB, "
                f"limit {self.limits.xml_mb} MB",
            )

    def charge_text(self, chars: int) -> None:
        """Charge ``chars`` characters of extracted text."""
        self.text_chars += chars
        if self.text_chars > self.limits.text_chars:
            raise self._over(
                "text",
                "TEXT_CHARS",
                f"more than {self.limits.text_chars:,} characters of text",
            )
        self.check_time()

    def charge_blocks(self, count: int) -> None:
        """Charge ``count`` blocks (paragraphs, rows, cells) at BLOCK_CHARS characters each.

        A loader charges each block as it makes it, so a million of them are refused
        before they are held; :func:`~hybridkb.loaders.load_file` charges the rest.
        """
        self.blocks += count
        self.charge_text(count * BLOCK_CHARS)

    def charge_block(self, text: str) -> None:
        """Charge one block about to be held: its text and BLOCK_CHARS more."""
        self.charge_blocks(1)
        self.charge_text(len(text))

    def charged(self, blocks: Iterable[Block]) -> Iterator[Block]:
        """``blocks``, each charged (:meth:`charge_block`) before it is handed on."""
        for block in blocks:
            self.charge_block(block.text)
            yield block

    def charge_pages(self, count: int = 1) -> None:
        """Charge ``count`` pages whose text layer is read."""
        self.pages += count
        if self.pages > self.limits.pages:
            raise self._over("page", "PAGES", f"more than {self.limits.pages:,} pages to read")
        self.check_time()

    def charge_ocr_pages(self, count: int) -> None:
        """Charge ``count`` pages to be read by OCR (before any is rendered)."""
        self.ocr_pages += count
        if self.ocr_pages > self.limits.ocr_pages:
            raise self._over(
                "OCR page",
                "OCR_PAGES",
                f"{self.ocr_pages:,} pages without a text layer to OCR, "
                f"limit {self.limits.ocr_pages:,}",
            )
        self.check_time()

    def charge_content(self, size: int) -> None:
        """Charge ``size`` bytes of PDF content stream about to be parsed for a page."""
        self.content_bytes += size
        limit = self.limits.pdf_content_mb * _MB
        if self.content_bytes > limit:
            raise self._over(
                "PDF content",
                "PDF_CONTENT_MB",
                f"pages draw more than {self.limits.pdf_content_mb} MB of content streams, "
                "counted each time a page draws one",
            )

    def charge_rows(self, count: int = 1) -> None:
        """Charge ``count`` spreadsheet or CSV rows."""
        self.rows += count
        if self.rows > self.limits.rows:
            raise self._over("row", "ROWS", f"more than {self.limits.rows:,} rows")
        self.check_time()

    def charge_cells(self, count: int) -> None:
        """Charge ``count`` spreadsheet or CSV cells read, empty ones included."""
        self.cells += count
        if self.cells > self.limits.cells:
            raise self._over("cell", "CELLS", f"more than {self.limits.cells:,} cells")


# -- a streamed file's time is the time spent reading it ---------------------------------------

_T = TypeVar("_T")


class ReadingClock:
    """A clock that runs only while a streamed file is read (see :func:`timed_while_read`).

    A streamed file is read block by block while its earlier blocks are embedded and
    written, so wall time would charge the embedder's work (an hour for a large log)
    to the file's parsing budget.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or time.monotonic
        self._spent = 0.0
        self._since: float | None = None

    def __call__(self) -> float:
        running = 0.0 if self._since is None else self._clock() - self._since
        return self._spent + running

    def start(self) -> None:
        """Run from now on."""
        self._since = self._clock()

    def stop(self) -> None:
        """Stop, keeping the time run so far."""
        if self._since is not None:
            self._spent += self._clock() - self._since
            self._since = None


def timed_while_read(items: Iterator[_T], clock: ReadingClock) -> Iterator[_T]:
    """``items``, with ``clock`` running only while the next one is being produced."""
    while True:
        clock.start()
        try:
            item = next(items)
        except StopIteration:
            return
        finally:
            clock.stop()
        yield item


# -- every ZIP part read is charged -----------------------------------------------------------

_active: contextvars.ContextVar[tuple[FileBudget, bool] | None] = contextvars.ContextVar(
    "hybridkb_zip_budget", default=None
)
_XML_STARTS = (b"<", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")
_install_lock = threading.Lock()
_original_open: Callable[..., IO[bytes]] | None = None


def _charged_open(self: zipfile.ZipFile, name: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
    active = _active.get()
    assert _original_open is not None
    if active is None or mode != "r":
        return _original_open(self, name, mode, *args, **kw)
    budget, trees = active
    info = name if isinstance(name, zipfile.ZipInfo) else self.getinfo(name)
    # zipfile never yields more than the central directory's file_size for a part
    # (ZipExtFile stops there), so charging it before the read bounds what the read
    # can cost, whatever the part claims in its local header or its name says.
    budget.charge_archive(info.filename, info.file_size)
    opened = _original_open(self, name, mode, *args, **kw)
    # XML is told by its first bytes, not its name: parts are parsed by content type.
    if trees and opened.peek(64)[:64].lstrip().startswith(_XML_STARTS):  # type: ignore[attr-defined]
        budget.charge_xml(info.filename, info.file_size)
    return opened


def _install() -> None:
    """Route ``zipfile.ZipFile.open`` through the charge, once per process.

    python-docx, python-pptx and openpyxl each make their own ``ZipFile`` from the
    stream they are given, so the charge cannot be handed to them; every read they
    make (``ZipFile.read`` included) goes through ``ZipFile.open``. Outside
    :func:`counting_zip_reads` (no budget in the context) the wrapper only forwards.
    """
    global _original_open
    with _install_lock:
        if _original_open is None:
            _original_open = zipfile.ZipFile.open
            zipfile.ZipFile.open = _charged_open  # type: ignore[method-assign]


@contextlib.contextmanager
def counting_zip_reads(budget: FileBudget, *, trees: bool = True) -> Iterator[FileBudget]:
    """Charge ``budget`` for every ZIP part opened for reading in this thread meanwhile.

    With ``trees``, XML parts are charged to the XML budget too (the reader parses
    them whole); openpyxl's read-only mode streams its XML, so XLSX passes False.
    """
    _install()
    token = _active.set((budget, trees))
    try:
        yield budget
    finally:
        _active.reset(token)
