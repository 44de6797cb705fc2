"""A team on one PostgreSQL, as the PostgreSQL guide sets it up (issue 37): the guide's roles SQL,
run as written; a reader role searches and is refused writes in one line; one
``hybridkb mcp`` per person stays in its workspace, and a shared workspace is shared;
pgvector's version is checked at connect."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import psycopg
import pytest
from internals import postgres_storage
from mcp_client import StdioClient
from paths import ROOT
from pg_server import ENV_URL, cli_env, database_url, drop_database, hybridkb_cli

import hybridkb
from hybridkb.agents.tools import make_tools
from hybridkb.errors import BackendError, GraphError, KBError
from hybridkb.mcp.server import build_server
from hybridkb.mcp.tools import advertised_tools
from hybridkb.storage.base import document_node_id
from hybridkb.storage.postgres.connection import check_pgvector

pytestmark = [pytest.mark.process, pytest.mark.postgres]

GUIDE = ROOT / "docs" / "guide" / "postgres.md"


def readme_sql() -> list[str]:
    """The SQL blocks of the PostgreSQL guide's team section, in order."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("## A team server")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


def as_role(url: str, role: str, password: str) -> str:
    """``url`` logging in as ``role`` (the bundled server authenticates the account by peer
    and ignores the password; a server of HYBRIDKB_TEST_POSTGRES_URL checks it)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{role}:{password}@{host}", parts.path, parts.query, ""))


@pytest.fixture
def team(pg_admin_url: str) -> Iterator[dict[str, str]]:
    """The README's roles and database, under names of this test run."""
    tag = os.getpid()
    names = {"kb_writer": f"hkbw_{tag}", "kb_reader": f"hkbr_{tag}", "kb": f"hkb_team_{tag}"}

    def local(sql: str) -> list[str]:
        for old, new in names.items():
            sql = re.sub(rf"\b{old}\b", new, sql)
        return [s.strip() for s in sql.split(";") if s.strip()]

    server, database = readme_sql()
    passwords = dict(re.findall(r"ROLE (\w+) LOGIN PASSWORD '([^']+)'", server))
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        for statement in local(server):
            admin.execute(statement)
    url = database_url(pg_admin_url, names["kb"])
    try:
        with psycopg.connect(url, autocommit=True) as owner:
            for statement in local(database):
                owner.execute(statement)
        yield {
            "writer": as_role(url, names["kb_writer"], passwords["kb_writer"]),
            "reader": as_role(url, names["kb_reader"], passwords["kb_reader"]),
            "reader_role": names["kb_reader"],
        }
    finally:
        drop_database(pg_admin_url, names["kb"])
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            for role in (names["kb_reader"], names["kb_writer"]):
                admin.execute(f"DROP ROLE IF EXISTS {role}")


def test_the_readme_roles_give_a_writer_and_a_reader(team: dict[str, str], tmp_path: Path) -> None:
    if os.environ.get(ENV_URL):
        pytest.skip("needs the bundled server's peer authentication for the new roles")
    with hybridkb.connect(team["writer"], model="fake") as writer:
        writer.create_collection("Handbook").add_texts(
            ["Annual leave is four weeks.", "Laptops are depreciated over three years."],
            ids=["leave", "laptops"],
        )
    with hybridkb.connect(team["reader"], model="fake") as reader:
        assert postgres_storage(reader).read_only and reader.read_only
        handbook = reader.collection("Handbook")
        assert handbook.search("annual leave", k=1)[0].document_id == "leave"
        leave, laptops = (document_node_id(handbook.record.id, i) for i in ("leave", "laptops"))
        note = tmp_path / "note.md"
        note.write_text("A reader's note on leave.", encoding="utf-8")
        refusals: list[KBError] = []
        for write in (
            lambda: handbook.delete(["leave"]),
            lambda: reader.create_collection("Mine"),
            lambda: reader.drop_collection("Handbook"),
            lambda: handbook.add_texts(["A reader's note."]),
            lambda: handbook.add([note], allowed_paths=[tmp_path]),
            lambda: handbook.sync(),
            lambda: reader.graph.relate(leave, laptops),
            lambda: reader.graph.set_alias("vacation", "leave"),
        ):
            with pytest.raises((BackendError, GraphError)) as caught:
                write()
            refusals.append(caught.value)
        role = team["reader_role"]
        # One line each, naming the role and the way to write: connect as a writer role.
        assert all(
            "\n" not in str(e) and f"role {role!r} may only read" in str(e) and "writer" in str(e)
            for e in refusals
        ), refusals
    with hybridkb.connect(team["writer"], model="fake") as writer:
        assert writer.collection("Handbook").count() == 2  # nothing a reader did stuck


