"""Cut a document's blocks into chunks for embedding (pure functions, no I/O).

Every chunk is a slice of the *document text*, the blocks' texts joined with a
blank line (:func:`document_text`), and carries its ``char_start``/``char_end`` in
it, so a hit can always be located and highlighted in the original document.

Strategies:

* ``paragraph`` (default): pack consecutive blocks of the same page and section
  into chunks of up to ``chunk_size`` characters; never mix two pages or
  sections; split a block that is too long on its own with overlap.
* ``page``: one chunk per page, split with overlap when longer than
  ``chunk_size``; documents without pages fall back to ``paragraph``.
* ``size``: ignore structure and split the whole text into overlapping windows.

Long text is cut where a reader would pause: at a paragraph end, else a sentence
end, else a line end, else between words, if one lies in the last fifth of the
window; only text without any of those is cut mid-word.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import replace

from hybridkb.errors import ConfigError
from hybridkb.results import Block, ChunkDraft

__all__ = [
    "STRATEGIES",
    "chunk_blocks",
    "contextual_text",
    "document_text",
    "is_page_number",
    "is_stub",
    "split_text",
    "title_line",
    "with_implicit_title",
]

STRATEGIES = ("paragraph", "page", "size")
SEPARATOR = "\n\n"
_BOUNDARY_WINDOW = 0.2  # look for a boundary in the last 20% of a window
# A sentence ends at . ! ? (with closing quotes/brackets) before whitespace, or at
# CJK full stops, which are not followed by spaces; NFKC turns the full-width
# ！？ into ASCII, so those count before a CJK character too.
_SENTENCE_END = re.compile(
    r"[.!?][\"'”’»)\]]*\s+|[。！？]\s*|[!?](?=[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af])"
)
_WHITESPACE = re.compile(r"\s+")


def document_text(blocks: Sequence[Block]) -> str:
    """The text chunk offsets refer to: block texts joined by a blank line."""
    return SEPARATOR.join(block.text for block in blocks)


def _check_sizes(size: int, overlap: int) -> None:
    if size < 1:
        raise ConfigError(f"chunk_size must be at least 1, got {size}")
    if not 0 <= overlap < size:
        raise ConfigError(
            f"chunk_overlap must be at least 0 and smaller than chunk_size ({size}), got {overlap}"
        )


def _cut(text: str, start: int, lo: int, hi: int) -> int:
    """Best end for a window [start, hi): a boundary in [lo, hi], else ``hi``."""
    paragraph = text.rfind("\n\n", lo - 2, hi)
    if paragraph != -1 and paragraph + 2 >= lo:
        return paragraph + 2
    best = -1
    # Matches are clipped at ``hi`` (endpos), so a whitespace run never overruns the window.
    for match in _SENTENCE_END.finditer(text, max(start, lo - 64), hi):
        if match.end() >= lo:
            best = match.end()
    if best != -1:
        return best
    line = text.rfind("\n", lo - 1, hi)
    if line != -1 and line + 1 >= lo:
        return line + 1
    for index in range(hi - 1, lo - 2, -1):
        if text[index].isspace():
            return index + 1
    return hi


def _next_start(text: str, start: int, end: int, overlap: int) -> int:
    """Start of the next window: ``overlap`` characters back, moved to a word start."""
    if overlap == 0:
        return end
    candidate = max(end - overlap, start + 1)
    if candidate > 0 and not text[candidate - 1].isspace():
        # Starting mid-word makes a fragment nobody searches for; skip to the next
        # word, as long as some overlap remains.
        match = _WHITESPACE.search(text, candidate, end)
        if match is not None and match.end() < end:
            candidate = match.end()
    return candidate


def split_text(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """Cut text into windows of at most ``size`` characters covering all of it.

    Consecutive windows overlap by at most ``overlap`` characters (and by at least
    one when ``overlap`` > 0). A window ends at the last paragraph, sentence, line
    or word boundary in its final fifth, if there is one.

    Args:
        text: The text to split.
        size: Longest window, in characters (>= 1).
        overlap: Characters shared by consecutive windows (0 <= overlap < size).

    Returns:
        ``(start, end)`` offsets into ``text``, in order; ``[]`` for empty text.

    Raises:
        ConfigError: ``size`` < 1 or ``overlap`` outside [0, size).
    """
    _check_sizes(size, overlap)
    length = len(text)
    if length <= size:
        return [(0, length)] if length else []
    spans: list[tuple[int, int]] = []
    start = end = 0
    margin = max(1, int(size * _BOUNDARY_WINDOW))
    while True:
        hi = start + size
        if hi >= length:
            spans.append((start, length))
            return spans
        # Past the previous end too, or a window could end where the last one did.
        lo = max(start + 1, hi - margin, end + 1)
        end = _cut(text, start, lo, hi)
        spans.append((start, end))
        start = _next_start(text, start, end, overlap)


def _draft(text: str, start: int, end: int, block: Block) -> ChunkDraft:
    return ChunkDraft(
        text=text[start:end], page=block.page, section=block.section, char_start=start, char_end=end
    )


def _split_range(
    text: str, start: int, end: int, block: Block, size: int, overlap: int
) -> list[ChunkDraft]:
    if end - start <= size:
        return [_draft(text, start, end, block)]
    return [
        _draft(text, start + s, start + e, block)
        for s, e in split_text(text[start:end], size, overlap)
    ]


def _offsets(blocks: Sequence[Block]) -> list[int]:
    starts, position = [], 0
    for block in blocks:
        starts.append(position)
        position += len(block.text) + len(SEPARATOR)
    return starts


def _groups(blocks: Sequence[Block], key: str) -> list[tuple[int, int]]:
    """Index ranges [i, j) of consecutive blocks sharing page (and section)."""

    def label(block: Block) -> tuple[int | None, str | None]:
        return (block.page, block.section if key == "section" else None)

    ranges: list[tuple[int, int]] = []
    first = 0
    for index in range(1, len(blocks) + 1):
        if index == len(blocks) or label(blocks[index]) != label(blocks[first]):
            ranges.append((first, index))
            first = index
    return ranges


def _by_paragraph(
    text: str, blocks: Sequence[Block], starts: list[int], size: int, overlap: int
) -> list[ChunkDraft]:
    chunks: list[ChunkDraft] = []
    for first, stop in attach_headings(_groups(blocks, "section"), blocks):
        pack_first: int | None = None  # first block of the chunk being packed
        pack_end = 0
        for index in range(first, stop):
            block_start = starts[index]
            block_end = block_start + len(blocks[index].text)
            if pack_first is not None and block_end - starts[pack_first] <= size:
                pack_end = block_end
                continue
            # Only headings (stubs) open the long block after them. A title sentence
            # stays a chunk of its own: merging SciFact's titles into the first piece
            # of their abstracts cost train nDCG@10 0.7484 -> 0.7427 (the title alone
            # is the sharpest statement of what the document is about).
            headings_only = pack_first is not None and all(
                _heading_stub(b) for b in blocks[pack_first:index]
            )
            if pack_first is not None and not (headings_only and block_end - block_start > size):
                owner = content_block(blocks, pack_first, index)
                chunks.append(_draft(text, starts[pack_first], pack_end, owner))
                pack_first = None
            if block_end - block_start > size:
                # Headings waiting for this long block open its first piece.
                split_from = block_start if pack_first is None else starts[pack_first]
                chunks.extend(
                    _split_range(text, split_from, block_end, blocks[index], size, overlap)
                )
                pack_first = None
            else:
                pack_first, pack_end = index, block_end
        if pack_first is not None:
            owner = content_block(blocks, pack_first, stop)
            chunks.append(_draft(text, starts[pack_first], pack_end, owner))
    return chunks


def _by_page(
    text: str, blocks: Sequence[Block], starts: list[int], size: int, overlap: int
) -> list[ChunkDraft]:
    chunks: list[ChunkDraft] = []
    for first, stop in _groups(blocks, "page"):
        start = starts[first]
        end = starts[stop - 1] + len(blocks[stop - 1].text)
        for chunk in _split_range(text, start, end, blocks[first], size, overlap):
            # A page may hold several sections: label each piece by where it starts.
            owner = blocks[_block_at(starts, blocks, chunk.char_start)]
            chunks.append(_draft(text, chunk.char_start, chunk.char_end, owner))
    return chunks


def _block_at(starts: list[int], blocks: Sequence[Block], position: int) -> int:
    """Index of the block holding ``position``; a separator belongs to the next block."""
    index = bisect.bisect_right(starts, position) - 1
    if position >= starts[index] + len(blocks[index].text) and index + 1 < len(blocks):
        index += 1
    return index


# A chunk shorter than this that ends no sentence is a heading or a running page number
# on its own: "15. TAX RETURNS", "CHAPTER XVIII", "73". Alone they match queries by their
# few words (the demo's first answer about depreciation was the heading "Tax notes
# 2024") while saying nothing; they are folded into the text they introduce.
STUB_CHARS = 40
_PAGE_NUMBER = re.compile(
    r"^\s*(?:page|seite|p\.?)?\s*"
    r"(?:\d{1,4}|(?=[mdclxvi])m{0,4}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3}))"
    r"(?:\s*(?:/|of|von)\s*\d{1,4})?\s*$",
    re.IGNORECASE,
)


_ENDS_SENTENCE = re.compile(r"[.!?:;。！？][\"'”’»)\]]*$")


def is_page_number(text: str) -> bool:
    """ "73", "xiv", "Page 4 of 9": what running footers leave when a page's text ends."""
    return bool(_PAGE_NUMBER.match(text))


