"""Read-only SQL over the workspace views: answers structured questions, refuses everything else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

import hybridkb
from hybridkb.agents.tools import make_tools
from hybridkb.errors import ConfigError
from hybridkb.sql.worker import Refused, check_tree
from hybridkb.storage.duckdb.schema import table_names

# A query runs in a worker process (hybridkb/sql/worker.py): every test that runs one is
# marked `process`.


@pytest.fixture
def sqlkb(tmp_path: Path) -> Any:
    with hybridkb.connect(tmp_path / "sql.duckdb", model="fake", enable_sql_tool=True) as kb:
        yield kb


def _files(tmp_path: Path, names: list[str]) -> list[Path]:
    out = []
    for name in names:
        p = tmp_path / name
        p.write_text(f"text of {name}")
        out.append(p)
    return out


def _backdate(kb: Any, collection: str, filename: str, when: str) -> None:
    t = table_names(kb.record(collection).id)
    kb.storage.transaction(
        lambda con: con.execute(
            f"UPDATE {t['documents']} SET added_at = ?::TIMESTAMPTZ WHERE filename = ?",
            [when, filename],
        )
    )


@pytest.mark.process
def test_how_many_pdfs_did_i_add_last_month(sqlkb: Any, tmp_path: Path) -> None:
    # .txt files stand in for PDFs here; the question is about names and dates.
    coll = sqlkb.create_collection("Tax Documents")
    coll.add(_files(tmp_path, ["a.txt", "b.txt", "c.md", "d.txt"]))
    sqlkb.create_collection("Other").add(_files(tmp_path, ["e.txt"]))
    last_month = "SELECT date_trunc('month', now()) - INTERVAL 15 DAY"
    when = str(sqlkb.storage.query(last_month)[0][0])
    for name in ("a.txt", "b.txt", "c.md"):
        _backdate(sqlkb, "Tax Documents", name, when)
    sql = (
        "SELECT count(*) AS n FROM kb_documents WHERE collection = 'Tax Documents' "
        "AND filename ILIKE '%.txt' AND added_at >= date_trunc('month', now()) - INTERVAL 1 MONTH "
        "AND added_at < date_trunc('month', now())"
    )
    result = sqlkb.sql(sql)
    assert result.columns == ["n"] and result.rows == [(2,)]
    tools = {t.name: t for t in make_tools(sqlkb)}
    msg = tools["query_kb_sql"].invoke(
        {"type": "tool_call", "id": "1", "name": "query_kb_sql", "args": {"sql": sql}}
    )
    assert isinstance(msg, ToolMessage) and isinstance(msg.content, str)
    assert msg.content.splitlines() == ["1 row:", "n", "2"]
    assert msg.artifact["rows"] == [[2]]


@pytest.mark.process
def test_views_have_the_documented_columns(sqlkb: Any) -> None:
    sqlkb.create_collection("C").add_texts(["hello world"], [{"year": 2024}], ["n1"])
    docs = sqlkb.sql("SELECT * FROM kb_documents")
    assert docs.columns == [
        "collection",
        "document_id",
        "filename",
        "path",
        "source",
        "metadata",
        "language",
        "bytes",
        "chunk_count",
        "added_at",
    ]
    assert docs.rows[0][:2] == ("C", "n1")
    chunks = sqlkb.sql("SELECT * FROM kb_chunks")
    assert "embedding" not in chunks.columns and "terms" not in chunks.columns
    assert chunks.columns[:5] == ["collection", "document_id", "chunk_id", "chunk_index", "text"]
    colls = sqlkb.sql("SELECT * FROM kb_collections")
    assert colls.columns == [
        "name",
        "model",
        "dim",
        "chunking",
        "language",
        "created_at",
        "updated_at",
    ]
    year = sqlkb.sql("SELECT json_extract_string(metadata, '$.year') FROM kb_documents")
    assert year.rows == [("2024",)]
    joined = sqlkb.sql(
        "WITH d AS (SELECT collection, count(*) n FROM kb_documents GROUP BY ALL) "
        "SELECT c.name, d.n FROM kb_collections c JOIN d ON d.collection = c.name",
    )
    assert joined.rows == [("C", 1)]


@pytest.mark.process
def test_empty_workspace_has_empty_views(sqlkb: Any) -> None:
    for view in ("kb_collections", "kb_documents", "kb_chunks", "kb_graph_nodes", "kb_graph_edges"):
        assert sqlkb.sql(f"SELECT count(*) FROM {view}").rows == [(0,)]


@pytest.mark.process
def test_other_workspaces_are_invisible(sqlkb: Any) -> None:
    sqlkb.in_workspace("alice").create_collection("Secret").add_texts(["alice private"], ids=["a1"])
    bob = sqlkb.in_workspace("bob")
    bob.create_collection("Mine").add_texts(["bob public"], ids=["b1"])
    assert bob.sql("SELECT collection, document_id FROM kb_documents").rows == [("Mine", "b1")]
    assert bob.sql("SELECT text FROM kb_chunks").rows == [("bob public",)]
    assert bob.sql("SELECT name FROM kb_collections").rows == [("Mine",)]
    with pytest.raises(ConfigError, match="not one of the views"):
        bob.sql("SELECT * FROM hybridkb_collections")
    alice_table = table_names(sqlkb.in_workspace("alice").record("Secret").id)["chunks"]
    with pytest.raises(ConfigError, match="not one of the views"):
        bob.sql(f"SELECT * FROM {alice_table}")


@pytest.mark.process
def test_graph_views_are_scoped_to_the_workspace(sqlkb: Any) -> None:
    graph = pytest.importorskip("hybridkb.graph")
    alice, bob = sqlkb.in_workspace("alice"), sqlkb.in_workspace("bob")
    graph.attach_graph(alice).add_node("ent:alice-only", "entity")
    graph.attach_graph(bob).add_node("ent:bob-only", "entity")
    rows = bob.sql("SELECT id FROM kb_graph_nodes").rows
    assert ("ent:bob-only",) in rows and ("ent:alice-only",) not in rows
    assert "workspace" not in bob.sql("SELECT * FROM kb_graph_nodes").columns


REFUSED = [
    "COPY (SELECT 1) TO 'out.csv'",
    "COPY kb_documents TO 'out.parquet' (FORMAT parquet)",
    "EXPORT DATABASE 'dump'",
    "ATTACH 'other.duckdb' AS other",
    "DETACH other",
    "INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA database_list",
    "SET enable_external_access = true",
    "RESET threads",
    "CALL pragma_version()",
    "INSERT INTO kb_documents VALUES (1)",
    "UPDATE hybridkb_collections SET name = 'x'",
    "DELETE FROM hybridkb_collections",
    "CREATE TABLE t AS SELECT 1",
    "DROP TABLE hybridkb_collections",
    "CREATE MACRO m() AS 1",
    "BEGIN TRANSACTION",
    "SELECT 1; DROP TABLE hybridkb_collections",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM read_parquet('x.parquet')",
    "SELECT * FROM read_json('x.json')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM 'https://example.com/x.csv'",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM parquet_scan('x.parquet')",
    "SELECT * FROM sqlite_scan('x.db', 't')",
    "SELECT * FROM query('SELECT * FROM hybridkb_collections')",
    "SELECT * FROM query_table('hybridkb_collections')",
    "SELECT * FROM duckdb_tables()",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM pg_catalog.pg_tables",
    "SELECT * FROM main.hybridkb_collections",
    "SELECT * FROM memory.main.hybridkb_collections",
    "SELECT * FROM hybridkb_meta",
    "SELECT getenv('HOME')",
    "SELECT current_setting('temp_directory')",
    "SELECT nextval('hybridkb_collection_ids')",
    "SELECT json_execute_serialized_sql(json_serialize_sql('SELECT 1'))",
    "SELECT (SELECT count(*) FROM hybridkb_collections)",
    "SELECT * FROM kb_documents WHERE collection IN (SELECT name FROM hybridkb_collections)",
    "WITH kb_documents AS (SELECT * FROM hybridkb_collections) SELECT * FROM kb_documents",
    "SHOW TABLES",
    "SHOW ALL TABLES",
    "DESCRIBE hybridkb_collections",
    "SUMMARIZE hybridkb_collections",
    "SELECT * FROM kb_documents WHERE filename = ?",
    "SELECT * FROM kb_documents WHERE filename = $1",
    "VACUUM",
    "CHECKPOINT",
    "SELECT main.getenv('HOME')",
    "",
    "   ;  ",
]


@pytest.fixture(scope="module")
def shared_kb(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One knowledge base for the many refusal cases (each leaves it unchanged)."""
    cache = tmp_path_factory.mktemp("cache")
    with hybridkb.connect(":memory:", model="fake", cache_dir=cache) as kb:
        kb.create_collection("C").add_texts(["hello"], ids=["x"])
        yield kb


