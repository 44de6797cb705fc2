"""The framing snapshot files share: magic bytes, header length and CRC, JSON header,
then named sections at aligned offsets the header records, each with its CRC32; and how
such a file is mapped into memory.

Each index decides what its header and sections hold.
"""

from __future__ import annotations

import json
import mmap as mmap_module
import os
import struct
import tempfile
import zlib
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

import numpy as np

_ALIGN = 64
_HEADER_ROOM = 4096  # sections start after a fixed room, so offsets are known first
# A search reads scattered pages of a snapshot's big sections: a re-score's few hundred
# rows, a filter's exact scan of thousands, a query's postings. Each fault maps the
# 64 KB around its page (the kernel's fault-around; MADV_RANDOM does not stop it), so
# after 200 searches a 1M-chunk collection held its vector rows and postings nearly
# whole: 780 of its +1,446 MB RSS. Sections past this size give back after each search
# the pages it mapped (SearchPages); smaller ones stay mapped.
RELEASE_ABOVE_BYTES = 128 << 20


def encode_header(magic: bytes, header: dict[str, Any]) -> bytes:
    """The file's prefix: ``magic``, then the JSON header's length and CRC32, then it."""
    head = json.dumps(header).encode()
    return magic + struct.pack("<II", len(head), zlib.crc32(head)) + head


def read_header(fh: IO[bytes], magic: bytes, what: str) -> dict[str, Any]:
    """Read and check a prefix written by :func:`encode_header` (ValueError/TypeError if not one)."""
    fixed = fh.read(len(magic) + 8)
    if len(fixed) < len(magic) + 8 or fixed[: len(magic)] != magic:
        raise ValueError(f"not a {what} file")
    head_len, head_crc = struct.unpack("<II", fixed[len(magic) :])
    head = fh.read(head_len)
    if len(head) != head_len or zlib.crc32(head) != head_crc:
        raise ValueError("header truncated or corrupt")
    header = json.loads(head)
    if not isinstance(header, dict):
        raise TypeError("header is not an object")
    return header


def write_sections(
    path: Path, magic: bytes, header: dict[str, Any], sections: dict[str, bytes]
) -> None:
    """Write ``header`` (plus a ``sections`` table) and the sections atomically: a
    temporary file beside ``path``, fsync, rename."""
    header = {**header, "sections": []}
    offset = _HEADER_ROOM
    for name, blob in sections.items():
        header["sections"].append(
            {"name": name, "offset": offset, "nbytes": len(blob), "crc32": zlib.crc32(blob)}
        )
        offset += -(-len(blob) // _ALIGN) * _ALIGN
    prefix = encode_header(magic, header)
    assert len(prefix) <= _HEADER_ROOM, "header outgrew its reserved room"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(prefix)
            for section, blob in zip(header["sections"], sections.values(), strict=True):
                out.seek(section["offset"])
                out.write(blob)
            last = header["sections"][-1]
            out.truncate(last["offset"] + last["nbytes"])
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def map_file(path: Path) -> mmap_module.mmap | None:
    """``path`` mapped whole, read-only (None for an empty file): arrays over it cannot be
    written, so a write copies what it changes and the mapping always matches the file."""
    with path.open("rb") as fh:
        if not os.fstat(fh.fileno()).st_size:
            return None
        return mmap_module.mmap(fh.fileno(), 0, access=mmap_module.ACCESS_READ)


def release(mapped: mmap_module.mmap | None, start: int = 0, length: int = 0) -> None:
    """Drop a mapping's pages from this process's resident memory, where the OS allows.

    A load reads every byte once to check it, and those pages would otherwise stay
    counted against the process (a 1M-chunk keyword snapshot: +680 MB of RSS at load,
    most of it postings no query asks for). The page cache keeps them: a search that
    needs one maps it back without reading the disk. Only for read-only mappings
    (:func:`map_file`): pages written through a copy-on-write one would be discarded.
    ``start`` (a multiple of the page size) and ``length`` narrow it to part of the
    mapping."""
    advise = getattr(mapped, "madvise", None)  # not on Windows
    if advise is not None:
        with suppress(OSError, ValueError):
            if length:
                advise(mmap_module.MADV_DONTNEED, start, length)
            else:
                advise(mmap_module.MADV_DONTNEED)


def mapped_span(arr: np.ndarray) -> tuple[mmap_module.mmap, int, int] | None:
    """The read-only mapping ``arr`` is a view of, and the page-aligned span of it that
    ``arr`` covers (start, length); None for an array that owns its memory, or one over
    a writable mapping (dropping its pages could discard what was written through it)."""
    view: Any = arr
    while isinstance(view, np.ndarray):
        if view.flags.writeable:
            return None
        view = view.base
    if not isinstance(view, memoryview) or not view.readonly:
        return None
    mapped = view.obj
    if not isinstance(mapped, mmap_module.mmap) or not arr.nbytes:
        return None
    offset = arr.ctypes.data - np.frombuffer(view, np.uint8, 1).ctypes.data
    start = offset - offset % mmap_module.PAGESIZE
    return mapped, start, offset + arr.nbytes - start


class SearchPages:
    """Gives back to the OS, after a search, the pages it mapped of big read-only mapped
    sections (see :data:`RELEASE_ABOVE_BYTES`): the page cache keeps them, and the next
    search maps what it reads again. At 1M chunks on a 2-core EPYC (bench/README.md): RSS
    after 200 searches +1,446 -> +658 MB; public hybrid wall p50 x1.16-1.34 (7 -> 8.5-9.3
    ms), and x1.1-1.7 with a 1% filter spread over the collection (13 -> 15-21 ms): the
    page faults and ``madvise`` calls, more where the page cache holds large folios.

    Sections that are not views of a read-only mapping (built here, or copied by a
    write) are left alone, and so are files whose sections are smaller."""

    def __init__(self, sections: Sequence[np.ndarray]) -> None:
        spans = [mapped_span(arr) for arr in sections]
        self._spans = [span for span in spans if span is not None]
        self.active = sum(length for _, _, length in self._spans) > RELEASE_ABOVE_BYTES

    def release(self) -> None:
        """Drop the sections' pages from this process (safe while others read them: a
        read-only page is mapped back on its next touch)."""
        if self.active:
            for mapped, start, length in self._spans:
                release(mapped, start, length)


def read_sections(
    path: Path, magic: bytes, what: str, *, mmap: bool
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and the sections (uint8 arrays, memory-mapped read-only when ``mmap``:
    a write must copy what it changes) of a file written by :func:`write_sections`, every
    byte checked against its CRC: a corrupt graph could crash a native library, not just
    mis-rank. The pages the check read are released (:func:`release`).

    Raises ValueError (or KeyError/TypeError on a malformed header) if the file is not
    one, or is truncated or corrupt."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        header = read_header(fh, magic, what)
    mapped = map_file(path) if mmap else None
    blobs: dict[str, np.ndarray] = {}
    for section in header["sections"]:
        offset, nbytes = int(section["offset"]), int(section["nbytes"])
        if offset + nbytes > size:
            raise ValueError(f"truncated: {size} bytes, a section ends at {offset + nbytes}")
        blob = (
            np.frombuffer(mapped, np.uint8, nbytes, offset)
            if mapped is not None and nbytes
            else np.fromfile(path, np.uint8, nbytes, offset=offset)
        )
        if zlib.crc32(blob.data) != section["crc32"]:
            raise ValueError(f"section {section['name']!r} is corrupt")
        blobs[section["name"]] = blob
    release(mapped)
    return header, blobs