def is_stub(text: str) -> bool:
    """Too short to stand alone: a page number, or a short line ending no sentence."""
    flat = text.strip()
    if is_page_number(flat):
        return True
    return len(flat) < STUB_CHARS and not _ENDS_SENTENCE.search(flat)


def _heading_stub(block: Block) -> bool:
    # A spreadsheet row is content however short ("id: 7; amount: 120"): it is cited by
    # its own row number, so it never joins the rows after it as a heading would.
    return block.kind != "row" and is_stub(block.text)


def attach_headings(
    groups: list[tuple[int, int]], blocks: Sequence[Block]
) -> list[tuple[int, int]]:
    """Join a group of only stub blocks (a heading whose section holds nothing else, e.g.
    a chapter title followed by its first subsection) to the group after it."""
    out: list[tuple[int, int]] = []
    pending: int | None = None
    for first, stop in groups:
        start = first if pending is None else pending
        if stop < len(blocks) and all(_heading_stub(b) for b in blocks[first:stop]):
            pending = start
            continue
        out.append((start, stop))
        pending = None
    if pending is not None:
        out.append((pending, len(blocks)))
    return out


def content_block(blocks: Sequence[Block], first: int, stop: int) -> Block:
    """The block a chunk of blocks[first:stop] is labelled by: its first one that is not a
    heading stub (a chunk that opens with "Tax notes 2024" cites the section it explains)."""
    return next((b for b in blocks[first:stop] if not _heading_stub(b)), blocks[first])


