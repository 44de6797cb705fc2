"""LangChain tools over a knowledge base: the names and arguments agents already call.

The tools themselves, and the registry every front end derives from, are in
:mod:`hybridkb.agents.toolbox`; this module binds them to a knowledge base. Module-level tools (``search_kb``, ``add_kb_documents``, ...) are bound to the
knowledge base that settings/.env name, opened on first call, not at import.
``make_tools(kb, workspace=..., allowed_paths=..., read_only=...)`` returns the same
tools bound to a given knowledge base and workspace, so one process can serve many
users. Every tool returns ``(text, artifact)``: compact cited text for the model
and the structured records for code. A :class:`KBError` becomes a
``ToolException`` (``handle_tool_error=True``), i.e. an observation that says what
to do instead; any other exception is a bug and propagates.

Example:
    >>> from hybridkb.agents.tools import make_tools           # doctest: +SKIP
    >>> tools = make_tools(hybridkb.connect("kb.duckdb"), workspace="alice")
    >>> agent = create_agent(model, tools)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from ..errors import ConfigError
from ..kb import KnowledgeBase
from ..opening import connect
from . import toolbox
from .frontend import bind_tool, offered, tool_guard, validation_message
from .toolbox import KB_TOOLS, SQL_TOOL, TOOL_NAMES, TOOLS, WRITE_TOOLS, KBToolkit

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
    "toolkit_tools",
    "validation_message",
]


def toolkit_tools(tk: KBToolkit) -> list[BaseTool]:
    """Every tool the toolkit offers (the registry's order): the writers left out if it is
    read-only, ``query_kb_sql`` when ``settings.enable_sql_tool``, the graph's too."""
    specs = offered(TOOLS, read_only=tk.read_only, settings=tk.kb.settings)
    return [bind_tool(spec, tk) for spec in specs]


def make_tools(
    kb: KnowledgeBase,
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
        read_only: Leave out the tools that write.

    Returns:
        ``create_kb_collection, search_kb, kb_list, describe_kb_collection,
        drop_kb_collection, add_kb_documents, delete_kb_documents, sync_kb_collection``
        (the five writers left out when ``read_only``), plus ``query_kb_sql`` when
        ``settings.enable_sql_tool``, plus the graph tools (``graph_relate`` writes).
    """
    return toolkit_tools(
        KBToolkit(kb, workspace=workspace, allowed_paths=allowed_paths, read_only=read_only)
    )


# -- module-level tools, bound to the settings' knowledge base on first call -------------


def _open_default() -> KnowledgeBase:
    return connect()


_DEFAULT = KBToolkit(_open_default)
_MODULE_TOOLS = {spec.name: bind_tool(spec, _DEFAULT) for spec in KB_TOOLS}

create_kb_collection: BaseTool = _MODULE_TOOLS["create_kb_collection"]
search_kb: BaseTool = _MODULE_TOOLS["search_kb"]
kb_list: BaseTool = _MODULE_TOOLS["kb_list"]
describe_kb_collection: BaseTool = _MODULE_TOOLS["describe_kb_collection"]
drop_kb_collection: BaseTool = _MODULE_TOOLS["drop_kb_collection"]
add_kb_documents: BaseTool = _MODULE_TOOLS["add_kb_documents"]
delete_kb_documents: BaseTool = _MODULE_TOOLS["delete_kb_documents"]
sync_kb_collection: BaseTool = _MODULE_TOOLS["sync_kb_collection"]


def _sql_when_enabled(sql: str) -> tuple[str, Any]:
    if not _DEFAULT.kb.settings.enable_sql_tool:
        raise ConfigError(
            "query_kb_sql is turned off; set HYBRIDKB_ENABLE_SQL_TOOL=true to allow read-only SQL"
        )
    return toolbox.query_kb_sql(_DEFAULT, sql)


# Made at import, before the settings are read: it checks the setting when called.
query_kb_sql: BaseTool = bind_tool(SQL_TOOL, _DEFAULT)
assert isinstance(query_kb_sql, StructuredTool)
query_kb_sql.func = tool_guard(_sql_when_enabled)
_MODULE_TOOLS[SQL_TOOL.name] = query_kb_sql


def get_tools() -> list[BaseTool]:
    """The module-level tools for the settings' knowledge base (opens it), with the SQL
    and graph tools as the settings offer them."""
    specs = offered(TOOLS, read_only=False, settings=_DEFAULT.kb.settings)
    return [_MODULE_TOOLS.get(s.name) or bind_tool(s, _DEFAULT) for s in specs]
