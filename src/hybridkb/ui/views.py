"""The pages that read: collections, one collection, a document, health.

Each handler is a plain function run in a worker thread (the knowledge base's calls
block), and each reads a bounded amount whatever the collection's size: documents
and chunks come a page at a time, sizes from the catalog.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..agents.render import page_label
from ..errors import InvalidFilter
from ..storage.backends import shown_db
from ..text.files import allowed_root
from ..text.filters import DOCUMENT_FIELDS
from .common import Problem, cache_folder, config_of, link, page, scalar_text
from .filtering import (
    BUILDER_ROWS,
    OPERATOR_LABELS,
    build_where,
    checked_where,
    filtered_documents,
    metadata_keys,
    rows_from,
)
from .page_image import PageUnavailable, page_count

__all__ = ["collection_page", "collections_page", "document_page", "health_page"]

DOCUMENTS_PER_PAGE = 50
CHUNKS_PER_PAGE = 40


def _int(request: Request, name: str, default: int, low: int = 0, high: int = 10**9) -> int:
    raw = request.query_params.get(name, "")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Problem(f"{name}: {raw[:40]!r} is not a whole number") from None
    if not low <= value <= high:
        raise Problem(f"{name}: {value} is out of range ({low} to {high})")
    return value


def source_state(source: dict[str, Any], allowed: list[Path]) -> str:
    """A source's state as a person reads it: what the engine says when it says one,
    else whether the folder is there and inside the allowed folders."""
    state = source.get("state")
    if isinstance(state, str) and state:
        return state
    path = Path(source["path"])
    if not os.path.lexists(path):
        return "missing"
    if allowed and allowed_root(path, allowed) is None:
        return "outside the allowed folders (sync from this page skips it)"
    return "ok"


def collections_page(request: Request) -> Response:
    """``/``: every collection with its size, model, languages, chunking and sources."""
    config = config_of(request)
    kb = config.kb
    rows = []
    for info in kb.list_collections():
        sources = kb.collection(info.name).sources()
        rows.append(
            {
                "info": info,
                "sources": [{**s, "state": source_state(s, config.allowed_paths)} for s in sources],
            }
        )
    return page(
        request,
        "collections.html",
        title="Collections",
        rows=rows,
        workspace=kb.workspace,
        store=shown_db(kb.settings.db),
        allowed=config.allowed_paths,
    )


def collection_page(request: Request) -> Response:
    """``/collection?c=NAME``: facts, sources, documents (paged, filtered), actions."""
    config = config_of(request)
    name = request.query_params.get("c", "")
    coll = config.kb.collection(name)
    info = coll.describe()
    params = dict(request.query_params)
    rows = rows_from(params)
    raw = params.get("where", "")
    offset = _int(request, "offset", 0)
    known = [*DOCUMENT_FIELDS, *metadata_keys(coll)]
    for row in rows:
        if row.field not in known:
            raise InvalidFilter(
                f"where: documents have no field {row.field!r}; fields here: {', '.join(known)}"
            )
    where = build_where(rows, raw)
    warnings = checked_where(config.kb, where, [info.name], known)
    listing = filtered_documents(coll, where, offset=offset, limit=DOCUMENTS_PER_PAGE)
    check = None
    if request.query_params.get("check"):
        check = coll.sync(dry_run=True, allowed_paths=config.allowed_paths or None)
    filter_params = {k: v for k, v in params.items() if k not in ("offset", "c", "check", "done")}
    return page(
        request,
        "collection.html",
        title=info.name,
        info=info,
        sources=[{**s, "state": source_state(s, config.allowed_paths)} for s in info.sources],
        listing=listing,
        fields=known,
        operators=OPERATOR_LABELS,
        rows=rows + [None] * max(0, BUILDER_ROWS - len(rows)),
        raw_where=raw,
        warnings=warnings,
        filter_params=filter_params,
        check=check,
        allowed=config.allowed_paths,
        scalar=scalar_text,
        default_folder=_default_folder(info.sources, config.allowed_paths),
    )


def _default_folder(sources: list[dict[str, Any]], allowed: list[Path]) -> str:
    """Where an upload goes unless the user picks: a followed folder inside the allowed
    ones (the next sync keeps it), else the first allowed folder."""
    for source in sources:
        path = Path(source["path"])
        if path.is_dir() and allowed_root(path, allowed) is not None:
            return str(path)
    return str(allowed[0]) if allowed else ""


def document_page(request: Request) -> Response:
    """``/document?c=NAME&id=DOC``: the chunks in order (a page of them), the metadata,
    and for a PDF the page image beside the page's text."""
    config = config_of(request)
    name = request.query_params.get("c", "")
    doc_id = request.query_params.get("id", "")
    coll = config.kb.collection(name)
    doc = coll.get(doc_id)
    if doc is None:
        raise Problem(
            f"{name!r} has no document {doc_id!r} (deleted, or re-added under a new id)", 404
        )
    chunks = coll.chunks(doc_id)
    wanted = request.query_params.get("chunk", "")
    is_pdf = (doc.filename or "").lower().endswith(".pdf")
    pages = sorted({c.page for c in chunks if c.page is not None})
    page_no: int | None = None
    page_total = None
    image_problem = None
    if is_pdf and pages:
        selected = next((c for c in chunks if c.chunk_id == wanted), None)
        fallback = selected.page if selected is not None and selected.page else pages[0]
        try:
            page_total = page_count(
                doc, allowed=config.allowed_paths, cache_dir=cache_folder(config)
            )
        except PageUnavailable as exc:
            image_problem = str(exc)
        last = page_total or pages[-1]
        page_no = _int(request, "page", fallback or 1, 1, max(last, 1))
        shown = _chunks_of_page(chunks, page_no)
        first = 0
    else:
        index = next((i for i, c in enumerate(chunks) if c.chunk_id == wanted), 0)
        default_first = index - index % CHUNKS_PER_PAGE
        first = _int(request, "from", default_first, 0, max(0, len(chunks)))
        shown = chunks[first : first + CHUNKS_PER_PAGE]
    record = config.kb.record(coll.name)
    return page(
        request,
        "document.html",
        title=doc.filename or doc.document_id,
        coll=coll.name,
        doc=doc,
        chunks=shown,
        total_chunks=len(chunks),
        first=first,
        per_page=CHUNKS_PER_PAGE,
        wanted=wanted,
        is_pdf=is_pdf,
        pages=pages,
        page_no=page_no,
        page_total=page_total or (pages[-1] if pages else None),
        image_problem=image_problem,
        page_label=page_label,
        scalar=scalar_text,
        node=f"doc:{record.id}:{doc.document_id}",
        image=link("/page.png", c=coll.name, id=doc_id, page=page_no)
        if page_no and not image_problem
        else None,
    )


def _chunks_of_page(chunks: list[Any], page: int) -> list[Any]:
    """The chunks that start on ``page``, else the one that runs over it (a chunk's
    ``page`` is where it starts)."""
    starting = [c for c in chunks if c.page == page]
    if starting:
        return starting
    before = [c for c in chunks if c.page is not None and c.page < page]
    return before[-1:]


def health_page(request: Request) -> Response:
    """``/health``: sizes per collection, the store's file size, doctor on demand, compact."""
    config = config_of(request)
    kb = config.kb
    infos = kb.list_collections()
    findings = None
    if request.query_params.get("check"):
        findings = kb.doctor()
    store = shown_db(kb.settings.db)
    try:
        store_bytes: int | None = os.path.getsize(kb.settings.db.removeprefix("duckdb://"))
    except (OSError, ValueError):
        store_bytes = None  # Postgres, :memory:
    return page(
        request,
        "health.html",
        title="Health",
        infos=infos,
        findings=findings,
        store=store,
        store_bytes=store_bytes,
        total_chunks=sum(i.chunks for i in infos),
        total_bytes=sum(i.bytes for i in infos),
    )