def title_line(blocks: Sequence[Block], size: int) -> str | None:
    """The document's title, if it has one by layout: a document without headings or
    pages whose first block is short and shorter than the next (a title line, as in a
    paper's "title, then abstract"). Headings are sections already; a paged document
    (PDF) is cited by page, and its first line is as often a heading as a title."""
    if len(blocks) < 2 or any(b.section or b.page is not None for b in blocks):
        return None
    title = " ".join(blocks[0].text.split())
    if (
        len(title) >= max(STUB_CHARS, size // 5)
        or len(title) >= len(blocks[1].text.strip())  # a list of short lines has no title
        or is_page_number(title)
    ):
        return None
    return title


def with_implicit_title(blocks: Sequence[Block], size: int) -> Sequence[Block]:
    """The blocks with their :func:`title_line` as the section of every one: it is what
    each chunk is about, and :func:`contextual_text` puts it before chunks that no
    longer show it."""
    title = title_line(blocks, size)
    return blocks if title is None else [replace(b, section=title) for b in blocks]


def contextual_text(section: str | None, text: str) -> str:
    """What is embedded and indexed for a chunk: its section path ("title > heading")
    before its text, unless the text already opens with it; what is shown stays the
    chunk's own text. On SciFact train the title before every later chunk of an
    abstract raised hybrid nDCG@10 from 0.7348 to 0.7443 (bench/quality.py --sweep)."""
    if not section or text.lstrip().startswith(section):
        return text
    return f"{section}{SEPARATOR}{text}"


def drop_page_numbers(chunks: list[ChunkDraft]) -> list[ChunkDraft]:
    """Leave out chunks that are only a page number (a PDF footer the packer could not
    join to its page's text), unless the document has nothing else."""
    kept = [c for c in chunks if not is_page_number(c.text)]
    return kept or chunks


def chunk_blocks(
    blocks: Sequence[Block],
    *,
    strategy: str = "paragraph",
    chunk_size: int = 1000,
    chunk_overlap: int = 150,
    implicit_title: bool = True,
) -> list[ChunkDraft]:
    """Cut a document's blocks into chunks.

    Args:
        blocks: The document's blocks, in order (as a loader returns them).
        strategy: "paragraph", "page" or "size" (see the module docstring).
        chunk_size: Longest chunk, in characters.
        chunk_overlap: Characters shared by consecutive pieces of one split text.
        implicit_title: Apply :func:`with_implicit_title` (off for the later windows of
            a streamed document, whose first line is no title).

    Returns:
        Chunks in document order. ``text`` equals
        ``document_text(blocks)[char_start:char_end]``; chunks that would be only
        whitespace are left out.

    Raises:
        ConfigError: Unknown strategy, or sizes out of range.
    """
    if strategy not in STRATEGIES:
        raise ConfigError(
            f"unknown chunk strategy {strategy!r}; use one of: {', '.join(STRATEGIES)}"
        )
    _check_sizes(chunk_size, chunk_overlap)
    if not blocks:
        return []
    if implicit_title:
        blocks = with_implicit_title(blocks, chunk_size)
    text = document_text(blocks)
    starts = _offsets(blocks)
    if strategy == "page" and all(block.page is None for block in blocks):
        strategy = "paragraph"  # nothing to group by; keep the structure we do have
    if strategy == "paragraph":
        chunks = _by_paragraph(text, blocks, starts, chunk_size, chunk_overlap)
    elif strategy == "page":
        chunks = _by_page(text, blocks, starts, chunk_size, chunk_overlap)
    else:
        chunks = [
            _draft(text, s, e, blocks[_block_at(starts, blocks, s)])
            for s, e in split_text(text, chunk_size, chunk_overlap)
        ]
    return drop_page_numbers([chunk for chunk in chunks if chunk.text.strip()])