@pytest.mark.process
@pytest.mark.parametrize("sql", REFUSED)
def test_anything_but_reading_the_views_is_refused(shared_kb: Any, sql: str) -> None:
    sqlkb = shared_kb
    before = sqlkb.storage.query("SELECT count(*), min(name) FROM hybridkb_collections")
    with pytest.raises(ConfigError, match=r"^sql: "):
        sqlkb.sql(sql)
    assert sqlkb.storage.query("SELECT count(*), min(name) FROM hybridkb_collections") == before
    assert not Path("out.csv").exists() and not Path("dump").exists()


@pytest.mark.process
def test_refusal_through_the_tool_is_an_observation(sqlkb: Any) -> None:
    tools = {t.name: t for t in make_tools(sqlkb)}
    msg = tools["query_kb_sql"].invoke(
        {
            "type": "tool_call",
            "id": "1",
            "name": "query_kb_sql",
            "args": {"sql": "COPY (SELECT 1) TO 'x.csv'"},
        }
    )
    assert msg.status == "error"
    assert msg.content.startswith("Error (config_error): sql: only SELECT statements")


@pytest.mark.process
def test_rows_are_capped(sqlkb: Any) -> None:
    result = sqlkb.sql("SELECT * FROM range(1000) t(i)", max_rows=50)
    assert len(result.rows) == 50 and result.truncated
    assert not sqlkb.sql("SELECT * FROM range(50) t(i)", max_rows=50).truncated


