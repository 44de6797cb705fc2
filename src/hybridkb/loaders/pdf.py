"""PDF loader: text layer per page, split into paragraphs, with page numbers kept.

pypdf reads in non-strict mode so PDFs whose cross-reference table needs repair
still load. Scanned pages (no text layer) are read by OCR (loaders.ocr) when it is
installed, and reported either way, never silently dropped. Every pypdf failure becomes an ExtractionError:
PDF parsing raises anything from KeyError to RecursionError on broken input.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NoReturn

from pypdf import PasswordType, PdfReader

from hybridkb.errors import ExtractionError
from hybridkb.loaders.budget import BudgetExceeded, FileBudget, FileLimits
from hybridkb.loaders.ocr import OCR_INSTALL, ocr_available, ocr_pdf_pages
from hybridkb.loaders.pdfium import pdfium_texts
from hybridkb.normalize import normalize_text
from hybridkb.results import Block, LoadedFile

__all__ = [
    "load_pdf",
    "page_ranges",
    "running_lines",
    "split_page_paragraphs",
    "strip_running_lines",
]

# pypdf logs every repair it makes ("Ignoring wrong pointing object ..."). Without a
# handler those go to stderr through logging's last resort and clutter the CLI;
# applications that configure logging still receive them.
logging.getLogger("pypdf").addHandler(logging.NullHandler())

_HEADER_WINDOW = 1024  # the spec lets junk precede %PDF-; readers look this far
_DIGITS = re.compile(r"\d+")
_EDGE = 2  # lines at the top and at the bottom of a page where running heads sit
_MIN_RUNNING_PAGES = 3
_SENTENCE_END = re.compile(r"[.!?:;。！？][\"'”’»)\]]*$")


def _short(exc: BaseException) -> str:
    """A one-line cause for the user: exception type plus a clipped message."""
    text = " ".join(str(exc).split())
    text = text[:80] + "..." if len(text) > 80 else text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _corrupt(name: str, exc: BaseException) -> ExtractionError:
    return ExtractionError(
        f"{name}: corrupt or truncated PDF ({_short(exc)}); re-export or repair it"
    )


def page_ranges(pages: list[int]) -> str:
    """Format sorted page numbers compactly: ``[3, 7, 8, 9]`` -> ``"3, 7-9"``."""
    parts: list[str] = []
    start = prev = pages[0]
    for number in [*pages[1:], None]:
        if number is not None and number == prev + 1:
            prev = number
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if number is not None:
            start = prev = number
    return ", ".join(parts)


def _pages_phrase(pages: list[int], singular: str, plural: str) -> str:
    if len(pages) == 1:
        return f"page {pages[0]} {singular}"
    return f"pages {page_ranges(pages)} {plural}"


def split_page_paragraphs(text: str) -> list[str]:
    """Split normalised page text into paragraphs.

    pypdf's text has one line per printed line and no blank lines between
    paragraphs, so paragraph ends are inferred the way a reader sees them: a line
    that ends a sentence and stops well short of the page's usual line width, or a
    very short line (a heading, a caption) followed by a capitalised line. Lines
    inside a paragraph keep their line breaks.

    Args:
        text: Output of :func:`normalize_text` for one page.

    Returns:
        Non-empty paragraphs in reading order.
    """
    paragraphs: list[str] = []
    for chunk in text.split("\n\n"):
        lines = chunk.split("\n")
        widths = sorted(len(line) for line in lines)
        # 90th percentile, not the maximum: one long table row must not make every
        # ordinary line look "short".
        full = widths[int(0.9 * (len(widths) - 1))]
        current: list[str] = []
        for index, line in enumerate(lines):
            current.append(line)
            following = lines[index + 1] if index + 1 < len(lines) else ""
            short = len(line) < 0.75 * full
            ends_sentence = bool(_SENTENCE_END.search(line))
            heading_like = len(line) < 0.5 * full and following[:1].isupper()
            if following and short and (ends_sentence or heading_like):
                paragraphs.append("\n".join(current))
                current = []
        if current:
            paragraphs.append("\n".join(current))
    return [p.strip() for p in paragraphs if p.strip()]


def _line_key(line: str) -> str:
    """A line as repeated on every page: case, spacing and numbers (page, date) ignored."""
    return _DIGITS.sub("#", " ".join(line.split()).lower())


def _edge_indexes(lines: list[str]) -> list[int]:
    """Indexes of the first and last _EDGE non-blank lines of a page."""
    filled = [index for index, line in enumerate(lines) if line.strip()]
    return filled if len(filled) <= 2 * _EDGE else filled[:_EDGE] + filled[-_EDGE:]


def strip_running_lines(text: str, running: frozenset[str], removed: dict[str, str]) -> str:
    """``text`` without the running lines at its top and bottom (``removed`` gets each
    removed key with the first line seen for it).

    Only edge lines go: the same words inside the page are content, and so is a
    repeated line that is all a page holds.
    """
    lines = text.split("\n")
    drop = {i for i in _edge_indexes(lines) if _line_key(lines[i]) in running}
    kept = "\n".join(line for index, line in enumerate(lines) if index not in drop)
    if not kept.strip():
        return text  # the repeated line is all the page says: it is the content
    for index in sorted(drop):
        removed.setdefault(_line_key(lines[index]), " ".join(lines[index].split()))
    return kept


def running_lines(page_texts: dict[int, str]) -> frozenset[str]:
    """Keys (see _line_key) of lines printed at the top or bottom of most pages.

    Running headers and footers ("Annual Report 2024", "Page 3 of 40", a company
    name) repeat on most pages; left in, they join every page's first or last chunk
    and a search for them returns every page. A line counts when it is among the
    first or last two lines of at least half the pages with text, and of at least 3.
    """
    if len(page_texts) < _MIN_RUNNING_PAGES:
        return frozenset()
    counts: dict[str, int] = {}
    for text in page_texts.values():
        lines = text.split("\n")
        for key in {_line_key(lines[index]) for index in _edge_indexes(lines)}:
            counts[key] = counts.get(key, 0) + 1
    needed = max(_MIN_RUNNING_PAGES, (len(page_texts) + 1) // 2)
    return frozenset(key for key, count in counts.items() if count >= needed and key.strip())


def _may_have_text(page: Any) -> tuple[bool, bool]:
    """``(drawn, may_have_text)`` for a page, judged without extracting any text.

    No text is extracted, so a PDF of thousands of blank pages costs little more
    than parsing its page tree. Text needs a font, directly or inside a form
    XObject; a page with neither fonts nor XObjects and (almost) no content is
    blank, one with a sizeable content stream holds drawings or inline images.
    """
    contents = page.get("/Contents")
    if contents is None:
        return False, False
    contents = contents.get_object()
    streams = contents if isinstance(contents, list) else [contents]
    if not streams:
        return False, False
    resources = page.get("/Resources")
    resources = resources.get_object() if resources is not None else {}
    if "/Font" in resources or "/XObject" in resources:
        return True, True
    # Only pages without fonts or XObjects get here (rare outside blank pages), so
    # decoding their streams to measure them costs little.
    size = sum(len(stream.get_object().get_data().strip()) for stream in streams)
    return size > 64, False


def _content_cost(page: Any, seen: set[int]) -> int:
    """Bytes of content stream a reader parses to draw ``page``, charged each use.

    A stream is charged at its stored length the first time (no decoding: real files
    stay as fast) and at its decoded length every time another page draws it again, so
    3,000 pages sharing one stream cost what parsing it 3,000 times costs; pypdf keeps
    the decoded copy, so the shared stream is decoded once.
    """
    contents = page.get("/Contents")
    if contents is None:
        return 0
    target = contents.get_object()
    refs = list(target) if isinstance(target, list) else [contents]
    cost = 0
    for ref in refs:
        stream = ref.get_object()
        key = getattr(ref, "idnum", None)
        if key is not None and key in seen:
            cost += len(stream.get_data())
            continue
        if key is not None:
            seen.add(key)
        length = stream.get("/Length", 0) if hasattr(stream, "get") else 0
        length = length.get_object() if hasattr(length, "get_object") else length
        cost += int(length) if isinstance(length, int) else 0
    return cost


def _ocr_fix(ocr: bool) -> str:
    if not ocr:
        return "OCR is off: set HYBRIDKB_OCR=true to read scans"
    if not ocr_available():
        return f"install OCR with {OCR_INSTALL} and add it again"
    return "OCR found no text"


def _unlock(reader: PdfReader, name: str, password: str | None) -> None:
    """Decrypt with the empty password, then ``password``; raise if neither opens it."""
    try:
        encrypted = reader.is_encrypted
    except Exception as exc:
        raise _corrupt(name, exc) from exc
    if not encrypted:
        return
    try:
        # Many "encrypted" PDFs only restrict printing and open with an empty password.
        if reader.decrypt("") != PasswordType.NOT_DECRYPTED:
            return
        if password and reader.decrypt(password) != PasswordType.NOT_DECRYPTED:
            return
    except Exception as exc:  # unsupported handler, missing crypto backend, broken dict
        raise ExtractionError(
            f"{name}: encrypted with an unsupported method ({_short(exc)}); "
            "remove the password and add it again"
        ) from exc
    if password:
        raise ExtractionError(
            f"{name}: encrypted and the password was rejected; check HYBRIDKB_PDF_PASSWORD"
        )
    raise ExtractionError(f"{name}: encrypted; set HYBRIDKB_PDF_PASSWORD or remove the password")


def load_pdf(
    stream: BinaryIO,
    *,
    name: str,
    password: str | None = None,
    ocr: bool = True,
    budget: FileBudget | None = None,
) -> LoadedFile:
    """Extract the text layer of a PDF as paragraph blocks with 1-based page numbers.

    Pages with drawings or images but no text layer (scans) are read by OCR when
    ``ocr`` is on and the OCR extra is installed, and named in a warning.

    Args:
        stream: The opened PDF (seekable, at its start).
        name: The file's name, for messages.
        password: User password for encrypted PDFs (tried after the empty password).
        ocr: Read pages without a text layer by OCR (HYBRIDKB_OCR).
        budget: Charged for the pages read (text layer and OCR apart) and their text;
            every page is charged, even pages sharing one content stream.

    Returns:
        Blocks of kind "paragraph", each with its page. ``warnings`` lists pages
        read by OCR, pages with no text that were not, and pages pypdf could not read.

    Raises:
        ExtractionError: Not a PDF, corrupt or truncated, encrypted without the
            right password, or no page has a text layer.
        BudgetExceeded: More pages, OCR pages, text or time than ``budget`` allows.
    """
    budget = budget or FileBudget(name, FileLimits())
    reader, page_count = _open_pdf(stream, name, password)
    pages = _survey_pages(reader, page_count, budget)
    page_texts = _text_layers(reader, stream, pages, password, budget)
    pages.no_text.sort()
    pages.unreadable.sort()

    warnings: list[str] = []
    blocks, removed = _page_paragraphs(page_texts)
    if removed:
        warnings.append(_running_lines_warning(removed))
    ocr_failure: str | None = None
    if pages.no_text and ocr and ocr_available():
        read, found, ocr_failure = _ocr_scans(stream, pages.no_text, password, budget)
        blocks.extend(read)
        blocks.sort(key=lambda block: block.page or 0)  # stable: page order, then reading order
        if found:
            warnings.append(
                _pages_phrase(
                    found, "was read by OCR (no text layer)", "were read by OCR (no text layer)"
                )
            )
        pages.no_text = [number for number in pages.no_text if number not in found]
    if not blocks:
        _raise_nothing_read(name, pages, ocr_failure, ocr)
    warnings.extend(_unread_pages_warnings(pages, ocr))
    return LoadedFile(blocks=blocks, warnings=warnings, file_type="pdf")


@dataclass
class PageSurvey:
    """The pages of a PDF sorted by what the passes over it found (1-based numbers)."""

    candidates: list[int] = field(default_factory=list)  # pages that may hold a text layer
    no_text: list[int] = field(default_factory=list)  # drawn but no text: scans
    unreadable: list[int] = field(default_factory=list)
    first_error: Exception | None = None  # the cause shown for the unreadable pages

    def failed(self, number: int, exc: Exception) -> None:
        """Record a page pypdf could not read; one broken page must not lose the others."""
        self.unreadable.append(number)
        self.first_error = self.first_error or exc


def _open_pdf(stream: BinaryIO, name: str, password: str | None) -> tuple[PdfReader, int]:
    """A decrypted reader of a PDF and its page count (at least 1); raise on anything else."""
    head = stream.read(_HEADER_WINDOW)
    stream.seek(0)
    if not head:
        raise ExtractionError(f"{name}: corrupt or truncated PDF (0 bytes); re-export or repair it")
    if b"%PDF-" not in head:
        raise ExtractionError(f"{name}: not a PDF (no %PDF- header); check the file")
    try:
        reader = PdfReader(stream, strict=False)
    except Exception as exc:
        raise _corrupt(name, exc) from exc
    _unlock(reader, name, password)
    try:
        page_count = len(reader.pages)
    except Exception as exc:
        raise _corrupt(name, exc) from exc
    if page_count == 0:
        raise ExtractionError(f"{name}: corrupt PDF (no pages found); re-export or repair it")
    return reader, page_count


def _survey_pages(reader: PdfReader, page_count: int, budget: FileBudget) -> PageSurvey:
    """Sort every page, without extracting text: may hold text, a scan, blank or unreadable.

    Each page's content streams are charged to ``budget`` as they would be parsed.
    """
    pages = PageSurvey()
    seen_streams: set[int] = set()
    for number in range(1, page_count + 1):
        if number % 100 == 0:
            budget.check_time()
        try:
            page = reader.pages[number - 1]
            budget.charge_content(_content_cost(page, seen_streams))
            drawn, may_have_text = _may_have_text(page)
        except BudgetExceeded:
            raise
        except Exception as exc:  # noqa: BLE001 - one broken page must not lose the others
            pages.failed(number, exc)
            continue
        if may_have_text:
            pages.candidates.append(number)
        elif drawn:
            pages.no_text.append(number)  # drawings or images only: a scan
        # else a blank page: nothing to OCR either, so no warning
    return pages


def _text_layers(
    reader: PdfReader,
    stream: BinaryIO,
    pages: PageSurvey,
    password: str | None,
    budget: FileBudget,
) -> dict[int, str]:
    """The normalized text of each candidate page that has some, by PDFium, else pypdf.

    A candidate without text joins ``pages.no_text``; one pypdf cannot read, ``unreadable``.
    """
    budget.charge_pages(len(pages.candidates))
    fast = pdfium_texts(
        stream,
        pages.candidates,
        password=password,
        on_page=lambda text: budget.charge_text(len(text)),
    )
    page_texts: dict[int, str] = {}
    for number in pages.candidates:
        raw = fast.get(number, "")
        if not raw.strip():  # PDFium could not read it, or found nothing: pypdf decides
            budget.check_time()
            try:
                raw = reader.pages[number - 1].extract_text()
            except Exception as exc:  # noqa: BLE001 - one broken page must not lose the others
                pages.failed(number, exc)
                continue
            budget.charge_text(len(raw))
        text = normalize_text(raw)
        if text.strip():
            page_texts[number] = text
        else:
            pages.no_text.append(number)
    return page_texts


def _page_paragraphs(page_texts: dict[int, str]) -> tuple[list[Block], dict[str, str]]:
    """Paragraph blocks of the text pages, running lines left out; and the lines left out."""
    blocks: list[Block] = []
    running = running_lines(page_texts)
    removed: dict[str, str] = {}
    for number, text in page_texts.items():
        kept = strip_running_lines(text, running, removed)
        blocks.extend(
            Block(text=p, page=number, kind="paragraph") for p in split_page_paragraphs(kept)
        )
    return blocks, removed


def _running_lines_warning(removed: dict[str, str]) -> str:
    shown = sorted(
        "page numbers" if key == "#" else f"'{line[:40]}'" for key, line in removed.items()
    )
    return (
        "left out running headers/footers repeated on most pages: "
        + ", ".join(shown[:3])
        + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")
    )


def _ocr_scans(
    stream: BinaryIO, scans: list[int], password: str | None, budget: FileBudget
) -> tuple[list[Block], list[int], str | None]:
    """Read scanned pages by OCR: their paragraph blocks, the pages it found text on, and
    why OCR failed on a page (the first such reason), if it did."""
    budget.charge_ocr_pages(len(scans))  # before any is rendered: ~1 s a page
    stream.seek(0)
    read, failed = ocr_pdf_pages(
        stream.read(), scans, password=password, before_page=budget.check_time
    )
    budget.charge_text(sum(len(p) for paragraphs in read.values() for p in paragraphs))
    blocks = [
        Block(text=text, page=number, kind="paragraph")
        for number, page_paragraphs in read.items()
        for paragraph in page_paragraphs
        if (text := normalize_text(paragraph))
    ]
    found = sorted(number for number, paragraphs in read.items() if paragraphs)
    return blocks, found, next(iter(failed.values()), None)


def _raise_nothing_read(
    name: str, pages: PageSurvey, ocr_failure: str | None, ocr: bool
) -> NoReturn:
    """Raise the reason a PDF gave no text: a scan, OCR failed, broken pages or all blank."""
    if pages.no_text and ocr_failure is not None:
        raise ExtractionError(
            f"{name}: no text layer (a scan), and OCR could not read it "
            f"({' '.join(ocr_failure.split())[:80]}); re-export the PDF"
        )
    if pages.no_text:
        raise ExtractionError(f"{name}: no text layer (a scan); {_ocr_fix(ocr)}")
    if pages.first_error is not None:
        raise _corrupt(name, pages.first_error) from pages.first_error
    raise ExtractionError(f"{name}: no text (every page is blank); nothing to add")


def _unread_pages_warnings(pages: PageSurvey, ocr: bool) -> list[str]:
    """Warnings naming the pages left without text: scans not read and unreadable pages."""
    warnings: list[str] = []
    if pages.no_text:
        warnings.append(
            _pages_phrase(pages.no_text, "has no text layer", "have no text layer")
            + f"; {_ocr_fix(ocr)}"
        )
    if pages.unreadable and pages.first_error is not None:
        cause = f"({_short(pages.first_error)}); re-export the PDF"
        warnings.append(
            _pages_phrase(
                pages.unreadable,
                f"could not be read {cause} to include it",
                f"could not be read {cause} to include them",
            )
        )
    return warnings
