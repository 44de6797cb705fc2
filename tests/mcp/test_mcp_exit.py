"""How ``hybridkb mcp`` and the CLI end: never an abort, always a clean close.

An MCP host stops its server by closing stdin or with SIGTERM; a closed terminal
sends SIGHUP. Each must finish the calls in progress, wait for the background
threads (a model still loading in native code when the interpreter exits aborts the
process with SIGABRT), close the knowledge base (DuckDB checkpoints: no WAL left)
and remove the owner's endpoint file.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from internals import local_engine
from mcp_session import INIT, Session

import hybridkb
from hybridkb.embedders import Embedder
from hybridkb.errors import ConfigError
from hybridkb.lifecycle import Stopped, stop_on_signals
from hybridkb.mcp.stdio import StdioServer
from hybridkb.serve.endpoint import endpoint_file
from hybridkb.storage.base import CollectionRecord

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)


def _wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.01)


def _note(ident: str) -> str:
    return json.dumps([{"content": f"the note {ident} about herons", "id": ident}])


def _exit_code(s: Session) -> int:
    assert s.proc.stdin is not None
    s.proc.stdin.close()
    return _wait_for_exit(s)


def _wait_for_exit(
    s: Session, timeout: float = float(os.environ.get("HKB_TEST_EXIT_WAIT", 180))
) -> int:
    """The server's exit code; if it has not exited in ``timeout``, fail with where each of
    its threads waits (the harness dumps them on SIGUSR1)."""
    try:
        return s.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        s.proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        s.proc.kill()
        s.proc.wait()
        pytest.fail(f"the server did not exit in {timeout} s:\n{s.stderr_path.read_text()[-6000:]}")


def _answers(s: Session) -> list[dict[str, Any]]:
    found = list(s.seen)
    while line := s.lines.get(timeout=30):
        found.append(json.loads(line))
    return found


def _stored_ids(db: Path) -> set[str]:
    with hybridkb.connect(db, model="fake") as kb:
        if "notes" not in kb.collection_names():
            return set()
        return {d.document_id for d in kb.collection("notes").documents(limit=10_000)}


def test_closing_stdin_waits_for_the_model_still_loading(tmp_path: Path) -> None:
    loads = tmp_path / "loads"
    loads.mkdir()
    s = Session(tmp_path, tmp_path / "kb.duckdb", HKB_TEST_MODEL_LOAD_DIR=str(loads))
    s.request(1, "initialize", INIT)
    assert not s.call(2, "kb_list", {})[1]
    _wait_for(loads / "loading")
    assert _exit_code(s) == 0
    assert (loads / "loaded").exists(), "the process exited while the model was loading"


def _close_stdin_at_random_moments(tmp_path: Path, runs: int) -> None:
    db = tmp_path / "kb.duckdb"
    rng = random.Random(23)
    answered: set[str] = set()
    codes = []
    for run in range(runs):
        loads = tmp_path / f"loads{run}"
        loads.mkdir()
        s = Session(tmp_path, db, HKB_TEST_MODEL_LOAD_DIR=str(loads))
        s.request(1, "initialize", INIT)
        if run == 0:
            assert not s.call(2, "create_kb_collection", {"collection_name": "notes"})[1]
        ident = f"note-{run}"
        s.send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {
                    "name": "add_kb_documents",
                    "arguments": {"collection_name": "notes", "documents": _note(ident)},
                },
            }
        )
        time.sleep(rng.uniform(0, 1.2))
        codes.append(_exit_code(s))
        for got in _answers(s):
            if got.get("id") == 3 and not got["result"]["isError"]:
                answered.add(ident)
        assert not (loads / "loading").exists() or (loads / "loaded").exists()
        assert not endpoint_file(db).exists()
    assert codes == [0] * runs, s.stderr_path.read_text()[-2000:]
    assert answered, "no add was answered before stdin closed; the test proves nothing"
    assert answered <= _stored_ids(db)


def test_closing_stdin_at_random_moments_never_aborts_nor_loses_an_answered_add(
    tmp_path: Path,
) -> None:
    _close_stdin_at_random_moments(tmp_path, runs=15)


@pytest.mark.slow
def test_closing_stdin_at_random_moments_100_times(tmp_path: Path) -> None:
    _close_stdin_at_random_moments(tmp_path, runs=100)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("moment", ["during", "after"])
def test_a_stop_signal_closes_the_knowledge_base_cleanly(
    tmp_path: Path, signum: int, moment: str
) -> None:
    db = tmp_path / "kb.duckdb"
    loads = tmp_path / "loads"
    loads.mkdir()
    s = Session(tmp_path, db, HKB_TEST_MODEL_LOAD_DIR=str(loads))
    s.request(1, "initialize", INIT)
    assert not s.call(2, "create_kb_collection", {"collection_name": "notes"})[1]
    arguments = {"collection_name": "notes", "documents": _note("kept")}
    if moment == "after":
        assert not s.call(3, "add_kb_documents", arguments)[1]
    else:
        s.send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "add_kb_documents", "arguments": arguments},
            }
        )
    assert endpoint_file(db).exists()  # the server owns the file and serves it
    s.proc.send_signal(signum)
    assert _wait_for_exit(s) == 128 + signum, s.stderr_path.read_text()[-2000:]
    assert f"stopped by signal {signum}" in s.stderr_path.read_text()
    answered = (
        any(got.get("id") == 3 and not got["result"]["isError"] for got in _answers(s))
        or moment == "after"
    )
    assert not endpoint_file(db).exists()
    assert not Path(f"{db}.wal").exists(), "the knowledge base was not closed"
    # The next opener (another process) finds a file it uses normally.
    listed = subprocess.run(
        [sys.executable, "-m", "hybridkb", "--db", str(db), "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HYBRIDKB_MODEL": "fake"},
    )
    assert listed.returncode == 0, listed.stderr
    assert [c["name"] for c in json.loads(listed.stdout)["collections"]] == ["notes"]
    if answered:
        assert _stored_ids(db) == {"kept"}


def test_a_stop_signal_that_another_thread_takes_still_stops_the_server(tmp_path: Path) -> None:
    # The kernel hands a process's SIGTERM to any thread that does not block it, and Python
    # only flags it for the main thread. A server whose main thread blocked in a read never
    # ran the handler: an MCP host's SIGTERM was lost (the process hung until killed).
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()

    def no_knowledge_base() -> hybridkb.KnowledgeBase:
        raise ConfigError("no knowledge base in this test")

    server = StdioServer(
        no_knowledge_base,
        sql_tool=False,
        close=False,
        reader=os.fdopen(requests_r, "rb"),
        out_fd=answers_w,
    )
    waiting, ended = threading.Event(), threading.Event()
    ended_before_input_closed: list[bool] = []

    def signal_from_this_thread() -> None:
        waiting.wait()
        time.sleep(0.3)  # the main thread waits for a request by now
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # this thread takes it
        ended_before_input_closed.append(ended.wait(30))
        os.close(requests_w)  # a server that missed the signal ends here, at end of input

    helper = threading.Thread(target=signal_from_this_thread, daemon=True)
    helper.start()
    with pytest.raises(Stopped), stop_on_signals():
        waiting.set()
        try:
            server.run()
        finally:
            ended.set()
    helper.join(60)
    os.close(answers_r)
    os.close(answers_w)
    assert ended_before_input_closed == [True]


def test_close_waits_for_the_threads_prepare_search_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = threading.Event()
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        kb.create_collection("notes")

        def slow_load(record: CollectionRecord) -> Embedder:
            time.sleep(0.5)
            loaded.set()
            return kb.embedder(record.model)

        monkeypatch.setattr(local_engine(kb), "embedder_for", slow_load)  # the loads' own
        kb.prepare_search(["notes"])
    assert loaded.is_set(), "close returned while prepare_search's model load ran"


def _search_with_rerank(tmp_path: Path, runs: int, model: str) -> None:
    db = tmp_path / "kb.duckdb"
    env = {**os.environ, "HYBRIDKB_MODEL": model}
    with hybridkb.connect(db, model=model) as kb:
        kb.create_collection("notes").add_texts(["herons wade in shallow water"])
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-m", "hybridkb", "--db", str(db), "search", "notes", "heron",
             "--rerank"],
            capture_output=True, text=True, timeout=180, env=env,
        )  # fmt: skip
        # A setting is missing: the CLI's exit code for configuration errors, never an abort.
        assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
        assert done.stderr.count("\n") == 1 and "no reranker is set" in done.stderr


def test_search_rerank_without_a_reranker_fails_in_one_line(tmp_path: Path) -> None:
    _search_with_rerank(tmp_path, runs=3, model="fake")


@pytest.mark.slow
@pytest.mark.model
def test_search_rerank_without_a_reranker_never_aborts_with_the_real_model(
    tmp_path: Path, real_model_name: str
) -> None:
    _search_with_rerank(tmp_path, runs=30, model=real_model_name)