@pytest.mark.process
def test_slow_queries_are_stopped(sqlkb: Any) -> None:
    with pytest.raises(ConfigError, match="stopped after 0.3s"):
        sqlkb.sql("SELECT count(*) FROM range(100000000) a, range(100000) b", timeout=0.3)
    assert sqlkb.sql("SELECT 42").rows == [(42,)]  # the connection still works


@pytest.mark.process
def test_nothing_is_left_behind(sqlkb: Any) -> None:
    sqlkb.create_collection("C").add_texts(["hello"], ids=["x"])
    sqlkb.sql("SELECT * FROM kb_documents")
    temp = sqlkb.storage.query(
        "SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name LIKE 'kb\\_%' ESCAPE '\\'"
    )
    assert temp == [(0,)]
    assert sqlkb.collection("C").count() == 1


@pytest.mark.process
def test_sql_errors_are_explained(sqlkb: Any) -> None:
    with pytest.raises(ConfigError, match="nosuch.*Views: kb_collections"):
        sqlkb.sql("SELECT nosuch FROM kb_documents")
    with pytest.raises(ConfigError, match="not valid SQL"):
        sqlkb.sql("SELEC 1")


@pytest.mark.process
def test_works_on_a_read_only_connection(tmp_path: Path) -> None:
    db = tmp_path / "ro.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("C").add_texts(["hello"], ids=["x"])
    with hybridkb.connect(db, model="fake", read_only=True) as ro:
        assert ro.sql("SELECT document_id FROM kb_documents").rows == [("x",)]


@pytest.mark.process
def test_hostile_values_inside_sql_are_data(sqlkb: Any) -> None:
    name = "Robert'); DROP TABLE x;-- 📚 50%"
    sqlkb.create_collection(name).add_texts(["a"], ids=["it's"])
    result = sqlkb.sql("SELECT collection, document_id FROM kb_documents")
    assert result.rows == [(name, "it's")]
    long = "SELECT '" + "x" * 10_000 + "' AS s"
    assert sqlkb.sql(long).rows[0][0] == "x" * 10_000
    with pytest.raises(ConfigError, match="NUL"):
        sqlkb.sql("SELECT 1\x00")


@pytest.mark.postgres
def test_the_same_views_on_postgres(pg_url: str) -> None:
    with hybridkb.connect(pg_url, model="fake", enable_sql_tool=True) as kb:
        kb.create_collection("C").add_texts(["hello world"], [{"year": 2024}], ["n1"])
        kb.in_workspace("other").create_collection("Hidden").add_texts(["secret"], ids=["s"])
        rows = kb.sql(
            "SELECT collection, document_id, json_extract_string(metadata, '$.year') FROM kb_documents",
        )
        assert rows.rows == [("C", "n1", "2024")]
        assert kb.sql("SELECT text FROM kb_chunks").rows == [("hello world",)]
        with pytest.raises(ConfigError, match="qualified table names are not allowed"):
            kb.sql("SELECT * FROM hybridkb.hybridkb_collections")


def test_check_tree_refuses_unknown_table_ref_types() -> None:
    tree = {
        "statements": [
            {
                "node": {
                    "from_table": {
                        "type": "SOMETHING_NEW",
                        "alias": "",
                        "sample": None,
                        "query_location": 0,
                    }
                }
            }
        ]
    }
    with pytest.raises(Refused, match="SOMETHING_NEW is not allowed"):
        check_tree(tree)
    assert json.dumps(tree)  # the tree itself is untouched
