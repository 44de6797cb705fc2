"""The stdio MCP server at the wire: what it loads before answering, bad lines, cancellation.

The SDK's client (test_mcp.py) sends only well-formed messages; these tests write
raw lines to ``hybridkb mcp`` (through tests/support/mcp_harness.py, whose hooks make the
timing deterministic) and read its raw answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from internals import through_owner
from mcp_session import HARNESS, INIT, Session

import hybridkb
from hybridkb.mcp.tools import advertised_tools

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)


def test_tools_list_is_answered_before_langchain_the_sdk_or_the_model_load(
    tmp_path: Path,
) -> None:
    hold, modules = tmp_path / "hold", tmp_path / "modules.txt"
    # The loader is held until tools/list is answered: what was imported by then is
    # what answering needed, whatever the background thread would have reached.
    s = Session(
        tmp_path,
        tmp_path / "kb.duckdb",
        HKB_TEST_HOLD_LOADER=str(hold),
        HKB_TEST_MODULES_OUT=str(modules),
    )
    init = s.request(1, "initialize", INIT)["result"]
    assert init["protocolVersion"] == "2025-06-18"
    assert init["capabilities"] == {"tools": {"listChanged": False}}
    assert init["serverInfo"] == {"name": "hybridkb", "version": hybridkb.__version__}
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    tools = s.request(2, "tools/list", {})["result"]["tools"]
    assert tools == advertised_tools(read_only=False, sql_tool=False)
    loaded = {name.split(".")[0] for name in modules.read_text().split()}
    heavy = {"torch", "sentence_transformers", "transformers", "onnxruntime", "langchain_core",
             "langchain", "mcp", "mcp_types"}  # fmt: skip
    assert loaded & heavy == set()
    assert "hybridkb.agents.tools" not in modules.read_text().split()
    hold.touch()
    text, is_error = s.call(3, "kb_list", {})
    assert not is_error and "No collections yet" in text
    assert s.close() == []


def test_bad_messages_get_errors_and_the_server_keeps_serving(tmp_path: Path) -> None:
    s = Session(tmp_path, tmp_path / "kb.duckdb", HKB_TEST_MAX_MESSAGE_BYTES="4096")
    assert s.request(0, "initialize", {**INIT, "protocolVersion": "1999-01-01"})["result"][
        "protocolVersion"
    ] == "2025-11-25"  # fmt: skip

    def error(ident: Any) -> dict[str, Any]:
        got = s.answer(ident)
        assert "result" not in got, got
        return dict(got["error"])

    s.send(b"{not json")
    assert error(None)["code"] == -32700
    s.send(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":NaN}}')
    assert error(1)["code"] == -32700  # the id of a broken line is kept when it leads
    s.send(b'\xff\xfe{"jsonrpc":"2.0"}')
    assert error(None)["code"] == -32700
    s.send(b"[1, 2]")
    assert error(None)["code"] == -32600
    s.send(b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x":' + b"[" * 60 + b"]" * 60 + b"}}")  # fmt: skip
    assert "nested more than" in error(2)["data"]
    s.send(b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":"' + b"y" * 10_000 + b'"}}')
    assert "longer than 4,096 bytes" in error(3)["data"]
    assert s.request(4, "resources/subscribe", {})["error"] == {
        "code": -32601, "message": "Method not found", "data": "resources/subscribe"
    }  # fmt: skip
    assert (
        s.request(5, "tools/call", {"name": "kb_list", "arguments": [1]})["error"]["code"] == -32602
    )
    assert s.request(6, "ping", [1])["error"]["code"] == -32602
    assert s.request(7, "initialize", {})["error"]["code"] == -32602
    assert s.request(None, "ping")["error"]["code"] == -32600
    s.send({"jsonrpc": "2.0", "id": 99, "result": {}})  # an answer to nothing: ignored
    s.send({"jsonrpc": "2.0", "method": "notifications/whatever"})  # ignored
    text, is_error = s.call(8, "no_such_tool", {})
    assert is_error and text.startswith("Error (unknown_tool): no tool 'no_such_tool'")
    text, is_error = s.call(9, "search_kb", {"query": "x", "limit": "lots"})
    assert is_error and text.startswith("Error (invalid_arguments): search_kb")
    text, is_error = s.call(10, "search_kb", {})
    assert is_error and "query: Field required" in text
    text, is_error = s.call(11, "describe_kb_collection", {"collection_name": "x\ud800"})
    # A lone surrogate is not text: refused as such (issue 23 item 6), not looked up.
    assert is_error and text.startswith("Error (config_error)") and "lone surrogate" in text
    assert s.request("twelve", "ping") == {"jsonrpc": "2.0", "id": "twelve", "result": {}}
    assert s.close() == []
    assert "Traceback" not in s.stderr_path.read_text()


def test_cancelled_calls_are_never_answered_and_unstarted_ones_never_run(tmp_path: Path) -> None:
    hold, gate = tmp_path / "hold", tmp_path / "gate"
    gate.mkdir()
    db = tmp_path / "kb.duckdb"
    s = Session(tmp_path, db, HKB_TEST_HOLD_LOADER=str(hold), HKB_TEST_BLOCK_DIR=str(gate))
    s.request(0, "initialize", INIT)
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
    # Waiting for the tools: cancelled before it starts, so it never runs.
    args = {"name": "create_kb_collection", "arguments": {"collection_name": "Never"}}
    s.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": args})
    s.send({**cancel, "params": {"requestId": 1, "reason": "user"}})
    s.request(2, "ping")  # lines are read in order: the cancel has been taken
    hold.touch()
    # Running (held in kb_list by the harness): cancelled, it finishes; its answer is dropped.
    s.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "kb_list"}})
    deadline = time.monotonic() + 120
    while not (gate / "entered").exists():
        assert time.monotonic() < deadline, "kb_list did not start"
        time.sleep(0.01)
    s.send({**cancel, "params": {"requestId": "3"}})  # an id quoted as text is the same id
    # Two calls interleave: the second is answered while the first is still held.
    text, is_error = s.call(5, "create_kb_collection", {"collection_name": "Later"})
    assert not is_error, text
    (gate / "release").touch()
    assert s.request(6, "ping")["result"] == {}
    rest = s.close()  # waits for every call in progress
    assert rest == []
    with hybridkb.connect(db, model="fake") as kb:
        assert kb.collection_names() == ["Later"]


def test_a_read_only_server_serves_the_writers_it_would_otherwise_lock_out(
    tmp_path: Path,
) -> None:
    """A long-lived ``mcp --read-only`` holding the file read-only would make every
    ``hybridkb add`` wait out the lock for the server's whole life: it holds the file
    for writing instead and serves the writers, while its own tools stay read-only."""
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("notes").add_texts(["Tax depreciation of office equipment."])
    s = Session(tmp_path, db, "--read-only")
    s.request(1, "initialize", INIT)
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    names = {t["name"] for t in s.request(2, "tools/list", {})["result"]["tools"]}
    assert "search_kb" in names and "add_kb_documents" not in names
    text, is_error = s.call(3, "search_kb", {"query": "depreciation"})
    assert not is_error and "depreciation" in text
    text, is_error = s.call(4, "add_kb_documents", {"collection_name": "notes", "documents": "x"})
    assert is_error

    (tmp_path / "vitamins.txt").write_text("Vitamin D and the risk of tuberculosis.")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
    env.update(HYBRIDKB_MODEL="fake", HYBRIDKB_LOCK_TIMEOUT="0.5", HF_HUB_OFFLINE="1")
    added = subprocess.run(
        [sys.executable, str(HARNESS), "--db", str(db), "add", "notes", "vitamins.txt"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    text, is_error = s.call(5, "search_kb", {"query": "tuberculosis vitamin"})
    assert not is_error and "vitamins.txt" in text
    with hybridkb.connect(db, model="fake") as script:
        assert through_owner(script)
        script.collection("notes").add_texts(["A note from a script."])
    text, is_error = s.call(6, "search_kb", {"query": "note from a script"})
    assert not is_error and "A note from a script" in text
    assert s.close() == []


def test_a_read_only_server_reads_beside_readers_that_hold_the_file(tmp_path: Path) -> None:
    """Readers serve nobody: a read-only server that cannot take the file for writing
    reads beside them rather than failing."""
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("notes").add_texts(["Tax depreciation of office equipment."])
    with hybridkb.connect(db, model="fake", read_only=True) as reader:
        assert not through_owner(reader)
        s = Session(tmp_path, db, "--read-only")
        s.request(1, "initialize", INIT)
        s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        text, is_error = s.call(2, "search_kb", {"query": "depreciation"})
        assert not is_error and "depreciation" in text
        assert reader.collection("notes").count() == 1
        assert s.close() == []
