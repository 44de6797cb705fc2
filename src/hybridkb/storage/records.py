"""Stored rows as records, the same on every backend.

Each backend selects its columns in the orders named here and hands the rows to these
functions, so a document, chunk, collection or source reads back identically whatever
stored it. What differs per backend (SQL dialect, how a time or JSON value arrives from
the driver) is absorbed here: times come as ``datetime`` (psycopg) or as DuckDB's text
for one, JSON as a decoded value (JSONB) or as text.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any

from ..limits import within_depth
from .base import (
    ChunkRecord,
    CollectionRecord,
    DocumentRecord,
    SourceRecord,
    chunk_key,
    make_chunk_id,
)

# The column orders document_record and chunk_record read (a backend may cast a column,
# e.g. a time to text, as long as the order stays).
DOC_COLUMNS = (
    "document_id, path, filename, source, content_hash, signature, metadata, language, bytes,"
    " chunk_count, added_at"
)
CHUNK_COLUMNS = (
    "key, chunk_id, document_id, chunk_index, text, page, section, char_start, char_end,"
    " content_hash, language, metadata, filename, path, added_at"
)

# DuckDB's text for a TIMESTAMPTZ in the session's time zone: "2024-05-01 12:00:00.5+02".
_DUCKDB_TIME = re.compile(
    r"(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?([+-]\d\d)(?::(\d\d))?(?::(\d\d))?"
)


def timestamp(value: Any) -> str | None:
    """A stored time as ``datetime.isoformat()`` writes it ("2024-05-01T12:00:00.500000+02:00").

    Args:
        value: a ``datetime``, DuckDB's text for a TIMESTAMPTZ, or None.

    Returns:
        The ISO 8601 text, None for None; a text in a form DuckDB does not write for
        our rows (a year before 1000, BC) comes back unchanged.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        return str(value.isoformat())
    found = _DUCKDB_TIME.fullmatch(value)
    if found is None:
        return value
    day, clock, fraction, hours, minutes, seconds = found.groups()
    micro = f".{fraction:0<6}" if fraction else ""  # isoformat: all six digits, or none
    offset = f"{hours}:{minutes or '00'}" + (f":{seconds}" if seconds else "")
    return f"{day}T{clock}{micro}{offset}"


def load_metadata(value: Any) -> dict[str, Any]:
    """Stored metadata (JSON text, or an already decoded JSONB value) as a dict.

    A value that does not decode to an object reads as empty, so one bad row can never
    break a read of the others; so does one nested deeper than anything may recurse
    into (written before ingest bounded metadata).
    """
    if isinstance(value, dict):
        return value if within_depth(value) else {}
    if not value:
        return {}
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):
        return {}
    return decoded if isinstance(decoded, dict) and within_depth(decoded) else {}


def document_record(row: Sequence[Any]) -> DocumentRecord:
    """A row of DOC_COLUMNS as a record."""
    return DocumentRecord(
        document_id=row[0],
        path=row[1],
        filename=row[2],
        source=row[3],
        content_hash=row[4],
        signature=row[5],
        metadata=load_metadata(row[6]),
        language=row[7] or "und",
        bytes=int(row[8] or 0),
        chunk_count=int(row[9] or 0),
        added_at=timestamp(row[10]),
    )


def chunk_record(row: Sequence[Any], terms: Sequence[str] = ()) -> ChunkRecord:
    """A row of CHUNK_COLUMNS as a record, with the chunk's analysed ``terms`` if read."""
    return ChunkRecord(
        key=int(row[0]),
        chunk_id=row[1],
        document_id=row[2],
        chunk_index=int(row[3]),
        text=row[4],
        page=row[5],
        section=row[6],
        char_start=int(row[7] or 0),
        char_end=int(row[8] or 0),
        content_hash=row[9] or "",
        language=row[10] or "und",
        terms=list(terms),
        metadata=load_metadata(row[11]),
        filename=row[12],
        path=row[13],
        added_at=timestamp(row[14]),
    )


def collection_record(row: Sequence[Any]) -> CollectionRecord:
    """A catalog row as a record: (id, workspace, name, model, dim, chunking, language,
    created_at, updated_at, generation, embedding recipe)."""
    chunking = row[5] if isinstance(row[5], dict) else json.loads(row[5] or "{}")
    return CollectionRecord(
        id=int(row[0]),
        workspace=row[1],
        name=row[2],
        model=row[3],
        dim=int(row[4]),
        chunking=chunking,
        language=row[6],
        created_at=timestamp(row[7]),
        updated_at=timestamp(row[8]),
        generation=int(row[9] or 0),
        recipe=load_metadata(row[10]),
    )


def source_options(source: SourceRecord) -> str:
    """The stored options of a source (everything but its path) as JSON text."""
    options: dict[str, Any] = {
        "recursive": source.recursive,
        "types": source.types,
        "metadata": source.metadata,
    }
    if source.device is not None:  # sources recorded before devices were have none
        options["device"] = [source.device, source.parent_device]
    return json.dumps(options, sort_keys=True)


def source_record(path: str, options: Any, added_at: Any, synced_at: Any = None) -> SourceRecord:
    """A stored source as a record; ``options`` as source_options wrote it (text, or
    decoded JSONB)."""
    opts: dict[str, Any] = json.loads(options) if isinstance(options, str) else dict(options)
    types = opts.get("types")
    devices = opts.get("device")
    device, parent = devices if isinstance(devices, list) and len(devices) == 2 else (None, None)
    return SourceRecord(
        path=path,
        recursive=bool(opts.get("recursive", True)),
        types=[str(t) for t in types] if isinstance(types, list) else None,
        metadata=dict(opts.get("metadata") or {}),
        added_at=timestamp(added_at),
        device=None if device is None else int(device),
        parent_device=None if parent is None else int(parent),
        synced_at=timestamp(synced_at),
    )


def rekeyed_chunk(
    chunk: ChunkRecord,
    *,
    collection_id: int,
    document_id: str,
    content_hash: str,
    **changes: Any,
) -> ChunkRecord:
    """A copy of ``chunk`` under the id it gets as chunk ``chunk.chunk_index`` of
    ``document_id`` (with that content) in collection ``collection_id``: for a copy to
    another store and for a file moved on disk, which keep text and vector.

    Args:
        chunk: the stored chunk (its terms and metadata are copied, not shared).
        collection_id: the collection the copy goes into.
        document_id: the document the copy belongs to.
        content_hash: the document's content hash, part of the chunk id.
        **changes: other fields to set on the copy (e.g. ``path`` of a moved file).

    Returns:
        The new record, with no ``added_at`` (the store sets it when written).
    """
    chunk_id = make_chunk_id(collection_id, document_id, content_hash, chunk.chunk_index)
    fields: dict[str, Any] = {
        "terms": list(chunk.terms),
        "metadata": dict(chunk.metadata),
        "added_at": None,
        **changes,
    }
    return dataclasses.replace(
        chunk, key=chunk_key(chunk_id), chunk_id=chunk_id, document_id=document_id, **fields
    )
