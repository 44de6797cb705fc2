"""The MCP server, tested with the official SDK's own client: in process, over stdio and HTTP."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from http_server import HttpServer
from internals import local, through_owner
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from paths import SUPPORT
from pdfgen import Page, write_pdf
from pydantic import BaseModel

import hybridkb
from hybridkb.agents.tools import TOOL_NAMES, make_tools
from hybridkb.mcp.server import build_server, tool_catalog
from hybridkb.mcp.tools import advertised_tools

pytestmark = [pytest.mark.process, pytest.mark.anyio]
DEPRECIATION = "Depreciation of equipment is spread over five years."
HARNESS = SUPPORT / "mcp_harness.py"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def mcpkb(tmp_path: Path) -> Iterator[hybridkb.KnowledgeBase]:
    with hybridkb.connect(tmp_path / "mcp.duckdb", model="fake") as kb:
        yield local(kb)


def _text(result: Any) -> str:
    assert len(result.content) == 1
    return str(result.content[0].text)


async def test_lists_the_same_tools_with_the_same_arguments(mcpkb: Any) -> None:
    lc_tools = make_tools(mcpkb)
    async with Client(build_server(mcpkb)) as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == [t.name for t in lc_tools]
    assert [t.name for t in listed][: len(TOOL_NAMES)] == list(TOOL_NAMES)
    for mcp_tool, lc_tool in zip(listed, lc_tools, strict=True):
        lc_model = lc_tool.get_input_schema()
        assert issubclass(lc_model, BaseModel)  # our tools take pydantic v2 models
        lc_schema = lc_model.model_json_schema()
        assert mcp_tool.input_schema.get("properties", {}) == lc_schema.get("properties", {})
        assert sorted(mcp_tool.input_schema.get("required", [])) == sorted(
            lc_schema.get("required", [])
        )
        assert mcp_tool.description == lc_tool.description
    hints = {t.name: t.annotations for t in listed}
    search, add, drop = hints["search_kb"], hints["add_kb_documents"], hints["drop_kb_collection"]
    assert search is not None and add is not None and drop is not None
    assert search.read_only_hint is True
    assert add.read_only_hint is False
    assert drop.destructive_hint is True


async def test_call_each_tool(mcpkb: Any, tmp_path: Path) -> None:
    pdf = write_pdf(
        tmp_path / "guide.pdf", [Page("Intro"), Page(f"Depreciation\n\n{DEPRECIATION}")]
    )
    async with Client(build_server(mcpkb, allowed_paths=[tmp_path])) as client:

        async def ok(name: str, **args: Any) -> str:
            result = await client.call_tool(name, args)
            assert not result.is_error, _text(result)
            return _text(result)

        assert "Created collection 'Tax Documents'" in await ok(
            "create_kb_collection", collection_name="Tax Documents"
        )
        added = await ok("add_kb_documents", collection_name="Tax Documents", documents=str(pdf))
        doc_id = added.split(" id ")[1].split()[0]
        found = await ok(
            "search_kb", query="depreciation", collection_name="Tax Documents", limit=2
        )
        assert f"[1] Tax Documents | guide.pdf | p. 2 | doc {doc_id}" in found
        assert DEPRECIATION in found
        assert "- Tax Documents: 1 document" in await ok("kb_list")
        assert doc_id in await ok("describe_kb_collection", collection_name="Tax Documents")
        assert f"deleted {doc_id}" in await ok(
            "delete_kb_documents", collection_name="Tax Documents", ids=json.dumps([doc_id])
        )
        # The file is still on disk and still a source: a sync brings it back.
        synced = await ok("sync_kb_collection", collection_name="Tax Documents")
        assert f"+ added guide.pdf  id {doc_id}" in synced
        assert "Dropped collection" in await ok(
            "drop_kb_collection", collection_name="Tax Documents"
        )


async def test_errors_come_back_as_rendered_error_results(mcpkb: Any, tmp_path: Path) -> None:
    mcpkb.create_collection("Tax Documents")
    async with Client(build_server(mcpkb, allowed_paths=[tmp_path / "inbox"])) as client:
        result = await client.call_tool("search_kb", {"query": "x", "collection_name": "Receipts"})
        assert result.is_error
        assert _text(result) == (
            "Error (collection_not_found): collection 'Receipts' not found in "
            "workspace 'default'; existing: 'Tax Documents'"
        )
        denied = await client.call_tool(
            "add_kb_documents", {"collection_name": "Tax Documents", "documents": "/etc/passwd"}
        )
        assert denied.is_error and _text(denied).startswith("Error (access_denied): /etc/passwd")
        assert str(tmp_path / "inbox") in _text(denied)
        bad = await client.call_tool("search_kb", {"query": "x", "limit": "lots"})
        assert bad.is_error and _text(bad).startswith("Error (invalid_arguments): search_kb")
        limit = await client.call_tool("search_kb", {"query": "x", "limit": 500})
        assert limit.is_error and "from 1 to 50" in _text(limit)


async def test_same_budget_as_the_langchain_tools(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "b.duckdb", model="fake", search_token_budget=150) as kb:
        kb.create_collection("C").add_texts(
            [f"budget passage {i} " + "words " * 80 for i in range(8)]
        )
        lc = {t.name: t for t in make_tools(kb)}["search_kb"].invoke(
            {"query": "budget", "limit": 8}
        )
        async with Client(build_server(kb)) as client:
            result = await client.call_tool("search_kb", {"query": "budget", "limit": 8})
        assert _text(result) == lc and len(lc) <= 150 * 4


async def test_read_only_and_workspace(mcpkb: Any) -> None:
    mcpkb.in_workspace("alice").create_collection("Alice only")
    async with Client(build_server(mcpkb, workspace="bob", read_only=True)) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert not {
            "create_kb_collection",
            "add_kb_documents",
            "delete_kb_documents",
            "drop_kb_collection",
        } & set(names)
        listing = await client.call_tool("kb_list", {})
        assert "No collections yet in workspace 'bob'" in _text(listing)


@pytest.mark.parametrize("read_only", [False, True])
@pytest.mark.parametrize("sql_tool", [False, True])
def test_static_tool_list_is_what_the_sdk_server_lists(read_only: bool, sql_tool: bool) -> None:
    # The stdio server answers tools/list from mcp_tools.json before LangChain loads;
    # every variant it can offer is exactly what the SDK server builds from the
    # LangChain tools (regenerate with scripts/gen_mcp_tools.py).
    assert advertised_tools(read_only=read_only, sql_tool=sql_tool) == tool_catalog(
        read_only=read_only, sql_tool=sql_tool
    )


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
    env.update(
        {
            "HYBRIDKB_MODEL": "fake",
            "HYBRIDKB_CACHE_DIR": str(tmp_path / "cache"),
            "HYBRIDKB_LOCK_TIMEOUT": "0.5",
            "HF_HUB_OFFLINE": "1",
        }
    )
    return env


def _stdio_server(db: Path, tmp_path: Path) -> StdioServerParameters:
    """`hybridkb --db DB mcp` over stdio, with the test's environment."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "hybridkb", "--db", str(db), "mcp"],
        env=_env(tmp_path),
        cwd=str(tmp_path),
    )


