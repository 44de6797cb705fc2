"""Moving an older file to the current schema: a process killed at any moment of it leaves
a file that opens (and is migrated by the next writer), and the commands that only read
read an older file as it is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from schemagen import old_schema_file, stored_version

import hybridkb
from hybridkb.cli.commands import main
from hybridkb.errors import BackendError
from hybridkb.mcp.server import build_server
from hybridkb.storage.duckdb.schema import MIGRATIONS
from hybridkb.storage.transfer import copy_kb

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

TEXTS = ["lemurs live on Madagascar", "otters hold hands while sleeping"]
KILLED = "import sys; from internals import die_in_migration; die_in_migration(int(sys.argv[2]));"
OPEN = "import hybridkb; hybridkb.connect(sys.argv[1], model='fake').close()"


def _old_file(tmp_path: Path, version: int) -> Path:
    db = tmp_path / "old.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add_texts(TEXTS, ids=["a", "b"])
    old_schema_file(db, version)
    return db


def _problems(kb: hybridkb.KnowledgeBaseAPI) -> list[str]:
    return [f.check for h in kb.doctor() for f in h.findings if f.count]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
@pytest.mark.parametrize(
    ("version", "killed_at"), [(3, 4), (3, 5), (3, 6), (1, 2), (1, 6), (0, 5), (0, 6)]
)
def test_a_process_killed_while_it_migrates_leaves_a_file_that_opens(
    tmp_path: Path, version: int, killed_at: int
) -> None:
    db = _old_file(tmp_path, version) if version else tmp_path / "old.duckdb"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "HYBRIDKB_SERVE": "false"}
    done = subprocess.run(
        [sys.executable, "-c", KILLED + OPEN, str(db), str(killed_at)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    with hybridkb.connect(db, model="fake") as kb:  # the next writer migrates it
        if not version:  # a new file, killed while it was created
            kb.create_collection("Notes").add_texts(TEXTS, ids=["a", "b"])
        assert kb["Notes"].search("lemurs Madagascar", k=1)[0].document_id == "a"
        assert _problems(kb) == []
        kb["Notes"].add_texts(["a third note"], ids=["c"])
        assert kb["Notes"].count() == 3
    assert stored_version(db) == len(MIGRATIONS)
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".hkbidx"))
    assert left == ["old.duckdb"]  # no copy, no log and no side folder


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_commands_that_read_read_an_older_file_as_it_is(
    tmp_path: Path, version: int, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _old_file(tmp_path, version)
    with hybridkb.connect(db, model="fake", read_only=True) as kb:
        assert kb.collection_names() == ["Notes"]
        assert kb["Notes"].search("otters", k=1)[0].document_id == "b"
        assert kb.describe("Notes").documents == 2
        assert kb["Notes"].sources() == []
    assert copy_kb(str(db), str(tmp_path / "copy.duckdb"))["documents"] == 2
    capsys.readouterr()
    for command in (
        ["list"],
        ["describe", "Notes"],
        ["search", "Notes", "lemurs"],
        ["sources", "Notes"],
        ["copy", "--to", str(tmp_path / "copied-by-cli.duckdb")],
    ):
        assert main(["--db", str(db), *command, "--json"]) == 0, capsys.readouterr().err
        assert json.loads(capsys.readouterr().out) is not None
    assert stored_version(db) == version  # reading changed nothing


READ_TOOL_CALLS = {
    "search_kb": {"query": "otters"},
    "kb_list": {},
    "describe_kb_collection": {"collection_name": "Notes"},
    "query_kb_sql": {"sql": "SELECT count(*) AS documents FROM kb_documents"},
    "graph_neighbors": {"node_id": "doc:1:a"},
    "graph_find_paths": {"source_id": "doc:1:a", "target_id": "doc:1:b"},
    "graph_search_kb": {"query": "otters"},
}


@pytest.mark.parametrize("version", [1, 3, 5])
def test_a_read_only_mcp_server_serves_an_older_file_as_it_is(tmp_path: Path, version: int) -> None:
    db = _old_file(tmp_path, version)
    with hybridkb.connect(db, model="fake", read_only=True, enable_sql_tool=True) as kb:
        answers = anyio.run(_call_every_tool, build_server(kb, read_only=True))
    for name, (failed, text) in answers.items():
        assert not failed and "Error" not in text, f"{name}: {text}"
    assert "otters" in answers["search_kb"][1] and "Notes" in answers["kb_list"][1]
    assert stored_version(db) == version


async def _call_every_tool(server: Any) -> dict[str, tuple[bool, str]]:
    answers = {}
    async with Client(server) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        assert sorted(listed) == sorted(READ_TOOL_CALLS)
        for name in listed:
            result: Any = await client.call_tool(name, READ_TOOL_CALLS[name])
            answers[name] = (bool(result.is_error), str(result.content[0].text))
    return answers


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_a_file_an_older_version_left_unopenable_says_what_to_do(tmp_path: Path) -> None:
    db = _old_file(tmp_path, 3)
    # What an older hybridkb did: migration 4 in place, killed before its checkpoint.
    code = (
        "import os, sys, duckdb; con = duckdb.connect(sys.argv[1]);"
        " con.execute('ALTER TABLE hybridkb_collections ADD COLUMN embedding JSON');"
        " os.kill(os.getpid(), 9)"
    )
    subprocess.run([sys.executable, "-c", code, str(db)], check=False)
    with pytest.raises(
        BackendError, match=r"cannot replay its write-ahead log.*move .*\.wal aside"
    ):
        hybridkb.connect(db, model="fake")
    os.replace(f"{db}.wal", f"{db}.wal.bad")  # what the message says
    with hybridkb.connect(db, model="fake") as kb:
        assert kb["Notes"].count() == 2
    assert stored_version(db) == len(MIGRATIONS)


@pytest.mark.postgres
def test_a_postgres_database_of_an_older_schema_reads_read_only(pg_url: str) -> None:
    import psycopg

    from hybridkb.storage.postgres.sources import FILE_STATES, SOURCES

    with hybridkb.connect(pg_url, model="fake") as kb:
        kb.create_collection("Notes").add_texts(TEXTS, ids=["a", "b"])
    with psycopg.connect(pg_url, autocommit=True) as con:  # back to schema 2
        con.execute(f"DROP TABLE {SOURCES}")
        con.execute(f"DROP TABLE {FILE_STATES}")
        con.execute("ALTER TABLE hybridkb.hybridkb_collections DROP COLUMN embedding")
        con.execute("UPDATE hybridkb.hybridkb_meta SET value = '2' WHERE key = 'schema_version'")
    with hybridkb.connect(pg_url, model="fake", read_only=True) as kb:
        assert kb.collection_names() == ["Notes"]
        assert kb["Notes"].search("otters", k=1)[0].document_id == "b"
        assert kb.describe("Notes").documents == 2
