"""A real LangGraph agent loop over make_tools(kb), driven by a scripted chat model.

The model is scripted (no network), but it reads the real tool results: the ids
it deletes and the passage it quotes come from what the tools returned, so the
test fails if the tools stop giving a model what it needs.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pdfgen import Page, write_pdf
from pydantic import PrivateAttr

import hybridkb
from hybridkb.agents.tools import make_tools

PASSAGE = (
    "Depreciation of office equipment is claimed over five years using the straight-line "
    "method, starting in the year the equipment is first used."
)

Step = Callable[[Sequence[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """Plays one scripted step per call; each step sees the conversation so far."""

    steps: list[Any]
    _next: int = PrivateAttr(default=0)
    _bound: list[str] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        self._bound = [getattr(t, "name", str(t)) for t in tools]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        step: Step = self.steps[self._next]
        self._next += 1
        message = step(messages)
        for call in message.tool_calls:
            assert call["name"] in self._bound, f"model called unbound tool {call['name']}"
        return ChatResult(generations=[ChatGeneration(message=message)])


def _tool_call(name: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{name}"}])


def _last_tool(messages: Sequence[BaseMessage]) -> ToolMessage:
    msg = messages[-1]
    assert isinstance(msg, ToolMessage), msg
    return msg


def _added_id(messages: Sequence[BaseMessage]) -> str:
    for msg in reversed(messages):
        if isinstance(msg, ToolMessage) and msg.name == "add_kb_documents":
            found = re.search(r"id ([0-9a-f]{16})", str(msg.content))
            assert found, msg.content
            return found.group(1)
    raise AssertionError("no add_kb_documents result in the conversation")


def _quote_first_passage(messages: Sequence[BaseMessage]) -> AIMessage:
    lines = str(_last_tool(messages).content).splitlines()
    citation, passage = lines[1], lines[2]
    number, where = citation.split("] ", 1)
    return AIMessage(content=f'Your tax documents say: "{passage}" {number}] ({where})')


def build_agent(model: BaseChatModel, tools: list[Any]) -> Any:
    bound = model.bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def transcript(messages: Sequence[BaseMessage]) -> str:
    out = []
    for m in messages:
        if isinstance(m, HumanMessage):
            out.append(f"USER: {m.content}")
        elif isinstance(m, AIMessage) and m.tool_calls:
            for c in m.tool_calls:
                out.append(f"AGENT -> {c['name']}({json.dumps(c['args'], ensure_ascii=False)})")
        elif isinstance(m, AIMessage):
            out.append(f"AGENT: {m.content}")
        elif isinstance(m, ToolMessage):
            body = str(m.content).replace("\n", "\n    ")
            out.append(f"TOOL {m.name} [{m.status}]:\n    {body}")
    return "\n".join(out)


def test_scripted_agent_creates_adds_searches_and_removes(tmp_path: Path) -> None:
    pdf = write_pdf(
        tmp_path / "2023-tax-guide.pdf",
        [
            Page("2023 Tax Guide\n\nKeep receipts for every claim you make."),
            Page(f"Depreciation\n\n{PASSAGE}"),
        ],
    )
    kb = hybridkb.connect(tmp_path / "agent.duckdb", model="fake")
    tools = make_tools(kb, workspace="alice", allowed_paths=[tmp_path])
    model = ScriptedChatModel(
        steps=[
            lambda m: _tool_call("create_kb_collection", collection_name="Tax Documents"),
            lambda m: AIMessage(content="I created the collection Tax Documents."),
            lambda m: _tool_call(
                "add_kb_documents", collection_name="Tax Documents", documents=str(pdf)
            ),
            lambda m: AIMessage(content=f"Added 2023-tax-guide.pdf (document {_added_id(m)})."),
            lambda m: _tool_call(
                "search_kb", query="depreciation", collection_name="Tax Documents"
            ),
            _quote_first_passage,
            lambda m: _tool_call(
                "delete_kb_documents", collection_name="Tax Documents", ids=_added_id(m)
            ),
            lambda m: AIMessage(content="Removed 2023-tax-guide.pdf from Tax Documents."),
        ]
    )
    agent = build_agent(model, tools)
    config = {"configurable": {"thread_id": "alice-1"}}
    turns = [
        "Create a collection Tax Documents",
        f"Add this PDF to Tax Documents: {pdf}",
        "What do my tax documents say about depreciation?",
        "Remove that file",
    ]
    answers = []
    for text in turns:
        state = agent.invoke({"messages": [HumanMessage(text)]}, config)
        answers.append(state["messages"][-1].content)
    messages = state["messages"]
    log = transcript(messages)
    if os.environ.get("PRINT_AGENT_TRANSCRIPT"):
        print("\n" + log)

    assert answers[0] == "I created the collection Tax Documents."
    doc_id = _added_id(messages)
    assert answers[1] == f"Added 2023-tax-guide.pdf (document {doc_id})."
    assert PASSAGE in answers[2]
    assert answers[2].endswith(f"[1] (Tax Documents | 2023-tax-guide.pdf | p. 2 | doc {doc_id})")
    assert answers[3] == "Removed 2023-tax-guide.pdf from Tax Documents."
    tool_results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.name for m in tool_results] == [
        "create_kb_collection",
        "add_kb_documents",
        "search_kb",
        "delete_kb_documents",
    ]
    assert all(m.status == "success" for m in tool_results)
    assert tool_results[2].artifact[0]["document_id"] == doc_id  # the structured hits
    search = {t.name: t for t in tools}["search_kb"]
    assert "No passages found" in search.invoke({"query": "depreciation"})
    assert kb.in_workspace("alice").collection("Tax Documents").count() == 0
    assert kb.collection_names() == []  # nothing leaked into the default workspace
    kb.close()


def test_agent_recovers_from_an_error_observation(tmp_path: Path) -> None:
    kb = hybridkb.connect(tmp_path / "agent.duckdb", model="fake")
    kb.create_collection("Tax Documents").add_texts([PASSAGE])
    tools = make_tools(kb)

    def retry_with_existing_name(messages: Sequence[BaseMessage]) -> AIMessage:
        error = _last_tool(messages)
        assert error.status == "error" and "existing: 'Tax Documents'" in str(error.content)
        return _tool_call("search_kb", query="depreciation", collection_name="Tax Documents")

    model = ScriptedChatModel(
        steps=[
            lambda m: _tool_call("search_kb", query="depreciation", collection_name="Taxes"),
            retry_with_existing_name,
            _quote_first_passage,
        ]
    )
    state = build_agent(model, tools).invoke(
        {"messages": [HumanMessage("What do my taxes say about depreciation?")]},
        {"configurable": {"thread_id": "t"}},
    )
    assert PASSAGE in state["messages"][-1].content
    kb.close()


@pytest.fixture(autouse=True)
def _quiet_langsmith(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    monkeypatch.setenv("LANGCHAIN_TRACING_V2", "false")