async def test_stdio_server_serves_a_second_server_and_other_processes(tmp_path: Path) -> None:
    db = tmp_path / "stdio.duckdb"
    params = _stdio_server(db, tmp_path)
    (tmp_path / "note.md").write_text("# Depreciation\n\n" + DEPRECIATION)
    async with Client(params) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert names[: len(TOOL_NAMES)] == list(TOOL_NAMES)
        created = await client.call_tool(
            "create_kb_collection", {"collection_name": "Tax", "documents": "note.md"}
        )
        assert not created.is_error, _text(created)
        found = await client.call_tool("search_kb", {"query": "depreciation"})
        assert DEPRECIATION in _text(found)
        # A second assistant's server on the same file: served by the first, not locked out.
        async with Client(params) as second:
            added = await second.call_tool(
                "add_kb_documents",
                {"collection_name": "Tax", "documents": "Receipts go in the blue folder."},
            )
            assert not added.is_error, _text(added)
            found = await second.call_tool("search_kb", {"query": "depreciation"})
            assert DEPRECIATION in _text(found)
        # A person's script in another terminal sees both servers' writes at once.
        with hybridkb.connect(db, model="fake") as kb:
            assert through_owner(kb) and kb.describe("Tax").documents == 2
        # Without serving (HYBRIDKB_SERVE=false), the old rule: told who holds the file,
        # not a traceback.
        with (
            pytest.MonkeyPatch.context() as env,
            pytest.raises(hybridkb.DatabaseLocked, match="MCP server"),
        ):
            env.setenv("HYBRIDKB_SERVE", "false")
            hybridkb.connect(db, model="fake", lock_timeout=0.3)
    with hybridkb.connect(db, model="fake") as kb:  # released when the server stops
        assert kb.collection_names() == ["Tax"] and not through_owner(kb)


