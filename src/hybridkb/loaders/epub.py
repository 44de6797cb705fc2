"""EPUB loader: chapters in reading order, each chapter's headings as sections.

An EPUB is a ZIP: META-INF/container.xml names the package document (OPF), whose
spine lists the chapters (XHTML) in reading order. Each chapter goes through the
HTML loader; text before a chapter's first heading gets the chapter's <title> as
its section. Read with zipfile and lxml (a dozen lines of OPF reading did not
justify another dependency); DRM-protected books are refused with a clear message.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from typing import BinaryIO

from hybridkb.errors import ExtractionError
from hybridkb.loaders.archive import check_zip, invalid
from hybridkb.loaders.budget import FileBudget, FileLimits
from hybridkb.loaders.webpage import html_blocks
from hybridkb.results import Block

__all__ = ["load_epub"]

_CONTAINER = "META-INF/container.xml"
_OPF = "{http://www.idpf.org/2007/opf}"
_CONTAINER_NS = "{urn:oasis:names:tc:opendocument:xmlns:container}"


def _xml(archive: zipfile.ZipFile, member: str) -> object:
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, remove_comments=True)
    return etree.fromstring(archive.read(member), parser=parser)


def _spine(archive: zipfile.ZipFile) -> list[str]:
    container = _xml(archive, _CONTAINER)
    rootfile = container.find(f".//{_CONTAINER_NS}rootfile")  # type: ignore[attr-defined]
    opf_path = rootfile.get("full-path") if rootfile is not None else None
    if not opf_path:
        raise ValueError("container.xml names no package document")
    opf = _xml(archive, opf_path)
    base = posixpath.dirname(opf_path)
    manifest = {
        item.get("id"): posixpath.normpath(posixpath.join(base, item.get("href", "")))
        for item in opf.iter(f"{_OPF}item")  # type: ignore[attr-defined]
    }
    return [
        manifest[ref.get("idref")]
        for ref in opf.iter(f"{_OPF}itemref")  # type: ignore[attr-defined]
        if ref.get("idref") in manifest
    ]


def load_epub(stream: BinaryIO, *, name: str, budget: FileBudget | None = None) -> list[Block]:
    """Blocks of every chapter in spine order.

    A chapter the spine lists twice is read twice, as a reader would show it, and
    charged to ``budget`` each time (its ZIP reads are charged when the caller
    counts them, see :func:`~hybridkb.loaders.budget.counting_zip_reads`).

    Raises:
        ExtractionError: Not an EPUB, broken, DRM-protected, or no text.
        BudgetExceeded: More text or time than ``budget`` allows.
    """
    budget = budget or FileBudget(name, FileLimits())
    members = check_zip(stream, name, kind=".epub", required=_CONTAINER)
    if "META-INF/encryption.xml" in members and "META-INF/rights.xml" in members:
        raise ExtractionError(f"{name}: the e-book is DRM-protected; add a DRM-free copy")
    blocks: list[Block] = []
    try:
        with zipfile.ZipFile(stream) as archive:
            for member in _spine(archive):
                if member not in members:
                    continue  # a spine entry without its file: skip it, keep the book
                # Held as bytes (charged as the ZIP part was), streamed as HTML is.
                chapter = io.BytesIO(archive.read(member))
                blocks += html_blocks(chapter, name=name, budget=budget, title_section=True)
    except ExtractionError:
        raise
    except Exception as exc:  # broken XML, bad ZIP members, missing package document
        raise invalid(name, ".epub", f"{type(exc).__name__}: {str(exc)[:80]}") from exc
    if not blocks:
        raise ExtractionError(f"{name}: no text in any chapter; nothing to add")
    return blocks
