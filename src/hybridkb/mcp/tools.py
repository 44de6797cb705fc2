"""What both MCP servers share: the advertised tools, their hints, and how a call runs.

Why there are two servers: :mod:`hybridkb.mcp.server` (the one place that says so).
Both list ``mcp_tools.json`` (or the variant :func:`advertised_tools` selects from it)
and run every ``tools/call`` through :func:`run_tool`. ``mcp_tools.json`` is what the
SDK server lists for the widest tool set (SQL tool on, not read-only), written by
``scripts/gen_mcp_tools.py``; ``tests/mcp/test_mcp.py`` checks that every variant equals
the SDK server's list.

This module imports neither LangChain nor the SDK at import time.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from ..agents.frontend import ToolSpec, validation_message
from ..agents.render import render_error
from ..errors import KBError

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

    from ..kb import KnowledgeBase

__all__ = [
    "CATALOG_PATH",
    "INSTRUCTIONS",
    "Hints",
    "SERVER_NAME",
    "advertised_tools",
    "hints",
    "load_tools",
    "run_tool",
]

SERVER_NAME = "hybridkb"
INSTRUCTIONS = (
    "A local knowledge base of the user's documents. Use search_kb to answer questions from "
    "their files and cite the numbered passages; kb_list and describe_kb_collection show what "
    "is stored; create_kb_collection, add_kb_documents and delete_kb_documents change it; "
    "sync_kb_collection follows files changed on disk."
)
CATALOG_PATH = Path(__file__).with_name("mcp_tools.json")
SQL_TOOL = "query_kb_sql"


class Hints(TypedDict):
    """A tool's MCP annotations, named as the SDK's ``ToolAnnotations`` takes them."""

    read_only_hint: bool
    destructive_hint: bool | None
    open_world_hint: bool


def hints(spec: ToolSpec) -> Hints:
    """Whether a tool writes, destroys (only said of writers) or reaches outside (never),
    as its spec in the registry (hybridkb.agents.toolbox.TOOLS) declares."""
    return {
        "read_only_hint": not spec.writes,
        "destructive_hint": spec.destructive if spec.writes else None,
        "open_world_hint": False,
    }


@functools.cache
def _catalog() -> tuple[dict[str, Any], ...]:
    data = json.loads(CATALOG_PATH.read_text(encoding="utf-8"))
    return tuple(data["tools"])


def advertised_tools(*, read_only: bool, sql_tool: bool) -> list[dict[str, Any]]:
    """The ``tools`` of a ``tools/list`` answer, as the SDK server lists them.

    Args:
        read_only: Leave out the tools that write (their ``readOnlyHint`` is false).
        sql_tool: Offer ``query_kb_sql`` (``HYBRIDKB_ENABLE_SQL_TOOL``).
    """
    return [
        t
        for t in _catalog()
        if (sql_tool or t["name"] != SQL_TOOL)
        and not (read_only and not t.get("annotations", {}).get("readOnlyHint", False))
    ]


def load_tools(
    kb: KnowledgeBase,
    *,
    workspace: str | None = None,
    allowed_paths: Iterable[str | Path] | None = None,
    read_only: bool = False,
) -> list[BaseTool]:
    """The LangChain tools behind the MCP tools (imports LangChain)."""
    from ..agents.tools import KBToolkit, toolkit_tools

    return toolkit_tools(
        KBToolkit(kb, workspace=workspace, allowed_paths=allowed_paths, read_only=read_only)
    )


def run_tool(lc_tool: BaseTool, arguments: dict[str, Any]) -> tuple[str, bool]:
    """Call a LangChain tool with MCP arguments: ``(text, is_error)``, never raising ours.

    Arguments are validated by the tool's own schema, so a wrong type or a missing
    argument gets the same ``Error (invalid_arguments): ...`` text as over LangChain;
    our errors come back as their rendered text. Any other exception is a bug and
    propagates (each server reports it its own way).
    """
    from langchain_core.tools import ToolException
    from pydantic import ValidationError

    func = getattr(lc_tool, "func", None)
    if func is None:
        raise TypeError(f"{lc_tool.name}: only function tools can be served over MCP")
    schema = lc_tool.args_schema
    fields = getattr(schema, "model_fields", {})
    try:
        if fields:
            parsed = schema.model_validate(arguments)  # type: ignore[union-attr]
            kwargs = {name: getattr(parsed, name) for name in fields}
        else:
            kwargs = {}  # extra arguments are ignored, as the LangChain tool ignores them
        out = func(**kwargs)
    except ValidationError as exc:
        return validation_message(lc_tool.name)(exc), True
    except ToolException as exc:
        return (str(exc.args[0]) if exc.args else "Error: the tool failed"), True
    except KBError as exc:  # a graph tool that does not wrap its own errors
        return render_error(exc), True
    content = out[0] if lc_tool.response_format == "content_and_artifact" else out
    return str(content), False
