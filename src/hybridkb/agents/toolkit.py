"""What the agent tools are bound to (:class:`KBToolkit`: one knowledge base, workspace
and folder set) and the argument types they share (:data:`ListText`, :data:`WhereArg`).

The tools themselves and their registry are :mod:`hybridkb.agents.toolbox`, which
re-exports these names; the binding is its own module because it is the part every
tool leans on and none defines: opening the knowledge base on first use, matching the
collection name a model meant, adding what an agent's ``documents`` argument held.
"""

from __future__ import annotations

import hashlib
import json
import threading
import unicodedata
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator

from ..errors import CollectionNotFound, ConfigError, InvalidFilter
from ..kb import Collection, KnowledgeBase
from ..limits import MAX_FILTER_CHARS, MAX_ITEMS, check_name, check_value, parse_json
from ..results import AddReport
from . import render
from .inputs import DocumentsInput, unquote

__all__ = ["KBToolkit", "ListText", "WhereArg"]


def _as_text(value: Any) -> Any:
    # Models (and MCP clients) often send a real JSON list where the schema says text.
    if isinstance(value, (list, tuple, dict)):
        try:
            check_value(value, what="value", max_nodes=MAX_ITEMS * 4)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None  # a validation error the model reads
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


ListText = Annotated[str, BeforeValidator(_as_text)]


def _as_filter(value: Any) -> Any:
    # Models send the filter as an object or as JSON text; both become an object here,
    # measured before it is parsed (limits.py), and parse_filter checks the rest.
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            return parse_json(value, what="where", max_chars=MAX_FILTER_CHARS, error=InvalidFilter)
        except InvalidFilter as exc:
            raise ValueError(str(exc)) from None
    return value


WhereArg = Annotated[dict[str, Any] | None, BeforeValidator(_as_filter)]


class KBToolkit:
    """What the tools are bound to: one knowledge base, workspace and folder set.

    Args:
        kb: A knowledge base, or a function that opens one (called on first use).
        workspace: Serve this workspace of ``kb`` (default: the knowledge base's own).
        allowed_paths: Folders the tools may read files from (default:
            ``settings.allowed_paths``, i.e. HYBRIDKB_ALLOWED_PATHS or the working directory).
        read_only: Leave out the tools that write (left out too wherever the knowledge
            base refuses writes: see :attr:`read_only`).
    """

    def __init__(
        self,
        kb: KnowledgeBase | Callable[[], KnowledgeBase],
        *,
        workspace: str | None = None,
        allowed_paths: Iterable[str | Path] | None = None,
        read_only: bool = False,
    ) -> None:
        self._source = kb
        self._kb: KnowledgeBase | None = None if callable(kb) else kb
        self._workspace = check_name(workspace, "workspace") if workspace is not None else None
        if self._kb is not None and self._workspace is not None:
            self._kb = self._kb.in_workspace(self._workspace)
        self._allowed = (
            [Path(p).expanduser().resolve() for p in allowed_paths]
            if allowed_paths is not None
            else None
        )
        self._read_only = read_only
        self._lock = threading.Lock()

    @property
    def kb(self) -> KnowledgeBase:
        """The bound knowledge base (in ``workspace``), opened on first use when a function was
        given."""
        if self._kb is None:
            with self._lock:
                if self._kb is None:
                    assert callable(self._source)
                    opened = self._source()
                    if self._workspace is not None:
                        opened = opened.in_workspace(self._workspace)
                    self._kb = opened
        return self._kb

    @property
    def read_only(self) -> bool:
        """Whether the writers are left out: asked for, or the knowledge base refuses writes
        (a database role that may only read: no tool offered that could only fail)."""
        return self._read_only or self.kb.read_only

    @property
    def allowed_paths(self) -> list[Path]:
        """The folders the tools may read: those given, else the knowledge base's settings."""
        return self._allowed if self._allowed is not None else list(self.kb.settings.allowed_paths)

    def collection(self, collection_name: str) -> Collection:
        """The collection a model meant: exact name, else the one case-insensitive match."""
        name = check_name(
            unquote(collection_name) if isinstance(collection_name, str) else collection_name
        )
        try:
            return self.kb.collection(name)
        except CollectionNotFound:
            key = _fold(name)
            matches = [n for n in self.kb.collection_names() if _fold(n) == key]
            if len(matches) == 1:
                return self.kb.collection(matches[0])
            raise

    def add_parsed(self, coll: Collection, parsed: DocumentsInput) -> AddReport:
        """Add what an agent's ``documents`` argument held: paths (read only inside the
        allowed folders), JSON records, or a note."""
        if parsed.paths:
            return coll.add(parsed.paths, allowed_paths=self.allowed_paths)
        if parsed.records:
            texts = [r["content"] for r in parsed.records]
            metas = [r["metadata"] for r in parsed.records]
            ids = None
            if any("id" in r for r in parsed.records):
                ids = [r.get("id") or _text_id(r["content"]) for r in parsed.records]
            return coll.add_texts(texts, metas, ids)
        if parsed.note is None:  # the callers add only what is not empty
            raise ConfigError("documents: empty; nothing to add")
        return coll.add_texts([parsed.note])

    def report_text(self, report: AddReport, collection: str) -> str:
        """An add's report as the model reads it, within the listing budget."""
        return render.render_add_report(
            report, collection=collection, budget_tokens=self.kb.settings.listing_token_budget
        ).text


def _fold(name: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def _text_id(text: str) -> str:
    # The same default id ingest gives a text without one.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
