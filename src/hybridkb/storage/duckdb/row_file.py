"""A collection's chunk rows in a file beside its indexes, for hits of big collections.

A collection whose rows do not fit the row cache (row_cache.py) read each search's hits
through DuckDB: at 1M chunks ~2 ms a search (a hit's row sits in a 256 KB block of each
column that DuckDB reads and decompresses whole), and DuckDB kept every block it read,
335 MB after 200 searches. Here the rows are written once, in a background thread, to
``c<id>.rows.bin`` in the snapshot folder, one record a row; a hit costs one ``pread`` of
its record (~1 KB, from the OS page cache), and the process holds only the keys and
record offsets (20 bytes a row) and each distinct document-level value once.

The file vouches for the collection's ``generation``: a process opening it at another
generation builds it again, and this process removes it from disk at its first write
(it keeps reading its open descriptor, with written keys dark, as the row cache does).
Each record carries its CRC32: a damaged record is a miss (read through SQL), never
a wrong row. The file is written under a hidden temporary name and renamed into place
complete, so a process that dies mid-write leaves only a leftover the next snapshot
save removes.
"""

from __future__ import annotations

import json
import os
import struct
import weakref
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np

from ..base import ChunkRecord
from ..records import chunk_record
from .packed_rows import RepeatedColumn

MAGIC = b"HKBROWS\x01"
HEADER_BYTES = 4096  # the records start here; the header is written last
# The columns of a ``CHUNK_COLUMNS`` row a record holds as codes into the file's value
# tables (values chunks of one document share), raw as DuckDB returns them: a hit is
# made by ``chunk_record`` from the same tuple SQL would give it.
VALUE_COLUMNS = (2, 5, 6, 10, 11, 12, 13, 14)
# crc32 of the rest, chunk_index, char_start, char_end, the 8 value codes, and the byte
# lengths of chunk_id and content_hash (the text takes the rest of the record).
RECORD = struct.Struct("<Iqqq8iII")
# Records gathered per write call while the file is built.
WRITE_BATCH = 4096


def row_file_path(folder: Path, collection_id: int) -> Path:
    return folder / f"c{int(collection_id)}.rows.bin"


def available() -> bool:
    """Whether this platform reads a file at an offset without a shared position."""
    return hasattr(os, "pread")


def drop_row_file(folder: Path | None, collection_id: int) -> None:
    """Remove the collection's rows file (stale after a write); readers keep their
    descriptor. Missing is fine."""
    if folder is not None:
        with suppress(FileNotFoundError):
            os.unlink(row_file_path(folder, collection_id))


def encode(row: Sequence[Any], codes: Sequence[int]) -> bytes:
    """The record of one row of ``CHUNK_COLUMNS`` as DuckDB returns it."""
    chunk_id = str(row[1]).encode("utf-8", "surrogatepass")
    content_hash = str(row[9] or "").encode("utf-8", "surrogatepass")
    text = str(row[4]).encode("utf-8", "surrogatepass")
    ints = (int(row[3]), int(row[7] or 0), int(row[8] or 0))
    body = RECORD.pack(0, *ints, *codes, len(chunk_id), len(content_hash))[4:]
    body += chunk_id + content_hash + text
    return struct.pack("<I", zlib.crc32(body)) + body


