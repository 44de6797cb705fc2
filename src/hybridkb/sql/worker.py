"""The engine that runs an agent's SQL: a separate process with its own in-memory DuckDB.

Run as a script (``python -I sql/worker.py``), it imports only the standard library
and duckdb, and never learns where the knowledge base lives. Its database
holds nothing but the rows its parent sends for one workspace (the five ``kb_*``
tables), with external access (files, network, extensions) turned off and the
configuration locked, so whatever SQL arrives can reach those rows and pure
functions only. On top, every statement is checked against an allow-list on
DuckDB's own parse tree: a SELECT over the five tables (or CTEs), pure table
functions, and functions from :data:`ALLOWED_FUNCTIONS`; anything else is refused
before it is bound. The parent kills this process when a query overruns its time
limit, since a query may compute without ever checking for interruption.

It runs with four arguments from its parent: a private folder (mode 0700, made by
the parent with ``tempfile.mkdtemp``) that is DuckDB's ``temp_directory`` (an
in-memory DuckDB otherwise spills into ``.tmp`` under the working folder, shared by
every worker started there), and an address-space limit it sets on itself before
importing duckdb (``RLIMIT_AS``: DuckDB's ``memory_limit`` does not count every
allocation, and a query reached 3-4 GB under it); then the read end of its lifeline pipe
and its parent's pid. When it is killed, the parent removes
the folder. When the parent goes away, even killed in the middle of a query (an MCP host
killing its server, the OOM killer), the worker notices within moments (a lifeline pipe,
and the parent-death signal on Linux: :func:`follow_parent`), stops the query, removes
the folder and exits, rather than computing on with no one to answer and no time limit.

Protocol (both directions): an 8-byte header (the JSON header's and the body's
big-endian lengths), the JSON header, then for ``load`` (the first rows) and ``update``
(what changed since: the documents to drop first, then rows to add) the bytes of each
table (lengths and column types in the header): a UTF-8 JSON object holding a list of
values per column, which DuckDB parses itself.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

TABLES = ("kb_collections", "kb_documents", "kb_chunks", "kb_graph_nodes", "kb_graph_edges")

# Table functions that only generate values from their arguments.
ALLOWED_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})

# Pure scalar, aggregate and window functions (and the operators DuckDB spells as
# functions). Anything not named here is refused, whatever it does.
ALLOWED_FUNCTIONS = frozenset(
    """
    + - * / // % ** ^ || ~~ !~~ ~~* !~~* ~~~ !~~~ @> <@ -> ->> & | << >> ! ~ @
    abs acos asin atan atan2 cbrt ceil ceiling cos cot degrees even exp factorial floor
    gamma greatest least isfinite isinf isnan ln log log10 log2 mod pi pow power radians
    round round_even sign signbit sin sqrt tan trunc xor bit_count
    ascii bit_length char_length character_length chr concat concat_ws contains
    ends_with format ilike instr lcase left len length length_grapheme levenshtein like
    like_escape lower lpad ltrim md5 nfc_normalize not_ilike_escape not_like_escape
    ord position prefix printf regexp_extract regexp_extract_all regexp_full_match
    regexp_matches regexp_replace regexp_split_to_array repeat replace reverse right rpad
    rtrim sha1 sha256 split split_part starts_with strip_accents strlen strpos string_split
    string_split_regex string_to_array substr substring suffix trim ucase unicode upper
    jaccard jaro_similarity jaro_winkler_similarity hamming damerau_levenshtein
    mismatches editdist3 translate url_decode url_encode to_base64 from_base64 hash
    age century current_date current_time current_timestamp date_add date_diff date_part
    date_sub date_trunc datediff datepart datesub datetrunc day dayname dayofmonth
    dayofweek dayofyear decade epoch epoch_ms epoch_us epoch_ns era extract get_current_time
    get_current_timestamp hour isodow isoyear julian last_day make_date make_time
    make_timestamp make_timestamptz microsecond millennium millisecond minute month
    monthname nanosecond now quarter second strftime strptime time_bucket timezone
    to_days to_hours to_microseconds to_milliseconds to_minutes to_months to_seconds
    to_timestamp to_weeks to_years today transaction_timestamp try_strptime week weekday
    weekofyear year yearweek to_centuries to_decades to_millennia
    json_array json_array_length json_contains json_exists json_extract json_extract_path
    json_extract_path_text json_extract_string json_keys json_object json_quote
    json_structure json_type json_valid json_value json_merge_patch json_pretty json
    to_json array_to_json row_to_json
    array_contains array_distinct array_extract array_has array_has_all array_has_any
    array_length array_position array_slice array_sort array_to_string array_value
    flatten len list_aggregate list_any_value list_append list_concat list_contains
    list_distinct list_extract list_filter list_has list_has_all list_has_any
    list_position list_prepend list_reduce list_reverse list_reverse_sort list_select
    list_slice list_sort list_transform list_unique list_value list_zip list_cat
    array_cat array_append array_prepend array_filter array_transform array_reduce
    list_sum list_avg list_min list_max list_count list_first list_last list_string_agg
    generate_series range struct_extract struct_pack row map map_extract map_keys
    map_values cardinality element_at
    coalesce ifnull nullif if iif typeof
    count count_star sum avg mean min max any_value arbitrary first last string_agg
    group_concat listagg list array_agg median mode quantile quantile_cont quantile_disc
    stddev stddev_pop stddev_samp var_pop var_samp variance bool_and bool_or
    every product approx_count_distinct approx_quantile arg_max arg_min argmax argmin
    max_by min_by histogram entropy kurtosis skewness corr covar_pop covar_samp
    regr_slope regr_intercept regr_r2 regr_count bit_and bit_or bit_xor favg fsum
    sumkahan kahan_sum count_if countif
    row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value
    last_value nth_value
    """.split()
)

# Types a CAST may produce: plain values only.
ALLOWED_CAST_TYPES = frozenset(
    """
    VARCHAR CHAR BPCHAR TEXT STRING BOOLEAN BOOL TINYINT SMALLINT INTEGER INT BIGINT
    HUGEINT UTINYINT USMALLINT UINTEGER UBIGINT UHUGEINT FLOAT REAL DOUBLE DECIMAL NUMERIC
    DATE TIME TIMESTAMP TIMESTAMP_S TIMESTAMP_MS TIMESTAMP_NS TIMESTAMP WITH TIME ZONE
    TIMESTAMP_TZ INTERVAL JSON LIST ARRAY STRUCT MAP UUID
    """.split()
) | {"TIMESTAMP WITH TIME ZONE"}

_CTE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SAFE_REFS = frozenset(
    {"BASE_TABLE", "JOIN", "SUBQUERY", "EXPRESSION_LIST", "EMPTY", "TABLE_FUNCTION"}
)
MAX_TREE_NODES = 50_000


class Refused(Exception):
    """The statement is not allowed (the message says why)."""


def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every object of a parse tree, iteratively (a deep tree must not recurse)."""
    stack = [node]
    seen = 0
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            seen += 1
            if seen > MAX_TREE_NODES:
                raise Refused("the statement is too large; simplify it")
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def cte_names(tree: Any) -> set[str]:
    """The names a statement's WITH clauses define (lower case): tables it may read besides the
    views."""
    names: set[str] = set()
    for d in walk(tree):
        cte_map = d.get("cte_map")
        if isinstance(cte_map, dict):
            for entry in cte_map.get("map", []):
                names.add(str(entry.get("key", "")).lower())
    return names


