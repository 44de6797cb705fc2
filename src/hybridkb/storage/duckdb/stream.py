"""One huge document into DuckDB in bounded memory, still all or nothing.

Writing a 200 MB text in one DuckDB transaction kept every uncommitted row in memory
(measured 2.2 GB peak). Instead a stream goes through three steps:

1. Stage: every batch of (chunks, vectors) is appended to a Parquet file in
   ``<db>.hkbstage/`` (memory: one row group). The database does not change, so
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
from typing import TYPE_CHECKING

import duckdb
import numpy as np

from ...errors import BackendError
from ..base import ChunkRecord, CollectionRecord, DocumentRecord, WriteEvent
from ..records import DOC_COLUMNS
from .engine import Engine
from .memory import Derived
from .rows import arrow_rows, bump_generation, delete_rows
from .schema import table_names

# Arrow is imported by the functions that build Arrow tables: a process that only
# searches (a cold CLI search) then never pays its import.
if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

STAGE_SUFFIX = ".hkbstage"
# Text per Parquet row group: the memory a stage holds before writing (terms and vectors
# add about twice as much again).
ROW_GROUP_CHARS = 4 << 20
# Rows per page when the staged rows are mirrored into the in-memory indexes.
MIRROR_ROWS = 8192
# DuckDB's buffer pool keeps every block it touched until it reaches its limit (80% of
# RAM by default). During the switch it may grow only this much over what it held
# before, so the copy spills instead (200 MB of text: peak RSS 1,232 MB unlimited,
# 526 MB with 128 MB; the rest of the peak is outside the pool and levels off).
SWITCH_HEADROOM_BYTES = 128 << 20

# Staged files being written by streams of this process: never stale.
_LIVE: set[Path] = set()
_LIVE_LOCK = threading.Lock()


def stage_dir(engine: Engine) -> Path | None:
    """Where a file-backed database stages streamed documents (None for :memory:)."""
    if engine.path == ":memory:":
        return None
    db = Path(engine.path).expanduser().resolve()
    return db.with_name(db.name + STAGE_SUFFIX)


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
        if p.name.startswith(prefix) and p.suffix == ".parquet" and p not in live
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
    folder = stage_dir(engine)
    scratch = None
    if folder is None:  # :memory: holds everything in RAM anyway; stage beside it all the same
        scratch = Path(tempfile.mkdtemp(prefix="hybridkb-stage-"))
        folder = scratch
    else:
        drop_stale_stages(engine)
    path = folder / f"c{coll.id}-{uuid.uuid4().hex[:16]}.parquet"
    with _LIVE_LOCK:
        _LIVE.add(path)
    try:
        count = _stage(engine, coll, batches, path)
        # Searches keep using the old version's rows until the switch commits.
        with engine.lock:  # switch and mirror as one step for other threads
            old_keys, generation = _switch(engine, coll, doc, path if count else None, count)
            _mirror(derived, coll, path if count else None, old_keys, generation)
        return count
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(path)
        path.unlink(missing_ok=True)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _stage(
    engine: Engine,
    coll: CollectionRecord,
    batches: Iterable[tuple[Sequence[ChunkRecord], np.ndarray]],
    path: Path,
) -> int:
    """Append every batch to one Parquet file; return the rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer: pq.ParquetWriter | None = None
    pending: list[pa.Table] = []
    chars = count = 0

    def flush() -> None:
        nonlocal writer, chars
        if not pending:
            return
        table = pa.concat_tables(pending)
        if writer is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        pending.clear()
        chars = 0

    try:
        for chunks, vectors in batches:
            if not chunks:
                continue
            chunk_table, vector_table = arrow_rows(coll, chunks, vectors)
            pending.append(chunk_table.append_column("embedding", vector_table.column("embedding")))
            chars += sum(len(c.text) for c in chunks)
            count += len(chunks)
            if chars >= ROW_GROUP_CHARS:
                flush()
        flush()
    except (OSError, pa.ArrowException) as exc:
        raise BackendError(
            f"{path.parent}: cannot stage a streamed document ({exc}); check free disk space there"
        ) from exc
    finally:
        if writer is not None:
            writer.close()
    return count


def _switch(
    engine: Engine,
    coll: CollectionRecord,
    doc: DocumentRecord,
    staged: Path | None,
    count: int,
) -> tuple[list[int], int]:
    """One transaction: old version out, staged rows in, document row, hooks, generation."""
    t = table_names(coll.id)

    def switch(con: duckdb.DuckDBPyConnection) -> tuple[list[int], int]:
        old_keys = delete_rows(con, coll, [doc.document_id])
        if staged is not None:
            src = [str(staged)]
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
                    f"{staged}: staged rows changed under the stream ({chunks}/{vectors} of {count});"
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
        if staged is not None and engine.persistent:
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
    staged: Path | None,
    old_keys: list[int],
    generation: int,
) -> None:
    """Bring the in-memory indexes to the committed state, a page of staged rows at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

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
        if staged is None or derived.indexes.get(coll.id) is None:
            return
        for batch in pq.ParquetFile(staged).iter_batches(
            batch_size=MIRROR_ROWS, columns=["key", "terms", "embedding"]
        ):
            keys = batch.column("key").to_numpy()
            flat = batch.column("embedding").flatten().to_numpy(zero_copy_only=False)
            derived.mirror(
                coll,
                removed=[],
                added_keys=keys,
                added_terms=batch.column("terms").to_pylist(),
                added_vectors=np.asarray(flat, dtype=np.float32).reshape(len(keys), coll.dim),
                generation=generation,
            )
    except (MemoryError, OSError, pa.ArrowException):
        # The tables are committed and right: the next search rebuilds the indexes.
        derived.forget(coll.id)
    except BaseException:
        derived.forget(coll.id)  # a half-updated index must never be trusted
        raise
