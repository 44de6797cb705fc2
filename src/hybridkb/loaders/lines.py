"""Lines of a text file of any size, decoded as they are read (CSV and Markdown stream).

Reading a 400 MB CSV whole and copying it into a StringIO took 2.5 GB; decoding it
line by line holds one read and one line. The encoding is detected from the first
:data:`SAMPLE_BYTES` as for every text file, and bytes that do not fit become U+FFFD
rather than failing after half the file was read.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import BinaryIO

from hybridkb.errors import ExtractionError
from hybridkb.loaders.encoding import SAMPLE_BYTES, detect_encoding, reject_binary

__all__ = ["MAX_LINE_CHARS", "iter_decoded", "iter_lines"]

MAX_LINE_CHARS = 1 << 20  # a longer line is handed on in pieces of this size
_READ_BYTES = 1 << 20


def iter_decoded(stream: BinaryIO, name: str, *, read_bytes: int = _READ_BYTES) -> Iterator[str]:
    """Yield the text of ``stream`` (read from where it stands) as it is read and decoded.

    Raises:
        ExtractionError: Empty or whitespace-only, or binary content.
    """
    first = stream.read(SAMPLE_BYTES)
    codec = detect_encoding(first, name, complete=len(first) < SAMPLE_BYTES)
    decoder = codecs.getincrementaldecoder(codec)(errors="replace")
    checked = False
    data = first
    while True:
        final = not data
        text = decoder.decode(data, final=final)
        if not checked and text.strip():
            reject_binary(text[:SAMPLE_BYTES], name)
            checked = True
        if text:
            yield text
        if final:
            break
        data = stream.read(read_bytes)
    if not checked:
        raise ExtractionError(f"{name}: empty file; nothing to add")


def iter_lines(
    stream: BinaryIO, name: str, *, max_line_chars: int = MAX_LINE_CHARS
) -> Iterator[str]:
    """Yield the lines of ``stream`` (read from where it stands), each ending in "\\n".

    Line ends ("\\r\\n", "\\r", "\\n") are normalised to "\\n"; the last line gets one
    too. A line longer than ``max_line_chars`` (a file without line breaks) is yielded
    in pieces of that size, the last of them ending in "\\n", so memory stays bounded.

    Raises:
        ExtractionError: Empty or whitespace-only, or binary content.
    """
    pending = ""
    texts = iter_decoded(stream, name)
    while True:
        text = next(texts, None)
        final = text is None
        pending += text or ""
        # A trailing "\r" may be half of a "\r\n" split between reads: keep it back.
        held = "\r" if pending.endswith("\r") and not final else ""
        body = pending[: len(pending) - len(held)].replace("\r\n", "\n").replace("\r", "\n")
        start = 0
        while (end := body.find("\n", start)) >= 0:
            yield from _pieces(body[start : end + 1], max_line_chars)
            start = end + 1
        pending = body[start:]
        while len(pending) > max_line_chars:
            yield pending[:max_line_chars]
            pending = pending[max_line_chars:]
        pending += held
        if final:
            break
    if pending:
        yield pending + "\n"


def _pieces(line: str, size: int) -> Iterator[str]:
    while len(line) > size:
        yield line[:size]
        line = line[size:]
    yield line
