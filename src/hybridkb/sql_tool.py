"""Read-only SQL for structured questions ("how many PDFs did I add last month?").

Off by default (``HYBRIDKB_ENABLE_SQL_TOOL=true`` turns it on). Confined by
construction, not by a list of what is forbidden:

* **A separate engine.** The SQL runs in a worker process (``sql_worker.py``) with its
  own in-memory DuckDB, external access (files, network, extensions) off and the
  configuration locked. It holds only the bound workspace's rows, copied out of the
  store through the storage protocol (``export_tables``) and cached per write
  generation; it never sees the knowledge base's file, connection, other
  workspaces or settings. Any backend works the same way (Postgres included).
* **An allow-list** of statement shape, tables, table functions, functions and cast
  types, checked on DuckDB's parse tree in the worker before anything is bound.
* **Limits that hold.** A call waits at most ``timeout`` seconds in all (for the
  workspace's worker, busy with another call, and for its answer) and then kills the
  worker (a query may compute without checking for interruption), so a call returns
  within the limit plus the time to kill. The worker's memory is bounded twice: its
  DuckDB's ``memory_limit`` and an address-space limit set by the OS (``RLIMIT_AS``,
  where there is one). It spills to a private folder of its own (mode 0700), removed
  when it ends or is killed, never the server's working folder. Results are capped
  in rows and bytes. The store's lock is held only while rows are
  copied out, never while agent SQL runs, so other tool calls and clients go on.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import BackendError, ConfigError
from .storage.columns import (
    EXPORT_CHUNKS,
    EXPORT_DOCUMENTS,
    GRAPH_EDGES,
    GRAPH_NODES,
    Schema,
    Table,
)

if TYPE_CHECKING:
    from .api import KnowledgeBaseAPI
    from .kb import KnowledgeBase
    from .storage.base import Storage

DEFAULT_MAX_ROWS = 200
DEFAULT_MAX_BYTES = 256 * 1024
DEFAULT_TIMEOUT = 5.0
LOAD_TIMEOUT = 120.0  # copying a large workspace in is not the agent's query
MAX_SQL_CHARS = 20_000
MIN_MEMORY_BYTES = 256 << 20
# The worker's address space beyond its DuckDB memory limit: Python and duckdb reserve
# most of it before a query runs (measured with pyarrow too: VmPeak 1.76 GB after loading).
ADDRESS_SPACE_HEADROOM = 2 << 30
MAX_SPILL_BYTES = 2 << 30  # what a query may write to its spill folder

VIEWS = ("kb_collections", "kb_documents", "kb_chunks", "kb_graph_nodes", "kb_graph_edges")
VIEW_HINT = "Views: kb_collections, kb_documents, kb_chunks (see the tool description for columns)"
VIEWS_DOC = """        Views (this workspace only):
        - kb_collections(name, model, dim, chunking JSON, language, created_at, updated_at)
        - kb_documents(collection, document_id, filename, path, source ('file' or 'text'),
          metadata JSON, language, bytes, chunk_count, added_at TIMESTAMPTZ)
        - kb_chunks(collection, document_id, chunk_id, chunk_index, text, page, section,
          char_start, char_end, language, filename, path, metadata JSON, added_at)
        - kb_graph_nodes(id, type, properties JSON, collection_id, document_id) and
          kb_graph_edges(source, target, type, weight, properties JSON, collection_id,
          document_id), when the knowledge graph exists
        Read metadata with json_extract_string(metadata, '$.key')."""

COLLECTIONS_SCHEMA: Schema = (
    ("name", "VARCHAR"), ("model", "VARCHAR"), ("dim", "INTEGER"), ("chunking", "VARCHAR"),
    ("language", "VARCHAR"), ("created_at", "VARCHAR"), ("updated_at", "VARCHAR"),
)  # fmt: skip


@dataclass
class SQLResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # more rows (or bytes) existed than the caps allow
    sql: str  # the statement that ran (re-printed from the checked tree)

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "rows": [list(r) for r in self.rows],
            "truncated": self.truncated,
            "sql": self.sql,
        }


def refuse(why: str) -> ConfigError:
    return ConfigError(
        f"sql: {why}. Only one read-only SELECT over the views kb_collections, kb_documents, "
        "kb_chunks, kb_graph_nodes, kb_graph_edges is allowed"
    )


# -- the workspace's rows ----------------------------------------------------------------


def table_json(table: Table) -> bytes:
    """A table as the worker loads it: one JSON object holding a list per column."""
    columns = dict(zip(table.column_names, table.columns, strict=True))
    return json.dumps(columns, ensure_ascii=False, default=str).encode("utf-8")


def _with_collection(tables: list[tuple[str, Table]], schema: Schema) -> Table:
    """The tables of several collections as one, a ``collection`` column first."""
    names = [name for name, table in tables for _ in range(table.num_rows)]
    columns = tuple(
        [value for _, table in tables for value in table.columns[i]] for i in range(len(schema))
    )
    return Table((("collection", "VARCHAR"), *schema), (names, *columns))


def _graph_tables(storage: Storage, workspace: str) -> tuple[int, Table, Table]:
    sql = storage.graph_sql
    if sql is None or not storage.transaction(sql.has_schema):
        return 0, Table.from_rows(GRAPH_NODES, []), Table.from_rows(GRAPH_EDGES, [])
    version, nodes, edges = storage.transaction(lambda con: sql.load(con, workspace))
    return version, nodes, edges


def data_key(kb: KnowledgeBase) -> str:
    """What the worker must hold: changes with every write to the workspace."""
    records = kb.storage.list_collections(kb.workspace)
    sql = kb.storage.graph_sql
    graph = 0
    if sql is not None and kb.storage.transaction(sql.has_schema):
        graph = kb.storage.transaction(lambda con: sql.version(con, kb.workspace))
    return json.dumps([kb.workspace, [(r.id, r.generation) for r in records], graph])


def workspace_tables(kb: KnowledgeBase) -> dict[str, Table]:
    """The five tables an agent may read, for ``kb``'s workspace only."""
    storage = kb.storage
    records = storage.list_collections(kb.workspace)
    docs, chunks = [], []
    for r in records:
        d, c = storage.export_tables(r)
        docs.append((r.name, d))
        chunks.append((r.name, c))
    collections = Table.from_rows(
        COLLECTIONS_SCHEMA,
        [
            (r.name, r.model, r.dim, json.dumps(r.chunking), r.language, r.created_at, r.updated_at)
            for r in records
        ],
    )
    _, nodes, edges = _graph_tables(storage, kb.workspace)
    return {
        "kb_collections": collections,
        "kb_documents": _with_collection(docs, EXPORT_DOCUMENTS),
        "kb_chunks": _with_collection(chunks, EXPORT_CHUNKS),
        "kb_graph_nodes": nodes,
        "kb_graph_edges": edges,
    }


