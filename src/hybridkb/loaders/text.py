"""Plain-text and Markdown loaders, and a bounded-memory reader for huge .txt files.

Markdown is parsed just enough to keep its structure: ATX (``## Title``) and
setext headings give each block a heading path as ``section``; fenced code stays
one block (blank lines inside a fence do not end it, and its indentation is kept);
tables stay one block. Everything else is paragraphs separated by blank lines.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from hybridkb.errors import ExtractionError
from hybridkb.loaders.encoding import SAMPLE_BYTES, decode_bytes, detect_encoding, reject_binary
from hybridkb.normalize import display_name, normalize_text
from hybridkb.types import Block, LoadedFile

__all__ = [
    "MAX_TITLE_CHARS",
    "HeadingPath",
    "iter_text_blocks",
    "load_markdown",
    "load_text",
    "markdown_blocks",
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


def text_blocks(text: str) -> list[Block]:
    """Split plain text into paragraph blocks at blank lines (no page, no section)."""
    return [Block(text=p, kind="paragraph") for p in normalize_text(text).split("\n\n") if p]


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
        return " > ".join(title for _, title in self.open) or self.before_first

    def enter(self, level: int, title: str) -> None:
        while self.open and self.open[-1][0] >= level:
            self.open.pop()
        self.open.append((level, title[:MAX_TITLE_CHARS].rstrip()))


class _MarkdownState:
    """Heading path and pending paragraph lines while scanning a Markdown file."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.headings = HeadingPath()
        self.paragraph: list[str] = []

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
            self.paragraph = []

    def heading(self, level: int, raw_title: str) -> None:
        self.flush()
        title = " ".join(normalize_text(raw_title).split())
        if not title:
            return
        self.headings.enter(level, title)
        self.blocks.append(Block(text=title, section=self.section, kind="heading"))


def _fence_end(lines: list[str], start: int, marker: str) -> int:
    """Index of the line closing the fence opened at ``start`` (len(lines) if unclosed)."""
    closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
    for index in range(start + 1, len(lines)):
        if closing.match(lines[index]):
            return index
    return len(lines)  # CommonMark: an unclosed fence runs to the end of the document


def _front_matter_end(lines: list[str]) -> int | None:
    if not lines or lines[0].strip() != "---":
        return None
    for index in range(1, min(len(lines), 500)):
        if lines[index].strip() in ("---", "..."):
            return index
    return None


def markdown_blocks(text: str) -> list[Block]:
    """Split Markdown into heading, paragraph, code and table blocks.

    Args:
        text: Decoded Markdown.

    Returns:
        Blocks in document order; ``section`` is the heading path ("A > B") of the
        headings above each block, including a heading block's own title.
    """
    lines = _LINE_ENDS.sub("\n", text).split("\n")
    state = _MarkdownState()
    index = 0
    if (end := _front_matter_end(lines)) is not None:
        # YAML front matter (title, tags) is worth indexing, but it is not a heading.
        state.emit("\n".join(lines[1:end]), "paragraph")
        index = end + 1
    while index < len(lines):
        line = lines[index]
        if fence := _FENCE.match(line):
            marker = fence.group(1)
            if marker[0] == "`" and "`" in fence.group(2):
                pass  # "```foo```" is inline code, not a fence
            else:
                state.flush()
                end = _fence_end(lines, index, marker)
                body = lines[index + 1 : end]
                if any(b.strip() for b in body):
                    state.emit("\n".join(lines[index : end + 1]), "code", keep_indent=True)
                index = end + 1
                continue
        if atx := _ATX.match(line):
            state.heading(len(atx.group(1)), atx.group(2) or "")
        elif state.paragraph and _SETEXT.match(line):
            title = " ".join(state.paragraph)
            state.paragraph = []
            state.heading(1 if line.strip()[0] == "=" else 2, title)
        elif _THEMATIC_BREAK.match(line):
            state.flush()
        elif "|" in line and index + 1 < len(lines) and _TABLE_DELIMITER.match(lines[index + 1]):
            state.flush()
            end = index + 2
            while end < len(lines) and lines[end].strip() and "|" in lines[end]:
                end += 1
            state.emit("\n".join(lines[index:end]), "table")
            index = end
            continue
        elif not line.strip():
            state.flush()
        else:
            state.paragraph.append(line)
        index += 1
    state.flush()
    return state.blocks


def load_text(stream: BinaryIO, *, name: str) -> LoadedFile:
    """Load a .txt file as paragraphs separated by blank lines.

    Raises:
        ExtractionError: Empty or whitespace-only, or binary content.
    """
    blocks = text_blocks(decode_bytes(stream.read(), name))
    if not blocks:  # only invisible characters
        raise ExtractionError(f"{name}: {_EMPTY}")
    return LoadedFile(blocks=blocks, file_type="txt")


def load_markdown(stream: BinaryIO, *, name: str) -> LoadedFile:
    """Load a Markdown file as heading, paragraph, code and table blocks.

    Raises:
        ExtractionError: Empty or whitespace-only, or binary content.
    """
    blocks = markdown_blocks(decode_bytes(stream.read(), name))
    if not blocks:
        raise ExtractionError(f"{name}: {_EMPTY}")
    return LoadedFile(blocks=blocks, file_type="md")


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
