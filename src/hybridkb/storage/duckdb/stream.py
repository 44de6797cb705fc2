"""One huge document into DuckDB in bounded memory, still all or nothing.

Writing a 200 MB text in one DuckDB transaction kept every uncommitted row in memory
(measured 2.2 GB peak). Instead a stream goes through three steps:

1. Stage: the batches of (chunks, vectors) are written as numbered Parquet parts
   ``c<collection>-<stream>-<n>.parquet`` in ``<db>.hkbstage/`` by DuckDB (memory: one
   part, about ROW_GROUP_CHARS of text). The database does not change, so
   searches keep serving the old version, and a crash leaves only a file behind.
2. Switch: one transaction deletes the old version, copies the staged rows into the
   chunks and vectors tables, writes the document row, runs the write hooks and bumps
   the generation. DuckDB writes each full row group of such a bulk append to the file,
   so its memory levels off at about one row group (with the buffer pool held to a
   small headroom, below). A SIGKILL before the commit leaves the old version, after
   it the new one.
3. Mirror: if this process has the collection's indexes loaded, they take the new rows
   page by page from the staged file instead of being dropped and rebuilt over every
   chunk. Otherwise the next search builds them from the tables (columnar reads).

Measured on 200 MB of text with the fake embedder (2 cores under load): peak RSS 2,284
-> 735 MB, time 173 -> 150 s. A staged file that no live stream owns (its writer was
killed) is removed by the next stream, by :func:`drop_stale_stages` and by
``doctor --repair``.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterable, Sequence
from contextlib import suppress
from pathlib import Path

import duckdb
import numpy as np

from ...errors import BackendError
from ...private_files import temp_folder
from ..base import ChunkRecord, CollectionRecord, DocumentRecord, WriteEvent
from ..records import DOC_COLUMNS
from .beside import STAGE, beside, made_beside
from .bulk import fetch_vectors_sql, json_rows_sql, vector_list_sql
from .engine import Engine
from .memory import Derived
from .rows import (
    CHUNK_PAYLOAD,
    CHUNK_VALUES,
    ChunkRows,
    bump_generation,
    chunk_rows,
    delete_rows,
)
from .schema import table_names

# Text per Parquet row group: the memory a stage holds before writing (terms and vectors
# add about twice as much again).
ROW_GROUP_CHARS = 4 << 20
# DuckDB's buffer pool keeps every block it touched until it reaches its limit (80% of
# RAM by default). During the switch it may grow only this much over what it held
# before, so the copy spills instead (200 MB of text: peak RSS 1,232 MB unlimited,
# 526 MB with 128 MB; the rest of the peak is outside the pool and levels off).
SWITCH_HEADROOM_BYTES = 128 << 20

# Name prefixes of the staged parts being written by streams of this process: never stale.
_LIVE: set[str] = set()
_LIVE_LOCK = threading.Lock()


def stage_dir(engine: Engine) -> Path | None:
    """Where a file-backed database stages streamed documents (None for :memory:); made
    private by the first part a stream writes (see ``beside.py``)."""
    return beside(engine.path, STAGE)


def stale_stages(engine: Engine, collection_id: int | None = None) -> list[Path]:
    """Staged files no live stream owns: left by a process killed while streaming."""
    folder = stage_dir(engine)
    if folder is None or not folder.is_dir():
        return []
    prefix = "c" if collection_id is None else f"c{collection_id}-"
    with _LIVE_LOCK:
        live = set(_LIVE)
    return sorted(
        p
        for p in folder.iterdir()
        if p.name.startswith(prefix)
        and p.suffix == ".parquet"
        and not any(p.name.startswith(stream) for stream in live)
    )


def drop_stale_stages(engine: Engine, collection_id: int | None = None) -> int:
    """Remove staged leftovers; only a writer may (it holds the file, so no other process streams)."""
    if engine.read_only:
        return 0
    removed = 0
    for path in stale_stages(engine, collection_id):
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
        except OSError:
            continue  # housekeeping: doctor reports what is left
    return removed


def stream_document(
    engine: Engine,
    derived: Derived,
    coll: CollectionRecord,
    doc: DocumentRecord,
    batches: Iterable[tuple[Sequence[ChunkRecord], np.ndarray]],
) -> int:
    """Stage, switch, mirror (see the module docstring); return the number of chunks."""
    scratch = None
    if engine.path == ":memory:":  # it holds everything in RAM anyway; stage beside it all the same
        scratch = Path(tempfile.mkdtemp(prefix="hybridkb-stage-", dir=temp_folder()))
        folder = scratch
    else:
        folder = made_beside(engine.path, STAGE)  # private, or refused in one line
        drop_stale_stages(engine)
    stream = f"c{coll.id}-{uuid.uuid4().hex[:16]}-"
    with _LIVE_LOCK:
        _LIVE.add(stream)
    parts: list[Path] = []
    try:
        count = _stage(coll, batches, folder, stream, parts)
        # Searches keep using the old version's rows until the switch commits.
        with engine.lock, derived.committing(coll):  # switch and mirror as one step
            old_keys, generation = _switch(engine, coll, doc, parts, count)
            _mirror(derived, coll, parts, old_keys, generation)
        return count
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(stream)
        for part in parts:
            part.unlink(missing_ok=True)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _stage(
    coll: CollectionRecord,
    batches: Iterable[tuple[Sequence[ChunkRecord], np.ndarray]],
    folder: Path,
    stream: str,
    parts: list[Path],
) -> int:
    """Write the batches as Parquet parts (appended to ``parts``); return the rows written."""
    pending: list[tuple[Sequence[ChunkRecord], np.ndarray]] = []
    chars = count = 0
    # A connection of its own: staging never touches the database (nor its lock).
    con = duckdb.connect(":memory:", config={"threads": 1})

    def flush() -> None:
        nonlocal chars
        if not pending:
            return
        rows = chunk_rows(
            coll,
            [c for chunks, _ in pending for c in chunks],
            np.concatenate([v for _, v in pending]),
        )
        path = folder / f"{stream}{len(parts):06d}.parquet"
        parts.append(path)
        _write_part(con, coll, rows, path)
        pending.clear()
        chars = 0

    try:
        for chunks, vectors in batches:
            if not chunks:
                continue
            pending.append(
                (chunks, np.asarray(vectors, dtype=np.float32).reshape(len(chunks), coll.dim))
            )
            chars += sum(len(c.text) for c in chunks)
            count += len(chunks)
            if chars >= ROW_GROUP_CHARS:
                flush()
        flush()
    except (OSError, duckdb.IOException) as exc:
        raise BackendError(
            f"{folder}: cannot stage a streamed document ({exc}); check free disk space there"
        ) from exc
    finally:
        con.close()
    return count


def _write_part(
    con: duckdb.DuckDBPyConnection, coll: CollectionRecord, rows: ChunkRows, path: Path
) -> None:
    """One staged part: the chunk columns as stored, plus ``embedding``."""
    # Read by DuckDB's replacement scan from this frame (see bulk.insert_vectors).
    hkb_stage_columns = np.ascontiguousarray(rows.vectors.T)  # noqa: F841
    escaped = str(path).replace("'", "''")
    con.execute(
        f"COPY (SELECT {CHUNK_VALUES}, {vector_list_sql(coll.dim)} AS embedding"
        f" FROM {json_rows_sql(CHUNK_PAYLOAD)} POSITIONAL JOIN hkb_stage_columns)"
        f" TO '{escaped}' (FORMAT parquet)",
        [rows.payload],
    )


def _switch(
    engine: Engine,
    coll: CollectionRecord,
    doc: DocumentRecord,
    staged: list[Path],
    count: int,
) -> tuple[list[int], int]:
    """One transaction: old version out, staged rows in, document row, hooks, generation."""
    t = table_names(coll.id)

    def switch(con: duckdb.DuckDBPyConnection) -> tuple[list[int], int]:
        old_keys = delete_rows(con, coll, [doc.document_id])
        if staged:
            src = [[str(p) for p in staged]]
            (chunks,) = con.execute(  # type: ignore[misc]
                f"INSERT INTO {t['chunks']} SELECT key, chunk_id, document_id, chunk_index, text, page,"
                " section, char_start, char_end, content_hash, language, terms, metadata::JSON,"
                " filename, path, current_timestamp FROM read_parquet(?)",
                src,
            ).fetchone()
            (vectors,) = con.execute(  # type: ignore[misc]
                f"INSERT INTO {t['vectors']} SELECT key, embedding::FLOAT[{int(coll.dim)}]"
                " FROM read_parquet(?)",
                src,
            ).fetchone()
            if int(chunks) != count or int(vectors) != count:
                raise BackendError(
                    f"{staged[0].parent}: staged rows changed under the stream ({chunks}/{vectors} of {count});"
                    " add the document again"
                )
        con.execute(
            f"INSERT INTO {t['documents']} ({DOC_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            " current_timestamp)",
            [
                doc.document_id,
                doc.path,
                doc.filename,
                doc.source,
                doc.content_hash,
                doc.signature,
                json.dumps(doc.metadata),
                doc.language,
                doc.bytes,
                count,
            ],
        )
        engine.emit(con, WriteEvent("put", coll, [doc.document_id], doc, []))
        return old_keys, bump_generation(con, coll)

    con = engine.con
    limit, threads = con.execute(  # type: ignore[misc]
        "SELECT current_setting('memory_limit'), current_setting('threads')"
    ).fetchone()
    (held,) = con.execute(
        "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory()"
    ).fetchone()  # type: ignore[misc]
    bounded = int(held) + SWITCH_HEADROOM_BYTES
    configured = _size_bytes(str(limit))
    if configured:
        bounded = min(bounded, configured)  # never above what the user set
    con.execute(f"SET memory_limit = '{bounded}B'")
    # One thread builds one row group at a time (two threads: +75% memory, slower here).
    con.execute("SET threads = 1")
    try:
        try:
            result: tuple[list[int], int] = engine.transaction(switch)
        except duckdb.Error as exc:
            name = doc.filename or doc.document_id
            raise BackendError(f"{name}: cannot write the streamed document ({exc})") from exc
        if staged and engine.persistent:
            # The copied rows sit in memory until a checkpoint writes them out; the
            # document is committed either way, so a failed checkpoint is only deferred.
            with suppress(duckdb.Error):
                con.execute("CHECKPOINT")
    finally:
        con.execute(f"SET memory_limit = '{limit}'")
        con.execute(f"SET threads = {int(threads)}")
    return result


_SIZE = re.compile(r"^\s*([0-9.]+)\s*([KMGT]i?B|bytes?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "byte": 1, "bytes": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3,
          "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}  # fmt: skip


def _size_bytes(text: str) -> int | None:
    """DuckDB's display of a size setting ("18.8 GiB", "512.0 MiB") in bytes; None if unknown."""
    match = _SIZE.match(text)
    if match is None:
        return None
    unit = _UNITS.get((match.group(2) or "").lower())
    return None if unit is None else int(float(match.group(1)) * unit)


