"""Calling LangChain tools as an agent does, and reading their answers."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool


def by_name(tools: list[BaseTool]) -> dict[str, BaseTool]:
    return {t.name: t for t in tools}


def call(t: BaseTool, **args: Any) -> ToolMessage:
    msg = t.invoke({"type": "tool_call", "id": "call-1", "name": t.name, "args": args})
    assert isinstance(msg, ToolMessage)
    return msg


def reply_text(msg: ToolMessage) -> str:
    """A tool's answer as text: our tools answer with one string, never content blocks."""
    assert isinstance(msg.content, str), msg.content
    return msg.content
