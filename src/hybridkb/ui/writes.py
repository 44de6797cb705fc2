"""The routes that change the knowledge base: create, upload, follow a folder, sync,
delete, drop, forget a source, compact.

They exist only when the server is not ``--read-only`` (``create_app`` leaves them out,
so a read-only server has no write to refuse). Each checks its CSRF value first
(:func:`form_for_write`; the gate has checked the origin), calls the same method
every other door calls, and answers with a redirect to the page that shows the
result (a message kept for one view), so reloading never repeats a write. What
destroys data asks first: a confirmation page, then the same form with
``confirm=yes``.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from ..errors import KBError
from ..normalize import printable
from .common import Problem, config_of, form_for_write, link, page, status_of
from .uploads import add_upload, allowed_folder, plain_name, receive

__all__ = ["WRITE_ROUTES", "take_message"]

MAX_MESSAGES = 64


def _messages(request: Request) -> OrderedDict[str, list[str]]:
    store: OrderedDict[str, list[str]] = request.app.state.messages
    return store


def _done(request: Request, lines: list[str], path: str, **params: Any) -> RedirectResponse:
    """A redirect to ``path`` that shows ``lines`` once (kept on the server: a link
    cannot put words on our page)."""
    store = _messages(request)
    key = secrets.token_urlsafe(8)
    store[key] = lines
    while len(store) > MAX_MESSAGES:
        store.popitem(last=False)
    return RedirectResponse(link(path, done=key, **params), status_code=303)


def take_message(request: Request) -> list[str]:
    """The lines a redirect left for this view (once), or none."""
    key = request.query_params.get("done", "")
    return _messages(request).pop(key, []) if key else []


def _text(form: Any, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _report_lines(report: Any) -> list[str]:
    lines = [f"added: {f.filename} ({f.chunks} chunks)" for f in report.added]
    lines += [f"updated: {f.filename} ({f.chunks} chunks)" for f in getattr(report, "updated", [])]
    lines += [f"unchanged: {f.filename}" for f in report.unchanged]
    lines += [f"failed: {f.error}" for f in report.failed]
    lines += [f"skipped: {f.filename}: {f.reason}" for f in report.skipped]
    return lines or ["nothing to add"]


async def create(request: Request) -> Response:
    """``POST /create``: a new collection with the settings' model and chunking."""
    form = await form_for_write(request)
    name = _text(form, "name")
    kb = config_of(request).kb
    coll = await run_in_threadpool(kb.create_collection, name)
    return _done(request, [f"created {coll.name!r}"], "/collection", c=coll.name)


async def upload(request: Request) -> Response:
    """``POST /upload?c=NAME&name=FILE&folder=DIR`` with the file as the body (the
    page's script sends one request per file, with the CSRF header); JSON answer."""
    config = config_of(request)
    if not request.scope.get("csrf_header_ok"):
        return JSONResponse({"error": "Refused: no valid form key; reload the page."}, 403)
    params = request.query_params
    try:
        name = plain_name(params.get("name", ""))
        coll = await run_in_threadpool(config.kb.collection, params.get("c", ""))
        folder = allowed_folder(params.get("folder", ""), config.allowed_paths)
        received = await receive(
            request.stream(), request.headers.get("content-length"), config.max_upload_bytes, name
        )
        placed, report = await run_in_threadpool(
            add_upload, coll, received, folder, name, config.allowed_paths
        )
    except Problem as exc:
        return JSONResponse({"error": str(exc)}, exc.status)
    except KBError as exc:
        return JSONResponse({"error": str(exc)}, status_of(exc))
    ok = bool(report.added or report.unchanged or getattr(report, "updated", None))
    lines = [f"{name} → {printable(str(placed))}" if ok else f"{name}: not kept"]
    return JSONResponse({"ok": ok, "lines": lines + _report_lines(report)}, 200 if ok else 422)


async def follow(request: Request) -> Response:
    """``POST /follow``: add a folder (inside the allowed folders) and follow it."""
    form = await form_for_write(request)
    config = config_of(request)
    raw = _text(form, "folder")
    if not raw:
        raise Problem("folder: give the path of a folder to follow")
    folder = allowed_folder(raw, config.allowed_paths, what="folders are followed")
    coll = await run_in_threadpool(config.kb.collection, _text(form, "c"))
    report = await run_in_threadpool(coll.add, [folder], allowed_paths=config.allowed_paths)
    lines = [f"following {printable(str(folder))}", *_report_lines(report)]
    return _done(request, lines, "/collection", c=coll.name)


