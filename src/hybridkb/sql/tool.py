"""Read-only SQL for structured questions ("how many PDFs did I add last month?").

Off by default (``HYBRIDKB_ENABLE_SQL_TOOL=true`` turns it on). Confined by
construction, not by a list of what is forbidden:

* **A separate engine.** The SQL runs in a worker process (``sql/worker.py``) with its
  own in-memory DuckDB, external access (files, network, extensions) off and the
  configuration locked. It holds only the bound workspace's rows, copied out of the
  store through the storage protocol (``export_tables``) once, then kept up to date
  with the rows of the documents each write changed (``sql/rows.py``); it never sees
  the knowledge base's file, connection, other workspaces or settings. Any backend
  works the same way (Postgres included).
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
from typing import Any

from ..errors import BackendError, ConfigError
from .rows import VIEWS, Held, OpenWorkspace, Shipment, changes, everything

DEFAULT_MAX_ROWS = 200
DEFAULT_MAX_BYTES = 256 * 1024
DEFAULT_TIMEOUT = 5.0
LOAD_TIMEOUT = 120.0  # copying a large workspace in is not the agent's query
# How long a stop from another thread waits for the call in progress to let go of the
# worker it killed (it reads the end of the pipe at once; a load may be mid-copy).
STOP_WAIT = 5.0
MAX_SQL_CHARS = 20_000
MIN_MEMORY_BYTES = 256 << 20
# The worker's address space beyond its DuckDB memory limit and the rows in transit
# (address_space): Python, duckdb and the worker's threads reserve ~0.55 GB however small
# the rows (bench/sql.py: VmPeak over the memory limit, the worst of its queries). Was
# 2 GiB flat, sized when the worker loaded pyarrow (VmPeak 1.76 GB before any query).
ADDRESS_SPACE_BASE = 1 << 30
# A worker's DuckDB memory limit is this many times the JSON bytes of the rows it may
# hold (loaded, plus sent since): they take about as much again as tables, and queries
# work on top.
ROWS_PER_MEMORY = 3
MAX_SPILL_BYTES = 2 << 30  # what a query may write to its spill folder

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


# -- the worker process ------------------------------------------------------------------


def address_space(memory: int) -> int:
    """The worker's address-space limit for a DuckDB ``memory`` limit (see
    ADDRESS_SPACE_BASE): a worker is sent at most a third of ``memory`` in rows, and one
    load or update holds what it was sent twice outside DuckDB."""
    return memory + ADDRESS_SPACE_BASE + 2 * (memory // ROWS_PER_MEMORY)


class QueryTimedOut(Exception):
    """The worker did not answer in time (it has been killed)."""


class SQLEngine:
    """One worker process serving one workspace's agent SQL, one call at a time.

    A worker is loaded with the whole workspace once; after a write, the next call sends
    it only what changed (``rows.changes``). Its configuration is locked and its
    memory limit sized to the first load, so once what it was sent outgrows that, the
    next call starts a new one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # held by the call in progress (and its clean-up)
        self.stop_requested = False  # a stop from another thread killed the call's worker
        self.proc: subprocess.Popen[bytes] | None = None
        self.held: Held | None = None  # what the worker holds, once loaded
        self.memory = 0  # its DuckDB memory limit
        self.spill_dir: str | None = None
        self.lifeline: int | None = None  # the write end of the worker's lifeline pipe

    def _start(self, memory: int) -> subprocess.Popen[bytes]:
        self._release()  # a worker that died on its own leaves its folder to us
        worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
        self.spill_dir = tempfile.mkdtemp(prefix="hybridkb-sql-")  # mode 0700, ours alone
        # The worker's lifeline: we hold the only write end (not inherited by any other
        # child), so the kernel closes it when this process dies, however it dies.
        lifeline, self.lifeline = os.pipe()
        try:
            args = [self.spill_dir, str(address_space(memory)), str(lifeline)]
            # -I: isolated (no environment variables, no user site, no cwd on the path).
            self.proc = subprocess.Popen(
                [sys.executable, "-I", worker, *args, str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(lifeline,),
                # Nothing of ours to read in its environment either.
                env={"LANG": "C.UTF-8", "PATH": os.defpath},
            )
        finally:
            os.close(lifeline)
        self.held = None
        return self.proc

    def stop(self) -> None:
        """Kill the worker (if it runs) and remove its spill folder, from any thread.

        A call in progress in another thread reads the end of its pipe at once and
        releases the worker itself: its pipes are never closed under it (a closed
        descriptor's number can be reused by another file before the call reads it)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            self.stop_requested = True
            proc.kill()
        if self.lock.acquire(timeout=STOP_WAIT):
            try:
                self._release()
            finally:
                self.lock.release()

    def _release(self) -> None:
        """Kill the worker, close its pipes and remove its spill folder (the caller holds
        :attr:`lock`, or is the finaliser of an engine nobody uses)."""
        self.stop_requested = False
        proc, self.proc, self.held = self.proc, None, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout) if proc is not None else ():
            if stream is not None:
                stream.close()
        lifeline, self.lifeline = self.lifeline, None
        if lifeline is not None:
            os.close(lifeline)
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
            self._release()
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
            chunk = os.read(fd, size - len(out)) if ready else b""
            if not ready:
                self._release()
                raise QueryTimedOut
            if not chunk:
                stopped = self.stop_requested
                self._release()
                if stopped:  # stop() from another thread: a server closing, an exit
                    raise BackendError(
                        "sql: the query engine was stopped during the query; send it again"
                    )
                raise BackendError(
                    "sql: the query engine stopped (out of memory?); send a cheaper query"
                )
            out += chunk
        return bytes(out)

    def _refresh(self, kb: OpenWorkspace) -> bool:
        """Bring the worker up to date with ``kb``'s workspace: start and load one, or send
        the one running what changed. Returns whether anything was sent."""
        if self.held is not None and self.proc is not None and self.proc.poll() is None:
            shipment = changes(kb, self.held)
            if shipment is None:
                return False
            blobs = shipment.blobs()
            size = sum(len(b) for b in blobs)
            if ROWS_PER_MEMORY * (self.held.sent + size) <= self.memory:
                self._send("update", shipment, blobs)
                self.held = shipment.held
                self.held.sent += size
                return True
        shipment = everything(kb)
        blobs = shipment.blobs()
        size = sum(len(b) for b in blobs)
        self.memory = max(MIN_MEMORY_BYTES, ROWS_PER_MEMORY * size)
        self._start(self.memory)
        self._send("load", shipment, blobs)
        self.held = shipment.held
        self.held.sent = size
        return True

    def _send(self, op: str, shipment: Shipment, blobs: list[bytes]) -> None:
        """Send rows (``load``: the first; ``update``: what changed) and wait for the worker."""
        header = {"op": op, "sizes": [len(b) for b in blobs],
                  "schemas": [shipment.tables[name].schema for name in VIEWS],
                  "drop": shipment.drop, "graph_drop": shipment.graph_drop,
                  "memory_limit": f"{self.memory}B", "max_spill": f"{MAX_SPILL_BYTES}B"}  # fmt: skip
        try:
            answer = self._call(header, b"".join(blobs), time.monotonic() + LOAD_TIMEOUT)
        except QueryTimedOut as exc:
            raise BackendError(
                f"sql: loading the workspace took over {LOAD_TIMEOUT:g}s; try again"
            ) from exc
        if not answer.get("ok"):
            self._release()
            raise BackendError(f"sql: cannot load the workspace ({answer.get('error')})")

    def run(
        self, kb: OpenWorkspace, sql: str, *, max_rows: int, max_bytes: int, timeout: float
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        # Wait for the worker no longer than the call's own limit: calls queued behind a
        # slow one must not hold their threads (a server's) for the sum of the limits.
        if not self.lock.acquire(timeout=timeout):
            raise QueryTimedOut
        try:
            if self._refresh(kb):
                # Loading is not the agent's query: after a load it gets its whole limit.
                deadline = time.monotonic() + timeout
            request = {"op": "query", "sql": sql, "max_rows": max_rows, "max_bytes": max_bytes}
            return self._call(request, b"", deadline)
        finally:
            self.lock.release()


_ENGINES: weakref.WeakKeyDictionary[Any, dict[str, SQLEngine]] = weakref.WeakKeyDictionary()
_ENGINES_LOCK = threading.Lock()
_ALL: weakref.WeakSet[SQLEngine] = weakref.WeakSet()


def engine_for(kb: OpenWorkspace) -> SQLEngine:
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


def sql_here(
    kb: OpenWorkspace,
    sql: str,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> SQLResult:
    """Run one checked, read-only SELECT over the workspace views of ``kb`` (the store
    this process opened: ``KnowledgeBase.sql`` runs it here or in the owner).

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
