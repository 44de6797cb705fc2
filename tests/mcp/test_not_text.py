"""Strings that are not text (a lone surrogate such as '\\ud800') get a one-line error from
every front end: the Python API, an owner's client, the CLI and MCP (issue 23 item 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from internals import through_owner
from mcp_session import INIT, Session

import hybridkb
from hybridkb.errors import ConfigError
from hybridkb.serve.endpoint import endpoint_file

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

BAD = "x\ud800y"

CALLS: dict[str, Callable[[Any], Any]] = {
    "collection name": lambda kb: kb.create_collection(BAD),
    "note": lambda kb: kb.collection("c").add_texts([BAD]),
    "id": lambda kb: kb.collection("c").add_texts(["fine"], ids=[BAD]),
    "metadata value": lambda kb: kb.collection("c").add_texts(["ok"], metadatas=[{"k": BAD}]),
    "metadata key": lambda kb: kb.collection("c").add_texts(["ok2"], metadatas=[{BAD: 1}]),
    "query": lambda kb: kb.search(BAD),
    "where": lambda kb: kb.search("q", where={"k": BAD}),
    "get": lambda kb: kb.collection("c").get(BAD),
    "delete": lambda kb: kb.collection("c").delete([BAD]),
}


def _check_every_call(kb: Any) -> None:
    for label, call in CALLS.items():
        with pytest.raises(ConfigError, match="lone surrogate") as failed:
            call(kb)
        assert "\n" not in str(failed.value), label
    assert kb.collection("c").count() == 0  # nothing half-written


def test_the_python_api_refuses_strings_that_are_not_text(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        kb.create_collection("c")
        _check_every_call(kb)


def test_a_client_of_an_owner_gets_the_same_error_not_a_lock(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("c")
    owner = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, hybridkb; kb = hybridkb.connect(sys.argv[1], model='fake', serve=True); "
         "sys.stdin.read(); kb.close()", str(db)],
        stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not endpoint_file(db).exists():
            assert time.monotonic() < deadline and owner.poll() is None
            time.sleep(0.05)
        with hybridkb.connect(db, model="fake", lock_timeout=2) as client:
            assert through_owner(client)
            started = time.monotonic()
            _check_every_call(client)
            client.collection("c").add_texts(["still served"])  # the owner is fine
            assert time.monotonic() - started < 60  # no retry loop waiting out a lock
    finally:
        assert owner.stdin is not None
        owner.stdin.close()
        owner.wait(timeout=60)


def test_the_cli_refuses_an_argument_that_is_not_text(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("c")
    env = {**os.environ, "HYBRIDKB_MODEL": "fake"}
    bad_arg = b"caf\xed\xa0\x80"  # UTF-8 of a surrogate: Python reads it as surrogate escapes
    for args in ([b"search", b"c", bad_arg], [b"create", bad_arg], [b"delete", b"c", bad_arg]):
        done = subprocess.run(
            [sys.executable.encode(), b"-m", b"hybridkb", b"--db", str(db).encode(), *args],
            capture_output=True, timeout=120, env=env,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert b"lone surrogate" in done.stderr and done.stderr.count(b"\n") == 1


def test_mcp_tools_answer_strings_that_are_not_text_with_an_error(tmp_path: Path) -> None:
    s = Session(tmp_path, tmp_path / "kb.duckdb")
    s.request(1, "initialize", INIT)
    assert not s.call(2, "create_kb_collection", {"collection_name": "c"})[1]
    note = json.dumps([{"content": BAD, "id": "n1"}])
    for ident, (name, args) in enumerate(
        [
            ("add_kb_documents", {"collection_name": "c", "documents": note}),
            ("create_kb_collection", {"collection_name": BAD}),
            ("search_kb", {"query": BAD}),
            ("delete_kb_documents", {"collection_name": "c", "ids": BAD}),
        ],
        start=3,
    ):
        text, is_error = s.call(ident, name, args)
        assert is_error and "lone surrogate" in text and "\n" not in text, (name, text)
    s.close()