def _type_name(type_info: Any) -> str:
    if isinstance(type_info, dict):
        return str(type_info.get("id", "")).upper()
    return str(type_info).upper()


def check_tree(tree: dict[str, Any]) -> None:
    """Refuse anything in a serialised statement but a SELECT over the tables.

    Raises:
        Refused: naming what is not allowed.
    """
    statements = tree.get("statements", [])
    if len(statements) != 1:
        raise Refused(f"{len(statements)} statements given; send exactly one")
    ctes = cte_names(tree)
    for name in ctes:
        if not _CTE_NAME.match(name) or name in TABLES:
            raise Refused(f"WITH name {name[:40]!r} is not allowed; use a short name like t1")
    tables = set(TABLES) | ctes
    for d in walk(statements[0]):
        if "class" not in d and {"type", "alias", "sample", "query_location"} <= d.keys():
            _check_table_ref(d, tables)
        _check_expression(d)


def _check_table_ref(d: dict[str, Any], tables: set[str]) -> None:
    """A table reference (FROM, JOIN): one of ``tables`` by its plain name, a subquery,
    a join or a pure table function."""
    kind = d.get("type")
    if kind not in _SAFE_REFS:
        raise Refused(f"{str(kind)[:40]} is not allowed")
    if kind == "BASE_TABLE":
        if d.get("schema_name") or d.get("catalog_name"):
            raise Refused("qualified table names are not allowed; use the plain names")
        if str(d.get("table_name", "")).lower() not in tables:
            raise Refused(f"table {str(d.get('table_name'))[:80]!r} is not one of the views")
    if kind == "TABLE_FUNCTION":
        fn = d.get("function") or {}
        name = str(fn.get("function_name", "")).lower()
        if name not in ALLOWED_TABLE_FUNCTIONS or fn.get("schema") or fn.get("catalog"):
            raise Refused(f"table function {name[:60]}() is not allowed")