class RowFile:
    """Rows of a collection read from its rows file by key; forgotten keys go dark.

    Has the interface the row cache uses for packed rows (``lookup``, ``forget``,
    ``mostly_dark``, ``nbytes``, ``len``). Lookups may run in several threads: each
    reads with ``pread`` (no shared file position), and the descriptor is closed only
    when the object is gone, never under a running lookup."""

    def __init__(self, fd: int, header: dict[str, Any]) -> None:
        # Every size and offset is checked against the file before anything is read or
        # allocated: the header, the index and the records are whatever the file says.
        size = os.fstat(fd).st_size
        n = whole(header["count"])
        index = read_section(fd, header, "index", size)
        values = read_section(fd, header, "values", size)
        if len(index) != 24 * n:
            raise ValueError("rows file: index size does not match its count")
        arrays = np.frombuffer(index, np.int64)
        self.sorted_keys, self.starts, self.lengths = arrays[:n], arrays[n : 2 * n], arrays[2 * n :]
        records_end = whole(header["index_offset"])
        if n and not (
            (self.starts >= HEADER_BYTES).all()
            and (self.lengths >= RECORD.size).all()
            and (self.starts + self.lengths <= records_end).all()
        ):
            raise ValueError("rows file: a record lies outside the records")
        self.values: list[list[Any]] = json.loads(values)
        if not (
            isinstance(self.values, list)
            and len(self.values) == len(VALUE_COLUMNS)
            and all(isinstance(table, list) for table in self.values)
        ):
            raise ValueError("rows file: value tables do not match")
        self._fd = fd
        self.alive = np.ones(n, bool)
        self.nbytes = len(index) + n + len(values) * 3  # decoded values: ~3x their JSON
        # Last: a check above that fails leaves the descriptor to open()'s caller to close.
        weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, path: Path, *, generation: int, chunks: int) -> RowFile | None:
        """The rows file at ``path`` if it vouches for ``generation`` and ``chunks``; else
        None (missing, stale, foreign, damaged or crafted: built again)."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            head = os.pread(fd, HEADER_BYTES, 0)
            if not head.startswith(MAGIC):
                raise ValueError("not a rows file")
            header = json.loads(head[len(MAGIC) :].rstrip(b"\0"))
            if not isinstance(header, dict):
                raise ValueError("rows file: the header is not an object")
            if header.get("generation") != generation or header.get("chunks") != chunks:
                raise ValueError("stale")
            return cls(fd, header)
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            os.close(fd)
            return None

    def __len__(self) -> int:
        return int(self.alive.sum())

    @property
    def mostly_dark(self) -> bool:
        return 2 * len(self) < len(self.alive)

    def positions(self, keys: Sequence[int]) -> list[tuple[int, int]]:
        """(key, position) for the live ``keys`` held here."""
        if not len(keys) or not len(self.sorted_keys):
            return []
        wanted = np.asarray(keys, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.sorted_keys, wanted), len(self.sorted_keys) - 1)
        live = (self.sorted_keys[at] == wanted) & self.alive[at]
        return [
            (key, i) for key, i, ok in zip(wanted.tolist(), at.tolist(), live.tolist(), strict=True)
            if ok
        ]  # fmt: skip

    def lookup(self, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        """Rows of the live ``keys``; a key whose record does not check is left out."""
        found = {}
        for key, i in self.positions(keys):
            row = self.record(key, i)
            if row is not None:
                found[key] = row
        return found

    def record(self, key: int, i: int) -> ChunkRecord | None:
        try:
            data = os.pread(self._fd, int(self.lengths[i]), int(self.starts[i]))
        except OSError:
            return None
        if len(data) < RECORD.size or struct.unpack_from("<I", data)[0] != zlib.crc32(data[4:]):
            return None
        _, chunk_index, char_start, char_end, *rest = RECORD.unpack_from(data)
        codes, id_len, hash_len = rest[:8], rest[8], rest[9]
        at, utf8 = RECORD.size, "utf-8"
        try:
            doc, page, section, language, metadata, filename, path, added_at = (
                values[code] for values, code in zip(self.values, codes, strict=True)
            )
            chunk_id = data[at : at + id_len].decode(utf8, "surrogatepass")
            content_hash = data[at + id_len : at + id_len + hash_len].decode(utf8, "surrogatepass")
            text = data[at + id_len + hash_len :].decode(utf8, "surrogatepass")
            return chunk_record(
                (key, chunk_id, doc, chunk_index, text, page, section, char_start, char_end,
                 content_hash, language, metadata, filename, path, added_at)
            )  # fmt: skip
        except (IndexError, ValueError, TypeError):  # a record that checks but does not read
            return None

    def forget(self, keys: Iterable[int]) -> None:
        for _, i in self.positions(list(keys)):
            self.alive[i] = False


def whole(value: Any) -> int:
    """A header's count or offset: a non-negative JSON integer, else ValueError."""
    if type(value) is not int or value < 0:
        raise ValueError(f"rows file: {value!r} is not a count")
    return value


def read_section(fd: int, header: dict[str, Any], name: str, size: int) -> bytes:
    """The ``name`` section (``<name>_offset``, ``_bytes``, ``_crc`` in the header), read
    only if it lies inside the file's ``size`` bytes, and checked against its CRC."""
    offset, length = whole(header[f"{name}_offset"]), whole(header[f"{name}_bytes"])
    if offset + length > size:
        raise ValueError(f"rows file: the {name} lies past the end")
    data = os.pread(fd, length, offset)
    if len(data) != length or zlib.crc32(data) != header[f"{name}_crc"]:
        raise ValueError(f"rows file: damaged {name}")
    return data


def write_row_file(
    folder: Path,
    collection_id: int,
    rows: Iterator[Sequence[Any]],
    *,
    generation: int,
    chunks: int,
    stopped: Callable[[], bool],
) -> RowFile | None:
    """Write every row of ``rows`` (``CHUNK_COLUMNS`` tuples) to the collection's rows
    file, renamed into place when complete; the file opened, or None if ``stopped()``
    turned true meanwhile."""
    final = row_file_path(folder, collection_id)
    # One process writes a file's rows files (DuckDB's single writer): any other
    # temporary file here is the leftover of a killed write.
    for leftover in folder.glob(f".{final.name}.*.tmp"):
        with suppress(FileNotFoundError):
            os.unlink(leftover)
    tmp = folder / f".{final.name}.{os.getpid()}.tmp"
    columns = [(column_at, RepeatedColumn()) for column_at in VALUE_COLUMNS]
    keys, starts, lengths = [], [], []
    try:
        with open(tmp, "wb", opener=private_opener) as out:
            out.write(b"\0" * HEADER_BYTES)
            at, pending = HEADER_BYTES, []
            for row in rows:
                if stopped():
                    return None
                codes = []
                for column_at, column in columns:
                    column.append(row[column_at])
                    codes.append(column.codes[-1])
                record = encode(row, codes)
                keys.append(row[0])
                starts.append(at)
                lengths.append(len(record))
                at += len(record)
                pending.append(record)
                if len(pending) >= WRITE_BATCH:
                    out.write(b"".join(pending))
                    pending = []
            out.write(b"".join(pending))
            order = np.argsort(np.asarray(keys, np.int64), kind="stable")
            index = np.concatenate(
                [np.asarray(a, np.int64)[order] for a in (keys, starts, lengths)]
            ).tobytes()
            values = json.dumps([column.values for _, column in columns]).encode()
            header = {
                "generation": int(generation), "chunks": int(chunks), "count": len(keys),
                "index_offset": at, "index_bytes": len(index), "index_crc": zlib.crc32(index),
                "values_offset": at + len(index), "values_bytes": len(values),
                "values_crc": zlib.crc32(values),
            }  # fmt: skip
            head = MAGIC + json.dumps(header).encode()
            if len(head) > HEADER_BYTES:
                raise ValueError("rows file: header too long")
            out.write(index)
            out.write(values)
            out.seek(0)
            out.write(head)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, final)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
    return RowFile.open(final, generation=generation, chunks=chunks)


def private_opener(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o600)
