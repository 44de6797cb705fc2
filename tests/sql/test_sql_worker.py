"""The SQL tool's worker holds its limits: private spill folders, bounded memory and waits.

Issue 23 item 4: an in-memory DuckDB spills into ``.tmp`` under the working folder,
shared by every worker started there (two workspaces corrupted each other's blocks)
and left behind when a worker is killed; a query reached 3-4 GB under DuckDB's
memory_limit; calls queued behind a slow one held the MCP server's threads; and the
first query after a write failed with "the configuration has been locked".
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from internals import local
from mcp_session import INIT, Session
from paths import SUPPORT

import hybridkb
from hybridkb.errors import BackendError, ConfigError
from hybridkb.sql.tool import engine_for

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

# Runs until the worker is killed at its time limit, spilling a join's hash table.
SPILLING = "SELECT count(*) FROM range(100000000) a(i) JOIN range(100000000) b(j) ON i = j"
SLOW = "SELECT sum(i) FROM range(10000000000) t(i)"


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tempfile's folder, watched by the test (the spill folders are made in it)."""
    root = tmp_path / "temp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.fixture
def sqlkb(tmp_path: Path, temp_root: Path) -> Iterator[Any]:
    with local(hybridkb.connect(tmp_path / "sql.duckdb", model="fake", enable_sql_tool=True)) as kb:
        kb.create_collection("notes").add_texts(["herons wade", "egrets stand"])
        yield kb
        for engine in (engine_for(kb), engine_for(kb.in_workspace("other"))):
            engine.stop()


def test_the_first_query_after_a_write_answers(sqlkb: Any) -> None:
    assert sqlkb.sql("SELECT count(*) FROM kb_documents").rows == [(2,)]
    sqlkb.collection("notes").add_texts(["storks fly"])
    assert sqlkb.sql("SELECT count(*) FROM kb_documents").rows == [(3,)]
    sqlkb.collection("notes").add_texts(["cranes dance"])
    assert sqlkb.sql("SELECT count(*) FROM kb_documents").rows == [(4,)]


def test_spill_files_go_to_a_private_folder_per_worker_removed_when_it_is_killed(
    sqlkb: Any, tmp_path: Path, temp_root: Path
) -> None:
    other = sqlkb.in_workspace("other")
    sqlkb.sql("SELECT 1")
    other.sql("SELECT 1")
    folders = {engine_for(kb).spill_dir for kb in (sqlkb, other)}
    assert len(folders) == 2 and None not in folders  # two workspaces never share one
    for folder in folders:
        assert folder is not None and Path(folder).parent == temp_root
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for _ in range(3):
        with pytest.raises(ConfigError, match="stopped after"):
            sqlkb.sql(SPILLING, timeout=1.5)
    engine_for(other).stop()
    assert sorted(temp_root.glob("hybridkb-sql-*")) == []
    assert not (tmp_path / ".tmp").exists()  # never the working folder


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_query_past_the_memory_bound_fails_in_one_line_and_rss_stays_bounded(
    sqlkb: Any,
) -> None:
    sqlkb.sql("SELECT 1")
    # 3-4 GB of one string: DuckDB's memory_limit does not count it, the OS limit does.
    with pytest.raises(ConfigError, match="(?i)out of memory") as failed:
        sqlkb.sql("SELECT length(repeat('x', 3000000000))", timeout=60)
    assert "\n" not in str(failed.value)
    proc = engine_for(sqlkb).proc
    assert proc is not None and proc.poll() is None  # refused, not killed
    status = Path(f"/proc/{proc.pid}/status").read_text()
    peak_kb = int(next(x for x in status.splitlines() if x.startswith("VmHWM")).split()[1])
    print(f"worker peak RSS {peak_kb / 1024:.0f} MiB", file=sys.stderr)
    assert peak_kb < 1_500_000, f"worker peak RSS {peak_kb} kB"


def test_queued_calls_wait_no_longer_than_their_limit(sqlkb: Any) -> None:
    results: list[str] = []

    def slow() -> None:
        try:
            sqlkb.sql(SLOW, timeout=30)
        except (ConfigError, BackendError) as exc:  # stopped by the test
            results.append(str(exc))

    first = threading.Thread(target=slow)
    first.start()
    time.sleep(0.5)
    with pytest.raises(ConfigError, match="stopped after 1s"):
        sqlkb.sql("SELECT 1", timeout=1)  # waited for the busy worker, not 30 s
    assert first.is_alive()
    engine = engine_for(sqlkb)
    engine.stop()
    first.join(60)
    # The stopped call ends with one line saying so: the stop kills the worker and the
    # call, reading the end of its pipe, lets go of it (its pipe was once closed under
    # it from this thread: EBADF escaped as an OSError, and the descriptor's number
    # could have been another file's by the time the call read it).
    assert not first.is_alive() and len(results) == 1, results
    assert "stopped during the query; send it again" in results[0]
    assert engine.proc is None and engine.spill_dir is None and not engine.stop_requested