def _check_expression(d: dict[str, Any]) -> None:
    """Any object of the tree (table references too): a function must be an allowed,
    unqualified one, a cast must make a plain value, a parameter is refused. Anything
    else (a subquery, a SELECT node, a column, a constant) passes: its parts are walked
    and checked on their own."""
    cls = d.get("class")
    if cls in ("FUNCTION", "AGGREGATE", "WINDOW") and "function_name" in d:
        name = str(d["function_name"]).lower()
        # The parser spells a lambda's parameter list (a, b) as main.row(a, b).
        plain = (d.get("schema") or "") in ("", "main" if name == "row" else "")
        if not plain or d.get("catalog"):
            raise Refused(f"qualified function {name[:60]} is not allowed")
        if name not in ALLOWED_FUNCTIONS:
            raise Refused(f"function {name[:60]}() is not allowed")
    elif cls == "CAST":
        target = _type_name(d.get("cast_type"))
        if target not in ALLOWED_CAST_TYPES:
            raise Refused(f"a cast to {target[:40]} is not allowed")
    elif cls == "PARAMETER" or d.get("type") == "VALUE_PARAMETER":
        raise Refused("parameters ($1, ?) are not allowed; write the values in the query")


# -- the process -------------------------------------------------------------------------


def read_frame(stream: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    """One frame from the parent: an 8-byte header (two big-endian lengths), JSON, then raw
    bytes; None at end of stream (the parent went away)."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    header_len, body_len = struct.unpack(">II", head)
    header = json.loads(stream.read(header_len))
    body = stream.read(body_len) if body_len else b""
    return header, body


def write_frame(stream: BinaryIO, header: dict[str, Any], body: bytes = b"") -> None:
    """Send one frame (see :func:`read_frame`) and flush it: the parent waits for it."""
    raw = json.dumps(header, default=str).encode()
    stream.write(struct.pack(">II", len(raw), len(body)) + raw + body)
    stream.flush()


def jsonable(v: Any) -> Any:
    """A DuckDB value as JSON data: containers kept, anything else (dates, decimals, blobs)
    as its text."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return str(v)


class Engine:
    """The in-memory DuckDB of this process, holding one workspace's tables at a time."""

    def __init__(self, memory_limit: str, spill_dir: str, max_spill: str) -> None:
        import duckdb

        self.duckdb = duckdb
        self.con = duckdb.connect(
            ":memory:",
            config={
                "enable_external_access": False,
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
                "allow_community_extensions": False,
                "allow_unsigned_extensions": False,
                "threads": 1,
                "memory_limit": memory_limit,
                "temp_directory": spill_dir,
                "max_temp_directory_size": max_spill,
            },
        )
        # Its progress bar would print on stdout, which is the protocol channel.
        self.con.execute("SET enable_progress_bar = false")
        self.locked = False

    def load(self, tables: dict[str, memoryview], schemas: dict[str, list[list[str]]]) -> None:
        """Make the five tables of the rows sent (see rows_sql)."""
        for name in TABLES:
            self.con.execute(f"DROP TABLE IF EXISTS {name}")
        for name in TABLES:
            select = rows_sql(schemas[name])
            self.con.execute(f"CREATE TABLE {name} AS {select}", [str(tables[name], "utf-8")])

    def update(
        self,
        tables: dict[str, memoryview],
        schemas: dict[str, list[list[str]]],
        drop: list[tuple[str, list[str] | None]],
        graph_drop: list[str],
    ) -> None:
        """Apply what changed since the load, all or nothing: the catalog replaced, the
        documents of ``drop`` (collection, ids; None: all) and the graph rows of
        ``graph_drop`` ("collection_id:document_id") deleted, then the rows sent added."""
        ids_in = "IN (SELECT unnest(from_json(?, '[\"VARCHAR\"]')))"
        provenance = "(CAST(collection_id AS VARCHAR) || ':' || document_id)"
        self.con.execute("BEGIN TRANSACTION")
        try:
            self.con.execute("DELETE FROM kb_collections")
            for collection, ids in drop:
                for name in ("kb_documents", "kb_chunks"):
                    if ids is None:
                        self.con.execute(f"DELETE FROM {name} WHERE collection = ?", [collection])
                    else:
                        self.con.execute(
                            f"DELETE FROM {name} WHERE collection = ? AND document_id {ids_in}",
                            [collection, json.dumps(ids)],
                        )
            if graph_drop:
                for name in ("kb_graph_nodes", "kb_graph_edges"):
                    sql = f"DELETE FROM {name} WHERE {provenance} {ids_in}"
                    self.con.execute(sql, [json.dumps(graph_drop)])
            for name in TABLES:
                select = rows_sql(schemas[name])
                self.con.execute(f"INSERT INTO {name} {select}", [str(tables[name], "utf-8")])
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise

    def _one(self, sql: str, param: str) -> Any:
        row = self.con.execute(sql, [param]).fetchone()
        assert row is not None
        return row[0]

    def lock(self) -> None:
        # After loading: nothing the SQL does may change a setting again. Once: setting
        # it again is itself a change, refused ("the configuration has been locked").
        """Lock DuckDB's configuration, once, after the first load: agent SQL can then change no
        setting (limits, external access) for the rest of the process."""
        if not self.locked:
            self.con.execute("SET lock_configuration = true")
            self.locked = True

    def query(self, sql: str, max_rows: int, max_bytes: int) -> dict[str, Any]:
        """Check and run one statement; the answer is a JSON-ready dict.

        The statement is parsed by DuckDB, checked against the allow-list on its parse tree
        (:class:`Refused` when it fails), and what runs is the tree printed back, never the
        text as sent. Rows stop at ``max_rows`` or ``max_bytes`` of JSON (``truncated``); a
        SQL error comes back as ``{"ok": False, "kind": "sql", "error": first line}``.
        """
        duckdb = self.duckdb
        raw = self._one("SELECT json_serialize_sql(?::VARCHAR)", sql)
        try:
            tree = json.loads(raw)
        except RecursionError:
            raise Refused("the statement is nested too deeply; simplify it") from None
        if tree.get("error"):
            message = str(tree.get("error_message", "cannot parse")).splitlines()[0][:200]
            if "Only SELECT" in message:
                raise Refused(
                    "only SELECT statements may run (no COPY, ATTACH, INSTALL, LOAD, PRAGMA,"
                    " SET, writes)"
                )
            raise Refused(f"not valid SQL ({message})")
        check_tree(tree)
        printed = self._one("SELECT json_deserialize_sql(?::JSON)", raw)
        try:
            cursor = self.con.execute(f"SELECT * FROM ({printed}) AS q LIMIT {int(max_rows) + 1}")
            columns = [d[0] for d in cursor.description]
            rows: list[list[Any]] = []
            size = 0
            truncated = False
            for row in cursor.fetchall():
                if len(rows) >= max_rows:
                    truncated = True
                    break
                values = [jsonable(v) for v in row]
                size += len(json.dumps(values, default=str))
                if size > max_bytes:
                    truncated = True
                    break
                rows.append(values)
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "error"
            return {"ok": False, "kind": "sql", "error": first}
        return {
            "ok": True,
            "columns": columns,
            "rows": rows,
            "truncated": truncated,
            "sql": printed,
        }


def limit_address_space(limit: int) -> None:
    """Let the OS refuse allocations past ``limit`` bytes (an allocation DuckDB does not
    count against its memory_limit then fails as out of memory)."""
    try:
        import resource
    except ImportError:  # not on this OS: DuckDB's memory_limit alone
        return
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def rows_sql(schema: list[list[str]]) -> str:
    """A SELECT of the rows in one JSON parameter holding a list per column, each column
    cast to its type (timestamps arrive as text)."""
    for name, sql_type in schema:
        if not re.fullmatch(r"[a-z_]+", name) or not re.fullmatch(r"[A-Z]+", sql_type):
            raise Refused(f"bad column {name!r} {sql_type!r}")
    parsed = {name: ["VARCHAR" if t == "TIMESTAMPTZ" else t] for name, t in schema}
    unnested = ", ".join(f"unnest(j.{name}) AS {name}" for name, _ in schema)
    cast = ", ".join(f"CAST({name} AS {sql_type}) AS {name}" for name, sql_type in schema)
    return (
        f"SELECT {cast} FROM (SELECT {unnested}"
        f" FROM (SELECT from_json(?, '{json.dumps(parsed)}') AS j))"
    )


def main(argv: list[str]) -> int:
    """The worker's entry: ``argv`` is the spill folder, the address-space limit, the read
    end of the lifeline pipe and the parent's pid; the spill folder is removed when the
    parent goes away, whatever the worker is doing then."""
    spill_dir, address_space = argv[0], int(argv[1])
    lifeline, parent = int(argv[2]), int(argv[3])
    limit_address_space(address_space)
    worker = Worker(spill_dir)
    follow_parent(lifeline, parent, worker.orphaned)
    try:
        return worker.serve()
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)  # the parent went away


