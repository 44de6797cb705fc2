"""``hybridkb mcp``: the knowledge-base tools over MCP (stdio, or streamable HTTP on 127.0.0.1).

The tools are the LangChain tools of :mod:`hybridkb.tools` (same names, arguments,
descriptions, budgets and error text), registered on the official SDK's
``MCPServer``. Our errors are rendered here as an error result carrying the code
and the fix, because an exception escaping a tool reaches the client only as
"Error executing tool X".

The server opens the knowledge base once and holds it (and the embedding model)
for its whole life: the derived search indexes stay warm. With DuckDB that means
the file is this process's while it runs; a CLI command in another terminal waits
``HYBRIDKB_LOCK_TIMEOUT`` seconds and then fails with a message saying the
knowledge base is in use and to send requests through the server.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

from langchain_core.tools import BaseTool, ToolException
from pydantic import ValidationError, WithJsonSchema
from pydantic_core import PydanticUndefined

from .errors import KBError
from .kb import KnowledgeBase
from .opening import connect
from .render import render_error
from .settings import Settings
from .tools import KBToolkit, toolkit_tools, validation_message

__all__ = ["build_server", "mcp_function", "serve"]

INSTRUCTIONS = (
    "A local knowledge base of the user's documents. Use search_kb to answer questions from "
    "their files and cite the numbered passages; kb_list and describe_kb_collection show what "
    "is stored; create_kb_collection, add_kb_documents and delete_kb_documents change it."
)
_DESTRUCTIVE = frozenset({"drop_kb_collection", "delete_kb_documents"})


def mcp_function(lc_tool: BaseTool) -> Callable[..., Any]:
    """A plain function with the tool's signature, returning an MCP result, never raising ours."""
    from mcp_types import CallToolResult, TextContent

    func = getattr(lc_tool, "func", None)
    if func is None:
        raise TypeError(f"{lc_tool.name}: only function tools can be served over MCP")
    schema = lc_tool.args_schema
    fields = getattr(schema, "model_fields", {})

    def call(**kwargs: Any) -> CallToolResult:
        try:
            if fields:
                parsed = schema.model_validate(kwargs)  # type: ignore[union-attr]
                kwargs = {name: getattr(parsed, name) for name in fields}
            else:
                kwargs = {}  # extra arguments are ignored, as the LangChain tool ignores them
            out = func(**kwargs)
        except ValidationError as exc:
            text = validation_message(lc_tool.name)(exc)
            return CallToolResult(content=[TextContent(text=text)], is_error=True)
        except ToolException as exc:
            text = str(exc.args[0]) if exc.args else "Error: the tool failed"
            return CallToolResult(content=[TextContent(text=text)], is_error=True)
        except KBError as exc:  # a graph tool that does not wrap its own errors
            return CallToolResult(content=[TextContent(text=render_error(exc))], is_error=True)
        content = out[0] if lc_tool.response_format == "content_and_artifact" else out
        return CallToolResult(content=[TextContent(text=str(content))])

    # Advertise the tool's own JSON schema per argument, but let values of any type
    # through to the LangChain schema above, so a wrong type gets our error text.
    properties = schema.model_json_schema().get("properties", {}) if fields else {}  # type: ignore[union-attr]
    params = []
    for name, info in fields.items():
        annotation = Annotated[Any, WithJsonSchema(properties.get(name, {}))]
        default = inspect.Parameter.empty if info.is_required() else info.default
        if default is PydanticUndefined:
            default = inspect.Parameter.empty
        params.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
            )
        )
    # What the SDK reads to build the tool's schema (inspect.signature honours it).
    call.__dict__["__signature__"] = inspect.Signature(params, return_annotation=CallToolResult)
    call.__name__ = lc_tool.name
    call.__doc__ = lc_tool.description
    return call


def build_server(
    kb: KnowledgeBase,
    *,
    workspace: str | None = None,
    allowed_paths: Iterable[str | Path] | None = None,
    read_only: bool = False,
    name: str = "hybridkb",
) -> Any:
    """An ``MCPServer`` serving the tools of ``make_tools(kb, ...)`` (same names and arguments)."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    from . import __version__

    toolkit = KBToolkit(kb, workspace=workspace, allowed_paths=allowed_paths, read_only=read_only)
    # Whatever a read-only toolkit leaves out writes (graph tools included).
    readers = {t.name for t in toolkit_tools(KBToolkit(kb, workspace=workspace, read_only=True))}
    server: Any = MCPServer(
        name, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
    )
    for lc_tool in toolkit_tools(toolkit):
        writes = lc_tool.name not in readers
        server.add_tool(
            mcp_function(lc_tool),
            name=lc_tool.name,
            description=lc_tool.description,
            annotations=ToolAnnotations(
                read_only_hint=not writes,
                destructive_hint=lc_tool.name in _DESTRUCTIVE if writes else None,
                open_world_hint=False,
            ),
            structured_output=False,
        )
    return server


def _warm_up(base: KnowledgeBase) -> None:
    try:
        base.embedder(base.settings.model)
    except KBError as exc:
        print(f"hybridkb mcp: {exc}", file=sys.stderr)


def serve(
    kb: KnowledgeBase | Settings | None = None,
    *,
    http_port: int | None = None,
    host: str = "127.0.0.1",
    workspace: str | None = None,
    read_only: bool = False,
) -> None:
    """Serve the tools until the client disconnects (stdio) or the process is stopped (HTTP).

    Args:
        kb: An open knowledge base, or Settings to open one with (default: env/.env).
        http_port: Serve streamable HTTP at ``http://{host}:{port}/mcp`` instead of stdio.
        host: HTTP bind address; 127.0.0.1 keeps it on this machine.
        workspace: Serve this workspace.
        read_only: Leave out the tools that write (and open the database read-only).
    """
    owned = not isinstance(kb, KnowledgeBase)
    base = kb if isinstance(kb, KnowledgeBase) else connect(settings=kb, read_only=read_only)
    try:
        if not base.is_client:  # a client of another process's knowledge base embeds nothing
            # Load the default model now, in the background, rather than inside the first
            # tool call: the handshake and tools/list need no model, and answer meanwhile.
            threading.Thread(
                target=_warm_up, args=(base,), name="hybridkb-warm-up", daemon=True
            ).start()
        server = build_server(base, workspace=workspace, read_only=read_only)
        if http_port is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=http_port)
    finally:
        if owned:
            base.close()
