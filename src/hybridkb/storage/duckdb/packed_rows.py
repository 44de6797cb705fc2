"""A collection's chunk rows packed into a few arrays, for the row cache.

As Python objects a cached row cost ~2,050 bytes at the 100k bench (its text ~660 of
them: a slotted record, fifteen field objects, a metadata dict, the document's path,
name and time repeated in every chunk of it), so the 256 MB budget held fewer rows
than it claimed and a warm 100k collection added ~260 MB to the process. Packed, a
row is its text as UTF-8 plus ~270 bytes (the 64-digit content hash is 72 of them): unique texts (text, ids, hashes) sit in one
byte string with offsets, integers in int64 arrays, and the values chunks repeat
(document id, file name and path, time, language, page, section, metadata) once per
distinct value with a 32-bit code per row. A row is rebuilt as a :class:`ChunkRecord`
only when a search asks for it (~3 microseconds; a search asks for its k hits).
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..base import ChunkRecord

# The fields many chunks share, in the order PackedRows.record unpacks them.
REPEATED_ORDER = (
    "document_id", "page", "section", "language", "filename", "path", "added_at", "metadata",
    "terms",
)  # fmt: skip

# Bytes a distinct repeated value costs beyond its own size (its dict slot and code).
DISTINCT_OVERHEAD_BYTES = 120


class TextColumn:
    """Strings stored as one UTF-8 byte string and the offsets where each one ends."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.ends = array("q")

    def append(self, value: str) -> None:
        self.data += value.encode("utf-8", "surrogatepass")
        self.ends.append(len(self.data))

    @property
    def nbytes(self) -> int:
        return len(self.data) + self.ends.itemsize * len(self.ends)


class RepeatedColumn:
    """Values many rows share, each stored once, with a 32-bit code per row.

    ``identity`` turns a value into a hashable key (metadata dicts are not hashable);
    a value it cannot key is kept as its own distinct value."""

    def __init__(self, identity: Any = None) -> None:
        self.codes = array("i")
        self.values: list[Any] = []
        self.index: dict[Any, int] = {}
        self.identity = identity
        self.value_bytes = 0

    def append(self, value: Any) -> None:
        key = value
        if self.identity is not None:
            try:
                key = self.identity(value)
            except (TypeError, ValueError):  # not keyable: a distinct value of its own
                key = ("unkeyed", len(self.values))
        code = self.index.get(key)
        if code is None:
            code = self.index[key] = len(self.values)
            self.values.append(value)
            self.value_bytes += deep_size(value) + DISTINCT_OVERHEAD_BYTES
        self.codes.append(code)

    def finish(self) -> None:
        """Drop the build-time index (reads need only ``values`` and ``codes``)."""
        self.index = {}

    @property
    def nbytes(self) -> int:
        return self.codes.itemsize * len(self.codes) + self.value_bytes


