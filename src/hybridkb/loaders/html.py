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
"""

from __future__ import annotations

import re
from typing import Any, BinaryIO

from hybridkb.errors import ExtractionError
from hybridkb.loaders.encoding import decode_bytes
from hybridkb.loaders.text import HeadingPath
from hybridkb.normalize import normalize_text
from hybridkb.types import Block, LoadedFile

__all__ = ["html_blocks", "load_html", "parse_html"]

_DROP = frozenset(
    {
        "script", "style", "noscript", "template", "nav", "footer", "aside",
        "form", "button", "select", "svg", "canvas", "iframe", "object", "head", "title",
    }
)  # fmt: skip
_DROP_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
_SPACES = re.compile(r"\s+")
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
# Elements that end a paragraph: their text never runs into the text around them.
_BREAKING = frozenset(
    {
        "p", "div", "section", "article", "main", "li", "ul", "ol", "dl", "dt", "dd", "pre",
        "blockquote", "figure", "figcaption", "address", "hr", "details", "summary", "body",
        "caption", "center",
    }
)  # fmt: skip


def parse_html(data: bytes, name: str) -> Any:
    """Parse bytes as HTML (charset from the bytes, as for text files) into an lxml tree."""
    import lxml.html

    # lxml refuses a str that still declares its encoding; the bytes are decoded already.
    text = _XML_DECLARATION.sub("", decode_bytes(data, name), count=1)
    parser = lxml.html.HTMLParser(remove_comments=True, remove_pis=True, no_network=True)
    try:
        return lxml.html.document_fromstring(text, parser=parser)
    except Exception as exc:  # lxml raises ParserError "Document is empty" and others
        raise ExtractionError(f"{name}: not readable HTML ({exc}); check the file") from exc


def _dropped(element: Any) -> bool:
    tag = element.tag.lower() if isinstance(element.tag, str) else ""
    if tag == "header":  # a site banner, or an article's own title block: keep the latter
        return not element.xpath(".//h1|.//h2|.//h3|.//h4|.//h5|.//h6")
    if tag in _DROP:
        return True
    if (element.get("role") or "").lower() in _DROP_ROLES:
        return True
    style = (element.get("style") or "").replace(" ", "").lower()
    return (
        element.get("hidden") is not None
        or (element.get("aria-hidden") or "").lower() == "true"
        or "display:none" in style
    )


def _main_content(root: Any) -> Any:
    for path in ("//main", "//*[@role='main']", "//article"):
        found = root.xpath(path)
        if len(found) == 1:
            return found[0]
    body = root.find("body")
    return body if body is not None else root


def _table_text(table: Any) -> str:
    rows = []
    for row in table.iter("tr"):
        cells = [" ".join(cell.text_content().split()) for cell in row if cell.tag in ("td", "th")]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


class _Flow:
    """Text gathered into paragraphs while the tree is walked."""

    def __init__(self, start_section: str | None) -> None:
        self.blocks: list[Block] = []
        self.path = HeadingPath(start_section)
        self.buffer: list[str] = []

    @property
    def section(self) -> str | None:
        return self.path.section

    def add(self, text: str | None, *, verbatim: bool = False) -> None:
        if text:
            # HTML shows any run of whitespace as one space; <br> and tables keep lines.
            self.buffer.append(text if verbatim else _SPACES.sub(" ", text))

    def flush(self, kind: str = "paragraph") -> None:
        lines = "".join(self.buffer).split("\n")
        text = normalize_text("\n".join(line.strip() for line in lines))
        self.buffer = []
        if text:
            self.blocks.append(Block(text=text, section=self.section, kind=kind))

    def heading(self, level: int, raw: str) -> None:
        self.flush()
        title = " ".join(raw.split())
        if not title:
            return
        self.path.enter(level, title)
        self.blocks.append(Block(text=title, section=self.section, kind="heading"))


def html_blocks(root: Any, *, section: str | None = None) -> list[Block]:
    """Blocks of a parsed page's main content, in reading order.

    Args:
        root: A tree from :func:`parse_html`.
        section: Section of text that comes before the first heading (an EPUB
            chapter's title), if any.
    """
    from lxml import etree

    flow = _Flow(section)
    skipped: set[Any] = set()
    walker = etree.iterwalk(_main_content(root), events=("start", "end"))
    for event, element in walker:
        tag = element.tag.lower() if isinstance(element.tag, str) else ""
        if event == "start":
            if _dropped(element) or tag in _HEADINGS or tag == "table":
                skipped.add(element)
                walker.skip_subtree()
                if tag in _HEADINGS and not _dropped(element):
                    flow.heading(_HEADINGS[tag], element.text_content())
                elif tag == "table":
                    flow.flush()
                    flow.add(_table_text(element), verbatim=True)
                    flow.flush("table")
                continue
            if tag in _BREAKING:
                flow.flush()
            elif tag == "br":
                flow.add("\n", verbatim=True)
            flow.add(element.text)
        else:
            if element not in skipped and tag in _BREAKING:
                flow.flush()
            flow.add(element.tail)
    flow.flush()
    return flow.blocks


def load_html(stream: BinaryIO, *, name: str) -> LoadedFile:
    """Load an .html/.htm page's main content.

    Raises:
        ExtractionError: Binary content, unparseable, or no text after boilerplate.
    """
    blocks = html_blocks(parse_html(stream.read(), name))
    if not blocks:
        raise ExtractionError(f"{name}: no text in the page's content; nothing to add")
    return LoadedFile(blocks=blocks, file_type="html")