# -- the worker process ------------------------------------------------------------------


class QueryTimedOut(Exception):
    """The worker did not answer in time (it has been killed)."""


class SQLEngine:
    """One worker process serving one workspace's agent SQL, one call at a time.

    A worker holds one version of the rows: after a write, the next call starts a new
    one (its configuration is locked, and its memory limit is sized to the rows)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.key: str | None = None
        self.spill_dir: str | None = None

    def _start(self, memory: int) -> subprocess.Popen[bytes]:
        self.stop()  # a worker that died on its own leaves its folder to us
        worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql_worker.py")
        self.spill_dir = tempfile.mkdtemp(prefix="hybridkb-sql-")  # mode 0700, ours alone
        # -I: isolated (no environment variables, no user site, no cwd on the path).
        self.proc = subprocess.Popen(
            [sys.executable, "-I", worker, self.spill_dir, str(memory + ADDRESS_SPACE_HEADROOM)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            # Nothing of ours to read in its environment either.
            env={"LANG": "C.UTF-8", "PATH": os.defpath},
        )
        self.key = None
        return self.proc

    def stop(self) -> None:
        """Kill the worker (if it runs) and remove its spill folder, whatever ended it."""
        proc, self.proc, self.key = self.proc, None, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout) if proc is not None else ():
            if stream is not None:
                stream.close()
        spill_dir, self.spill_dir = self.spill_dir, None
        if spill_dir is not None:
            shutil.rmtree(spill_dir, ignore_errors=True)

    def _call(self, header: dict[str, Any], body: bytes, deadline: float) -> dict[str, Any]:
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        raw = json.dumps(header).encode()
        try:
            proc.stdin.write(struct.pack(">II", len(raw), len(body)) + raw + body)
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            self.stop()
            raise BackendError(
                f"sql: the query engine stopped ({exc}); send the query again"
            ) from exc
        head = self._read(proc, 8, deadline)
        header_len, body_len = struct.unpack(">II", head)
        answer: dict[str, Any] = json.loads(self._read(proc, header_len + body_len, deadline))
        return answer

    def _read(self, proc: subprocess.Popen[bytes], size: int, deadline: float) -> bytes:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        out = bytearray()
        while len(out) < size:
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self.stop()
                raise QueryTimedOut
            chunk = os.read(fd, size - len(out))
            if not chunk:
                self.stop()
                raise BackendError(
                    "sql: the query engine stopped (out of memory?); send a cheaper query"
                )
            out += chunk
        return bytes(out)

    def run(
        self, kb: KnowledgeBase, sql: str, *, max_rows: int, max_bytes: int, timeout: float
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        # Wait for the worker no longer than the call's own limit: calls queued behind a
        # slow one must not hold their threads (a server's) for the sum of the limits.
        if not self.lock.acquire(timeout=timeout):
            raise QueryTimedOut
        try:
            key = data_key(kb)
            if key != self.key or self.proc is None or self.proc.poll() is not None:
                tables = workspace_tables(kb)
                blobs = [table_json(tables[name]) for name in VIEWS]
                memory = max(MIN_MEMORY_BYTES, 3 * sum(len(b) for b in blobs))
                self._start(memory)
                header = {"op": "load", "key": key, "sizes": [len(b) for b in blobs],
                          "schemas": [tables[name].schema for name in VIEWS],
                          "memory_limit": f"{memory}B", "max_spill": f"{MAX_SPILL_BYTES}B"}  # fmt: skip
                try:
                    answer = self._call(header, b"".join(blobs), time.monotonic() + LOAD_TIMEOUT)
                except QueryTimedOut as exc:
                    raise BackendError(
                        f"sql: loading the workspace took over {LOAD_TIMEOUT:g}s; try again"
                    ) from exc
                if not answer.get("ok"):
                    self.stop()
                    raise BackendError(f"sql: cannot load the workspace ({answer.get('error')})")
                self.key = key
                # Loading is not the agent's query: after a load it gets its whole limit.
                deadline = time.monotonic() + timeout
            request = {"op": "query", "sql": sql, "max_rows": max_rows, "max_bytes": max_bytes}
            return self._call(request, b"", deadline)
        finally:
            self.lock.release()


_ENGINES: weakref.WeakKeyDictionary[Any, dict[str, SQLEngine]] = weakref.WeakKeyDictionary()
_ENGINES_LOCK = threading.Lock()
_ALL: weakref.WeakSet[SQLEngine] = weakref.WeakSet()


def engine_for(kb: KnowledgeBase) -> SQLEngine:
    """The worker of ``kb``'s store and workspace (started on first use)."""
    with _ENGINES_LOCK:
        per_store = _ENGINES.setdefault(kb.storage, {})
        engine = per_store.get(kb.workspace)
        if engine is None:
            engine = per_store[kb.workspace] = SQLEngine()
            _ALL.add(engine)
            weakref.finalize(engine, SQLEngine.stop, engine)
        return engine