async def sync(request: Request) -> Response:
    """``POST /sync``: bring the collection in step with its folders now."""
    form = await form_for_write(request)
    config = config_of(request)
    coll = await run_in_threadpool(config.kb.collection, _text(form, "c"))
    report = await run_in_threadpool(coll.sync, allowed_paths=config.allowed_paths or None)
    counts = ", ".join(f"{n} {what}" for what, n in report.counts().items() if n) or "no change"
    lines = [f"synced: {counts}", *(f"failed: {f.error}" for f in report.failed)]
    return _done(request, lines, "/collection", c=coll.name)


def _confirm(request: Request, form: Any, action: str, question: str, **extra: Any) -> Response:
    fields = [(k, v) for k, v in form.multi_items() if k not in ("csrf", "confirm")]
    return page(
        request, "confirm.html", title="Confirm", action=action, question=question,
        fields=fields, back=extra.get("back", "/"), items=extra.get("items", []),
    )  # fmt: skip


async def delete(request: Request) -> Response:
    """``POST /delete``: delete the checked documents, after a confirmation page."""
    form = await form_for_write(request)
    coll = await run_in_threadpool(config_of(request).kb.collection, _text(form, "c"))
    ids = [v for v in form.getlist("id") if isinstance(v, str) and v]
    if not ids:
        raise Problem("delete: no document was checked; check the documents to delete")
    if _text(form, "confirm") != "yes":
        docs = [await run_in_threadpool(coll.get, i) for i in ids]
        items = [d.filename or d.document_id if d else i for d, i in zip(docs, ids, strict=True)]
        question = f"Delete {len(ids)} document{'s' if len(ids) != 1 else ''} from {coll.name!r}?"
        return _confirm(
            request, form, "/delete", question, items=items, back=link("/collection", c=coll.name)
        )
    report = await run_in_threadpool(coll.delete, ids)
    lines = [f"deleted {len(report.deleted)} document{'s' if len(report.deleted) != 1 else ''}"]
    if report.not_found:
        lines.append(f"not found (already gone): {', '.join(report.not_found)}")
    return _done(request, lines, "/collection", c=coll.name)


async def drop(request: Request) -> Response:
    """``POST /drop``: drop the collection, once its name is typed on the confirmation page."""
    form = await form_for_write(request)
    kb = config_of(request).kb
    info = await run_in_threadpool(kb.describe, _text(form, "c"))
    if _text(form, "confirm") != "yes" or _text(form, "typed") != info.name:
        return page(
            request, "drop.html", title="Drop collection", info=info,
            wrong=bool(_text(form, "typed")),
        )  # fmt: skip
    await run_in_threadpool(kb.drop_collection, info.name)
    return _done(request, [f"dropped {info.name!r} ({info.documents} documents)"], "/")


async def remove_source(request: Request) -> Response:
    """``POST /remove-source``: stop following a folder and remove its documents."""
    form = await form_for_write(request)
    coll = await run_in_threadpool(config_of(request).kb.collection, _text(form, "c"))
    path = _text(form, "path")
    if _text(form, "confirm") != "yes":
        question = f"Stop following {path} and remove its documents from {coll.name!r}?"
        return _confirm(
            request, form, "/remove-source", question, back=link("/collection", c=coll.name)
        )
    report = await run_in_threadpool(coll.remove_source, path)
    lines = [f"no longer following {path}; removed {len(report.deleted)} documents"]
    return _done(request, lines, "/collection", c=coll.name)


async def compact(request: Request) -> Response:
    """``POST /compact``: reclaim the space deletes left in the store file."""
    await form_for_write(request)
    sizes = await run_in_threadpool(config_of(request).kb.compact)
    before, after = sizes.get("bytes_before", 0), sizes.get("bytes_after", 0)
    return _done(request, [f"compacted: {before:,} → {after:,} bytes"], "/health")


WRITE_ROUTES = {
    "/create": create,
    "/upload": upload,
    "/follow": follow,
    "/sync": sync,
    "/delete": delete,
    "/drop": drop,
    "/remove-source": remove_source,
    "/compact": compact,
}