def test_slow_sql_calls_leave_the_mcp_server_threads_to_a_search(tmp_path: Path) -> None:
    s = Session(tmp_path, tmp_path / "kb.duckdb", HYBRIDKB_ENABLE_SQL_TOOL="true")
    s.request(1, "initialize", INIT)
    assert not s.call(2, "create_kb_collection", {"collection_name": "notes"})[1]
    for n in range(16):
        s.send(
            {"jsonrpc": "2.0", "id": 100 + n, "method": "tools/call",
             "params": {"name": "query_kb_sql", "arguments": {"sql": SLOW}}}
        )  # fmt: skip
    started = time.monotonic()
    text, is_error = s.call(3, "search_kb", {"query": "herons", "collection_name": "notes"})
    waited = time.monotonic() - started
    assert not is_error, text
    # No slow query has come back yet: the search did not wait for one to end.
    slow_answers = [
        got for got in s.seen
        if got.get("id", 0) >= 100 and "busy" not in got["result"]["content"][0]["text"]
    ]  # fmt: skip
    assert slow_answers == []
    print(f"search answered in {waited:.2f} s beside 16 slow SQL calls", file=sys.stderr)
    rest = s.close()
    assert len([a for a in rest if a.get("id", 0) >= 100]) == 16  # every call answered


# -- issue 32 item 5: the worker dies with its owner ------------------------------------

OWNER = SUPPORT / "sql_owner.py"


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for init to reap it is not)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