class Worker:
    """This process: its engine (made by the first ``load``) and its spill folder."""

    def __init__(self, spill_dir: str) -> None:
        self.spill_dir = spill_dir
        self.engine: Engine | None = None

    def orphaned(self) -> None:
        """The parent is gone (killed, perhaps mid-query): stop the query, remove the spill
        folder and exit now. Nobody will read an answer, and nobody else knows the folder."""
        engine = self.engine
        if engine is not None:
            engine.con.interrupt()  # no new spill file once the query sees it
        # A spill file created while the folder was being emptied makes rmtree fail
        # (ENOTEMPTY); once the folder is gone DuckDB cannot create one in it.
        for _ in range(10):
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            if not os.path.lexists(self.spill_dir):
                break
        os._exit(0)  # the main thread may be deep in a query that never checks for interrupts

    def serve(self) -> int:
        """Answer the parent's frames on stdin/stdout (``load`` then ``query``...) until stdin
        closes; returns the exit code."""
        stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
        while True:
            frame = read_frame(stdin)
            if frame is None:
                return 0  # the parent went away
            try:
                write_frame(stdout, self.answer(*frame))
            except Refused as exc:
                write_frame(stdout, {"ok": False, "kind": "refused", "error": str(exc)})
            except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
                text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                error = f"{type(exc).__name__}: {text}"
                write_frame(stdout, {"ok": False, "kind": "internal", "error": error})

    def answer(self, header: dict[str, Any], body: bytes) -> dict[str, Any]:
        """The answer to one request: ``load`` (the tables) or ``query``."""
        if header["op"] in ("load", "update"):
            parts, at, whole = {}, 0, memoryview(body)
            for name, size in zip(TABLES, header["sizes"], strict=True):
                parts[name] = whole[at : at + size]  # no copy: each is decoded once
                at += size
            schemas = dict(zip(TABLES, header["schemas"], strict=True))
            if header["op"] == "update":
                assert self.engine is not None
                drop = [(str(c), None if ids is None else [str(i) for i in ids])
                        for c, ids in header["drop"]]  # fmt: skip
                graph_drop = [str(k) for k in header["graph_drop"]]
                self.engine.update(parts, schemas, drop, graph_drop)
                return {"ok": True}
            if self.engine is None:
                self.engine = Engine(
                    str(header["memory_limit"]), self.spill_dir, str(header["max_spill"])
                )
            self.engine.load(parts, schemas)
            self.engine.lock()
            return {"ok": True}
        if header["op"] == "query":
            assert self.engine is not None
            return self.engine.query(
                str(header["sql"]), int(header["max_rows"]), int(header["max_bytes"])
            )
        return {"ok": False, "kind": "refused", "error": "unknown request"}