def deep_size(value: Any) -> int:
    """Approximate bytes of a JSON-like value (what a distinct value holds in memory)."""
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(deep_size(k) + deep_size(v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        size += sum(deep_size(v) for v in value)
    return size


def metadata_identity(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


class PackedRows:
    """One collection's cached rows, looked up by chunk key; forgotten keys go dark."""

    def __init__(self) -> None:
        self.keys = array("q")
        self.ints = {name: array("q") for name in ("chunk_index", "char_start", "char_end")}
        self.texts = {name: TextColumn() for name in ("chunk_id", "text", "content_hash")}
        self.repeated = {name: RepeatedColumn() for name in REPEATED_ORDER}
        self.repeated["metadata"] = RepeatedColumn(metadata_identity)
        self.repeated["terms"] = RepeatedColumn(tuple)
        self.repeated_columns: list[tuple[list[Any], array[int]]] = []
        self.id_columns: list[tuple[bytearray, array[int]]] = []
        self.text_data, self.ends_of_text = bytearray(), array("q")
        self.sorted_keys = np.empty(0, np.int64)
        self.order = np.empty(0, np.intp)
        self.alive = np.empty(0, bool)
        self.nbytes = 0

    @classmethod
    def pack(cls, rows: Iterable[ChunkRecord]) -> PackedRows:
        """Pack ``rows`` (a repeated key keeps its last row, as a dict would)."""
        packed = cls()
        for row in rows:
            packed.append(row)
        return packed.finish()

    def append(self, row: ChunkRecord) -> None:
        self.keys.append(row.key)
        for name, ints in self.ints.items():
            ints.append(getattr(row, name))
        for name, column in self.texts.items():
            column.append(getattr(row, name))
        for name, repeated in self.repeated.items():
            repeated.append(getattr(row, name))

    def finish(self) -> PackedRows:
        keys = np.frombuffer(self.keys, dtype=np.int64) if len(self.keys) else np.empty(0, np.int64)
        # Stable on the reversed rows, so the last row of a repeated key is found first.
        reverse = np.arange(len(keys) - 1, -1, -1)
        by_key = reverse[np.argsort(keys[reverse], kind="stable")]
        self.sorted_keys, self.order = keys[by_key], by_key
        self.alive = np.ones(len(keys), bool)
        self.alive[by_key[1:][self.sorted_keys[1:] == self.sorted_keys[:-1]]] = False  # shadowed
        for repeated in self.repeated.values():
            repeated.finish()
        # The columns as record() reads them, in the order it unpacks them.
        self.repeated_columns = [
            (self.repeated[name].values, self.repeated[name].codes) for name in REPEATED_ORDER
        ]
        self.id_columns = [
            (self.texts[name].data, self.texts[name].ends) for name in ("chunk_id", "content_hash")
        ]
        self.text_data, self.ends_of_text = self.texts["text"].data, self.texts["text"].ends
        self.nbytes = (
            self.keys.itemsize * len(self.keys) * 3  # keys, their sorted copy, the order
            + sum(a.itemsize * len(a) for a in self.ints.values())
            + sum(c.nbytes for c in self.texts.values())
            + sum(c.nbytes for c in self.repeated.values())
            + len(keys)  # alive
        )
        return self

    def __len__(self) -> int:
        return int(self.alive.sum())

    def positions(self, keys: Sequence[int]) -> list[tuple[int, int]]:
        """(key, row position) for the live ``keys`` held here."""
        # One pass of array calls and lists: a search asks for its k hits' rows.
        if not len(keys) or not len(self.sorted_keys):
            return []
        wanted = np.asarray(keys, dtype=np.int64)
        at = np.searchsorted(self.sorted_keys, wanted)
        at[at == len(self.sorted_keys)] = 0
        position = self.order[at]
        live = (self.sorted_keys[at] == wanted) & self.alive[position]
        return [
            (key, row)
            for key, row, ok in zip(wanted.tolist(), position.tolist(), live.tolist(), strict=True)
            if ok
        ]

    def lookup(self, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        record = self.record
        return {key: record(i) for key, i in self.positions(keys)}

    def record(self, i: int) -> ChunkRecord:
        # Positional, in ChunkRecord's field order, every column read inline: this runs
        # for every hit a search returns (~2 microseconds; generators per column cost
        # a third of that).
        ends = self.ends_of_text
        text = self.text_data[ends[i - 1] if i else 0 : ends[i]].decode("utf-8", "surrogatepass")
        (doc, page, section, language, filename, path, added_at, metadata, terms) = [
            values[codes[i]] for values, codes in self.repeated_columns
        ]
        (chunk_id_data, chunk_id_ends), (hash_data, hash_ends) = self.id_columns
        ints = self.ints
        return ChunkRecord(
            self.keys[i],
            chunk_id_data[chunk_id_ends[i - 1] if i else 0 : chunk_id_ends[i]].decode(
                "utf-8", "surrogatepass"
            ),
            doc, ints["chunk_index"][i], text, page, section,
            ints["char_start"][i], ints["char_end"][i],
            hash_data[hash_ends[i - 1] if i else 0 : hash_ends[i]].decode("utf-8", "surrogatepass"),
            language,
            list(terms) if terms else [],
            dict(metadata) if metadata else {},  # a copy: rows share one decoded dict
            filename, path, added_at,
        )  # fmt: skip

    def forget(self, keys: Iterable[int]) -> None:
        """Turn ``keys`` dark. Their bytes stay (and count) until the rows are packed
        again: the caller drops a collection whose rows are mostly dark."""
        for _, i in self.positions(list(keys)):
            self.alive[i] = False

    @property
    def mostly_dark(self) -> bool:
        return 2 * len(self) < len(self.alive)