def gone_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` ends within ``seconds`` (a ceiling for a loaded machine, not a
    measure: bench/sql_orphan.py times it)."""
    deadline = time.monotonic() + seconds
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


def start_owner(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    temp = tmp_path / "temp"
    temp.mkdir(exist_ok=True)
    owner = subprocess.Popen(
        [sys.executable, str(OWNER), str(tmp_path / "kb.duckdb"), *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(temp), "HF_HUB_OFFLINE": "1"},
    )
    assert owner.stdout is not None
    line = owner.stdout.readline()
    if not line:
        owner.kill()
        owner.wait()
        pytest.fail("the owner ended before its query ran")
    return owner, json.loads(line)


@pytest.mark.parametrize("hold_lifeline", [False, True], ids=["owner-killed", "lifeline-held"])
def test_a_worker_whose_owner_is_killed_mid_query_stops_and_removes_its_spill_folder(
    tmp_path: Path, hold_lifeline: bool
) -> None:
    if hold_lifeline and not sys.platform.startswith("linux"):
        pytest.skip("only Linux signals a parent's death")
    owner, found = start_owner(tmp_path, *(["--fork-holder"] if hold_lifeline else []))
    worker, spill = int(found["pid"]), Path(found["spill"])
    try:
        assert running(worker) and spill.is_dir()
        owner.kill()  # SIGKILL: no handler, no atexit, no finally runs in the owner
        owner.wait()
        assert gone_within(worker, 60), "the orphaned worker runs on"
        assert not spill.exists(), "the orphaned worker left its spill folder"
    finally:
        for pid in (worker, found.get("holder")):
            if pid is not None and running(int(pid)):
                os.kill(int(pid), signal.SIGKILL)
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_the_worker_outlives_the_thread_that_started_it(sqlkb: Any) -> None:
    # Linux signals the death of the parent *thread*: a server's pool thread that ends
    # must not take the workspace's worker with it.
    started = threading.Thread(target=sqlkb.sql, args=("SELECT 1",))
    started.start()
    started.join()
    proc = engine_for(sqlkb).proc
    assert proc is not None
    time.sleep(0.5)  # time for a signal to arrive, if one were sent
    assert sqlkb.sql("SELECT count(*) FROM kb_documents").rows == [(2,)]
    assert engine_for(sqlkb).proc is proc and proc.poll() is None


# -- issue 32 item 5: after a write, the worker gets what changed, not the workspace -----

DIGEST = {
    "documents": "SELECT count(*), md5(string_agg(concat_ws('|', collection, document_id, "
    "filename, metadata, bytes, chunk_count, added_at), '#' ORDER BY collection, document_id))"
    " FROM kb_documents",
    "chunks": "SELECT count(*), md5(string_agg(concat_ws('|', collection, chunk_id, text, "
    "metadata), '#' ORDER BY collection, chunk_id)) FROM kb_chunks",
    "collections": "SELECT string_agg(name, ',' ORDER BY name) FROM kb_collections",
    "nodes": "SELECT count(*), md5(string_agg(concat_ws('|', id, type, properties, "
    "collection_id, document_id), '#' ORDER BY id, collection_id, document_id))"
    " FROM kb_graph_nodes",
    "edges": "SELECT count(*), md5(string_agg(concat_ws('|', source, target, type, weight, "
    "properties, collection_id, document_id), '#' ORDER BY source, target, type, "
    "collection_id, document_id)) FROM kb_graph_edges",
}


def digests(kb: Any) -> dict[str, list[tuple[Any, ...]]]:
    return {name: kb.sql(sql, timeout=60).rows for name, sql in DIGEST.items()}


def bytes_read(pid: int) -> int:
    """What the process has read so far (its stdin: the rows it was sent)."""
    io = Path(f"/proc/{pid}/io").read_text()
    return int(next(x for x in io.splitlines() if x.startswith("rchar")).split()[1])


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="reads /proc/PID/io")
def test_a_one_note_add_sends_the_worker_that_note_not_the_workspace(sqlkb: Any) -> None:
    notes = sqlkb.collection("notes")
    text = "Herons and egrets wade in the marsh at dawn. " * 40  # ~1.8 kB a note
    notes.add_texts([f"{n} {text}" for n in range(300)])
    assert sqlkb.sql("SELECT count(*) FROM kb_documents").rows == [(302,)]
    proc = engine_for(sqlkb).proc
    assert proc is not None
    workspace = bytes_read(proc.pid)
    for n in range(3):  # an agent alternating one-note adds and SQL calls
        before = bytes_read(proc.pid)
        notes.add_texts([f"one more note {n}"])
        assert sqlkb.sql("SELECT count(*) FROM kb_documents").rows == [(303 + n,)]
        assert engine_for(sqlkb).proc is proc  # the same worker, not a new one loaded anew
        sent = bytes_read(proc.pid) - before
        assert sent < workspace / 20, f"{sent} bytes sent for one note ({workspace} in all)"


def writes_then_a_fresh_load(kb: Any) -> None:
    """Every kind of write after a worker was loaded: what it was sent since equals what
    a new worker loads."""
    notes = kb.create_collection("notes")
    birds = kb.create_collection("birds")
    notes.add_texts(["storks fly", "cranes dance"], ids=["s", "c"], metadatas=[{"n": 1}, {}])
    birds.add_texts(["ibis", "spoonbill"], ids=["i", "sp"])
    doomed = kb.create_collection("doomed")
    doomed.add_texts(["gone soon"])
    kb.sql("SELECT 1")
    proc = engine_for(kb).proc
    notes.add_texts(["storks soar now"], ids=["s"], metadatas=[{"n": 2}])  # changed
    notes.delete(["c"])  # gone
    birds.add_texts(["flamingo"], ids=["f"])  # new
    kb.drop_collection("doomed")  # a whole collection gone
    kb.create_collection("fresh").add_texts(["a new collection"])
    kb.graph.add_node("concept:wading", "concept", {"note": "mine"})  # a user's rows
    kb.graph.relate("concept:wading", "concept:wading", "same")
    assert kb.sql("SELECT count(*) FROM kb_graph_nodes").rows != [(0,)]
    kb.graph.set_alias("storks", "stork")
    kb.graph.rebuild("notes")  # graph rows re-derived, no document written
    kept = digests(kb)
    assert engine_for(kb).proc is proc
    assert kept["collections"] == [("birds,fresh,notes",)]
    engine_for(kb).stop()  # a new worker, loaded with everything
    assert digests(kb) == kept


def test_what_a_worker_is_sent_after_writes_equals_a_fresh_load(tmp_path: Path) -> None:
    with local(hybridkb.connect(tmp_path / "kb.duckdb", model="fake", enable_sql_tool=True)) as kb:
        try:
            writes_then_a_fresh_load(kb)
        finally:
            engine_for(kb).stop()


@pytest.mark.postgres
def test_the_same_on_postgres(pg_url: str) -> None:
    with local(hybridkb.connect(pg_url, model="fake", enable_sql_tool=True)) as kb:
        try:
            writes_then_a_fresh_load(kb)
        finally:
            engine_for(kb).stop()