async def test_two_assistants_and_a_terminal_interleave_on_one_file(tmp_path: Path) -> None:
    # Two MCP servers on one file (the second is served by the first), each driven by its
    # own client at the same time, while a terminal adds files with the CLI.
    db = tmp_path / "busy.duckdb"
    params = _stdio_server(db, tmp_path)
    for i in range(3):
        (tmp_path / f"cli-{i}.txt").write_text(f"Terminal note {i} about the harbour lease.")
    failures: list[str] = []

    async def assistant(client: Client, who: str) -> None:
        for i in range(6):
            text = f"{who} note {i} on depreciation of the {who} laptop."
            added = await client.call_tool(
                "add_kb_documents", {"collection_name": "Tax", "documents": text}
            )
            found = await client.call_tool("search_kb", {"query": f"{who} laptop"})
            for result in (added, found):
                if result.is_error:
                    failures.append(f"{who}: {_text(result)}")
            if i % 3 == 2:  # delete the note it just added (a note's id: its text's hash)
                note_id = hashlib.sha256(text.encode()).hexdigest()[:16]
                deleted = await client.call_tool(
                    "delete_kb_documents", {"collection_name": "Tax", "ids": note_id}
                )
                if deleted.is_error:
                    failures.append(f"{who}: {_text(deleted)}")

    def terminal() -> list[int]:
        codes = []
        for i in range(3):
            run = subprocess.run(
                [sys.executable, "-m", "hybridkb", "--db", str(db), "add", "Tax",
                 str(tmp_path / f"cli-{i}.txt")],
                env=_env(tmp_path), cwd=str(tmp_path), capture_output=True, text=True,
                timeout=120, check=False,
            )  # fmt: skip
            codes.append(run.returncode)
            if run.returncode:
                failures.append(f"cli: {run.stderr.strip()}")
        return codes

    async with Client(params) as first:
        created = await first.call_tool("create_kb_collection", {"collection_name": "Tax"})
        assert not created.is_error, _text(created)
        async with Client(params) as second:
            codes: list[int] = []
            async with anyio.create_task_group() as group:
                group.start_soon(assistant, first, "alpha")
                group.start_soon(assistant, second, "beta")

                async def run_terminal() -> None:
                    codes.extend(await anyio.to_thread.run_sync(terminal))

                group.start_soon(run_terminal)
    assert failures == [] and codes == [0, 0, 0]
    with hybridkb.connect(db, model="fake") as kb:  # the servers are gone: the file itself
        assert not through_owner(kb)
        # Every write applied once, none lost: 6 notes each, 2 each deleted, 3 files.
        assert kb.describe("Tax").documents == 4 + 4 + 3
        hits = kb.search("beta laptop", k=3, mode="keyword")
        assert hits and "beta" in hits[0].text