# -- noticing the parent's death ---------------------------------------------------------

PR_SET_PDEATHSIG = 1  # linux/prctl.h
# The signal the kernel sends when the parent dies (Linux). Not SIGTERM: that keeps its
# usual meaning, and this one is ignored unless the parent really is gone (see below).
PARENT_DIED = getattr(signal, "SIGUSR1", None)


def ask_kernel_to_signal_parent_death() -> bool:
    """PR_SET_PDEATHSIG (Linux): the kernel signals this process when its parent dies, even
    when some other process still holds the lifeline's write end. Returns whether it is
    set. The kernel signals the death of the parent *thread*, so a signal while
    ``getppid()`` is still the parent is a thread of a live parent ending: ignored."""
    if not sys.platform.startswith("linux") or PARENT_DIED is None:
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(PARENT_DIED), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def follow_parent(lifeline: int, parent: int, orphaned: Callable[[], None]) -> None:
    """Call ``orphaned`` (from a thread) as soon as the parent process ``parent`` is gone.

    Two signs, because the main thread may spend minutes inside one DuckDB call and never
    read stdin: end of file on ``lifeline`` (a pipe whose only write end the parent holds:
    the kernel closes it when the parent dies, on every POSIX system), and on Linux the
    parent-death signal, whose Python handler could not run while the main thread is in
    DuckDB, so its C-level handler wakes the thread through ``set_wakeup_fd``.
    """
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    if PARENT_DIED is not None:
        signal.signal(PARENT_DIED, lambda *_: None)  # the wakeup fd does the work
        signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
        ask_kernel_to_signal_parent_death()

    def gone() -> bool:
        return os.getppid() != parent  # reparented: the parent has died

    def watch() -> None:
        while not gone():
            ready = select.select([lifeline, wake_read], [], [])[0]
            if lifeline in ready and not os.read(lifeline, 64):
                break  # end of file: the parent's write end is closed
            if wake_read in ready:
                os.read(wake_read, 64)
        orphaned()

    threading.Thread(target=watch, name="hybridkb-sql-parent", daemon=True).start()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
