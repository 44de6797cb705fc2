"""``hybridkb mcp`` on stdio: a small MCP server of our own, answering before anything loads.

Why this exists beside the SDK's server: :mod:`hybridkb.mcp.server` (the one place
that says so). MCP over stdio is JSON-RPC 2.0, one message per line. The handshake (``initialize``),
``ping`` and ``tools/list`` need neither LangChain, the MCP SDK nor the model, so
they are answered here at once: ``tools/list`` from the static description in
``mcp_tools.json`` (see :mod:`hybridkb.mcp.tools`). The knowledge base and the
LangChain tools load in a background thread started at spawn, then the default
model; a ``tools/call`` waits for the tools, then runs in a worker thread through
:func:`hybridkb.mcp.tools.run_tool`, the function the SDK server (HTTP) runs too, so
a ping or a second call is answered while a long add runs.

The input is hostile (an agent follows text in documents): a line is read up to
:data:`MAX_MESSAGE_BYTES`, its nesting is measured by a linear scan before it is
parsed (:mod:`hybridkb.mcp.jsonrpc` reads and writes the messages), and a bad message
gets a JSON-RPC error, never a traceback, and never stops the server; the calls in
progress are counted and cancelled in :mod:`hybridkb.mcp.calls`. Only protocol messages reach stdout: the real stdout is kept for
them and file descriptor 1 is pointed at stderr, so whatever a library prints
lands there.

Implemented: ``initialize`` (protocol revisions 2024-11-05 to 2025-11-25),
``ping``, ``tools/list`` (one page), ``tools/call``, empty ``resources/list``,
``resources/templates/list`` and ``prompts/list`` (hosts ask regardless of
capabilities), and the notifications ``initialized`` and ``cancelled`` (a
cancelled call is not started, or its answer is dropped; a running call is never
interrupted, so a write is never cut in half). The SDK client's ``server/discover``
probe gets "method not found" and falls back to ``initialize``, as it does with
any server of the handshake era.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .. import __version__
from ..agents.render import render_error
from ..errors import KBError
from ..lifecycle import EXIT_WAIT_SECONDS, Handoff, join_background, start_background
from ..limits import MAX_DOCUMENTS_CHARS
from .calls import PendingCalls
from .jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    Notification,
    Refusal,
    Request,
    RequestId,
    encode_line,
    leading_id,
    read_line,
    request_key,
)
from .tools import INSTRUCTIONS, SERVER_NAME, advertised_tools, load_tools, run_tool

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

    from ..kb import KnowledgeBase

__all__ = ["MAX_MESSAGE_BYTES", "PROTOCOL_VERSIONS", "StdioServer", "serve_stdio"]

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
# The largest documents argument the tools take (8M characters) fits, even as \uXXXX escapes.
MAX_MESSAGE_BYTES = 8 * MAX_DOCUMENTS_CHARS
MAX_PENDING_CALLS = 32  # running or waiting; more are refused until some answer
CALL_WORKERS = 8
# query_kb_sql calls that may hold call threads at once (a workspace's worker runs one
# query at a time anyway): 16 slow queries must not leave a search waiting for a thread.
MAX_SQL_CALLS = 2
# How long the main thread waits for the next request before it looks again. The kernel
# hands a stop signal (SIGTERM, SIGHUP) to any thread that does not block it; Python then
# only flags it for the main thread, which runs the handler when it next runs Python code.
# A main thread blocked in a read without end would never see a signal a worker thread
# took (an MCP host's SIGTERM was lost that way), so it waits in steps of this long.
SIGNAL_CHECK_SECONDS = 0.25
# Lines read ahead of the one being handled: the reader stops there (a client that floods
# the server is held back by its pipe, not buffered here).
READ_AHEAD_LINES = 8
SQL_TOOL = "query_kb_sql"

_EMPTY_LISTS = {
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
    "prompts/list": "prompts",
}


class StdioServer:
    """One stdio session: reads requests from ``reader``, writes answers to ``out_fd``.

    Args:
        open_kb: Opens the knowledge base (in the background; again by a call if it failed).
        sql_tool: Whether ``query_kb_sql`` is offered (``settings.enable_sql_tool``).
        workspace: Serve this workspace.
        allowed_paths: Folders the tools may read (default: the settings').
        read_only: Leave out the tools that write (left out too once the knowledge base
            opens refusing writes: a database role that may only read).
        list_after_open: Answer ``tools/list`` once the knowledge base has opened (the
            store's backend decides writing by role: ``Backend.access_by_role``).
        close: Close the knowledge base when the session ends.
        reader: Binary stream of requests, one a line.
        out_fd: File descriptor the answers are written to.
    """

    def __init__(
        self,
        open_kb: Callable[[], KnowledgeBase],
        *,
        sql_tool: bool,
        workspace: str | None = None,
        allowed_paths: Iterable[str | Path] | None = None,
        read_only: bool = False,
        list_after_open: bool = False,
        close: bool = True,
        reader: IO[bytes],
        out_fd: int,
    ) -> None:
        self._open_kb = open_kb
        self._workspace = workspace
        self._allowed_paths = allowed_paths
        self._read_only = read_only
        self._sql_tool = sql_tool
        self._list_after_open = list_after_open
        self._close = close
        self._reader = reader
        self._out_fd = out_fd
        self._listed = advertised_tools(read_only=read_only, sql_tool=sql_tool)
        self._names = [t["name"] for t in self._listed]
        self._write_lock = threading.Lock()
        self._out_closed = False
        self._calls = PendingCalls(max_calls=MAX_PENDING_CALLS, max_sql_calls=MAX_SQL_CALLS)
        self._pool = ThreadPoolExecutor(CALL_WORKERS, thread_name_prefix="hybridkb-mcp-call")
        self._load_lock = threading.Lock()
        self._opened = threading.Event()  # the open was tried (the knowledge base may be None)
        self._ready = threading.Event()  # the tools were built, or building them failed
        self._stopping = threading.Event()
        self._loader: threading.Thread | None = None
        self._kb: KnowledgeBase | None = None
        self._tools: dict[str, BaseTool] | None = None
        self._load_error = "Error (internal): the tools did not load"

    # -- the session --------------------------------------------------------------------

    def run(self) -> None:
        """Serve until the client closes stdin; calls in progress finish and are answered."""
        self._loader = start_background(self._load_in_background, "hybridkb-mcp-load")
        requests: Handoff[tuple[bytes, bool] | None] = Handoff(READ_AHEAD_LINES)
        # A plain daemon thread: at exit nothing waits for a read the client never ends.
        reader = threading.Thread(
            target=self._read_requests, args=(requests,), name="hybridkb-mcp-read", daemon=True
        )
        reader.start()
        try:
            while (request := _next(requests)) is not None:
                line, too_long = request
                if too_long:
                    self._error(
                        self._leading_id(line),
                        INVALID_REQUEST,
                        "Invalid Request",
                        f"message longer than {MAX_MESSAGE_BYTES:,} bytes; send less",
                    )
                    continue
                try:
                    self._handle_line(line)
                except Exception:  # noqa: BLE001 - a bug: logged, answered, the server lives
                    traceback.print_exc(file=sys.stderr)
                    self._error(self._leading_id(line), INTERNAL_ERROR, "Internal error")
        finally:
            requests.abandon()
            self._shut_down()

    def _read_requests(self, requests: Handoff[tuple[bytes, bool] | None]) -> None:
        """The reader thread: each line of input with False, or the first bytes of a line
        over the limit with True (the rest of it is skipped); None at the end of input."""
        try:
            while line := self._reader.readline(MAX_MESSAGE_BYTES + 1):
                too_long = len(line) > MAX_MESSAGE_BYTES and not line.endswith(b"\n")
                if too_long:
                    self._skip_line()
                if not requests.put((line, too_long)):
                    return  # the session ended
        except (OSError, ValueError):  # the input was closed under the reader
            pass
        finally:
            requests.put(None)

    def _skip_line(self) -> None:
        while chunk := self._reader.readline(1 << 20):
            if chunk.endswith(b"\n"):
                return

    def _shut_down(self) -> None:
        """Finish the calls in progress, wait for the loading thread (a model still loading
        in native code when the interpreter exits aborts the process), then close."""
        self._stopping.set()
        self._pool.shutdown(wait=True)
        if self._loader is not None and not join_background([self._loader], EXIT_WAIT_SECONDS):
            print("hybridkb mcp: the model is still loading; exiting anyway", file=sys.stderr)
        self._opened.wait(EXIT_WAIT_SECONDS)
        if self._close and self._kb is not None:
            self._kb.close()

    # -- reading ------------------------------------------------------------------------

    def _handle_line(self, line: bytes) -> None:
        message = read_line(line)
        if isinstance(message, Refusal):
            self._error(message.ident, message.code, message.message, message.data)
        elif isinstance(message, Notification):
            self._notified(message.method, message.params)
        elif isinstance(message, Request):
            self._request(message.ident, message.method, message.params)

    def _leading_id(self, line: bytes) -> RequestId | None:
        return leading_id(line)

    def _notified(self, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/cancelled":
            ident = params.get("requestId")
            if isinstance(ident, (str, int)) and not isinstance(ident, bool):
                self._calls.cancel(request_key(ident))
        # notifications/initialized and the rest need nothing from us

    def _request(self, ident: RequestId, method: str, params: dict[str, Any]) -> None:
        if method == "initialize":
            self._initialize(ident, params)
        elif method == "ping":
            self._result(ident, {})
        elif method == "tools/list":
            if self._list_after_open and not self._opened.is_set():
                # Which tools there are is the role's to say: answered once open, off
                # this thread (pings and the rest are still answered meanwhile).
                self._pool.submit(self._list_when_open, ident)
            else:
                self._result(ident, self._tools_list_result())
        elif method == "tools/call":
            self._tools_call(ident, params)
        elif method in _EMPTY_LISTS:
            self._result(ident, {_EMPTY_LISTS[method]: []})
        else:
            self._error(ident, METHOD_NOT_FOUND, "Method not found", method[:200])

    def _initialize(self, ident: RequestId, params: dict[str, Any]) -> None:
        asked = params.get("protocolVersion")
        if not isinstance(asked, str):
            self._error(ident, INVALID_PARAMS, "Invalid params", "protocolVersion: expected text")
            return
        self._result(
            ident,
            {
                "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": SERVER_NAME, "version": __version__},
                "instructions": INSTRUCTIONS,
            },
        )

    def _tools_list_result(self) -> dict[str, Any]:
        return {"tools": self._listed}

    def _list_when_open(self, ident: RequestId) -> None:
        self._opened.wait()
        self._result(ident, self._tools_list_result())

    def _tools_call(self, ident: RequestId, params: dict[str, Any]) -> None:
        name, arguments = params.get("name"), params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            reason = "tools/call needs name (text) and arguments (an object)"
            self._error(ident, INVALID_PARAMS, "Invalid params", reason)
            return
        if name not in self._names:
            known = ", ".join(self._names)
            self._call_result(
                ident, f"Error (unknown_tool): no tool {name[:100]!r}; the tools are {known}", True
            )
            return
        key = request_key(ident)
        refused = self._calls.admit(key, sql=name == SQL_TOOL)
        if refused == "taken":
            reason = f"request id {ident!r} is already in use by a call in progress"
            self._error(ident, INVALID_REQUEST, "Invalid Request", reason)
        elif refused == "busy":
            text = (
                f"Error (busy): {MAX_PENDING_CALLS} tool calls are already in progress; "
                "wait for their answers and call again"
            )
            self._call_result(ident, text, True)
        elif refused == "sql_busy":
            text = (
                f"Error (busy): {MAX_SQL_CALLS} {SQL_TOOL} calls are already running; wait for "
                "their answers and query again"
            )
            self._call_result(ident, text, True)
        else:
            self._pool.submit(self._run_call, ident, key, name, arguments)

    # -- calls (worker threads) ---------------------------------------------------------

    def _run_call(self, ident: RequestId, key: RequestId, name: str, args: dict[str, Any]) -> None:
        try:
            text, is_error = self._call_tool(key, name, args)
        except Exception as exc:  # noqa: BLE001 - a tool's bug: the log gets the traceback
            traceback.print_exc(file=sys.stderr)
            text = (
                f"Error (internal): {name} failed unexpectedly ({type(exc).__name__}); "
                "the server's log (stderr) has the details"
            )
            is_error = True
        if self._calls.finish(key, sql=name == SQL_TOOL):
            self._call_result(ident, text, is_error)

    def _call_tool(self, key: RequestId, name: str, args: dict[str, Any]) -> tuple[str, bool]:
        self._ready.wait()
        if not self._calls.may_start(key):
            return "cancelled", True  # not started; the answer is dropped
        tools = self._tools if self._tools is not None else self._load()
        if tools is None:
            return self._load_error, True
        tool = tools.get(name)
        if tool is None:
            return f"Error (unknown_tool): {name} did not load; the server's log has why", True
        return run_tool(tool, args)

    # -- loading (background thread) ----------------------------------------------------

    def _load_in_background(self) -> None:
        try:
            self._load()
        finally:
            self._opened.set()
            self._ready.set()
        # Then the default model, rather than inside the first search. After the tools, not
        # beside them: both are mostly Python, so together neither is ready sooner.
        kb = self._kb
        if kb is None or self._stopping.is_set():
            return
        try:
            kb.warm_up()  # a client of another process's knowledge base loads nothing
        except KBError as exc:
            print(f"hybridkb mcp: {exc}", file=sys.stderr)

    def _load(self) -> dict[str, BaseTool] | None:
        """Open the knowledge base and build the tools (again after a failure: a locked file
        may have been released); ``None`` if that failed, with the reason kept."""
        with self._load_lock:
            if self._tools is not None:
                return self._tools
            try:
                if self._kb is None:
                    try:
                        self._kb = self._open_kb()
                        self._follow_access(self._kb)
                    finally:
                        self._opened.set()
                tools = {t.name: t for t in self._build_tools(self._kb)}
            except KBError as exc:
                print(f"hybridkb mcp: {exc}", file=sys.stderr)
                self._load_error = render_error(exc)
                return None
            except Exception:  # noqa: BLE001 - a bug: every call says so, the server lives
                traceback.print_exc(file=sys.stderr)
                self._load_error = (
                    "Error (internal): the knowledge base did not open; the server's log "
                    "(stderr) has the details"
                )
                return None
            if sorted(tools) != sorted(self._names):
                print(
                    "hybridkb mcp: the tools loaded differ from mcp_tools.json "
                    f"({sorted(tools)} != {sorted(self._names)}); run scripts/gen_mcp_tools.py",
                    file=sys.stderr,
                )
            self._tools = tools
            return tools

    def _follow_access(self, kb: KnowledgeBase) -> None:
        """A knowledge base that refuses writes (a role that may only read) gets the
        read-only list, as ``--read-only`` would: no tool listed that could only fail."""
        if kb.read_only and not self._read_only:
            self._read_only = True
            self._listed = advertised_tools(read_only=True, sql_tool=self._sql_tool)
            self._names = [t["name"] for t in self._listed]

    def _build_tools(self, kb: KnowledgeBase) -> list[BaseTool]:
        return load_tools(
            kb,
            workspace=self._workspace,
            allowed_paths=self._allowed_paths,
            read_only=self._read_only,
        )

    # -- writing ------------------------------------------------------------------------

    def _call_result(self, ident: RequestId, text: str, is_error: bool) -> None:
        self._result(ident, {"content": [{"type": "text", "text": text}], "isError": is_error})

    def _result(self, ident: RequestId, result: dict[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "id": ident, "result": result})

    def _error(
        self, ident: RequestId | None, code: int, message: str, data: str | None = None
    ) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self._send({"jsonrpc": "2.0", "id": ident, "error": error})

    def _send(self, message: dict[str, Any]) -> None:
        data = memoryview(encode_line(message))
        with self._write_lock:
            if self._out_closed:
                return
            try:
                while data:
                    data = data[os.write(self._out_fd, data) :]
            except OSError:  # the client has gone; the reader sees the end of input next
                self._out_closed = True


def _next(
    requests: Handoff[tuple[bytes, bool] | None],
) -> tuple[bytes, bool] | None:
    """The next request from the reader thread, waiting in steps (SIGNAL_CHECK_SECONDS)."""
    while True:
        try:
            return requests.get(timeout=SIGNAL_CHECK_SECONDS)
        except queue.Empty:
            continue


def serve_stdio(
    open_kb: Callable[[], KnowledgeBase],
    *,
    sql_tool: bool,
    workspace: str | None = None,
    allowed_paths: Iterable[str | Path] | None = None,
    read_only: bool = False,
    list_after_open: bool = False,
    close: bool = True,
) -> None:
    """Serve MCP on this process's stdin/stdout until the client closes stdin.

    Args:
        open_kb: Opens the knowledge base; called in the background, after the server
            starts answering (a failure is the answer of every tool call, and retried).
        sql_tool: Offer ``query_kb_sql`` (``settings.enable_sql_tool``).
        workspace: Serve this workspace.
        allowed_paths: Folders the tools may read (default: the settings').
        read_only: Leave out the tools that write (and see :class:`StdioServer`).
        list_after_open: Answer ``tools/list`` once the knowledge base has opened.
        close: Close the knowledge base at the end.
    """
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)  # from here on, whatever anything prints goes to stderr
    # The reader thread reads its own copy of stdin: sys.stdin's lock, held by a read that
    # never ends, would abort the interpreter when it closes sys.stdin at exit.
    requests_in = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    try:
        StdioServer(
            open_kb,
            sql_tool=sql_tool,
            workspace=workspace,
            allowed_paths=allowed_paths,
            read_only=read_only,
            list_after_open=list_after_open,
            close=close,
            reader=requests_in,
            out_fd=out_fd,
        ).run()
    finally:
        sys.stdout.flush()
        os.dup2(out_fd, 1)
        os.close(out_fd)
