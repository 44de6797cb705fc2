"""A file read as it was when it was opened: never past the size it had then.

A log being written grows while it is read. Read to its end, it was read for as long
as it grew (``add``, ``sync`` and ``watch`` never ended when it grew faster than its
blocks were embedded), and the text stored was not the text hashed. Every reader of
an opened file (hash, loaders, streamed ingest) reads through :func:`as_opened`: the
bytes before the size ``fstat`` gave when the file was opened, whatever is appended
meanwhile.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, BinaryIO

from hybridkb.text.files import OpenedFile

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["as_opened"]


class _Prefix(io.RawIOBase):
    """The first ``size`` bytes of ``inner``, read at this reader's own position."""

    def __init__(self, inner: BinaryIO, size: int) -> None:
        self._inner = inner
        self._size = size
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")  # a slice of a bytearray would be a copy
        wanted = min(len(view), self._size - self._position)
        if wanted <= 0:
            return 0
        # The stream is shared (hashed, then read), so each read says where it starts.
        if self._inner.tell() != self._position:
            self._inner.seek(self._position)
        got = self._inner.readinto(view[:wanted])  # type: ignore[attr-defined]
        self._position += got
        return int(got)


def as_opened(opened: OpenedFile) -> BinaryIO:
    """A reader of ``opened`` from its start, ending at the size it had when opened.

    Closing the reader leaves ``opened`` open: its owner closes it.
    """
    return io.BufferedReader(_Prefix(opened.stream, opened.size))
