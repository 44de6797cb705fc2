"""The framing both snapshot files share: magic bytes, header length and CRC, JSON header.

Sections follow at offsets the header records; each index decides their layout.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import IO, Any


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
