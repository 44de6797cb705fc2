"""The pages of ``hybridkb ui`` as one Starlette app (:func:`create_app`).

The app calls the knowledge base it is given through its public API, as every other
door does; it is wrapped by :class:`hybridkb.ui.gate.BrowserGate` when served
(:func:`hybridkb.ui.server.serve_ui`), which checks the Host, the token and the
origin of writes before any route runs. A ``--read-only`` app has no write route.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import KBError
from .common import Problem, UIConfig, cache_folder, config_of, page, status_of
from .graph_view import graph_data, graph_page
from .page_image import page_png
from .search_view import search_page
from .views import collection_page, collections_page, document_page, health_page
from .writes import WRITE_ROUTES, take_message

__all__ = ["READ_ROUTES", "create_app"]

STATIC = Path(__file__).parent / "static"


def _threaded(view: Callable[[Request], Response]) -> Callable[[Request], Any]:
    """A page whose knowledge-base calls block, run in a worker thread, with the message
    a write left for it."""

    async def endpoint(request: Request) -> Response:
        request.state.messages = take_message(request)
        return await run_in_threadpool(view, request)

    endpoint.__name__ = view.__name__
    endpoint.__doc__ = view.__doc__
    return endpoint


def page_image(request: Request) -> Response:
    """``/page.png?c=NAME&id=DOC&page=N``: a PDF page as stored (see page_image)."""
    config = config_of(request)
    coll = config.kb.collection(request.query_params.get("c", ""))
    doc_id = request.query_params.get("id", "")
    doc = coll.get(doc_id)
    if doc is None:
        raise Problem(f"{coll.name!r} has no document {doc_id!r}", 404)
    raw = request.query_params.get("page", "1")
    if not raw.isdigit() or not 1 <= int(raw) <= 1_000_000:
        raise Problem(f"page: {raw[:20]!r} is not a page number")
    png = page_png(doc, int(raw), allowed=config.allowed_paths, cache_dir=cache_folder(config))
    return Response(png, media_type="image/png", headers={"cache-control": "private, max-age=3600"})


READ_ROUTES: dict[str, Callable[[Request], Response]] = {
    "/": collections_page,
    "/collection": collection_page,
    "/document": document_page,
    "/page.png": page_image,
    "/search": search_page,
    "/graph": graph_page,
    "/graph.json": graph_data,
    "/health": health_page,
}


async def _problem(request: Request, exc: Exception) -> Response:
    """A KBError or a refused request: one message on the page, the rest of the page
    as usual (the navigation stays)."""
    if isinstance(exc, Problem):
        status, message = exc.status, str(exc)
    elif isinstance(exc, KBError):
        status, message = status_of(exc), str(exc)
    elif isinstance(exc, HTTPException):
        status, message = exc.status_code, _HTTP_MESSAGES.get(exc.status_code, str(exc.detail))
    else:  # pragma: no cover - Starlette routes only these here
        raise exc
    if request.url.path.endswith(".json") or request.url.path == "/upload":
        return JSONResponse({"error": message}, status)
    request.state.messages = []
    return page(request, "error.html", status=status, title="Problem", message=message)


_HTTP_MESSAGES = {
    404: "No such page here. Use the links at the top of the page.",
    405: "This server does not take that request (it is read-only, or the page is old).",
}


def _cached(app: Any) -> Any:
    """The page's CSS and JS kept by the browser for a day: a page then costs one request
    (the links carry the version, so an upgrade is fetched afresh)."""

    async def serve(scope: Any, receive: Any, send: Any) -> None:
        async def sending(message: Any) -> None:
            if message.get("type") == "http.response.start":
                message["headers"] = [
                    *(message.get("headers") or []),
                    (b"cache-control", b"private, max-age=86400"),
                ]
            await send(message)

        await app(scope, receive, sending)

    return serve


def create_app(config: UIConfig) -> Starlette:
    """The pages over ``config.kb``; write routes only when not ``config.read_only``."""
    routes: list[Any] = [
        Route(path, _threaded(view), methods=["GET", "HEAD"]) for path, view in READ_ROUTES.items()
    ]
    if not config.read_only:
        routes += [Route(path, view, methods=["POST"]) for path, view in WRITE_ROUTES.items()]
    routes.append(Mount("/static", _cached(StaticFiles(directory=STATIC)), name="static"))
    app = Starlette(
        routes=routes,
        exception_handlers={
            KBError: _problem,
            Problem: _problem,
            HTTPException: _problem,
        },
    )
    app.state.config = config
    app.state.messages = OrderedDict()
    return app
