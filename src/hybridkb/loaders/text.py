"""Plain-text and Markdown loaders, and a bounded-memory reader for huge .txt files.

Markdown is parsed just enough to keep its structure: ATX (``## Title``) and
setext headings give each block a heading path as ``section``; fenced code stays
one block (blank lines inside a fence do not end it, and its indentation is kept);
tables stay one block. Everything else is paragraphs separated by blank lines.
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from hybridkb.errors import ExtractionError
from hybridkb.loaders.budget import FileBudget
from hybridkb.loaders.encoding import SAMPLE_BYTES, decode_bytes, detect_encoding, reject_binary
from hybridkb.loaders.lines import iter_lines
from hybridkb.normalize import display_name, normalize_text
from hybridkb.results import Block, LoadedFile

__all__ = [
    "MAX_TITLE_CHARS",
    "HeadingPath",
    "iter_markdown_blocks",
    "iter_text_blocks",
    "load_markdown",
    "load_text",
    "markdown_blocks",
    "stream_markdown",
    "text_blocks",
]

_EMPTY = "empty file; nothing to add"
MAX_TITLE_CHARS = 200  # longest heading title kept in a section path
_LINE_ENDS = re.compile("\r\n?")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# The title stops only after a non-blank character and trailing blanks are matched
# possessively: with `(.*?)` and `[ \t]*` side by side, a long run of spaces costs
# quadratic time (a 100 KB line took minutes).
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+((?:[ \t]*+[^ \t])*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*+(\|[ \t]*:?-+:?[ \t]*+)*\|?[ \t]*$")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
MAX_BLOCK_CHARS = 1_000_000  # a longer paragraph, fence or table is cut (streamed files)
_FRONT_MATTER_CHARS = 64 * 1024  # YAML front matter is short; a rule is not its start


def text_blocks(text: str) -> list[Block]:
    """Split plain text into paragraph blocks at blank lines (no page, no section)."""
    return list(_paragraph_blocks(text))


def _paragraph_blocks(text: str) -> Iterator[Block]:
    # One at a time: a million one-letter paragraphs are refused before they are held.
    text = normalize_text(text)
    start = 0
    while start <= len(text):
        end = text.find("\n\n", start)
        end = len(text) if end < 0 else end
        if end > start:
            yield Block(text=text[start:end], kind="paragraph")
        start = end + 2


class HeadingPath:
    """The headings open at a point of a document, as the section of what follows.

    Shared by the Markdown, HTML and DOCX loaders: a heading closes every open
    heading of its level or deeper, and the path ("Intro > Details") is the
    ``section`` of each later block. Titles are clipped to MAX_TITLE_CHARS: the path
    is copied into every later chunk, and a huge heading would be copied into each
    (a 1.7 MB file became a 500 MB database); the heading block keeps the full text.
    """

    def __init__(self, before_first: str | None = None) -> None:
        self.open: list[tuple[int, str]] = []
        self.before_first = before_first  # the section of text before any heading

    @property
    def section(self) -> str | None:
        """The open headings joined with `` > `` (``before_first`` before any heading)."""
        return " > ".join(title for _, title in self.open) or self.before_first

    def enter(self, level: int, title: str) -> None:
        """Open a heading at ``level`` (1 = top), closing those of its level or deeper."""
        while self.open and self.open[-1][0] >= level:
            self.open.pop()
        self.open.append((level, title[:MAX_TITLE_CHARS].rstrip()))


class _MarkdownState:
    """Heading path and pending paragraph lines while scanning a Markdown file."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.headings = HeadingPath()
        self.paragraph: list[str] = []
        self.paragraph_chars = 0

    @property
    def section(self) -> str | None:
        return self.headings.section

    def emit(self, raw: str, kind: str, *, keep_indent: bool = False) -> None:
        text = normalize_text(raw, keep_indent=keep_indent)
        if text:
            self.blocks.append(Block(text=text, section=self.section, kind=kind))

    def flush(self) -> None:
        if self.paragraph:
            self.emit("\n".join(self.paragraph), "paragraph")
            self.paragraph, self.paragraph_chars = [], 0

    def take_blocks(self) -> list[Block]:
        blocks, self.blocks = self.blocks, []
        return blocks

    def heading(self, level: int, raw_title: str) -> None:
        self.flush()
        title = " ".join(normalize_text(raw_title).split())
        if not title:
            return
        self.headings.enter(level, title)
        self.blocks.append(Block(text=title, section=self.section, kind="heading"))


