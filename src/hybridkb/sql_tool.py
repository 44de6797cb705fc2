"""Read-only SQL for structured questions ("how many PDFs did I add last month?").

Off by default (``HYBRIDKB_ENABLE_SQL_TOOL=true`` turns it on). A query may read
only the documented views of the bound workspace, never a table, file, setting or
extension. Defence in depth, all on DuckDB's own parser:

1. ``json_serialize_sql`` parses the text; only a single SELECT (or WITH ... SELECT)
   serialises, so COPY, ATTACH, INSTALL, LOAD, PRAGMA, SET, INSERT ... are refused.
2. The syntax tree is walked: every table reference must be one of the views (or a
   CTE the query defines, whose name may not shadow a real object), table functions
   are refused except a few generators, and scalar functions that read files,
   settings, the environment or sequences are refused.
3. The statement that runs is re-printed from the checked tree
   (``json_deserialize_sql``), so what runs is what was checked.
4. It runs inside a transaction that is always rolled back, over TEMP views created
   in that transaction that list only this workspace's collections (by integer id;
   no user text is spliced into SQL), wrapped in ``LIMIT max_rows + 1``, and
   interrupted after ``timeout`` seconds.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, KBError
from .storage.duckdb.schema import table_names

DEFAULT_MAX_ROWS = 200
DEFAULT_TIMEOUT = 5.0
MAX_SQL_CHARS = 20_000

VIEWS = ("kb_collections", "kb_documents", "kb_chunks", "kb_graph_nodes", "kb_graph_edges")

VIEWS_DOC = """        Views (this workspace only):
        - kb_collections(name, model, dim, chunking JSON, language, created_at, updated_at)
        - kb_documents(collection, document_id, filename, path, source ('file' or 'text'),
          metadata JSON, language, bytes, chunk_count, added_at TIMESTAMPTZ)
        - kb_chunks(collection, document_id, chunk_id, chunk_index, text, page, section,
          char_start, char_end, language, filename, path, metadata JSON, added_at)
        - kb_graph_nodes(id, type, properties JSON, collection_id, document_id, chunk_id) and
          kb_graph_edges(source, target, type, weight, properties JSON, collection_id,
          document_id, chunk_id), when the knowledge graph exists
        Read metadata with json_extract_string(metadata, '$.key')."""

# Table functions that only generate values.
_TABLE_FUNCTIONS_OK = frozenset({"range", "generate_series", "unnest", "json_each", "json_tree"})
# Scalar functions refused by exact name, and by pattern (file, network, settings, state).
_DENY_FUNCTIONS = frozenset(
    {
        "getenv",
        "current_setting",
        "nextval",
        "currval",
        "setseed",
        "query",
        "query_table",
        "json_execute_serialized_sql",
        "checkpoint",
        "force_checkpoint",
        "glob",
        "sql_auto_complete",
        "current_user",
        "user_agent",
        "icu_collate",
        "which_secret",
        "error",
    }
)
_DENY_PATTERN = re.compile(
    r"^(read_|load|install|export|import|copy|pragma|duckdb_|enable_|disable_|http|s3|gcs|azure|"
    r"iceberg|delta|sqlite|postgres|mysql|parquet|attach|detach|secret|ducklake|fts_|"
    r"create_|drop_|reset_)|(_scan|file|files|_attach|_secret)$|^(parquet|csv)_"
)
_SAFE_REF_TYPES = frozenset(
    {"BASE_TABLE", "JOIN", "SUBQUERY", "EXPRESSION_LIST", "EMPTY", "TABLE_FUNCTION", "PIVOT"}
)
_CTE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass
class SQLResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # more rows existed than max_rows
    sql: str  # the statement that ran (re-printed from the checked tree)

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "rows": [[_jsonable(v) for v in r] for r in self.rows],
            "truncated": self.truncated,
            "sql": self.sql,
        }


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


class _Rollback(Exception):
    """Carries the result out of the transaction so the transaction is always rolled back."""

    def __init__(self, payload: Any) -> None:
        super().__init__("rollback")
        self.payload = payload


def _refuse(why: str) -> ConfigError:
    return ConfigError(
        f"sql: {why}. Only one read-only SELECT over the views kb_collections, kb_documents, "
        "kb_chunks, kb_graph_nodes, kb_graph_edges is allowed"
    )


# -- checking ----------------------------------------------------------------------------


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _cte_names(tree: Any) -> set[str]:
    names: set[str] = set()
    for d in _walk(tree):
        cte_map = d.get("cte_map")
        if isinstance(cte_map, dict):
            for entry in cte_map.get("map", []):
                names.add(str(entry.get("key", "")).lower())
    return names


def check_tree(tree: dict[str, Any], *, existing_names: set[str]) -> None:
    """Refuse anything in a serialised SELECT but reads of the views (raises ConfigError)."""
    statements = tree.get("statements", [])
    if len(statements) != 1:
        raise _refuse(f"{len(statements)} statements given; send exactly one")
    ctes = _cte_names(tree)
    for name in ctes:
        if not _CTE_NAME.match(name) or name in existing_names or name in VIEWS:
            raise _refuse(f"WITH name {name!r} is not allowed; use a short lowercase name like t1")
    allowed_tables = set(VIEWS) | ctes
    for d in _walk(statements[0]):
        kind = d.get("type")
        is_table_ref = (
            "class" not in d and {"type", "alias", "sample", "query_location"} <= d.keys()
        )
        if (is_table_ref and kind not in _SAFE_REF_TYPES) or kind == "SHOW_REF":
            raise _refuse(
                "SHOW, DESCRIBE and SUMMARIZE are not allowed"
                if kind == "SHOW_REF"
                else f"{kind} is not allowed"
            )
        if kind == "BASE_TABLE" and "class" not in d:
            if d.get("schema_name") or d.get("catalog_name"):
                raise _refuse(
                    f"qualified name {d.get('schema_name') or d.get('catalog_name')}."
                    f"{d.get('table_name')} is not allowed"
                )
            if str(d.get("table_name", "")).lower() not in allowed_tables:
                raise _refuse(f"table {str(d.get('table_name'))[:80]!r} is not one of the views")
        if kind == "TABLE_FUNCTION":
            fn = d.get("function") or {}
            name = str(fn.get("function_name", "")).lower()
            if name not in _TABLE_FUNCTIONS_OK or fn.get("schema") or fn.get("catalog"):
                raise _refuse(f"table function {name}() is not allowed")
        if d.get("class") in ("FUNCTION", "WINDOW", "AGGREGATE") and "function_name" in d:
            name = str(d["function_name"]).lower()
            if d.get("schema") or d.get("catalog"):
                raise _refuse(
                    f"qualified function {d.get('schema') or d.get('catalog')}.{name} is not allowed"
                )
            if name in _DENY_FUNCTIONS or _DENY_PATTERN.search(name):
                raise _refuse(
                    f"function {name}() is not allowed (it reads files, settings or state)"
                )
        if d.get("type") in ("VALUE_PARAMETER",) or d.get("class") == "PARAMETER":
            raise _refuse("parameters ($1, ?) are not allowed; write the values in the query")


# -- views -------------------------------------------------------------------------------

_DOC_COLS = "document_id, filename, path, source, metadata, language, bytes, chunk_count, added_at"
_CHUNK_COLS = (
    "document_id, chunk_id, chunk_index, text, page, section, char_start, char_end, "
    "language, filename, path, metadata, added_at"
)
_EMPTY_DOCS = (
    "SELECT NULL::VARCHAR AS collection, NULL::VARCHAR AS document_id, NULL::VARCHAR AS filename,"
    " NULL::VARCHAR AS path, NULL::VARCHAR AS source, NULL::JSON AS metadata,"
    " NULL::VARCHAR AS language, NULL::BIGINT AS bytes, NULL::INTEGER AS chunk_count,"
    " NULL::TIMESTAMPTZ AS added_at WHERE FALSE"
)
_EMPTY_CHUNKS = (
    "SELECT NULL::VARCHAR AS collection, NULL::VARCHAR AS document_id, NULL::VARCHAR AS chunk_id,"
    " NULL::INTEGER AS chunk_index, NULL::VARCHAR AS text, NULL::INTEGER AS page,"
    " NULL::VARCHAR AS section, NULL::INTEGER AS char_start, NULL::INTEGER AS char_end,"
    " NULL::VARCHAR AS language, NULL::VARCHAR AS filename, NULL::VARCHAR AS path,"
    " NULL::JSON AS metadata, NULL::TIMESTAMPTZ AS added_at WHERE FALSE"
)

_EMPTY_GRAPH = {
    "kb_graph_nodes": "SELECT NULL::VARCHAR AS id, NULL::VARCHAR AS type, NULL::JSON AS properties,"
    " NULL::INTEGER AS collection_id, NULL::VARCHAR AS document_id, NULL::VARCHAR AS chunk_id"
    " WHERE FALSE",
    "kb_graph_edges": "SELECT NULL::VARCHAR AS source, NULL::VARCHAR AS target, NULL::VARCHAR AS type,"
    " NULL::DOUBLE AS weight, NULL::JSON AS properties, NULL::INTEGER AS collection_id,"
    " NULL::VARCHAR AS document_id, NULL::VARCHAR AS chunk_id WHERE FALSE",
}


def _sql_literal(text: str) -> str:
    # Standard SQL string literal; DuckDB has no backslash escapes in '...'.
    if "\x00" in text:
        raise ConfigError("workspace name contains NUL")
    return "'" + text.replace("'", "''") + "'"


def _view_statements(con: Any, ids: list[int], workspace: str) -> list[str]:
    id_list = ", ".join(str(int(i)) for i in ids) or "NULL"
    out = [
        (
            "CREATE TEMP VIEW kb_collections AS SELECT name, model, dim, chunking, language,"
            f" created_at, updated_at FROM main.hybridkb_collections WHERE id IN ({id_list})"
        )
    ]
    docs = []
    chunks = []
    for cid in ids:
        t = table_names(int(cid))
        coll = f"(SELECT name FROM main.hybridkb_collections WHERE id = {int(cid)})"
        docs.append(f"SELECT {coll} AS collection, {_DOC_COLS} FROM main.{t['documents']}")
        chunks.append(f"SELECT {coll} AS collection, {_CHUNK_COLS} FROM main.{t['chunks']}")
    out.append("CREATE TEMP VIEW kb_documents AS " + (" UNION ALL ".join(docs) or _EMPTY_DOCS))
    out.append("CREATE TEMP VIEW kb_chunks AS " + (" UNION ALL ".join(chunks) or _EMPTY_CHUNKS))
    for view, table in (
        ("kb_graph_nodes", "hybridkb_graph_nodes"),
        ("kb_graph_edges", "hybridkb_graph_edges"),
    ):
        cols = [
            (r[0], r[1])
            for r in con.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main'"
                " AND table_name = ? ORDER BY column_index",
                [table],
            ).fetchall()
        ]
        names = {c for c, _ in cols}
        if "workspace" in names:
            scope = f"workspace = {_sql_literal(workspace)}"
        elif "collection_id" in names:
            scope = f"collection_id IN ({id_list})"
        else:
            # Absent (or unscoped): an empty view, so the name never falls through to
            # anything else DuckDB might resolve it to.
            out.append(f"CREATE TEMP VIEW {view} AS {_EMPTY_GRAPH[view]}")
            continue
        shown = [c for c, ty in cols if c != "workspace" and "[" not in ty] or ["1"]
        select = ", ".join(
            f'"{c}"' if re.fullmatch(r"[a-z_][a-z0-9_]*", c) else "NULL" for c in shown
        )
        out.append(f"CREATE TEMP VIEW {view} AS SELECT {select} FROM main.{table} WHERE {scope}")
    return out


# -- running -----------------------------------------------------------------------------


def run_sql(
    kb: Any, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout: float = DEFAULT_TIMEOUT
) -> SQLResult:
    """Run one checked, read-only SELECT over the workspace views of ``kb``.

    Raises:
        ConfigError: refused statement, a SQL error, too slow, or not a DuckDB store.
    """
    storage = kb.storage
    if storage.capabilities.name != "duckdb":
        raise ConfigError(
            f"query_kb_sql is not supported on the {storage.capabilities.name} backend yet; "
            "use search_kb and describe_kb_collection"
        )
    if not isinstance(sql, str) or not sql.strip():
        raise ConfigError(
            "sql: empty; send one SELECT statement, e.g. SELECT count(*) FROM kb_documents"
        )
    if len(sql) > MAX_SQL_CHARS:
        raise _refuse(f"{len(sql):,} characters is too long (limit {MAX_SQL_CHARS:,})")
    if "\x00" in sql:
        raise _refuse("the statement contains a NUL character")
    ids = [c.id for c in storage.list_collections(kb.workspace)]
    workspace = kb.workspace

    def body(con: Any) -> None:
        import duckdb

        raw = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()[0]
        tree = json.loads(raw)
        if tree.get("error"):
            message = str(tree.get("error_message", "cannot parse"))
            if "Only SELECT" in message:
                raise _refuse(
                    "only SELECT statements may run (no COPY, ATTACH, INSTALL, LOAD, PRAGMA, SET, writes)"
                )
            raise _refuse(f"not valid SQL ({message.splitlines()[0][:200]})")
        existing = {
            str(r[0]).lower()
            for r in con.execute(
                "SELECT table_name FROM duckdb_tables() UNION SELECT view_name FROM duckdb_views()"
            ).fetchall()
        }
        check_tree(tree, existing_names=existing)
        printed = con.execute("SELECT json_deserialize_sql(?::JSON)", [raw]).fetchone()[0]
        for statement in _view_statements(con, ids, workspace):
            con.execute(statement)
        timer = threading.Timer(timeout, con.interrupt)
        timer.start()
        try:
            cursor = con.execute(f"SELECT * FROM ({printed}) AS q LIMIT {int(max_rows) + 1}")
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        except duckdb.InterruptException as exc:
            raise ConfigError(
                f"sql: stopped after {timeout:g}s; make the query cheaper (filter, LIMIT, aggregate)"
            ) from exc
        except duckdb.Error as exc:
            first = str(exc).splitlines()[0][:300]
            raise ConfigError(f"sql: {first}. {VIEW_HINT}") from exc
        finally:
            timer.cancel()
        raise _Rollback(SQLResult(columns, rows[:max_rows], len(rows) > max_rows, printed))

    try:
        storage.transaction(body)
    except _Rollback as done:
        result: SQLResult = done.payload
        return result
    except KBError:
        raise
    except Exception as exc:
        import duckdb

        if isinstance(exc, duckdb.Error):
            raise ConfigError(f"sql: {str(exc).splitlines()[0][:300]}. {VIEW_HINT}") from exc
        raise
    raise AssertionError("unreachable")  # pragma: no cover


VIEW_HINT = "Views: kb_collections, kb_documents, kb_chunks (see the tool description for columns)"
