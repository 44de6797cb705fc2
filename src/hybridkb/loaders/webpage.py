"""HTML loader: the page's main content as paragraphs, tables and headings-as-sections.

Boilerplate a reader skips is dropped: scripts and styles, navigation, page
headers and footers, sidebars, forms and hidden elements. When the page marks its
main content (``<main>``, a single ``<article>``, or role="main"), only that is read.
Headings h1-h6 build the section path the same way DOCX and Markdown headings do.

Parsing is lxml's HTML parser (libxml2), already installed with python-docx: it
recovers from broken markup, resolves no external entities and fetches nothing. A
readability library was not needed: pages that mark their main content are the
common case, and the rest keeps its body minus boilerplate. EPUB chapters are XHTML
and go through :func:`html_blocks` too.

The page is streamed, never held as a tree: libxml2 hands each tag and each run of
text to a parser target as it reads, and only the open elements, the paragraph being
built and the blocks made so far are kept. A tree cost ~40x its markup (48 MB of
``<p>a</p>`` took 1.84 GB and then failed in XPath); now each block is charged to the
text budget as it is made, and the markup itself to the XML budget as XML parts are,
because what libxml2 must hold at once (the open elements, one tag's attributes)
still grows with it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

from hybridkb.errors import ExtractionError
from hybridkb.loaders.budget import FileBudget
from hybridkb.loaders.lines import iter_decoded
from hybridkb.loaders.text import HeadingPath
from hybridkb.normalize import normalize_text
from hybridkb.results import Block, LoadedFile

__all__ = ["html_blocks", "load_html"]

_DROP = frozenset(
    {
        "script", "style", "noscript", "template", "nav", "footer", "aside",
        "form", "button", "select", "svg", "canvas", "iframe", "object", "head", "title",
    }
)  # fmt: skip
_DROP_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
_SPACES = re.compile(r"\s+")
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
# Elements that end a paragraph: their text never runs into the text around them.
_BREAKING = frozenset(
    {
        "p", "div", "section", "article", "main", "li", "ul", "ol", "dl", "dt", "dd", "pre",
        "blockquote", "figure", "figcaption", "address", "hr", "details", "summary", "body",
        "caption", "center",
    }
)  # fmt: skip
_CELLS = frozenset({"td", "th"})
_COMPACT_PIECES = 1024  # a paragraph's pieces are joined past this many (one-letter runs)

Attributes = Mapping[str, str]


class _Target(Protocol):
    """What lxml calls while it parses (its parser target interface); ``data(text)`` too
    if the target has it."""

    def start(self, tag: str, attrib: Attributes) -> None: ...
    def end(self, tag: str) -> None: ...
    def close(self) -> None: ...


def _parse(stream: BinaryIO, name: str, target: _Target, budget: FileBudget) -> None:
    """Feed the page, decoded as it is read (charset as for text files), to ``target``."""
    from lxml import etree

    stream.seek(0)
    # A str is parsed as it is: a <meta charset> or an XML declaration cannot re-decode it.
    parser = etree.HTMLParser(target=target, no_network=True)
    for text in iter_decoded(stream, name):
        parser.feed(text)
        budget.check_time()
    parser.close()


def _dropped(tag: str, attrib: Attributes) -> bool:
    if tag in _DROP or not attrib:
        return tag in _DROP
    if (attrib.get("role") or "").lower() in _DROP_ROLES:
        return True
    style = (attrib.get("style") or "").replace(" ", "").lower()
    return (
        attrib.get("hidden") is not None
        or (attrib.get("aria-hidden") or "").lower() == "true"
        or "display:none" in style
    )


class _Survey:
    """First pass: where the main content is (its text is not read: a callback less)."""

    def __init__(self) -> None:
        self.mains = self.roles = self.articles = 0
        self.body = False  # a <body> under the root
        self.depth = 0

    def start(self, tag: str, attrib: Attributes) -> None:
        self.depth += 1
        self.mains += tag == "main"
        self.roles += bool(attrib) and attrib.get("role") == "main"
        self.articles += tag == "article"
        self.body = self.body or (tag == "body" and self.depth == 2)

    def end(self, tag: str) -> None:
        self.depth -= 1

    def close(self) -> None:
        pass

    def region(self) -> Callable[[str, Attributes, int], bool]:
        """The test for the element whose content is read (as XPath //main, ...)."""
        if self.mains == 1:
            return lambda tag, attrib, depth: tag == "main"
        if self.roles == 1:
            return lambda tag, attrib, depth: bool(attrib) and attrib.get("role") == "main"
        if self.articles == 1:
            return lambda tag, attrib, depth: tag == "article"
        if self.body:
            return lambda tag, attrib, depth: tag == "body" and depth == 2
        return lambda tag, attrib, depth: depth == 1


class _TitledSurvey(_Survey):
    """The first pass of an EPUB chapter: also the first <title>'s own text."""

    def __init__(self) -> None:
        super().__init__()
        self.title: list[str] | None = None  # once found
        self.title_open = False  # its text up to its first child is being read

    def start(self, tag: str, attrib: Attributes) -> None:
        super().start(tag, attrib)
        self.title_open = tag == "title" and self.title is None
        if self.title_open:
            self.title = []

    def end(self, tag: str) -> None:
        super().end(tag)
        self.title_open = False

    def data(self, text: str) -> None:
        if self.title_open and self.title is not None:
            self.title.append(text)

    def page_title(self) -> str | None:
        return " ".join("".join(self.title or ()).split()) or None


class _Flow:
    """Text gathered into paragraphs as the page is read, each block charged as made."""

    def __init__(self, start_section: str | None, budget: FileBudget) -> None:
        self.blocks: list[Block] = []
        self.path = HeadingPath(start_section)
        self.buffer: list[str] = []
        self.budget = budget

    @property
    def section(self) -> str | None:
        return self.path.section

    def add(self, text: str, *, verbatim: bool = False) -> None:
        if text:
            self.budget.charge_text(len(text))
            # HTML shows any run of whitespace as one space; <br> and tables keep lines.
            self.buffer.append(text if verbatim else _SPACES.sub(" ", text))
            if len(self.buffer) > _COMPACT_PIECES:
                self.buffer = ["".join(self.buffer)]

    def _append(self, block: Block) -> None:
        self.budget.charge_blocks(1)
        self.blocks.append(block)

    def flush(self, kind: str = "paragraph") -> None:
        if not self.buffer:
            return
        lines = "".join(self.buffer).split("\n")
        text = normalize_text("\n".join(line.strip() for line in lines))
        self.buffer = []
        if text:
            self._append(Block(text=text, section=self.section, kind=kind))

    def heading(self, level: int, raw: str) -> None:
        self.flush()
        title = " ".join(raw.split())
        if not title:
            return
        self.path.enter(level, title)
        self._append(Block(text=title, section=self.section, kind="heading"))

    def mark(self) -> tuple[int, str]:
        """The state to return to if what follows is dropped (see :meth:`restore`)."""
        self.buffer = ["".join(self.buffer)]
        return len(self.blocks), self.buffer[0]

    def restore(self, mark: tuple[int, str]) -> None:
        del self.blocks[mark[0] :]
        self.buffer = [mark[1]]


@dataclass
class _Heading:
    """A heading's text, gathered to its end (text in any element inside counts)."""

    depth: int
    level: int
    pieces: list[str] = field(default_factory=list)

    def start(self, tag: str, depth: int) -> None:
        pass

    def end(self, depth: int) -> None:
        pass

    def data(self, text: str, budget: FileBudget) -> None:
        budget.charge_text(len(text))
        self.pieces.append(text)
        if len(self.pieces) > _COMPACT_PIECES:
            self.pieces = ["".join(self.pieces)]

    def text(self) -> str:
        return "".join(self.pieces)


@dataclass
class _Row:
    depth: int
    index: int  # rows are listed in the order they start (nested tables' rows after)
    cells: list[str] = field(default_factory=list)


@dataclass
class _Table:
    """A table's rows as "cell | cell" lines: each <td>/<th> of a <tr> is a cell, and a
    cell's text is all the text inside it (a nested table's too)."""

    depth: int
    rows: list[str | None] = field(default_factory=list)
    open_rows: list[_Row] = field(default_factory=list)
    open_cells: list[tuple[int, int, _Row]] = field(default_factory=list)  # depth, start, row
    pieces: list[str] = field(default_factory=list)  # text since the outermost open cell

    def start(self, tag: str, depth: int) -> None:
        if tag == "tr":
            self.open_rows.append(_Row(depth, len(self.rows)))
            self.rows.append(None)
        elif tag in _CELLS and self.open_rows and self.open_rows[-1].depth == depth - 1:
            self.open_cells.append((depth, len(self.pieces), self.open_rows[-1]))

    def end(self, depth: int) -> None:
        if self.open_cells and self.open_cells[-1][0] == depth:
            _, start, row = self.open_cells.pop()
            row.cells.append(" ".join("".join(self.pieces[start:]).split()))
            if not self.open_cells:
                self.pieces = []
        elif self.open_rows and self.open_rows[-1].depth == depth:
            row = self.open_rows.pop()
            if any(row.cells):
                self.rows[row.index] = " | ".join(row.cells)

    def data(self, text: str, budget: FileBudget) -> None:
        if self.open_cells:
            # Each open cell will hold this text: nested cells cost their depth.
            budget.charge_text(len(text) * len(self.open_cells))
            self.pieces.append(text)

    def text(self) -> str:
        return "\n".join(row for row in self.rows if row)


class _Walker:
    """Second pass: the main content's blocks, in reading order.

    The rules of a tree walk, applied to tags as they come: a dropped element is
    passed over to its end; a heading's or table's text is gathered to its end; a
    <header> is kept only if a heading is inside it, known at its end, so what it
    added is taken back then if not.
    """

    def __init__(
        self,
        region: Callable[[str, Attributes, int], bool],
        flow: _Flow,
        budget: FileBudget,
    ) -> None:
        self.region = region
        self.flow = flow
        self.budget = budget
        self.tags: list[str] = []  # open elements (interned: a page may nest millions)
        self.region_depth = 0  # 0 before the main content, -1 after it
        self.tail = False  # the text right after the main content, as a tree walk reads it
        self.skip_depth = 0  # a dropped element being passed over
        self.gather: _Heading | _Table | None = None
        self.headings = 0  # headings started so far, anywhere
        self.headers: list[tuple[int, int, tuple[int, str]]] = []  # depth, headings, mark

    def start(self, tag: str, attrib: Attributes) -> None:
        tag = sys.intern(tag)
        self.tags.append(tag)
        depth = len(self.tags)
        self.headings += tag in _HEADINGS
        self.tail = False
        if self.region_depth == 0 and self.region(tag, attrib, depth):
            self.region_depth = depth
        if self.region_depth <= 0 or self.skip_depth:
            return
        if self.gather is not None:
            self.gather.start(tag, depth)
            return
        flow = self.flow
        if tag == "header":
            self.headers.append((depth, self.headings, flow.mark()))
        elif _dropped(tag, attrib):
            self.skip_depth = depth
        elif tag in _HEADINGS:
            self.gather = _Heading(depth, _HEADINGS[tag])
        elif tag == "table":
            flow.flush()
            self.gather = _Table(depth)
        elif tag in _BREAKING:
            flow.flush()
        elif tag == "br":
            flow.add("\n", verbatim=True)

    def end(self, tag: str) -> None:
        depth = len(self.tags)
        tag = self.tags.pop() if self.tags else ""
        self.tail = False
        if self.region_depth <= 0:
            return
        if self.skip_depth:
            self.skip_depth = 0 if self.skip_depth == depth else self.skip_depth
        elif self.gather is not None:
            self._end_gathered(depth)
        else:
            if tag in _BREAKING:
                self.flow.flush()
            if self.headers and self.headers[-1][0] == depth:
                _, headings, mark = self.headers.pop()
                if headings == self.headings:  # no heading inside: a site banner
                    self.flow.restore(mark)
        if depth == self.region_depth:
            self.region_depth = -1
            self.tail = True

    def _end_gathered(self, depth: int) -> None:
        gather = self.gather
        assert gather is not None
        if depth != gather.depth:
            gather.end(depth)
            return
        self.gather = None
        if isinstance(gather, _Heading):
            self.flow.heading(gather.level, gather.text())
        else:
            self.flow.add(gather.text(), verbatim=True)
            self.flow.flush("table")

    def data(self, text: str) -> None:
        if self.tail or (self.region_depth > 0 and not self.skip_depth):
            if self.gather is not None:
                self.gather.data(text, self.budget)
            else:
                self.flow.add(text)

    def close(self) -> None:
        pass


def html_blocks(
    stream: BinaryIO, *, name: str, budget: FileBudget, title_section: bool = False
) -> list[Block]:
    """Blocks of a page's main content, in reading order.

    The page is read twice from its start, as it is decoded: once to find its main
    content, once for the blocks, each charged to ``budget`` as it is made.

    Args:
        stream: The page's bytes (charset detected as for text files).
        name: The file's name for messages.
        budget: What reading the page may cost.
        title_section: Give text before the first heading the page's <title> as its
            section (an EPUB chapter's title).

    Raises:
        ExtractionError: Binary content or an empty file.
        BudgetExceeded: More text, blocks or time than ``budget`` allows.
    """
    survey = _TitledSurvey() if title_section else _Survey()
    _parse(stream, name, survey, budget)
    title = survey.page_title() if isinstance(survey, _TitledSurvey) else None
    flow = _Flow(title, budget)
    _parse(stream, name, _Walker(survey.region(), flow, budget), budget)
    flow.flush()
    return flow.blocks


def load_html(stream: BinaryIO, *, name: str, budget: FileBudget) -> LoadedFile:
    """Load an .html/.htm page's main content.

    Raises:
        ExtractionError: Binary content, unparseable, or no text after boilerplate.
        BudgetExceeded: More markup, text, blocks or time than ``budget`` allows.
    """
    # Markup is charged as XML parts are: what libxml2 holds at once grows with it.
    size = stream.seek(0, 2)
    budget.charge_xml(name, size)
    blocks = html_blocks(stream, name=name, budget=budget)
    if not blocks:
        raise ExtractionError(f"{name}: no text in the page's content; nothing to add")
    return LoadedFile(blocks=blocks, file_type="html")