def test_a_reader_role_gets_read_only_tools_at_every_door(
    team: dict[str, str], tmp_path: Path
) -> None:
    """No --read-only given: the role's grants make the LangChain tools, the SDK server's
    list (HTTP) and ``hybridkb mcp`` on stdio (which lists before it opens) read-only."""
    if os.environ.get(ENV_URL):
        pytest.skip("needs the bundled server's peer authentication for the new roles")
    with hybridkb.connect(team["writer"], model="fake") as writer:
        writer.create_collection("Handbook").add_texts(["Annual leave is four weeks."])
    readers = [t["name"] for t in advertised_tools(read_only=True, sql_tool=True)]
    with hybridkb.connect(team["reader"], model="fake", enable_sql_tool=True) as reader:
        assert [t.name for t in make_tools(reader)] == readers
        assert [t.name for t in anyio.run(build_server(reader).list_tools)] == readers
    server = mcp_server(team["reader"], "default", tmp_path)
    try:
        listed = server.request("tools/list")["tools"]
        assert [t["name"] for t in listed] == readers
        found = server.call("search_kb", query="annual leave", collection_name="Handbook")
        assert not found[0] and "four weeks" in found[1], found
        is_error, text = server.call(
            "add_kb_documents", collection_name="Handbook", documents="A reader's note."
        )
        assert is_error and "\n" not in text and "add_kb_documents" in text, text
    finally:
        assert server.close() == 0, server.stderr_tail()
    assert "Traceback" not in server.stderr_tail()
    with hybridkb.connect(team["writer"], model="fake") as writer:
        assert writer.collection("Handbook").count() == 1


def test_pgvector_older_than_the_minimum_is_one_line() -> None:
    url = "postgresql://kb_writer:secret@db.example/kb"
    with pytest.raises(BackendError) as caught:
        check_pgvector("0.4.4", url)
    message = str(caught.value)
    assert "\n" not in message and "0.4.4" in message and "ALTER EXTENSION vector UPDATE" in message
    assert "secret" not in message
    check_pgvector("0.5.0", url)
    check_pgvector("0.10.1", url)


# -- one MCP server per person on one database ------------------------------------------


def mcp_server(url: str, workspace: str, tmp_path: Path) -> StdioClient:
    env = cli_env(tmp_path, HYBRIDKB_DB=url, HYBRIDKB_ENABLE_SQL_TOOL="true")
    client = StdioClient(
        [sys.executable, "-m", "hybridkb", "--workspace", workspace, "mcp"],
        env,
        cwd=str(tmp_path),
        stderr_path=tmp_path / f"{workspace}.stderr",
    )
    client.handshake()
    return client


def test_mcp_servers_on_one_database_stay_in_their_workspaces(pg_url: str, tmp_path: Path) -> None:
    with hybridkb.connect(pg_url, model="fake") as kb:
        kb.in_workspace("alice").create_collection("Private").add_texts(
            ["Alice's secret: the salary review is in May."], ids=["a1"]
        )
        bob = kb.in_workspace("bob").create_collection("Private")
        bob.add_texts(["Bob's secret: the merger code is BLUEBIRD."], ids=["b1"])
        bob_node = document_node_id(bob.record.id, "b1")
        kb.in_workspace("team").create_collection("Handbook").add_texts(
            ["Annual leave is four weeks."], ids=["leave"]
        )
    servers: list[StdioClient] = []
    try:
        alice, alice_team, bob_team = (
            mcp_server(pg_url, "alice", tmp_path),
            mcp_server(pg_url, "team", tmp_path),
            mcp_server(pg_url, "team", tmp_path),
        )
        servers += [alice, alice_team, bob_team]
        answers: list[tuple[bool, str]] = [
            alice.call("kb_list"),
            alice.call("search_kb", query="secret merger code"),
            alice.call("search_kb", query="secret merger code", collection_name="Private"),
            alice.call("search_kb", query="merger", collection_name="bob/Private"),
            alice.call("search_kb", query="merger", collection_name="../bob/Private"),
            alice.call("describe_kb_collection", collection_name="Private"),
            alice.call("query_kb_sql", sql="SELECT text FROM kb_chunks"),
            alice.call("query_kb_sql", sql="SELECT text FROM hkb_ws2.c2_chunks"),
            alice.call("graph_neighbors", node_id=bob_node),
        ]
        leaked = [text for _, text in answers if "BLUEBIRD" in text or "Bob's" in text]
        assert leaked == []
        assert "Alice's secret" in answers[1][1] and "Handbook" not in answers[0][1]
        # The shared workspace is shared: one person's server writes, another's reads it.
        is_error, text = alice_team.call(
            "add_kb_documents",
            collection_name="Handbook",
            documents="Expenses are claimed monthly.",
        )
        assert not is_error, text
        found = bob_team.call("search_kb", query="expenses claimed monthly")[1]
        assert "Expenses are claimed monthly." in found and "salary" not in found
    finally:
        codes = [server.close() for server in servers]
    assert codes == [0] * len(servers), [s.stderr_tail() for s in servers]
    for server in servers:
        assert "Traceback" not in server.stderr_tail()


def test_a_reader_s_writes_are_one_line_on_the_command_line(
    team: dict[str, str], tmp_path: Path
) -> None:
    if os.environ.get(ENV_URL):
        pytest.skip("needs the bundled server's peer authentication for the new roles")
    with hybridkb.connect(team["writer"], model="fake") as writer:
        writer.create_collection("Handbook").add_texts(["Annual leave is four weeks."])
    found = hybridkb_cli("--db", team["reader"], "search", "Handbook", "leave", cwd=tmp_path)
    assert found.returncode == 0 and "four weeks" in found.stdout, found.stderr
    dropped = hybridkb_cli("--db", team["reader"], "drop", "Handbook", "--yes", cwd=tmp_path)
    assert dropped.returncode == 1 and dropped.stderr.count("\n") == 1, dropped.stderr
    assert "may only read" in dropped.stderr and "Traceback" not in dropped.stderr
