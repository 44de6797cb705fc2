"""What every front end (CLI, LangChain tools, MCP, graph tools) shares: one place for
the tool error guard, argument ranges, search modes and JSON output, and how a declared
tool (:class:`ToolSpec`) becomes a LangChain tool.

Citations live in :mod:`hybridkb.agents.render` with the rest of the text agents and people read.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..errors import ConfigError, KBError
from ..normalize import printable
from ..results import SEARCH_MODES
from .render import render_error

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = [
    "SEARCH_MODES",
    "ToolSpec",
    "bind_tool",
    "check_limit",
    "offered",
    "to_json",
    "tool_guard",
    "validation_message",
]

R = TypeVar("R")


def tool_guard(fn: Callable[..., R]) -> Callable[..., R]:
    """Turn our errors into ToolException observations (``Error (<code>): ...``); bugs
    propagate. The door of every tool answer: its text is shown by the rule of every name
    (``normalize.printable``: control characters, ANSI escapes and bidi controls escaped;
    newlines and tabs kept), the artifact (data) left as it is."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        try:
            answer = fn(*args, **kwargs)
        except KBError as exc:
            # Imported here: the CLI shares this module and must start without LangChain.
            from langchain_core.tools import ToolException

            raise ToolException(render_error(exc)) from exc
        return _shown(answer)

    return wrapper


def _shown(answer: R) -> R:
    """A tool's answer (its text, or its (text, artifact) pair) with the text made printable."""
    if isinstance(answer, str):
        return cast(R, printable(answer, lines=True))
    if isinstance(answer, tuple) and answer and isinstance(answer[0], str):
        return cast(R, (printable(answer[0], lines=True), *answer[1:]))
    return answer


def check_limit(value: object, name: str = "limit", *, high: int = 50, low: int = 1) -> int:
    """A whole number in [low, high] for a tool argument, else a ConfigError saying so."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(
            f"{name}: {value!r} is out of range; use a whole number from {low} to {high}"
        )
    return value


def to_json(data: Any) -> str:
    """JSON as every front end prints it (UTF-8 kept, indented, dates as text), shown by
    the rule of every name (``normalize.printable``) in JSON's own form: what a terminal
    would act on or reorder (control characters, bidi controls, ...) written as ``\\uXXXX``
    escapes, so the text is safe to show and still parses to the same data."""
    text = json.dumps(data, ensure_ascii=False, indent=2, default=str)
    if text.replace("\n", "").isprintable():  # the indent's newlines; in strings they are \n
        return text
    return "".join(ch if ch.isprintable() or ch == "\n" else _json_escape(ch) for ch in text)


def _json_escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes the rest of Unicode as a UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


@dataclass(frozen=True)
class ToolSpec:
    """One agent tool, declared once (the registry is :data:`hybridkb.agents.toolbox.TOOLS`).

    Attributes:
        function: ``function(context, **arguments) -> (text, artifact)``; its name is the
            tool's, its docstring (Google style) the description the model reads and its
            arguments' descriptions. ``context`` is what the tool is bound to (the
            toolkit, with the knowledge base as ``.kb``).
        writes: The tool changes the store: a read-only toolkit leaves it out, and MCP
            says ``readOnlyHint: false``.
        destructive: It removes what was stored (MCP's ``destructiveHint``; said of
            writers only).
        setting: A flag of the settings that must be on for the tool to be offered
            (``enable_sql_tool`` for ``query_kb_sql``).
    """

    function: Callable[..., tuple[str, Any]]
    writes: bool = False
    destructive: bool = False
    setting: str | None = None

    @property
    def name(self) -> str:
        """The tool's name: its function's."""
        return self.function.__name__


def offered(specs: Iterable[ToolSpec], *, read_only: bool, settings: Any) -> list[ToolSpec]:
    """The tools a toolkit offers: the writers left out when ``read_only``, and each tool
    whose setting is off."""
    return [
        s
        for s in specs
        if not (read_only and s.writes) and (s.setting is None or getattr(settings, s.setting))
    ]


def validation_message(name: str) -> Callable[[Any], str]:
    """A LangChain ``handle_validation_error`` for tool ``name``: the first few argument
    errors on one line, with what to do, instead of pydantic's multi-line report."""

    def handle(exc: Any) -> str:
        from pydantic import ValidationError  # with LangChain, which brings it anyway

        problems = []
        errors = exc.errors() if isinstance(exc, ValidationError) else []
        for err in errors[:5]:
            where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
            problems.append(f"{where}: {err.get('msg', 'invalid')}")
        detail = "; ".join(problems) or str(exc).splitlines()[0]
        return printable(  # the names of arguments a model made up are shown too
            f"Error (invalid_arguments): {name} got arguments it cannot use ({detail}). "
            "Check the argument names and types in the tool description and call it again."
        )

    return handle


def bind_tool(spec: ToolSpec, context: Any) -> BaseTool:
    """The LangChain tool of ``spec`` with ``context`` bound: its arguments are the
    function's after the first, its schema and description read from the docstring; our
    errors become error observations (``handle_tool_error``), as do bad arguments."""
    from langchain_core.tools import tool  # the CLI shares this module: LangChain here only

    fn = spec.function

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> tuple[str, Any]:
        return fn(context, *args, **kwargs)

    signature = inspect.signature(fn)
    first, *rest = signature.parameters
    call.__dict__["__signature__"] = signature.replace(
        parameters=[signature.parameters[p] for p in rest]
    )
    call.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != first}
    made = tool(response_format="content_and_artifact", parse_docstring=True)(tool_guard(call))
    made.handle_tool_error = True
    made.handle_validation_error = validation_message(made.name)
    return made
