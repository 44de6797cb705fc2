"""The SQL tool's worker holds its limits: private spill folders, bounded memory and waits.

Issue 23 item 4: an in-memory DuckDB spills into ``.tmp`` under the working folder,
shared by every worker started there (two workspaces corrupted each other's blocks)
and left behind when a worker is killed; a query reached 3-4 GB under DuckDB's
memory_limit; calls queued behind a slow one held the MCP server's threads; and the
first query after a write failed with "the configuration has been locked".
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from internals import local
from test_mcp_stdio import INIT, Session

import hybridkb
from hybridkb.errors import BackendError, ConfigError
from hybridkb.sql_tool import engine_for, run_sql

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
    assert run_sql(sqlkb, "SELECT count(*) FROM kb_documents").rows == [(2,)]
    sqlkb.collection("notes").add_texts(["storks fly"])
    assert run_sql(sqlkb, "SELECT count(*) FROM kb_documents").rows == [(3,)]
    sqlkb.collection("notes").add_texts(["cranes dance"])
    assert run_sql(sqlkb, "SELECT count(*) FROM kb_documents").rows == [(4,)]


def test_spill_files_go_to_a_private_folder_per_worker_removed_when_it_is_killed(
    sqlkb: Any, tmp_path: Path, temp_root: Path
) -> None:
    other = sqlkb.in_workspace("other")
    run_sql(sqlkb, "SELECT 1")
    run_sql(other, "SELECT 1")
    folders = {engine_for(kb).spill_dir for kb in (sqlkb, other)}
    assert len(folders) == 2 and None not in folders  # two workspaces never share one
    for folder in folders:
        assert folder is not None and Path(folder).parent == temp_root
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for _ in range(3):
        with pytest.raises(ConfigError, match="stopped after"):
            run_sql(sqlkb, SPILLING, timeout=1.5)
    engine_for(other).stop()
    assert sorted(temp_root.glob("hybridkb-sql-*")) == []
    assert not (tmp_path / ".tmp").exists()  # never the working folder


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_query_past_the_memory_bound_fails_in_one_line_and_rss_stays_bounded(
    sqlkb: Any,
) -> None:
    run_sql(sqlkb, "SELECT 1")
    # 3-4 GB of one string: DuckDB's memory_limit does not count it, the OS limit does.
    with pytest.raises(ConfigError, match="(?i)out of memory") as failed:
        run_sql(sqlkb, "SELECT length(repeat('x', 3000000000))", timeout=60)
    assert "\n" not in str(failed.value)
    proc = engine_for(sqlkb).proc
    assert proc is not None and proc.poll() is None  # refused, not killed
    status = Path(f"/proc/{proc.pid}/status").read_text()
    peak_kb = int(next(x for x in status.splitlines() if x.startswith("VmHWM")).split()[1])
    print(f"worker peak RSS {peak_kb / 1024:.0f} MiB", file=sys.stderr)
    assert peak_kb < 1_500_000, f"worker peak RSS {peak_kb} kB"


def test_queued_calls_wait_no_longer_than_their_limit(sqlkb: Any) -> None:
    import threading

    results: list[str] = []

    def slow() -> None:
        try:
            run_sql(sqlkb, SLOW, timeout=30)
        except (ConfigError, BackendError) as exc:  # stopped by the test
            results.append(str(exc))

    first = threading.Thread(target=slow)
    first.start()
    time.sleep(0.5)
    with pytest.raises(ConfigError, match="stopped after 1s"):
        run_sql(sqlkb, "SELECT 1", timeout=1)  # waited for the busy worker, not 30 s
    assert first.is_alive()
    engine_for(sqlkb).stop()
    first.join(60)


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