def test_streamable_http_server(tmp_path: Path) -> None:
    import httpx2  # the MCP SDK's HTTP client
    from mcp.client.streamable_http import streamable_http_client

    # No token given: the server makes one for this start and names its file on stderr.
    server = HttpServer(tmp_path / "http.duckdb", env=_env(tmp_path))

    async def session(url: str, token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60)) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            names = [t.name for t in (await client.list_tools()).tools]
            assert names[: len(TOOL_NAMES)] == list(TOOL_NAMES)
            result = await client.call_tool("kb_list", {})
            assert "No collections yet" in _text(result)
            missing = await client.call_tool("describe_kb_collection", {"collection_name": "Nope"})
            assert missing.is_error and "collection_not_found" in _text(missing)

    try:
        token = server.token_file().read_text().strip()
        anyio.run(session, f"http://127.0.0.1:{server.port}/mcp", token)
    finally:
        server.stop()


@pytest.mark.parametrize("read_only", [False, True])
async def test_stdio_server_lists_what_the_sdk_server_lists(
    tmp_path: Path, mcpkb: Any, read_only: bool
) -> None:
    params = _stdio_server(tmp_path / "listed.duckdb", tmp_path)
    if read_only:
        params.args.append("--read-only")
    async with Client(params) as client:
        listed = (await client.list_tools()).tools
        instructions = client.instructions
    async with Client(build_server(mcpkb, read_only=read_only)) as reference:
        expected = (await reference.list_tools()).tools
        assert instructions == reference.instructions
    assert [t.model_dump() for t in listed] == [t.model_dump() for t in expected]


def _harness(db: Path, tmp_path: Path, **hooks: str) -> StdioServerParameters:
    """`hybridkb --db DB mcp` through tests/support/mcp_harness.py, with its test hooks set."""
    params = _stdio_server(db, tmp_path)
    params.args = [str(HARNESS), *params.args[2:]]
    assert params.env is not None
    params.env.update(hooks)
    return params


async def _until(path: Path, timeout: float = 120) -> None:
    with anyio.fail_after(timeout):
        while not path.exists():
            await anyio.sleep(0.01)


async def test_stdio_answers_a_ping_and_a_second_call_while_a_call_runs(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    params = _harness(tmp_path / "busy.duckdb", tmp_path, HKB_TEST_BLOCK_DIR=str(gate))
    (tmp_path / "note.md").write_text("# Depreciation\n\n" + DEPRECIATION)
    async with Client(params) as client:
        created = await client.call_tool(
            "create_kb_collection", {"collection_name": "Tax", "documents": "note.md"}
        )
        assert not created.is_error, _text(created)
        done: dict[str, str] = {}

        async def slow_listing() -> None:
            done["kb_list"] = _text(await client.call_tool("kb_list", {}))

        async with anyio.create_task_group() as group:
            group.start_soon(slow_listing)
            await _until(gate / "entered")  # kb_list is running, held by the harness
            await client.session.send_ping()
            found = await client.call_tool("search_kb", {"query": "depreciation"})
            assert DEPRECIATION in _text(found)
            assert "kb_list" not in done
            (gate / "release").touch()
        assert "Tax: 1 document" in done["kb_list"]


async def test_stdio_cancelled_call_leaves_the_session_usable(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    params = _harness(tmp_path / "cancel.duckdb", tmp_path, HKB_TEST_BLOCK_DIR=str(gate))
    async with Client(params) as client:
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "kb_list", {})
            await _until(gate / "entered")
            group.cancel_scope.cancel()  # the SDK client sends notifications/cancelled
        (gate / "release").touch()
        await client.session.send_ping()
        created = await client.call_tool("create_kb_collection", {"collection_name": "After"})
        assert not created.is_error, _text(created)
        listed = await client.call_tool("kb_list", {})
        assert "After: 0 documents" in _text(listed)