class _Lookahead:
    """Lines from an iterator, with a look at the ones ahead (kept until taken)."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines
        self._ahead: deque[str] = deque()

    def peek(self, offset: int = 0) -> str | None:
        while len(self._ahead) <= offset:
            line = next(self._lines, None)
            if line is None:
                return None
            self._ahead.append(line)
        return self._ahead[offset]

    def take(self) -> str | None:
        return self._ahead.popleft() if self._ahead else next(self._lines, None)


def _front_matter_end(lines: _Lookahead) -> int | None:
    first = lines.peek()
    if first is None or first.strip() != "---":
        return None
    seen = 0
    for offset in range(1, 500):
        line = lines.peek(offset)
        if line is None or seen > _FRONT_MATTER_CHARS:  # not front matter: a rule, a table
            return None
        if line.strip() in ("---", "..."):
            return offset
        seen += len(line)
    return None


def markdown_blocks(text: str) -> list[Block]:
    """Split Markdown into heading, paragraph, code and table blocks.

    Args:
        text: Decoded Markdown.

    Returns:
        Blocks in document order; ``section`` is the heading path ("A > B") of the
        headings above each block, including a heading block's own title.
    """
    return list(iter_markdown_blocks(iter(_LINE_ENDS.sub("\n", text).split("\n"))))


def iter_markdown_blocks(
    lines: Iterator[str], *, max_block_chars: int = MAX_BLOCK_CHARS
) -> Iterator[Block]:
    """Markdown blocks of ``lines`` (without line ends), as they are read.

    The same blocks as :func:`markdown_blocks`, holding only the block being built:
    a paragraph, fence or table longer than ``max_block_chars`` is handed on in
    pieces (an unclosed fence runs to the end of a 150 MB file).
    """
    ahead = _Lookahead(lines)
    state = _MarkdownState()
    if (end := _front_matter_end(ahead)) is not None:
        # YAML front matter (title, tags) is worth indexing, but it is not a heading.
        matter = [ahead.take() or "" for _ in range(end + 1)]
        state.emit("\n".join(matter[1:end]), "paragraph")
    while (line := ahead.take()) is not None:
        yield from state.take_blocks()
        if marker := _fence_marker(line):
            state.flush()
            yield from _fence_blocks(state, ahead, line, marker, max_block_chars)
            continue
        if atx := _ATX.match(line):
            state.heading(len(atx.group(1)), atx.group(2) or "")
        elif state.paragraph and _SETEXT.match(line):
            title = " ".join(state.paragraph)
            state.paragraph, state.paragraph_chars = [], 0
            state.heading(1 if line.strip()[0] == "=" else 2, title)
        elif _THEMATIC_BREAK.match(line):
            state.flush()
        elif "|" in line and _TABLE_DELIMITER.match(ahead.peek() or "x"):
            state.flush()
            yield from _table_blocks(state, ahead, line, max_block_chars)
        elif not line.strip():
            state.flush()
        else:
            state.paragraph.append(line)
            state.paragraph_chars += len(line) + 1
            if state.paragraph_chars > max_block_chars:
                state.flush()
    state.flush()
    yield from state.take_blocks()


def _fence_marker(line: str) -> str | None:
    """The fence (three or more backticks or tildes) a line opens a code block with."""
    fence = _FENCE.match(line)
    if fence is None:
        return None
    marker = fence.group(1)
    if marker[0] == "`" and "`" in fence.group(2):  # "```foo```" is inline code
        return None
    return marker


def _table_blocks(
    state: _MarkdownState, ahead: _Lookahead, header: str, max_block_chars: int
) -> Iterator[Block]:
    """The table whose ``header`` row was just read (its delimiter row is next), up to the
    first row without a "|"; emitted in pieces of ``max_block_chars``, the last one left
    in ``state``."""
    rows, size = [header, ahead.take() or ""], len(header)
    while (row := ahead.peek()) is not None and row.strip() and "|" in row:
        rows.append(ahead.take() or "")
        size += len(row) + 1
        if size > max_block_chars:
            state.emit("\n".join(rows), "table")
            yield from state.take_blocks()
            rows, size = [], 0
    state.emit("\n".join(rows), "table")


def _fence_blocks(
    state: _MarkdownState, ahead: _Lookahead, opening: str, marker: str, max_block_chars: int
) -> Iterator[Block]:
    """The code block opened by ``opening``, up to its closing fence or the end."""
    closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
    held, size, has_body = [opening], len(opening), False
    while (line := ahead.take()) is not None:
        held.append(line)
        size += len(line) + 1
        if closing.match(line):
            break
        has_body = has_body or bool(line.strip())
        if size > max_block_chars:  # CommonMark: an unclosed fence runs to the end
            state.emit("\n".join(held), "code", keep_indent=True)
            yield from state.take_blocks()
            held, size = [], 0
    if has_body and held:
        state.emit("\n".join(held), "code", keep_indent=True)
    yield from state.take_blocks()


def load_text(stream: BinaryIO, *, name: str, budget: FileBudget | None = None) -> LoadedFile:
    """Load a .txt file as paragraphs separated by blank lines.

    Raises:
        ExtractionError: Empty or whitespace-only, or binary content.
        BudgetExceeded: More text than ``budget`` allows (ingest streams large files).
    """
    text = decode_bytes(stream.read(), name)
    blocks: list[Block] = []
    if budget is not None:
        budget.charge_text(len(text))  # held whole: charged before it is split
    for block in _paragraph_blocks(text):
        if budget is not None:
            budget.charge_blocks(1)
        blocks.append(block)
    if not blocks:  # only invisible characters
        raise ExtractionError(f"{name}: {_EMPTY}")
    return LoadedFile(blocks=blocks, file_type="txt")


def stream_markdown(stream: BinaryIO, *, name: str) -> Iterator[Block]:
    """Markdown blocks of a file of any size, read and decoded as they are needed.

    Raises:
        ExtractionError: Empty or whitespace-only, or binary content.
    """
    lines = (line[:-1] if line.endswith("\n") else line for line in iter_lines(stream, name))
    yielded = False
    for block in iter_markdown_blocks(lines):
        yielded = True
        yield block
    if not yielded:
        raise ExtractionError(f"{name}: {_EMPTY}")


def load_markdown(stream: BinaryIO, *, name: str, budget: FileBudget | None = None) -> LoadedFile:
    """Load a Markdown file as heading, paragraph, code and table blocks.

    Raises:
        ExtractionError: Empty or whitespace-only, or binary content.
        BudgetExceeded: More text or time than ``budget`` allows.
    """
    blocks = stream_markdown(stream, name=name)
    return LoadedFile(
        blocks=list(budget.charged(blocks) if budget is not None else blocks), file_type="md"
    )


def _cut_long(buffer: str, limit: int) -> int:
    """Where to cut a paragraph that outgrew ``limit``: the last line end, else space."""
    for separator in ("\n", " "):
        cut = buffer.rfind(separator, limit // 2, limit)
        if cut > 0:
            return cut + 1
    return limit


def iter_text_blocks(
    source: Path | BinaryIO,
    *,
    name: str | None = None,
    read_size: int = SAMPLE_BYTES,
    max_block_chars: int = 100_000,
) -> Iterator[Block]:
    """Stream a plain-text file paragraph by paragraph with bounded memory.

    The encoding is detected from the first :data:`SAMPLE_BYTES` and the rest is
    decoded incrementally (bytes that do not fit become U+FFFD rather than failing
    after half the file was yielded). A paragraph longer than ``max_block_chars``
    (a file without blank lines) is cut at a line end or space, so memory stays
    around ``read_size + max_block_chars`` whatever the file size.

    Args:
        source: A text file of any size: its path, or the opened file (read from where
            it stands; not closed here).
        name: The file's name for messages (default: from the path).
        read_size: Bytes read per step.
        max_block_chars: Longest block yielded.

    Yields:
        Normalised paragraph blocks (no page, no section).

    Raises:
        ExtractionError: Binary content, or no text at all (raised at the end).
    """
    if isinstance(source, Path):
        with source.open("rb") as opened:
            yield from iter_text_blocks(
                opened,
                name=name or display_name(source),
                read_size=read_size,
                max_block_chars=max_block_chars,
            )
        return
    handle = source
    name = name or "text"
    yielded = False

    def finish(raw: str) -> Iterator[Block]:
        nonlocal yielded
        text = normalize_text(raw)
        for paragraph in text.split("\n\n"):
            if paragraph:
                yielded = True
                yield Block(text=paragraph, kind="paragraph")

    first = handle.read(SAMPLE_BYTES)
    codec = detect_encoding(first, name, complete=len(first) < SAMPLE_BYTES)
    decoder = codecs.getincrementaldecoder(codec)(errors="replace")
    buffer = ""
    data = first
    checked = False
    while data:
        decoded = decoder.decode(data)
        if not checked and decoded.strip():
            reject_binary(decoded, name)
            checked = True
        buffer += decoded
        # A trailing "\r" may be half of a "\r\n" split between reads: keep it back.
        held = "\r" if buffer.endswith("\r") else ""
        buffer = _LINE_ENDS.sub("\n", buffer[: len(buffer) - len(held)])
        parts = _PARAGRAPH_BREAK.split(buffer)
        buffer = parts.pop()
        for part in parts:
            yield from finish(part)
        while len(buffer) > max_block_chars:
            cut = _cut_long(buffer, max_block_chars)
            yield from finish(buffer[:cut])
            buffer = buffer[cut:]
        buffer += held
        data = handle.read(read_size)
    buffer += decoder.decode(b"", final=True)
    yield from finish(_LINE_ENDS.sub("\n", buffer))
    if not yielded:
        raise ExtractionError(f"{name}: {_EMPTY}")
