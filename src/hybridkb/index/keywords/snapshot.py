"""Saving a BM25 index to one file and mapping it back.

The file is a JSON header (``fileheader.py`` framing) followed by the raw arrays,
aligned, so :func:`load` memory-maps them instead of parsing or copying them, and
checks them for consistency so a damaged file fails at load, never mid-search.
"""

from __future__ import annotations

import os
import struct
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendError
from ..fileheader import encode_header, map_file, read_header, release
from ..keyrows import KeyRows
from .arrays import Buffer, Csr, Vocab
from .postings import Postings

FORMAT = "hybridkb-keyword-index"
VERSION = 2  # v1 (an .npz archive) is no longer read: such a snapshot is rebuilt
MAGIC = b"HKBKIDX\x02"
HEADER_ROOM = 4096  # the JSON header fits here; arrays start after it
ALIGN = 64


def save(p: Postings, path: str | Path) -> None:
    """Write the index to one file atomically (temp file, fsync, rename).

    Tombstones are dropped first, so the file holds only live documents. The
    file is a JSON header followed by the raw arrays, aligned, so :func:`load`
    maps them instead of parsing or copying them.

    Args:
        path: Destination file; its folder must exist.

    Raises:
        BackendError: the file cannot be written.
    """
    p.drop_tombstones()
    path = Path(path)
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "ptr": p.base.ptr,
        "rows": p.base.rows,
        "tf": p.base.tf,
        "keys": p.keys.view(),
        "dl": p.dl.view(),
        "fptr": p.fptr.view(),
        "fterm": p.fterm.view(),
        # The key -> row lookup, so a load maps it instead of sorting the keys.
        "sorted_keys": p.key_rows.keys,
        "sorted_rows": p.key_rows.rows,
    }
    joined = "\n".join(p.vocab)
    if joined.count("\n") != max(len(p.vocab) - 1, 0):
        # Some term holds a newline: store the terms unseparated, with lengths.
        joined = "".join(p.vocab)
        arrays["vocab_lengths"] = np.array(
            [len(t.encode("utf-8", "surrogatepass")) for t in p.vocab], np.int64
        )
    arrays["vocab"] = np.frombuffer(joined.encode("utf-8", "surrogatepass"), np.uint8)
    meta: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "k1": p.k1,
        "b": p.b,
        "uid": p.uid,
        "generation": p.generation,
        "terms": len(p.vocab),
        "sections": [],
    }
    offset = HEADER_ROOM
    for name, arr in arrays.items():
        meta["sections"].append(
            {"name": name, "dtype": arr.dtype.str, "count": len(arr), "offset": offset}
        )
        offset += -(-arr.nbytes // ALIGN) * ALIGN
    prefix = encode_header(MAGIC, meta)
    if len(prefix) > HEADER_ROOM:  # pragma: no cover - a few hundred bytes in practice
        raise BackendError(f"{path}: keyword index header too large")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(prefix)
            for section, arr in zip(meta["sections"], arrays.values(), strict=False):
                fh.seek(section["offset"])
                fh.write(np.ascontiguousarray(arr).data)
            fh.truncate(offset)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise BackendError(f"{path}: cannot save the keyword index: {exc}") from exc
    finally:
        if tmp is not None:
            with suppress(OSError):
                os.unlink(tmp)


def load(path: str | Path) -> Postings:
    """Read an index written by :func:`save`.

    The arrays are memory-mapped read-only (pages are read on first use; a
    write copies what it changes), and checked for consistency: sizes, offsets
    and every stored row and term id in range, so a damaged file fails here and
    never mid-search. A file is checked in O(size) numpy passes, not hashed, and
    the pages the checks read are then released from this process.

    Args:
        path: The file.

    Returns:
        The index, with the k1 and b it was saved with.

    Raises:
        FileNotFoundError: no such file.
        BackendError: the file is not a keyword index of this version or is
            damaged; delete it and rebuild from the database.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            meta = read_header(fh, MAGIC, "keyword index")
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise ValueError(f"format {meta.get('format')} v{meta.get('version')}")
        mapped = map_file(path)
        data: dict[str, np.ndarray[Any, Any]] = {}
        for section in meta["sections"]:
            dtype = np.dtype(section["dtype"])
            count, offset = int(section["count"]), int(section["offset"])
            if offset + count * dtype.itemsize > size:
                raise ValueError(
                    f"truncated: {size} bytes, section {section['name']!r} "
                    f"ends at {offset + count * dtype.itemsize}"
                )
            # Plain ndarrays over the map (slicing a np.memmap runs Python code per
            # slice, which a search does hundreds of times).
            data[section["name"]] = (
                np.frombuffer(mapped, dtype, count, offset)
                if count and mapped is not None
                else np.empty(0, dtype)
            )
        index = from_arrays(meta, data)
        release(mapped)  # the checks read every page; searches map back what they use
        return index
    except FileNotFoundError:
        raise
    except (
        OSError,
        EOFError,
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        struct.error,
    ) as exc:
        raise BackendError(
            f"{path}: not a readable keyword index ({exc}); delete it to rebuild it "
            "from the database"
        ) from exc


def from_arrays(meta: dict[str, Any], data: dict[str, Any]) -> Postings:
    """The postings of a loaded file, after checking the arrays fit together."""
    index = Postings(k1=float(meta["k1"]), b=float(meta["b"]))
    raw = data["vocab"].tobytes()
    if "vocab_lengths" in data:
        ends = np.cumsum(data["vocab_lengths"]).tolist()
        terms = [
            raw[a:z].decode("utf-8", "surrogatepass")
            for a, z in zip([0, *ends[:-1]], ends, strict=False)
        ]
    else:
        terms = raw.decode("utf-8", "surrogatepass").split("\n") if meta["terms"] else []
    ptr, rows, tf = data["ptr"], data["rows"], data["tf"]
    keys, dl, fptr, fterm = data["keys"], data["dl"], data["fptr"], data["fterm"]
    if not (
        len(terms) == meta["terms"] == len(ptr) - 1
        and ptr[0] == 0
        and ptr[-1] == len(rows) == len(tf)
        and len(keys) == len(dl) == len(fptr) - 1
        and fptr[0] == 0
        and fptr[-1] == len(fterm)
        and ptr.dtype == fptr.dtype == keys.dtype == dl.dtype == np.int64
        and rows.dtype == fterm.dtype == np.int32
        and tf.dtype == np.uint16
    ):
        raise ValueError("inconsistent array sizes")
    # Out-of-range ids would raise mid-search; a saved index has no tombstones, so
    # every term has postings and every row is live.
    if (
        np.any(np.diff(ptr) <= 0)
        or np.any(np.diff(fptr) < 0)
        or (len(rows) and not 0 <= rows.min() <= rows.max() < len(keys))
        or (len(fterm) and not 0 <= fterm.min() <= fterm.max() < len(terms))
    ):
        raise ValueError("ids out of range")
    index.vocab = Vocab(zip(terms, range(len(terms)), strict=False))
    index.base = Csr(ptr, rows, tf)
    index.df = Buffer.adopt(np.diff(ptr))  # saved without tombstones: postings are all live
    index.keys = Buffer.adopt(keys)
    index.dl = Buffer.adopt(dl)
    index.live = Buffer.adopt(np.ones(len(keys), np.bool_))
    index.fptr = Buffer.adopt(fptr)
    index.fterm = Buffer.adopt(fterm)
    if "sorted_keys" in data:
        index.key_rows = KeyRows(data["sorted_keys"], data["sorted_rows"])
        index.key_rows.check(keys)
    else:  # saved before the lookup was kept in the file
        index.key_rows = KeyRows.of(keys)
        if len(index.key_rows.keys) > 1 and not np.all(np.diff(index.key_rows.keys) > 0):
            raise ValueError("repeated keys")
    index.total_len = int(dl.sum())
    index.uid = str(meta["uid"])
    index.generation = int(meta["generation"])
    return index
