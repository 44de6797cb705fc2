"""Say when a filter names a metadata field that no document of the searched collections has.

A misspelled field (``{"yeer": 2024}``) is a valid filter that matches nothing, so the
search answers "no results" and the user never learns why. Front ends (CLI, agent
tools, MCP) call :func:`filter_warnings` beside the search and show what it returns.

User metadata is per document (every chunk of a document carries its document's
metadata), so the documents' metadata keys are the fields a filter can find. The scan
reads documents a page at a time through the public facade (it works the same on a
client of another process's knowledge base) and stops as soon as every named field has
been seen, so a filter on a field that exists costs one page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..kb import KnowledgeBase
from ..text.filters import BUILTIN_FIELDS, named_fields, parse_filter

PAGE = 1000  # documents read per call
# A collection larger than this is not scanned to its end: a field not seen in the first
# documents is then not reported (no warning is better than a wrong one).
MAX_DOCUMENTS_SCANNED = 20_000
MAX_LISTED = 12  # metadata fields named in one warning


def filter_warnings(
    kb: KnowledgeBase,
    where: Mapping[str, Any] | str | None,
    collections: Iterable[str] | None = None,
) -> list[str]:
    """One line per metadata field of ``where`` that no document of ``collections`` has.

    Args:
        kb: The knowledge base searched.
        where: The filter (dict or JSON text); an invalid one raises InvalidFilter.
        collections: The collections searched (default: every one of the workspace).
    """
    wanted = named_fields(parse_filter(where)) - set(BUILTIN_FIELDS)
    if not wanted:
        return []
    names = list(collections) if collections is not None else kb.collection_names()
    seen: set[str] = set()
    for name in names:
        complete = _scan(kb, name, wanted, seen)
        if not complete or wanted <= seen:
            return []
    scope = ", ".join(repr(n) for n in names) or "the workspace (no collections)"
    known = sorted(seen)
    listed = ", ".join(known[:MAX_LISTED]) + (", ..." if len(known) > MAX_LISTED else "")
    has = f"metadata fields there: {listed}" if known else "no document there has metadata"
    return [
        f"where: no document in {scope} has the field {field!r}, so it matches nothing "
        f"({has}; built-in fields: {', '.join(BUILTIN_FIELDS)}); check the spelling"
        for field in sorted(wanted - seen)
    ]


def _scan(kb: KnowledgeBase, name: str, wanted: set[str], seen: set[str]) -> bool:
    """Add the metadata keys of ``name``'s documents to ``seen``; False if cut short."""
    coll = kb.collection(name)
    offset = 0
    while offset < MAX_DOCUMENTS_SCANNED:
        page = coll.documents(limit=PAGE, offset=offset)
        for doc in page:
            seen.update(doc.metadata)
        if len(page) < PAGE or wanted <= seen:
            return True
        offset += PAGE
    return False