def _mirror(
    derived: Derived,
    coll: CollectionRecord,
    staged: list[Path],
    old_keys: list[int],
    generation: int,
) -> None:
    """Bring the in-memory indexes to the committed state, a staged part at a time."""
    empty = np.zeros((0, coll.dim), np.float32)
    try:
        derived.mirror(
            coll,
            removed=old_keys,
            added_keys=[],
            added_terms=[],
            added_vectors=empty,
            generation=generation,
        )
        if not staged or derived.indexes.get(coll.id) is None:
            return
        with duckdb.connect(":memory:", config={"threads": 1}) as con:
            for part in staged:
                source = "read_parquet('" + str(part).replace("'", "''") + "')"
                keys, vectors = fetch_vectors_sql(
                    con, f"SELECT key, embedding FROM {source}", coll.dim
                )
                terms = dict(con.execute(f"SELECT key, terms FROM {source}").fetchall())
                derived.mirror(
                    coll,
                    removed=[],
                    added_keys=keys,
                    added_terms=[terms[int(k)] or [] for k in keys],
                    added_vectors=vectors,
                    generation=generation,
                )
    except (MemoryError, OSError, duckdb.Error):
        # The tables are committed and right: the next search rebuilds the indexes.
        derived.discard(coll)
    except BaseException:
        # A half-updated index must never be trusted: its generation may already be the
        # committed one (set by the first step), so Derived.committing cannot tell.
        derived.discard(coll)
        raise
