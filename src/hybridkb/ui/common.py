"""What every page of ``hybridkb ui`` shares: its configuration, the templates, links,
messages and the check every write makes.

Pages are rendered on the server by Jinja2 with autoescaping on for every template,
so a name, a path or a passage from a document reaches the HTML escaped: no value
is marked safe except the highlighted passages, built by :func:`highlighted` from
escaped pieces.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import jinja2
from markupsafe import Markup, escape
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse

from ..agents.render import human_size
from ..errors import (
    AccessDenied,
    BackendError,
    CollectionNotFound,
    ConfigError,
    DocumentNotFound,
    GraphError,
    InvalidFilter,
    KBError,
)
from .gate import CSRF_FIELD, check_csrf_form

if TYPE_CHECKING:
    from .. import KnowledgeBaseAPI

__all__ = [
    "DEFAULT_MAX_UPLOAD_MB",
    "Problem",
    "cache_folder",
    "UIConfig",
    "config_of",
    "form_for_write",
    "highlighted",
    "link",
    "page",
    "status_of",
    "synced_note",
]

DEFAULT_MAX_UPLOAD_MB = 100
TEMPLATES = Path(__file__).parent / "templates"


@dataclass
class UIConfig:
    """One server's knowledge base and rules.

    Attributes:
        kb: The knowledge base every page calls (the same API as every other door).
        read_only: Serve no write at all (no write route exists).
        allowed_paths: Folders uploads, followed folders and page images may touch
            (the agent tools' ``HYBRIDKB_ALLOWED_PATHS``).
        max_upload_bytes: The most one uploaded file may hold.
        cache_dir: Where rendered PDF pages are kept (``<cache>/ui-pages``).
    """

    kb: KnowledgeBaseAPI
    read_only: bool = False
    allowed_paths: list[Path] = field(default_factory=list)
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_MB << 20
    cache_dir: Path | None = None


class Problem(Exception):
    """A request the page answers with one message and a status (bad input, refused)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


_STATUS: dict[type[KBError], int] = {
    CollectionNotFound: 404,
    DocumentNotFound: 404,
    AccessDenied: 403,
    InvalidFilter: 400,
    ConfigError: 400,
    GraphError: 400,
    BackendError: 500,
}


def status_of(exc: KBError) -> int:
    """The HTTP status a page answers an error with: 4xx for what the request got
    wrong, 500 for a failure of ours (a bare KBError, a BackendError)."""
    for kind, status in _STATUS.items():
        if isinstance(exc, kind):
            return status
    return 500 if type(exc) is KBError else 400


def cache_folder(config: UIConfig) -> Path:
    """Where the page pictures are cached: the given folder, else the settings' cache."""
    return config.cache_dir or Path(config.kb.settings.cache_dir)


def config_of(request: Request) -> UIConfig:
    """The server's configuration (set by ``create_app``)."""
    config: UIConfig = request.app.state.config
    return config


def link(path: str, **params: Any) -> str:
    """``path`` with its query (None values left out): every link the pages make."""
    kept = [(k, str(v)) for k, v in params.items() if v is not None and v != ""]
    return path + ("?" + urlencode(kept) if kept else "")


def _assets_version() -> str:
    """A digest of the page's CSS and JS: their links carry it, so a browser that keeps
    them for a day fetches them again once they change."""
    digest = hashlib.sha256()
    for path in sorted((TEMPLATES.parent / "static").iterdir()):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _when(timestamp: str | None) -> str:
    """A stored time as people read it, to the second ("2024-05-01 12:00:00")."""
    return (timestamp or "")[:19].replace("T", " ") or "-"


def synced_note(source: dict[str, Any]) -> str:
    """When a followed folder was last synced, as its row says it."""
    synced = source.get("synced_at")
    return f"last synced {_when(synced)}" if synced else "not synced yet"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["link"] = link
    env.globals["version"] = _assets_version()
    env.globals["synced"] = synced_note
    env.filters["size"] = human_size
    env.filters["when"] = _when
    return env


ENVIRONMENT = _environment()


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page: ``template`` rendered with ``context`` and what the layout needs."""
    config = config_of(request)
    body = ENVIRONMENT.get_template(template).render(
        csrf=getattr(request.state, "csrf", ""),
        csrf_field=CSRF_FIELD,
        read_only=config.read_only,
        path=request.url.path,
        messages=getattr(request.state, "messages", []),
        **context,
    )
    return HTMLResponse(body, status_code=status, headers={"cache-control": "no-store"})


async def form_for_write(request: Request) -> FormData:
    """The form of a write, once its CSRF value is checked (the header, or the form's
    ``csrf`` field); the gate has already checked its origin.

    Raises:
        Problem: No CSRF value, or a wrong one (403).
    """
    form = await request.form(max_files=0, max_fields=64, max_part_size=64 * 1024)
    field_value = form.get(CSRF_FIELD)
    ok = request.scope.get("csrf_header_ok") or check_csrf_form(
        field_value if isinstance(field_value, str) else None, request.state.csrf
    )
    if not ok:
        raise Problem(
            "Refused: this change carried no valid form key (an old or foreign page). "
            "Reload the page and try again.",
            403,
        )
    return form


def highlighted(text: str, spans: list[tuple[int, int]]) -> Markup:
    """``text`` escaped, with each ``(start, end)`` span wrapped in ``<mark>``."""
    out: list[str] = []
    at = 0
    for start, end in spans:
        out.append(str(escape(text[at:start])))
        out.append(f"<mark>{escape(text[start:end])}</mark>")
        at = end
    out.append(str(escape(text[at:])))
    return Markup("".join(out))


def scalar_text(value: Any) -> str:
    """A metadata value as a person reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list):
        import json

        return json.dumps(value, ensure_ascii=False)
    return str(value)
