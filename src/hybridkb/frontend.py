"""What every front end (CLI, LangChain tools, MCP, graph tools) shares: one place for
the tool error guard, argument ranges, search modes and JSON output.

Citations live in :mod:`hybridkb.render` with the rest of the text agents and people read.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import ConfigError, KBError
from .render import render_error
from .types import SEARCH_MODES

__all__ = ["SEARCH_MODES", "check_limit", "to_json", "tool_guard"]

R = TypeVar("R")


def tool_guard(fn: Callable[..., R]) -> Callable[..., R]:
    """Turn our errors into ToolException observations (``Error (<code>): ...``); bugs
    propagate."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        try:
            return fn(*args, **kwargs)
        except KBError as exc:
            # Imported here: the CLI shares this module and must start without LangChain.
            from langchain_core.tools import ToolException

            raise ToolException(render_error(exc)) from exc

    return wrapper


def check_limit(value: object, name: str = "limit", *, high: int = 50, low: int = 1) -> int:
    """A whole number in [low, high] for a tool argument, else a ConfigError saying so."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(
            f"{name}: {value!r} is out of range; use a whole number from {low} to {high}"
        )
    return value


def to_json(data: Any) -> str:
    """JSON as every front end prints it (UTF-8 kept, indented, dates as text)."""
    return json.dumps(data, ensure_ascii=False, indent=2, default=str)
