"""A standing corpus of SQL escape attempts, run against the real engine in every CI run.

Each attempt must be refused (a ConfigError starting ``sql:``) or confined: it runs,
but what it returns holds nothing the workspace may not read (no other workspace's
text or names, no file contents, no paths or settings of the process). The counts
are printed with ``-s`` (and asserted: every attempt falls in one of the two).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hybridkb
from hybridkb.errors import ConfigError
from hybridkb.storage.duckdb.schema import table_names

pytestmark = pytest.mark.process  # every query runs in a worker process (hybridkb/sql/worker.py)

SECRET = "ALICE-SECRET-7f3a"  # text of another workspace
ENV_SECRET = "ENV-SECRET-91bd"  # an environment variable of the knowledge base's process

FILES = [
    "/etc/passwd",
    "/etc/hostname",
    "/proc/self/environ",
    "~/.bashrc",
    "../kb.duckdb",
    "kb.duckdb",
]
READERS = [
    "read_csv", "read_csv_auto", "read_text", "read_blob", "read_parquet", "read_json",
    "read_json_auto", "read_ndjson", "parquet_scan", "sniff_csv", "glob", "parquet_metadata",
]  # fmt: skip
SETTINGS = [
    "home_directory", "temp_directory", "extension_directory", "secret_directory",
    "custom_extension_repository", "memory_limit", "threads", "external_threads",
]  # fmt: skip
CATALOG_FUNCTIONS = [
    "duckdb_tables", "duckdb_columns", "duckdb_views", "duckdb_databases", "duckdb_functions",
    "duckdb_extensions", "duckdb_secrets", "duckdb_settings", "duckdb_memory",
    "duckdb_temporary_files", "duckdb_schemas", "duckdb_indexes", "duckdb_constraints",
    "duckdb_dependencies", "duckdb_optimizers", "duckdb_keywords", "duckdb_types",
    "pragma_database_list", "pragma_version", "pragma_platform", "pragma_storage_info",
    "pragma_table_info", "pragma_show_tables", "test_all_types", "which_secret",
]  # fmt: skip
CATALOG_TABLES = [
    "information_schema.tables", "information_schema.columns", "information_schema.schemata",
    "pg_catalog.pg_tables", "pg_catalog.pg_class", "pg_catalog.pg_settings",
    "sqlite_master", "sqlite_schema", "duckdb_tables", "main.sqlite_master",
]  # fmt: skip


def _attempts(other_table: str) -> list[str]:
    out: list[str] = []
    for reader, path in itertools.product(READERS, FILES):
        out.append(f"SELECT * FROM {reader}('{path}')")
    out += [f"SELECT * FROM '{p}'" for p in FILES]
    out += [f'SELECT * FROM "{p}"' for p in FILES]
    out += [f"SELECT {r}('{p}')" for r in ("read_text", "read_blob") for p in FILES[:3]]
    plan_targets = [f"SELECT * FROM read_csv('{FILES[0]}')", f"SELECT * FROM {other_table}",
                    "SELECT current_setting('home_directory')"]  # fmt: skip
    for inner in plan_targets:
        quoted = inner.replace("'", "''")
        out += [
            f"SELECT json_serialize_plan('{quoted}')",
            f"SELECT json_serialize_plan('{quoted}', optimize := true)",
            f"SELECT json_serialize_sql('{quoted}')",
            f"SELECT json_execute_serialized_sql(json_serialize_sql('{quoted}'))",
            f"SELECT * FROM json_execute_serialized_sql(json_serialize_sql('{quoted}'))",
            f"SELECT * FROM query('{quoted}')",
            f"EXPLAIN {inner}",
            f"EXPLAIN ANALYZE {inner}",
        ]
    out += [f"SELECT current_setting('{s}')" for s in SETTINGS]
    out += [f"SELECT * FROM {f}()" for f in CATALOG_FUNCTIONS]
    out += [f"SELECT * FROM {t}" for t in CATALOG_TABLES]
    out += [
        f"SELECT * FROM {other_table}",
        f"SELECT * FROM main.{other_table}",
        f'SELECT * FROM "{other_table}"',
        f"SELECT * FROM query_table('{other_table}')",
        f"SELECT count(*) FROM kb_chunks WHERE text IN (SELECT text FROM {other_table})",
        "SELECT * FROM hybridkb_collections",
        "SELECT * FROM hybridkb_meta",
        "SELECT * FROM hybridkb_graph_nodes",
        "SELECT * FROM memory.main.kb_chunks",
        "SELECT * FROM system.main.duckdb_tables()",
        "SELECT * FROM temp.main.kb_chunks",
        "SELECT getenv('HYBRIDKB_SQL_ATTACK_SECRET')",
        "SELECT getenv('HOME')",
        "SELECT main.getenv('HOME')",
        "SELECT system.main.getenv('HOME')",
        "SELECT current_setting('home_directory') AS h",
        "SELECT version()",
        "SELECT current_database()",
        "SELECT current_schema()",
        "SELECT nextval('hybridkb_collection_ids')",
        "SELECT error('x')",
        "SELECT sql_auto_complete('SEL')",
        "SELECT * FROM sql_auto_complete('SEL')",
        "CREATE MACRO m() AS 1",
        "CREATE TEMP MACRO m() AS TABLE SELECT * FROM read_csv('/etc/passwd')",
        "CREATE FUNCTION f() AS 1",
        "CREATE TABLE t AS SELECT 1",
        "CREATE VIEW v AS SELECT * FROM kb_chunks",
        "CREATE SECRET s (TYPE s3)",
        "INSERT INTO kb_chunks SELECT * FROM kb_chunks",
        "UPDATE kb_documents SET filename = 'x'",
        "DELETE FROM kb_documents",
        "DROP TABLE kb_documents",
        "ALTER TABLE kb_documents RENAME TO x",
        "ATTACH ':memory:' AS other",
        "ATTACH 'kb.duckdb' AS other",
        "DETACH memory",
        "USE memory",
        "COPY kb_chunks TO 'out.csv'",
        "COPY (SELECT * FROM kb_chunks) TO '/tmp/leak.parquet' (FORMAT parquet)",
        "COPY kb_chunks FROM '/etc/passwd'",
        "EXPORT DATABASE '/tmp/dump'",
        "IMPORT DATABASE '/tmp/dump'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "FORCE INSTALL httpfs",
        "CALL pragma_version()",
        "CALL enable_external_access()",
        "PRAGMA database_list",
        "PRAGMA enable_profiling",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "RESET lock_configuration",
        "SET memory_limit = '100GB'",
        "SET threads = 64",
        "BEGIN TRANSACTION",
        "COMMIT",
        "ROLLBACK",
        "CHECKPOINT",
        "VACUUM",
        "SHOW TABLES",
        "SHOW ALL TABLES",
        "DESCRIBE kb_chunks",
        "SUMMARIZE kb_chunks",
        "SELECT 1; SELECT 2",
        "SELECT 1; DROP TABLE kb_chunks",
        "SELECT 1 /* ; */; ATTACH 'x' AS y",
        "/* hi */ COPY kb_chunks TO 'x.csv'",
        "-- comment\nINSTALL httpfs",
        "SELECT * FROM kb_documents WHERE filename = ?",
        "SELECT * FROM kb_documents WHERE filename = $1",
        "SELECT * FROM kb_documents WHERE filename = $name",
        "SELECT 'x'::regclass",
        "SELECT CAST('x' AS blob)",
        "SELECT CAST(1 AS bit)",
        "SELECT * FROM \"read_csv\"('/etc/passwd')",
        "SELECT * FROM main.read_csv('/etc/passwd')",
        "SELECT * FROM re\u0430d_csv('/etc/passwd')",  # a Cyrillic a
        "SELECT * FROM read_csv\u200b('/etc/passwd')",  # zero-width space
        "SELECT * FROM ｒｅａｄ＿ｃｓｖ('/etc/passwd')",  # full width
        "SELECT * FROM READ_CSV('/ETC/PASSWD')",
        "SELECT * FROM Read_Csv('/etc/passwd')",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5)"
        " SELECT * FROM read_csv('/etc/passwd')",
        "WITH kb_chunks AS (SELECT * FROM read_csv('/etc/passwd')) SELECT * FROM kb_chunks",
        "WITH x AS MATERIALIZED (SELECT * FROM duckdb_settings()) SELECT * FROM x",
        "PIVOT kb_documents ON language USING count(*)",
        "SELECT * FROM kb_documents, LATERAL read_csv(path)",
        "SELECT * FROM kb_documents, LATERAL (SELECT getenv(filename))",
        "SELECT list_transform([1], x -> getenv('HOME'))",
        "SELECT [getenv('HOME')]",
        "SELECT {'a': current_setting('temp_directory')}",
        "SELECT * FROM unnest([current_setting('home_directory')])",
        "SELECT * FROM range(3) WHERE getenv('HOME') IS NOT NULL",
        "SELECT count(*) FILTER (WHERE getenv('HOME') IS NULL) FROM kb_chunks",
        "SELECT row_number() OVER (ORDER BY getenv('HOME'))",
        "SELECT * FROM kb_documents ORDER BY current_setting('home_directory')",
        "SELECT * FROM kb_documents GROUP BY ALL HAVING getenv('HOME') IS NULL",
        "SELECT * FROM (VALUES (getenv('HOME'))) t(x)",
        "SELECT * FROM kb_documents UNION ALL SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM kb_documents EXCEPT SELECT * FROM hybridkb_collections",
        "SELECT * FROM kb_chunks USING SAMPLE 10%",
        "FROM read_csv('/etc/passwd')",
        "FROM duckdb_settings()",
        "SELECT * FROM ducklake_snapshots('x')",
        "SELECT * FROM iceberg_scan('x')",
        "SELECT * FROM delta_scan('x')",
        "SELECT * FROM sqlite_scan('kb.duckdb', 'x')",
        "SELECT * FROM postgres_scan('dbname=x', 'public', 't')",
        "SELECT * FROM read_xlsx('x.xlsx')",
        "SELECT icu_sort_key('a', 'en')",
        "SELECT * FROM fts_main_kb_chunks.match_bm25('x', 'y')",
    ]
    # Recursive CTEs and heavy but legal reads are confined, not refused.
    out += [
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 50)"
        " SELECT count(*) FROM r",
        "WITH hybridkb_collections AS (SELECT 1 AS x) SELECT * FROM hybridkb_collections",
        "SELECT collection, count(*) FROM kb_documents GROUP BY ALL",
        "SELECT text FROM kb_chunks WHERE text ILIKE '%secret%'",
        "SELECT * FROM kb_collections",
        "SELECT * FROM kb_graph_nodes",
        "SELECT * FROM kb_graph_edges",
        "SELECT json_extract_string(metadata, '$.owner') FROM kb_documents",
        "SELECT list_reduce([1, 2, 3], (a, b) -> a + b)",
        "SELECT * FROM range(5)",
        "SELECT * FROM generate_series(1, 5)",
        "SELECT unnest([1, 2])",
    ]
    return out


@pytest.fixture(scope="module")
def attack_kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str, str]]:
    root = tmp_path_factory.mktemp("attack")
    os.environ["HYBRIDKB_SQL_ATTACK_SECRET"] = ENV_SECRET
    db = root / "kb.duckdb"
    with hybridkb.connect(db, model="fake", cache_dir=root / "cache") as kb:
        alice = kb.in_workspace("alice")
        alice.create_collection("Secrets").add_texts([f"{SECRET} the launch code"], ids=["s"])
        other = table_names(alice.record("Secrets").id)["chunks"]
        bob = kb.in_workspace("bob")
        bob.create_collection("Notes").add_texts(["bob's own note"], [{"owner": "bob"}], ["n"])
        yield bob, other, str(db)
    os.environ.pop("HYBRIDKB_SQL_ATTACK_SECRET", None)


def _leaks(text: str, db_path: str) -> list[str]:
    found = []
    for needle in (SECRET, ENV_SECRET, "root:x:0", db_path, os.path.dirname(db_path), "Secrets"):
        if needle and needle in text:
            found.append(needle)
    return found


def test_every_escape_attempt_is_refused_or_confined(attack_kb: tuple[Any, str, str]) -> None:
    kb, other_table, db_path = attack_kb
    attempts = _attempts(other_table)
    assert len(attempts) >= 200
    refused = confined = 0
    for sql in attempts:
        try:
            result = kb.sql(sql, timeout=10)
        except ConfigError as exc:
            assert str(exc).startswith("sql: "), sql
            assert not _leaks(str(exc), db_path), (sql, str(exc))
            refused += 1
            continue
        text = repr(result.to_dict())
        assert not _leaks(text, db_path), (sql, text[:300])
        confined += 1
    print(f"\nSQL attack corpus: {len(attempts)} attempts, {refused} refused, {confined} confined")
    assert refused + confined == len(attempts)
    assert not Path("out.csv").exists() and not Path("/tmp/leak.parquet").exists()
    # The workspace still answers afterwards.
    assert kb.sql("SELECT document_id FROM kb_documents").rows == [("n",)]


def test_break1_plan_functions_cannot_read_files_or_other_workspaces(
    attack_kb: tuple[Any, str, str],
) -> None:
    """Regression: json_serialize_plan bound arbitrary inner SQL inside the tool's connection."""
    kb, other_table, db_path = attack_kb
    for inner in (
        "SELECT * FROM read_csv(''/etc/passwd'', sep=''\\x01'', header=false)",
        f"SELECT * FROM {other_table} WHERE text LIKE ''ALICE%''",
        "SELECT current_setting(''home_directory'')",
    ):
        with pytest.raises(
            ConfigError, match=r"^sql: function json_serialize_plan\(\) is not allowed"
        ):
            kb.sql(f"SELECT json_serialize_plan('{inner}', optimize := true)")


