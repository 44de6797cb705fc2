"""LangChain tools over a knowledge base: the names and arguments agents already call.

Module-level tools (``search_kb``, ``add_kb_documents``, ...) are bound to the
knowledge base that settings/.env name, opened on first call, not at import.
``make_tools(kb, workspace=..., allowed_paths=..., read_only=...)`` returns the same
tools bound to a given knowledge base and workspace, so one process can serve many
users. Every tool returns ``(text, artifact)``: compact cited text for the model
and the structured records for code. A :class:`KBError` becomes a
``ToolException`` (``handle_tool_error=True``), i.e. an observation that says what
to do instead; any other exception is a bug and propagates.

Example:
    >>> from hybridkb.tools import make_tools           # doctest: +SKIP
    >>> tools = make_tools(hybridkb.connect("kb.duckdb"), workspace="alice")
    >>> agent = create_agent(model, tools)
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import threading
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException, tool
from pydantic import BeforeValidator, ValidationError

from . import render
from .agent_input import parse_documents, parse_ids, unquote
from .api import CollectionAPI, KnowledgeBaseAPI
from .errors import CollectionNotFound, ConfigError, InvalidFilter
from .filter_check import filter_warnings
from .filters import parse_filter
from .frontend import check_limit, tool_guard
from .kb import check_name
from .limits import MAX_FILTER_CHARS, MAX_ITEMS, check_value, parse_json
from .locations import shown_db
from .opening import connect
from .sql_tool import VIEWS_DOC, run_sql
from .types import AddReport, DeleteReport

__all__ = [
    "TOOL_NAMES",
    "WRITE_TOOLS",
    "KBToolkit",
    "add_kb_documents",
    "create_kb_collection",
    "delete_kb_documents",
    "describe_kb_collection",
    "drop_kb_collection",
    "get_tools",
    "kb_list",
    "make_tools",
    "query_kb_sql",
    "search_kb",
    "sync_kb_collection",
]

TOOL_NAMES = (
    "create_kb_collection",
    "search_kb",
    "kb_list",
    "describe_kb_collection",
    "drop_kb_collection",
    "add_kb_documents",
    "delete_kb_documents",
    "sync_kb_collection",
)
WRITE_TOOLS = frozenset(
    {
        "create_kb_collection",
        "drop_kb_collection",
        "add_kb_documents",
        "delete_kb_documents",
        "sync_kb_collection",
    }
)
MAX_LIMIT = 50
DESCRIBE_DOCS = 200  # documents listed by describe_kb_collection before "N more"
_FILENAME_SCAN_PAGE = 1000

Result = tuple[str, Any]


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
    """The operations behind the tools, bound to one knowledge base, workspace and folder set.

    Args:
        kb: A knowledge base, or a function that opens one (called on first use).
        workspace: Serve this workspace of ``kb`` (default: the knowledge base's own).
        allowed_paths: Folders the tools may read files from (default:
            ``settings.allowed_paths``, i.e. HYBRIDKB_ALLOWED_PATHS or the working directory).
        read_only: Leave out the tools that write.
    """

    def __init__(
        self,
        kb: KnowledgeBaseAPI | Callable[[], KnowledgeBaseAPI],
        *,
        workspace: str | None = None,
        allowed_paths: Iterable[str | Path] | None = None,
        read_only: bool = False,
    ) -> None:
        self._source = kb
        self._kb: KnowledgeBaseAPI | None = None if callable(kb) else kb
        self._workspace = check_name(workspace, "workspace") if workspace is not None else None
        if self._kb is not None and self._workspace is not None:
            self._kb = self._kb.in_workspace(self._workspace)
        self._allowed = (
            [Path(p).expanduser().resolve() for p in allowed_paths]
            if allowed_paths is not None
            else None
        )
        self.read_only = read_only
        self._lock = threading.Lock()

    # -- binding ----------------------------------------------------------------------

    @property
    def kb(self) -> KnowledgeBaseAPI:
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
    def allowed_paths(self) -> list[Path]:
        """The folders the tools may read: those given, else the knowledge base's settings."""
        return self._allowed if self._allowed is not None else list(self.kb.settings.allowed_paths)

    def _resolve_name(self, collection_name: str) -> CollectionAPI:
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

    # -- operations (raise KBError) ---------------------------------------------------

    def create(self, collection_name: str, documents: str = "") -> Result:
        """create_kb_collection: create a collection and add ``documents`` to it if given.

        ``documents`` is parsed (and refused when malformed or outside the allowed folders)
        before the collection is created, so a bad call leaves nothing behind.
        """
        parsed = parse_documents(documents, allowed=self.allowed_paths)  # refuse bad input first
        coll = self.kb.create_collection(collection_name)
        lines = [f"Created collection '{coll.name}' in workspace '{self.kb.workspace}'."]
        artifact: dict[str, Any] = {"collection": coll.name, "created": True}
        if not parsed.empty:
            report = self._add_parsed(coll, parsed)
            lines.append(self._report_text(report, coll.name))
            artifact["report"] = report.to_dict()
        else:
            lines.append("Add files or notes with add_kb_documents.")
        return "\n".join(lines), artifact

    def search(
        self,
        query: str,
        collection_name: str = "",
        limit: int = 5,
        where: dict[str, Any] | str | None = None,
    ) -> Result:
        """search_kb: hits for ``query`` in one collection (matched by name, case-insensitively
        when unambiguous) or in all of them, rendered within the search token budget.

        Searching all skips collections embedded by a LangChain model (this process cannot
        embed a query for them) and says so. Filter fields no document has are reported as
        warnings, not errors. The artifact is the hits as dicts.
        """
        check_limit(limit, high=MAX_LIMIT)
        if not isinstance(query, str) or not query.strip():
            raise ConfigError("query: empty; pass the question or words to look for")
        parse_filter(where)  # a bad filter is refused before anything is searched
        name = unquote(collection_name) if isinstance(collection_name, str) else collection_name
        searched: list[str] | None
        if name:
            coll = self._resolve_name(name)
            hits = coll.search(query, k=limit, where=where)
            scope = f"'{coll.name}'"
            searched = [coll.name]
        else:
            names = self.kb.collection_names()
            if not names:
                empty = (
                    f"No collections yet in workspace '{self.kb.workspace}'; create one with "
                    "create_kb_collection and add documents first."
                )
                return empty, []
            # Collections embedded by a LangChain model (HybridKBVectorStore) cannot embed a
            # query here; search the rest rather than fail the whole question.
            records = self.kb.list_collections()
            usable = [r.name for r in records if not r.embedding_model.startswith("langchain:")]
            hits = self.kb.search(query, k=limit, collections=usable, where=where) if usable else []
            scope = f"all {len(usable)} collection{'s' if len(usable) != 1 else ''}"
            searched = usable
            skipped = [r.name for r in records if r.embedding_model.startswith("langchain:")]
            if skipped:
                scope += (
                    " (skipped, embedded by a LangChain model: "
                    + ", ".join(repr(n) for n in skipped)
                    + ")"
                )
        out = render.render_hits(
            hits, query=query, budget_tokens=self.kb.settings.search_token_budget, scope=scope
        )
        warnings = filter_warnings(self.kb, where, searched) if where else []
        text = "\n".join([*(f"Warning: {w}" for w in warnings), out.text])
        return text, [h.to_dict() for h in hits]

    def listing(self) -> Result:
        """kb_list: every collection of the workspace with counts, within the listing budget."""
        infos = self.kb.list_collections()
        out = render.render_collections(
            infos,
            workspace=self.kb.workspace,
            budget_tokens=self.kb.settings.listing_token_budget,
            stored_in=shown_db(self.kb.settings.db),
        )
        return out.text, [i.to_dict() for i in infos]

    def describe(self, collection_name: str) -> Result:
        """describe_kb_collection: a collection's description and its first documents (ids,
        filenames, chunk counts, metadata), so a model can name what it wants to delete."""
        coll = self._resolve_name(collection_name)
        info = coll.describe()
        docs = coll.documents(limit=DESCRIBE_DOCS)
        out = render.render_description(
            info, docs, budget_tokens=self.kb.settings.listing_token_budget
        )
        artifact = info.to_dict()
        artifact["documents_listed"] = [
            {
                "document_id": d.document_id,
                "filename": d.filename,
                "path": d.path,
                "chunks": d.chunk_count,
                "added_at": d.added_at,
                "metadata": d.metadata,
            }
            for d in docs
        ]
        return out.text, artifact

    def drop(self, collection_name: str) -> Result:
        """drop_kb_collection: drop a collection, saying how many documents and chunks went."""
        coll = self._resolve_name(collection_name)
        info = coll.describe()
        coll.drop()
        text = (
            f"Dropped collection '{info.name}' ({info.documents} documents, {info.chunks} chunks) "
            f"from workspace '{self.kb.workspace}'."
        )
        return text, {"dropped": info.name, "documents": info.documents, "chunks": info.chunks}

    def add(self, collection_name: str, documents: str) -> Result:
        """add_kb_documents: add files or folders (read only inside the allowed folders), JSON
        records or a note. Raises ToolException when every document failed, so the model sees
        an error rather than a report of nothing added."""
        coll = self._resolve_name(collection_name)
        parsed = parse_documents(documents, allowed=self.allowed_paths)
        if parsed.empty:
            raise ConfigError(
                "documents: empty; pass file or folder paths (e.g. '~/docs/report.pdf'), a JSON list "
                'of {"content": ..., "metadata": {...}} objects, or the text of a note'
            )
        report = self._add_parsed(coll, parsed)
        text = self._report_text(report, coll.name)
        if report.failed and not report.added and not report.unchanged:
            raise ToolException(f"Error ({report.failed[0].code}): {text}")
        return text, report.to_dict()

    def delete(self, collection_name: str, ids: str) -> Result:
        """delete_kb_documents: delete documents by id. Ids not found are tried as file names
        (models often name the file they added); ToolException when nothing was deleted."""
        coll = self._resolve_name(collection_name)
        wanted = parse_ids(ids)
        report = coll.delete(wanted)
        if report.not_found:
            # Models often name the file they added rather than its id.
            by_name = self._ids_by_filename(coll, report.not_found)
            if by_name:
                extra = coll.delete([i for ids_ in by_name.values() for i in ids_])
                report = DeleteReport(
                    deleted=report.deleted + extra.deleted,
                    not_found=[i for i in report.not_found if i not in by_name],
                )
        out = render.render_delete_report(
            report, collection=coll.name, budget_tokens=self.kb.settings.listing_token_budget
        )
        if not report.deleted:
            raise ToolException(
                f"Error (document_not_found): {out.text} Nothing was deleted; check the ids "
                "with describe_kb_collection."
            )
        return out.text, report.to_dict()

    def sync(self, collection_name: str = "") -> Result:
        """sync_kb_collection: sync one collection, or every one when no name is given, within
        the allowed folders."""
        names = (
            [self._resolve_name(collection_name).name]
            if collection_name.strip()
            else self.kb.collection_names()
        )
        budget = self.kb.settings.listing_token_budget
        texts, reports = [], []
        for name in names:
            report = self.kb.collection(name).sync(allowed_paths=self.allowed_paths)
            texts.append(render.render_sync_report(report, budget_tokens=budget).text)
            reports.append(report.to_dict())
        if not names:
            texts.append(f"No collections yet in workspace '{self.kb.workspace}'.")
        return "\n".join(texts), {"reports": reports}

    def sql(self, sql: str) -> Result:
        """query_kb_sql: one read-only SELECT over the workspace's views, rendered as a table."""
        result = run_sql(self.kb, sql)
        out = render.render_table(
            result.columns,
            result.rows,
            budget_tokens=self.kb.settings.search_token_budget,
            more_rows=result.truncated,
        )
        return out.text, result.to_dict()

    # -- helpers ----------------------------------------------------------------------

    def _add_parsed(self, coll: CollectionAPI, parsed: Any) -> AddReport:
        if parsed.paths:
            return coll.add(parsed.paths, allowed_paths=self.allowed_paths)
        if parsed.records:
            texts = [r["content"] for r in parsed.records]
            metas = [r["metadata"] for r in parsed.records]
            ids = None
            if any("id" in r for r in parsed.records):
                ids = [r.get("id") or _text_id(r["content"]) for r in parsed.records]
            return coll.add_texts(texts, metas, ids)
        return coll.add_texts([parsed.note])

    def _report_text(self, report: AddReport, collection: str) -> str:
        return render.render_add_report(
            report, collection=collection, budget_tokens=self.kb.settings.listing_token_budget
        ).text

    @staticmethod
    def _ids_by_filename(coll: CollectionAPI, names: Sequence[str]) -> dict[str, list[str]]:
        wanted = {n: n for n in names}
        wanted.update({Path(n).name: n for n in names if Path(n).name})
        found: dict[str, list[str]] = {}
        offset = 0
        while True:
            page = coll.documents(limit=_FILENAME_SCAN_PAGE, offset=offset)
            for d in page:
                for key in (d.filename, d.path):
                    if key and key in wanted:
                        found.setdefault(wanted[key], []).append(d.document_id)
                        break
            if len(page) < _FILENAME_SCAN_PAGE:
                return found
            offset += _FILENAME_SCAN_PAGE


def _fold(name: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def _text_id(text: str) -> str:
    # The same default id ingest gives a text without one.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# -- LangChain wrappers ------------------------------------------------------------------


def validation_message(name: str) -> Callable[[Any], str]:
    """A LangChain ``handle_validation_error`` for tool ``name``: the first few argument
    errors on one line, with what to do, instead of pydantic's multi-line report."""

    def handle(exc: Any) -> str:
        problems = []
        errors = exc.errors() if isinstance(exc, ValidationError) else []
        for err in errors[:5]:
            where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
            problems.append(f"{where}: {err.get('msg', 'invalid')}")
        detail = "; ".join(problems) or str(exc).splitlines()[0]
        return (
            f"Error (invalid_arguments): {name} got arguments it cannot use ({detail}). "
            "Check the argument names and types in the tool description and call it again."
        )

    return handle


def _finish(t: BaseTool) -> BaseTool:
    t.handle_tool_error = True
    t.handle_validation_error = validation_message(t.name)
    return t


def _build(tk: KBToolkit) -> dict[str, BaseTool]:
    """The tools, each a closure over ``tk``; docstrings are what the model reads."""

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def create_kb_collection(collection_name: str, documents: ListText = "") -> tuple[str, Any]:
        """Create a new, empty knowledge-base collection, optionally adding documents at once.

        Use this when the user wants a new place to keep documents ("make a collection Tax
        Documents"). If the collection already exists, use add_kb_documents instead.

        Args:
            collection_name: Display name, free text, e.g. "Tax Documents".
            documents: Optional. File or folder paths (one per line, comma-separated, or a JSON
                list, e.g. "~/docs/2023-return.pdf"), a JSON list of {"content": "...",
                "metadata": {...}} objects, or plain text to store as a note. Empty creates an
                empty collection.
        """
        return tk.create(collection_name, documents)

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def search_kb(
        query: str, collection_name: str = "", limit: int = 5, where: WhereArg = None
    ) -> tuple[str, Any]:
        """Search the user's documents and return numbered, cited passages.

        Use this to answer questions from the user's files or notes ("what do my tax documents
        say about depreciation?"). Quote the passages and cite them by number, file and page.
        Hybrid search: exact words and meaning both count.

        Args:
            query: The question or keywords, e.g. "depreciation of a home office".
            collection_name: Collection to search, e.g. "Tax Documents"; empty searches every
                collection (kb_list shows them).
            limit: How many passages to return, 1 to 50 (default 5).
            where: Optional filter object; only passages matching it are searched. Fields:
                filename, page, section, language, added_at ("YYYY-MM-DD HH:MM:SS" text),
                document_id, or any metadata key given when documents were added (e.g. year,
                tag). A bare value means equals; operators $eq $ne $gt $gte $lt $lte $in $nin
                go inside a field, $and/$or at the top. Examples: {"page": 3};
                {"filename": "2023-return.pdf", "page": {"$gte": 2, "$lte": 4}};
                {"added_at": {"$gte": "2024-01-01"}}; {"year": 2024};
                {"$or": [{"tag": "hr"}, {"tag": "policy"}]}.
        """
        return tk.search(query, collection_name, limit, where)

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def kb_list() -> tuple[str, Any]:
        """List the knowledge-base collections with their document counts, and where the
        knowledge base is stored.

        Use this to find which collections exist before searching, adding or deleting, or when a
        collection name was not found.
        """
        return tk.listing()

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def describe_kb_collection(collection_name: str) -> tuple[str, Any]:
        """Describe one collection: its size, embedding model, and its documents with their ids.

        Use this to see which files are in a collection or to find the document id needed by
        delete_kb_documents.

        Args:
            collection_name: The collection, e.g. "Tax Documents".
        """
        return tk.describe(collection_name)

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def drop_kb_collection(collection_name: str) -> tuple[str, Any]:
        """Delete a whole collection and every document in it. This cannot be undone.

        Use this only when the user clearly asks to remove the entire collection; to remove
        single files use delete_kb_documents.

        Args:
            collection_name: The collection to delete, e.g. "Old Notes".
        """
        return tk.drop(collection_name)

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def add_kb_documents(collection_name: str, documents: ListText) -> tuple[str, Any]:
        """Add files, folders or notes to an existing collection (PDF incl. scans, DOCX, PPTX,
        XLSX, CSV, HTML, EPUB, Markdown, text).

        Use this when the user asks to add or index documents ("add this PDF to Tax Documents").
        Re-adding an unchanged file does nothing; a changed file replaces its old version. The
        answer lists each document's id.

        Args:
            collection_name: An existing collection, e.g. "Tax Documents".
            documents: File or folder paths (one per line, comma-separated, or a JSON list, e.g.
                "~/Downloads/2023-return.pdf"), a JSON list of {"content": "...", "metadata":
                {...}} objects, or plain text to store as a note.
        """
        return tk.add(collection_name, documents)

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def delete_kb_documents(collection_name: str, ids: ListText) -> tuple[str, Any]:
        """Remove documents (files or notes) from a collection by document id.

        Use this when the user asks to remove a file. Ids appear in the answers of
        add_kb_documents, search_kb ("doc ...") and describe_kb_collection; a file name also
        works.

        Args:
            collection_name: The collection, e.g. "Tax Documents".
            ids: One or more document ids, comma- or newline-separated or a JSON list, e.g.
                "3f2a9c1b7d4e5f60" or ["3f2a9c1b7d4e5f60", "a1b2c3d4e5f60718"].
        """
        return tk.delete(collection_name, ids)

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def sync_kb_collection(collection_name: str = "") -> tuple[str, Any]:
        """Bring a collection in step with the folders and files it was added from.

        Use this when the user says files changed on disk ("I edited my notes", "I deleted last
        year's draft") or before answering from files that may have changed. New files are
        added, changed ones re-read, deleted ones removed, renamed ones kept under their new
        name; a file that cannot be read keeps its previous version and is reported.

        Args:
            collection_name: The collection, e.g. "Tax Documents"; empty syncs every collection.
        """
        return tk.sync(collection_name)

    built = [
        create_kb_collection,
        search_kb,
        kb_list,
        describe_kb_collection,
        drop_kb_collection,
        add_kb_documents,
        delete_kb_documents,
        sync_kb_collection,
    ]
    return {t.name: _finish(t) for t in built}


def _build_sql(tk: KBToolkit) -> BaseTool:
    def query_kb_sql(sql: str) -> tuple[str, Any]:
        return tk.sql(sql)

    query_kb_sql.__doc__ = f"""Run one read-only SQL SELECT over the knowledge base's catalog.

        Use this for counting and listing questions that are not text search, e.g. "how many
        PDFs did I add to Tax Documents last month?". DuckDB SQL; only SELECT/WITH over the
        views below; results are capped in rows and time.

{VIEWS_DOC}

        Args:
            sql: One SELECT statement, e.g. "SELECT count(*) FROM kb_documents WHERE
                collection = 'Tax Documents' AND filename ILIKE '%.pdf' AND added_at >=
                date_trunc('month', now()) - INTERVAL 1 MONTH AND added_at <
                date_trunc('month', now())".
        """
    t = tool(response_format="content_and_artifact", parse_docstring=True)(tool_guard(query_kb_sql))
    return _finish(t)


def _graph_tools(tk: KBToolkit) -> list[BaseTool]:
    """Tools from ``hybridkb.graph.tools.make_graph_tools(kb, ...)`` when that module exists."""
    try:
        module = importlib.import_module("hybridkb.graph.tools")
    except ModuleNotFoundError as exc:
        if exc.name in ("hybridkb.graph", "hybridkb.graph.tools"):
            return []
        raise
    factory = getattr(module, "make_graph_tools", None)
    if factory is None:
        return []
    params = inspect.signature(factory).parameters
    kwargs: dict[str, Any] = {}
    if "read_only" in params:
        kwargs["read_only"] = tk.read_only
    if "allowed_paths" in params:
        kwargs["allowed_paths"] = tk.allowed_paths
    found = [_finish(t) for t in factory(tk.kb, **kwargs)]
    return [t for t in found if t.name not in TOOL_NAMES]


def toolkit_tools(tk: KBToolkit) -> list[BaseTool]:
    """All tools for a toolkit: the eight (minus writers if read-only), SQL and graph if enabled."""
    built = _build(tk)
    tools = [t for name, t in built.items() if not (tk.read_only and name in WRITE_TOOLS)]
    if tk.kb.settings.enable_sql_tool:
        tools.append(_build_sql(tk))
    tools.extend(_graph_tools(tk))
    return tools


def make_tools(
    kb: KnowledgeBaseAPI,
    *,
    workspace: str | None = None,
    allowed_paths: Iterable[str | Path] | None = None,
    read_only: bool = False,
) -> list[BaseTool]:
    """The knowledge-base tools bound to ``kb`` (and ``workspace``), for one user's agent.

    Args:
        kb: An open knowledge base (``hybridkb.connect(...)``).
        workspace: The workspace these tools see and change (default: ``kb.workspace``);
            tools for workspace A can neither see nor change workspace B.
        allowed_paths: Folders the tools may read files from (default
            ``kb.settings.allowed_paths``: HYBRIDKB_ALLOWED_PATHS or the working directory).
        read_only: Leave out create/add/delete/drop.

    Returns:
        ``create_kb_collection, search_kb, kb_list, describe_kb_collection,
        drop_kb_collection, add_kb_documents, delete_kb_documents, sync_kb_collection``
        (the five writers left out when ``read_only``), plus ``query_kb_sql`` when ``settings.enable_sql_tool``,
        plus graph tools when ``hybridkb.graph.tools`` provides them.
    """
    return toolkit_tools(
        KBToolkit(kb, workspace=workspace, allowed_paths=allowed_paths, read_only=read_only)
    )


# -- module-level tools, bound to the settings' knowledge base on first call -------------


def _open_default() -> KnowledgeBaseAPI:
    return connect()


_DEFAULT = KBToolkit(_open_default)
_DEFAULT_TOOLS = _build(_DEFAULT)

create_kb_collection: BaseTool = _DEFAULT_TOOLS["create_kb_collection"]
search_kb: BaseTool = _DEFAULT_TOOLS["search_kb"]
kb_list: BaseTool = _DEFAULT_TOOLS["kb_list"]
describe_kb_collection: BaseTool = _DEFAULT_TOOLS["describe_kb_collection"]
drop_kb_collection: BaseTool = _DEFAULT_TOOLS["drop_kb_collection"]
add_kb_documents: BaseTool = _DEFAULT_TOOLS["add_kb_documents"]
delete_kb_documents: BaseTool = _DEFAULT_TOOLS["delete_kb_documents"]
sync_kb_collection: BaseTool = _DEFAULT_TOOLS["sync_kb_collection"]


def _sql_when_enabled(sql: str) -> tuple[str, Any]:
    if not _DEFAULT.kb.settings.enable_sql_tool:
        raise ConfigError(
            "query_kb_sql is turned off; set HYBRIDKB_ENABLE_SQL_TOOL=true to allow read-only SQL"
        )
    return _DEFAULT.sql(sql)


query_kb_sql: BaseTool = _build_sql(_DEFAULT)
assert isinstance(query_kb_sql, StructuredTool)
query_kb_sql.func = tool_guard(_sql_when_enabled)


def get_tools() -> list[BaseTool]:
    """The module-level tools for the settings' knowledge base (opens it)."""
    tools: list[BaseTool] = list(_DEFAULT_TOOLS.values())
    if _DEFAULT.kb.settings.enable_sql_tool:
        tools.append(query_kb_sql)
    tools.extend(_graph_tools(_DEFAULT))
    return tools
