"""The tools an agent can call, each one function, and the one registry of them.

Every front end derives from :data:`TOOLS` (a list of :class:`~hybridkb.agents.frontend.ToolSpec`):
the LangChain tools (:mod:`hybridkb.agents.tools`), the MCP catalogue and its hints
(``scripts/gen_mcp_tools.py`` writes ``mcp_tools.json`` from them), the read-only
filter and ``TOOL_NAMES``/``WRITE_TOOLS``. A tool is a function
``tool(toolkit, **arguments) -> (text, artifact)``: its name is the tool's name and its
docstring what the model reads (the ``Args:`` become the argument descriptions); it
raises KBError for what the caller got wrong (the front end turns that into an error
observation). A new tool is one function and one spec here (or in the module of its
feature, as the graph's are), and a regenerated catalogue. What the tools are bound to
(:class:`KBToolkit`) and their shared argument types live in :mod:`hybridkb.agents.toolkit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.tools import ToolException

from ..errors import ConfigError
from ..kb import Collection
from ..results import DeleteReport
from ..sql.tool import VIEWS_DOC
from ..storage.backends import shown_db
from ..text.filters import parse_filter
from . import render
from .filter_check import filter_warnings
from .frontend import ToolSpec, check_limit
from .graph_tools import GRAPH_TOOLS
from .inputs import parse_documents, parse_ids, unquote
from .toolkit import KBToolkit, ListText, WhereArg

__all__ = [
    "KB_TOOLS",
    "SQL_TOOL",
    "TOOLS",
    "TOOL_NAMES",
    "WRITE_TOOLS",
    "KBToolkit",
    "ListText",
    "WhereArg",
]

MAX_LIMIT = 50
DESCRIBE_DOCS = 200  # documents listed by describe_kb_collection before "N more"
_FILENAME_SCAN_PAGE = 1000

Result = tuple[str, Any]


def _ids_by_filename(coll: Collection, names: Sequence[str]) -> dict[str, list[str]]:
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


# -- the tools: docstrings are what the model reads ----------------------------------------


def create_kb_collection(tk: KBToolkit, collection_name: str, documents: ListText = "") -> Result:
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
    # Parsed (and refused when malformed or outside the allowed folders) before the
    # collection is created, so a bad call leaves nothing behind.
    parsed = parse_documents(documents, allowed=tk.allowed_paths)
    coll = tk.kb.create_collection(collection_name)
    lines = [f"Created collection '{coll.name}' in workspace '{tk.kb.workspace}'."]
    artifact: dict[str, Any] = {"collection": coll.name, "created": True}
    if not parsed.empty:
        report = tk.add_parsed(coll, parsed)
        lines.append(tk.report_text(report, coll.name))
        artifact["report"] = report.to_dict()
    else:
        lines.append("Add files or notes with add_kb_documents.")
    return "\n".join(lines), artifact


def search_kb(
    tk: KBToolkit, query: str, collection_name: str = "", limit: int = 5, where: WhereArg = None
) -> Result:
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
    check_limit(limit, high=MAX_LIMIT)
    if not isinstance(query, str) or not query.strip():
        raise ConfigError("query: empty; pass the question or words to look for")
    parse_filter(where)  # a bad filter is refused before anything is searched
    name = unquote(collection_name) if isinstance(collection_name, str) else collection_name
    searched: list[str] | None
    if name:
        coll = tk.collection(name)
        hits = coll.search(query, k=limit, where=where)
        scope = f"'{coll.name}'"
        searched = [coll.name]
    else:
        if not tk.kb.collection_names():
            empty = (
                f"No collections yet in workspace '{tk.kb.workspace}'; create one with "
                "create_kb_collection and add documents first."
            )
            return empty, []
        # Collections embedded by a LangChain model (HybridKBVectorStore) cannot embed a
        # query here; search the rest rather than fail the whole question, and say so.
        records = tk.kb.list_collections()
        usable = [r.name for r in records if not r.embedding_model.startswith("langchain:")]
        hits = tk.kb.search(query, k=limit, collections=usable, where=where) if usable else []
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
        hits, query=query, budget_tokens=tk.kb.settings.search_token_budget, scope=scope
    )
    # Filter fields no document has are reported as warnings, not errors.
    warnings = filter_warnings(tk.kb, where, searched) if where else []
    text = "\n".join([*(f"Warning: {w}" for w in warnings), out.text])
    return text, [h.to_dict() for h in hits]


def kb_list(tk: KBToolkit) -> Result:
    """List the knowledge-base collections with their document counts, and where the
    knowledge base is stored.

    Use this to find which collections exist before searching, adding or deleting, or when a
    collection name was not found.
    """
    infos = tk.kb.list_collections()
    out = render.render_collections(
        infos,
        workspace=tk.kb.workspace,
        budget_tokens=tk.kb.settings.listing_token_budget,
        stored_in=shown_db(tk.kb.settings.db),
    )
    return out.text, [i.to_dict() for i in infos]


def describe_kb_collection(tk: KBToolkit, collection_name: str) -> Result:
    """Describe one collection: its size, embedding model, and its documents with their ids.

    Use this to see which files are in a collection or to find the document id needed by
    delete_kb_documents.

    Args:
        collection_name: The collection, e.g. "Tax Documents".
    """
    coll = tk.collection(collection_name)
    info = coll.describe()
    docs = coll.documents(limit=DESCRIBE_DOCS)
    out = render.render_description(info, docs, budget_tokens=tk.kb.settings.listing_token_budget)
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


def drop_kb_collection(tk: KBToolkit, collection_name: str) -> Result:
    """Delete a whole collection and every document in it. This cannot be undone.

    Use this only when the user clearly asks to remove the entire collection; to remove
    single files use delete_kb_documents.

    Args:
        collection_name: The collection to delete, e.g. "Old Notes".
    """
    coll = tk.collection(collection_name)
    info = coll.describe()
    coll.drop()
    text = (
        f"Dropped collection '{info.name}' ({info.documents} documents, {info.chunks} chunks) "
        f"from workspace '{tk.kb.workspace}'."
    )
    return text, {"dropped": info.name, "documents": info.documents, "chunks": info.chunks}


def add_kb_documents(tk: KBToolkit, collection_name: str, documents: ListText) -> Result:
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
    coll = tk.collection(collection_name)
    parsed = parse_documents(documents, allowed=tk.allowed_paths)
    if parsed.empty:
        raise ConfigError(
            "documents: empty; pass file or folder paths (e.g. '~/docs/report.pdf'), a JSON list "
            'of {"content": ..., "metadata": {...}} objects, or the text of a note'
        )
    report = tk.add_parsed(coll, parsed)
    text = tk.report_text(report, coll.name)
    if report.failed and not report.added and not report.unchanged:
        # Every document failed: an error, not a report of nothing added.
        raise ToolException(f"Error ({report.failed[0].code}): {text}")
    return text, report.to_dict()


def delete_kb_documents(tk: KBToolkit, collection_name: str, ids: ListText) -> Result:
    """Remove documents (files or notes) from a collection by document id.

    Use this when the user asks to remove a file. Ids appear in the answers of
    add_kb_documents, search_kb ("doc ...") and describe_kb_collection; a file name also
    works.

    Args:
        collection_name: The collection, e.g. "Tax Documents".
        ids: One or more document ids, comma- or newline-separated or a JSON list, e.g.
            "3f2a9c1b7d4e5f60" or ["3f2a9c1b7d4e5f60", "a1b2c3d4e5f60718"].
    """
    coll = tk.collection(collection_name)
    report = coll.delete(parse_ids(ids))
    if report.not_found:
        # Models often name the file they added rather than its id.
        by_name = _ids_by_filename(coll, report.not_found)
        if by_name:
            extra = coll.delete([i for ids_ in by_name.values() for i in ids_])
            report = DeleteReport(
                deleted=report.deleted + extra.deleted,
                not_found=[i for i in report.not_found if i not in by_name],
            )
    out = render.render_delete_report(
        report, collection=coll.name, budget_tokens=tk.kb.settings.listing_token_budget
    )
    if not report.deleted:
        raise ToolException(
            f"Error (document_not_found): {out.text} Nothing was deleted; check the ids "
            "with describe_kb_collection."
        )
    return out.text, report.to_dict()


def sync_kb_collection(tk: KBToolkit, collection_name: str = "") -> Result:
    """Bring a collection in step with the folders and files it was added from.

    Use this when the user says files changed on disk ("I edited my notes", "I deleted last
    year's draft") or before answering from files that may have changed. New files are
    added, changed ones re-read, deleted ones removed, renamed ones kept under their new
    name; a file that cannot be read keeps its previous version and is reported.

    Args:
        collection_name: The collection, e.g. "Tax Documents"; empty syncs every collection.
    """
    names = (
        [tk.collection(collection_name).name]
        if collection_name.strip()
        else tk.kb.collection_names()
    )
    budget = tk.kb.settings.listing_token_budget
    texts, reports = [], []
    for name in names:
        report = tk.kb.collection(name).sync(allowed_paths=tk.allowed_paths)
        texts.append(render.render_sync_report(report, budget_tokens=budget).text)
        reports.append(report.to_dict())
    if not names:
        texts.append(f"No collections yet in workspace '{tk.kb.workspace}'.")
    return "\n".join(texts), {"reports": reports}


def query_kb_sql(tk: KBToolkit, sql: str) -> Result:
    # The docstring is set below: it holds the views' description.
    result = tk.kb.sql(sql)
    out = render.render_table(
        result.columns,
        result.rows,
        budget_tokens=tk.kb.settings.search_token_budget,
        more_rows=result.truncated,
    )
    return out.text, result.to_dict()


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


# The registry, in the order the tools are offered. sync_kb_collection is destructive:
# it removes the documents of files that are gone from disk.
KB_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(create_kb_collection, writes=True),
    ToolSpec(search_kb),
    ToolSpec(kb_list),
    ToolSpec(describe_kb_collection),
    ToolSpec(drop_kb_collection, writes=True, destructive=True),
    ToolSpec(add_kb_documents, writes=True),
    ToolSpec(delete_kb_documents, writes=True, destructive=True),
    ToolSpec(sync_kb_collection, writes=True, destructive=True),
)
SQL_TOOL = ToolSpec(query_kb_sql, setting="enable_sql_tool")
TOOLS: tuple[ToolSpec, ...] = (*KB_TOOLS, SQL_TOOL, *GRAPH_TOOLS)

TOOL_NAMES = tuple(spec.name for spec in KB_TOOLS)  # the knowledge-base tools, in order
WRITE_TOOLS = frozenset(spec.name for spec in TOOLS if spec.writes)