def test_break2_a_query_that_never_polls_stops_in_time_and_blocks_nobody(
    attack_kb: tuple[Any, str, str],
) -> None:
    """Regression: list_reduce over 20M values ran 27 s past a 5 s limit and held the file."""
    kb, _, _ = attack_kb
    answered: list[float] = []
    stop = threading.Event()

    def other_client() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            kb.list_collections()
            answered.append(time.monotonic() - t0)
            time.sleep(0.05)

    thread = threading.Thread(target=other_client)
    thread.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="stopped after 1s"):
            kb.sql("SELECT list_reduce(range(0, 20000000), (a, b) -> a + b)", timeout=1.0)
    finally:
        elapsed = time.monotonic() - t0
        stop.set()
        thread.join()
    assert elapsed < 1.0 + 1.0  # the promise: the limit plus at most a second
    assert answered and max(answered) < 1.0  # nobody waited on the agent's query
    assert kb.sql("SELECT 42").rows == [(42,)]  # a fresh engine answers next


def test_results_are_capped_in_bytes_as_well_as_rows(attack_kb: tuple[Any, str, str]) -> None:
    kb, _, _ = attack_kb
    result = kb.sql("SELECT repeat('x', 100000) FROM range(10)", max_bytes=250_000)
    assert result.truncated and 1 <= len(result.rows) < 10
    with pytest.raises(ConfigError, match=r"^sql: "):  # the engine's memory limit holds
        kb.sql("SELECT length(string_agg(repeat('x', 1000000), '')) FROM range(1000)")
