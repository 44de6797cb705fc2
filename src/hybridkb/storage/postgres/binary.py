"""Binary COPY of chunk rows (reading vectors back in binary: ``rows.parse_binary_vector``),
and query vectors as binary parameters (:class:`QueryVector`).

Writing a chunk in COPY's text form cost more than the server spent storing it: a
vector printed as 384 decimal numbers (about 2 ms in Python), and psycopg's array dumper
walking the terms one by one. In COPY's binary form a vector is pgvector's own binary
layout (two 16-bit words, dimension and 0, then big-endian float4s: one ``tobytes``),
and the terms a ``text[]`` built in one join. psycopg picks a COPY column's dumper by
type oid (``Copy.set_types``), so these are registered by oid on each connection
(:func:`register_dumpers`); pgvector's oid differs per database and is looked up there.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np
from psycopg.adapt import Dumper
from psycopg.pq import Format

from .rows import JSONB, TEXT, TEXT_ARRAY

_VECTOR_HEAD = struct.Struct(">HH")
_ARRAY_HEAD = struct.Struct(">iiIii")
_LENGTH = struct.Struct(">i").pack


class QueryVector:
    """A query vector as a statement's parameter, sent in pgvector's binary form (its
    placeholder is ``%b``): printed as 384 decimal numbers it cost the client a fifth of
    a millisecond and the server a parse at each of its uses in the hybrid statement."""

    __slots__ = ("data",)

    def __init__(self, vec: np.ndarray) -> None:
        self.data = _vector_bytes(vec)


def _vector_bytes(obj: Any) -> bytes:
    vec = np.asarray(obj, dtype=">f4").reshape(-1)
    return _VECTOR_HEAD.pack(len(vec), 0) + vec.tobytes()


class VectorDumper(Dumper):
    """A float32 row, or a :class:`QueryVector`, as pgvector's binary ``vector`` (one
    dumper for both: psycopg keeps one dumper per oid, the last registered)."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        if isinstance(obj, QueryVector):
            return obj.data
        return _vector_bytes(obj)


class TermsDumper(Dumper):
    """A list of str as a one-dimensional binary ``text[]`` without NULLs."""

    format = Format.BINARY
    oid = TEXT_ARRAY

    def dump(self, obj: Any) -> bytes:
        items: Sequence[str] = obj
        if not items:
            return struct.pack(">iiI", 0, 0, TEXT)
        encoded = [item.encode("utf-8") for item in items]
        lengths = map(_LENGTH, map(len, encoded))
        body = b"".join(chain.from_iterable(zip(lengths, encoded, strict=True)))
        return _ARRAY_HEAD.pack(1, 0, TEXT, len(encoded), 1) + body


class JsonTextDumper(Dumper):
    """JSON already serialised (``rows.dumps``) as binary ``jsonb`` (version 1 + text)."""

    format = Format.BINARY
    oid = JSONB

    def dump(self, obj: Any) -> bytes:
        return b"\x01" + str(obj).encode("utf-8")


def register_dumpers(con: Any, vector_oid: int) -> None:
    """Register the COPY dumpers by oid on ``con`` (only ``Copy.set_types`` asks by oid),
    and :class:`QueryVector`'s by its class."""
    vector = type("BoundVectorDumper", (VectorDumper,), {"oid": vector_oid})
    for dumper in (vector, TermsDumper, JsonTextDumper):
        con.adapters.register_dumper(None, dumper)
    con.adapters.register_dumper(QueryVector, vector)