@atexit.register
def _stop_all() -> None:
    for engine in list(_ALL):
        engine.stop()


# -- the entry point ---------------------------------------------------------------------


def run_sql(
    kb: KnowledgeBaseAPI,
    sql: str,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> SQLResult:
    """Run one checked, read-only SELECT over the workspace views of ``kb``
    (``kb.sql``: on a client of an owner, the owner runs it with the same checks).

    Raises:
        ConfigError: a refused statement, a SQL error, or too slow (stopped at ``timeout``).
        BackendError: the engine could not be started or loaded.
    """
    return kb.sql(sql, max_rows=max_rows, timeout=timeout, max_bytes=max_bytes)


def sql_from_dict(found: dict[str, Any]) -> SQLResult:
    """A result sent as ``SQLResult.to_dict()`` (by the owner) rebuilt."""
    return SQLResult(
        list(found["columns"]), [tuple(r) for r in found["rows"]], found["truncated"], found["sql"]
    )


def sql_here(
    kb: KnowledgeBase,
    sql: str,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> SQLResult:
    """:func:`run_sql` in the process that opened the store.

    Raises:
        ConfigError: a refused statement, a SQL error, or too slow (stopped at ``timeout``).
        BackendError: the engine could not be started or loaded.
    """
    if not isinstance(sql, str) or not sql.strip().strip(";").strip():
        raise ConfigError(
            "sql: empty; send one SELECT statement, e.g. SELECT count(*) FROM kb_documents"
        )
    if len(sql) > MAX_SQL_CHARS:
        raise refuse(f"{len(sql):,} characters is too long (limit {MAX_SQL_CHARS:,})")
    if "\x00" in sql:
        raise refuse("the statement contains a NUL character")
    try:
        answer = engine_for(kb).run(
            kb, sql, max_rows=max_rows, max_bytes=max_bytes, timeout=timeout
        )
    except QueryTimedOut:
        raise ConfigError(
            f"sql: stopped after {timeout:g}s; make the query cheaper (filter, LIMIT, aggregate)"
        ) from None
    if answer.get("ok"):
        return SQLResult(
            list(answer["columns"]),
            [tuple(r) for r in answer["rows"]],
            bool(answer["truncated"]),
            str(answer["sql"]),
        )
    error = str(answer.get("error", "refused"))
    kind = answer.get("kind")
    if kind == "sql":
        raise ConfigError(f"sql: {error}. {VIEW_HINT}")
    if kind == "internal":
        raise BackendError(f"sql: the query engine failed ({error}); send the query again")
    raise refuse(error)
