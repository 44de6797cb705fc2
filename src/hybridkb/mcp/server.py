"""``hybridkb mcp``: the knowledge-base tools over MCP (stdio, or streamable HTTP on 127.0.0.1).

The tools are the LangChain tools of :mod:`hybridkb.agents.tools` (same names, arguments,
descriptions, budgets and error text). :func:`serve` picks the server; both run a
call through :func:`hybridkb.mcp.tools.run_tool`, which renders our errors as an error
result carrying the code and the fix (an exception escaping a tool reaches the client
only as "Error executing tool X").

Why there are two MCP servers
-----------------------------
This is the one place that says why; the other ``mcp_*`` modules point here.

- **stdio: our own JSON-RPC loop** (:mod:`hybridkb.mcp.stdio`). An MCP client spawns
  ``hybridkb mcp`` and waits for the handshake (``initialize``) and ``tools/list``
  under a start timeout. The SDK's server cannot answer before the SDK (anyio,
  pydantic, starlette) and LangChain (for the tools' schemas) are imported: spawn to
  ``tools/list`` took 9.6 s when they (and then torch) loaded first, and 0.13 s median
  with our loop (10 runs, AMD EPYC, 2 cores; ``bench/mcp_start.py``). Our loop answers the handshake,
  ``ping`` and ``tools/list`` at once, from the static catalog ``mcp_tools.json``,
  while the knowledge base, the tools and the model load in a background thread; a
  ``tools/call`` waits for them. stdio MCP is one JSON message per line, small enough
  to implement and to harden ourselves (limits, hostile input: see that module).
- **HTTP and in-process clients: the official SDK's** ``MCPServer``
  (:func:`build_server`). Streamable HTTP (sessions, SSE, Host/Origin checks against
  DNS rebinding) is too much protocol to copy, and an HTTP server is started once and
  stays up, so its import time matters little; the SDK is the ``[mcp]`` extra.

What keeps the two equal: one catalog and one dispatch (:mod:`hybridkb.mcp.tools`).
``mcp_tools.json`` is what the SDK server lists (written by ``scripts/gen_mcp_tools.py``),
``tests/mcp/test_mcp.py`` checks every variant against the SDK server's live list, and
both servers run every call through ``run_tool``.

The server opens the knowledge base once and holds it (and the embedding model)
for its whole life: the derived search indexes stay warm. With DuckDB the first
process to open the file serves it to every other hybridkb process.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from .. import __version__
from ..errors import KBError
from ..kb import KnowledgeBase
from ..lifecycle import EXIT_WAIT_SECONDS, join_background, own_process, start_background
from ..opening import connect, connect_server
from ..settings import Settings, load_settings
from ..storage.backends import backend_for
from .http_server import allowed_hosts, is_loopback, read_token, serve_app
from .stdio import serve_stdio
from .tools import INSTRUCTIONS, SERVER_NAME, hints, load_tools, run_tool

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = ["INSTRUCTIONS", "build_server", "mcp_function", "serve", "tool_catalog"]


def mcp_function(lc_tool: BaseTool) -> Callable[..., Any]:
    """A plain function with the tool's signature, returning an MCP result, never raising ours."""
    from mcp_types import CallToolResult, TextContent
    from pydantic import WithJsonSchema
    from pydantic_core import PydanticUndefined

    if getattr(lc_tool, "func", None) is None:
        raise TypeError(f"{lc_tool.name}: only function tools can be served over MCP")
    schema = lc_tool.args_schema
    fields = getattr(schema, "model_fields", {})

    def call(**kwargs: Any) -> CallToolResult:
        text, is_error = run_tool(lc_tool, kwargs)
        return CallToolResult(content=[TextContent(text=text)], is_error=is_error)

    # Advertise the tool's own JSON schema per argument, but let values of any type
    # through to the LangChain schema in run_tool, so a wrong type gets our error text.
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
    name: str = SERVER_NAME,
) -> Any:
    """An ``MCPServer`` serving the tools of ``make_tools(kb, ...)`` (same names and arguments)."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    from ..agents.toolbox import TOOLS

    specs = {spec.name: spec for spec in TOOLS}
    server: Any = MCPServer(
        name, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
    )
    tools = load_tools(kb, workspace=workspace, allowed_paths=allowed_paths, read_only=read_only)
    for lc_tool in tools:
        server.add_tool(
            mcp_function(lc_tool),
            name=lc_tool.name,
            description=lc_tool.description,
            annotations=ToolAnnotations(**hints(specs[lc_tool.name])),
            structured_output=False,
        )
    return server


def tool_catalog(*, read_only: bool = False, sql_tool: bool = True) -> list[dict[str, Any]]:
    """The tools the SDK server lists for one variant, as JSON (``mcp_tools.json`` holds the
    widest: ``read_only=False, sql_tool=True``; the others are its subsets)."""
    import anyio

    with connect(":memory:", model="fake", enable_sql_tool=sql_tool) as kb:
        listed = anyio.run(build_server(kb, read_only=read_only).list_tools)
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed]


def _warm_up(base: KnowledgeBase) -> None:
    try:
        base.warm_up()  # a client of another process's knowledge base loads nothing
    except KBError as exc:
        print(f"hybridkb mcp: {exc}", file=sys.stderr)


def _serve_http(
    server: Any, *, host: str, port: int, token: str | None, allow_hosts: Iterable[str]
) -> None:
    from mcp.server.transport_security import TransportSecuritySettings

    security = None  # loopback: the SDK's own Host/Origin allow-list of loopback names
    if not is_loopback(host):
        hosts = allowed_hosts(host, allow_hosts)
        origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
        security = TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins)
    app: Any = server.streamable_http_app(transport_security=security, host=host)
    serve_app(app, host=host, port=port, token=token)  # the token gate, bounded connections


def serve(
    kb: KnowledgeBase | Settings | None = None,
    *,
    http_port: int | None = None,
    host: str = "127.0.0.1",
    workspace: str | None = None,
    read_only: bool = False,
    token_file: Path | None = None,
    allow_hosts: Iterable[str] = (),
) -> None:
    """Serve the tools until the client disconnects (stdio) or the process is stopped (HTTP).

    Args:
        kb: An open knowledge base, or Settings to open one with (default: env/.env).
        http_port: Serve streamable HTTP at ``http://{host}:{port}/mcp`` instead of stdio.
        host: HTTP bind address; 127.0.0.1 keeps it on this machine.
        workspace: Serve this workspace.
        read_only: Leave out the tools that write. A DuckDB file is still held for writing
            where this user may write it, so that the server serves the processes that
            write (opening.connect_server).
        token_file: HTTP: a file (mode 0600) holding the bearer token clients must send
            (else ``HYBRIDKB_MCP_TOKEN``; with neither, on loopback, a token is made for
            this start and the file it is in is named on stderr); required off loopback.
        allow_hosts: HTTP off loopback: more Host names clients may use (see mcp_http).

    Raises:
        ConfigError: ``host`` is not loopback and no token is set, or the token file is
            not private (checked first); the port is taken.
    """
    own_process()  # a server owns its process: a first use may judge int8 in a child
    if http_port is None:
        if kb is not None and not isinstance(kb, Settings):
            opened = kb
            serve_stdio(
                lambda: opened,
                sql_tool=opened.settings.enable_sql_tool,
                workspace=workspace,
                read_only=read_only or opened.read_only,
                close=False,
            )
        else:
            settings = kb if kb is not None else load_settings()
            serve_stdio(
                lambda: connect_server(settings, read_only=read_only),
                sql_tool=settings.enable_sql_tool,
                workspace=workspace,
                read_only=read_only,
                list_after_open=backend_for(settings.db).access_by_role,
            )
        return
    token = read_token(host, token_file)  # before anything opens: refuse in one line
    owned = kb is None or isinstance(kb, Settings)
    if kb is not None and not isinstance(kb, Settings):
        base = kb
    else:
        base = connect_server(kb if kb is not None else load_settings(), read_only=read_only)
    warming: list[threading.Thread] = []
    try:
        # Load the default model now, in the background, rather than inside the first
        # tool call: the handshake and tools/list need no model, and answer meanwhile.
        warming.append(start_background(lambda: _warm_up(base), "hybridkb-warm-up"))
        _serve_http(
            build_server(base, workspace=workspace, read_only=read_only),
            host=host, port=http_port, token=token, allow_hosts=allow_hosts,
        )  # fmt: skip
    finally:
        join_background(warming, EXIT_WAIT_SECONDS)  # a model loading in native code
        if owned:
            base.close()
