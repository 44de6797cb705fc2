"""py3langid's language model, loaded from an uncompressed copy kept in the cache.

The model ships LZMA-compressed: decompressing it took 0.65-1.7 s on a 2-core AMD
EPYC, the largest single cost of a cold ``hybridkb search`` (the query's language is
detected to pick its stop words). The first load writes the arrays to
``<cache>/langid/`` as a plain ``.npz`` (no pickle, members stored uncompressed).
Later processes map that file instead of reading it: the arrays are views of the
mapping where ``np.savez`` laid them out, so a load takes a few milliseconds and a
detection reads only the pages it touches (reading and converting the 68 MB took
~0.25 s). A copy that is missing, stale or unreadable is simply rebuilt.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
import zipfile
from array import array
from pathlib import Path
from typing import Any, Literal

import numpy as np

__all__ = ["load_identifier", "set_cache_folder"]

_cache_folder: Path | None = None
# array/memoryview type codes by numpy kind and item size.
_TYPECODES: dict[tuple[str, int], Literal["H", "I", "Q", "h", "i", "q"]] = {
    ("u", 2): "H",
    ("u", 4): "I",
    ("u", 8): "Q",
    ("i", 2): "h",
    ("i", 4): "i",
    ("i", 8): "q",
}


def set_cache_folder(folder: Path | None) -> None:
    """Where the uncompressed copy lives (``Settings.cache_dir``); None: no copy."""
    global _cache_folder
    _cache_folder = None if folder is None else Path(folder).expanduser() / "langid"


def _as_array(values: np.ndarray) -> array[int]:
    out = array(_TYPECODES[values.dtype.kind, values.dtype.itemsize])
    out.frombytes(np.ascontiguousarray(values).tobytes())
    return out


def _copy_path(source: Path) -> Path | None:
    if _cache_folder is None:
        return None
    stat = source.stat()
    return _cache_folder / f"model-{stat.st_size}-{stat.st_mtime_ns}.npz"


def _lookup(values: np.ndarray) -> memoryview | array[int]:
    """An integer table py3langid indexes one item at a time: a view of the mapped array
    when its layout allows (indexing a memoryview is as fast as an array's), else a copy.

    Also the state -> feature table, whose 104,583 entries were a list: 6 ms to build at
    a cold search's first detection, and a list every GC pass of the process walked."""
    code = _TYPECODES.get((values.dtype.kind, values.dtype.itemsize))
    if (
        code is not None
        and values.ndim == 1
        and values.dtype.isnative
        and values.flags.c_contiguous
    ):
        # Through bytes: a mapped array's own view says "=H", which cannot be indexed.
        return values.view(np.uint8).data.cast(code)
    return _as_array(values)


def _mapped_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an uncompressed ``.npz``, as read-only views of the mapped file.

    Raises:
        ValueError, OSError, KeyError, zipfile.BadZipFile, struct.error: not such a file.
    """
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
    arrays: dict[str, np.ndarray] = {}
    with path.open("rb") as fh:
        mapping = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        for info in members:
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"{path}: {info.filename} is not a stored .npy member")
            # The local file header: 30 bytes, then the name and the extra field.
            name_len, extra_len = struct.unpack_from("<HH", mapping, info.header_offset + 26)
            fh.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            if dtype.hasobject:
                raise ValueError(f"{path}: {info.filename} holds Python objects")
            arrays[info.filename.removesuffix(".npy")] = np.ndarray(
                shape, dtype, buffer=mapping, offset=fh.tell(), order="F" if fortran else "C"
            )
    return arrays


def _read_copy(path: Path) -> tuple[Any, ...]:
    data = _mapped_npz(path)
    return (
        data["ptc"],
        data["pc"],
        data["classes"].tolist(),
        _lookup(data["nextmove"]),
        _lookup(data["row"]),
        _lookup(data["output"]),
    )


def _write_copy(path: Path, model: tuple[Any, ...]) -> None:
    ptc, pc, classes, nextmove, row, output = model
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            # savez, not savez_compressed: _mapped_npz maps the stored members in place.
            np.savez(
                fh,
                ptc=np.asarray(ptc),
                pc=np.asarray(pc),
                classes=np.asarray(classes),
                nextmove=np.frombuffer(nextmove, dtype=f"u{nextmove.itemsize}"),
                row=np.frombuffer(row, dtype=f"u{row.itemsize}"),
                output=np.asarray(output, dtype=np.int64),
            )
        os.replace(tmp, path)  # whole or absent: a reader never sees half a copy
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_identifier() -> Any:
    """py3langid's ``LanguageIdentifier`` over its bundled model, probabilities normalised."""
    from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier
    from py3langid.modelio import load_model

    source = Path(MODEL_DIR) / MODEL_FILE
    copy = _copy_path(source)
    model: tuple[Any, ...] | None = None
    if copy is not None and copy.is_file():
        try:
            model = _read_copy(copy)
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, struct.error):
            model = None  # damaged or foreign: rebuilt below
    if model is None:
        model = tuple(load_model(source))
        if copy is not None:
            try:
                _write_copy(copy, model)
            except OSError:
                pass  # a read-only cache only costs the next process the slow load
    ptc, pc, classes, nextmove, row, output = model
    return LanguageIdentifier(
        np.asarray(ptc), np.asarray(pc), classes, nextmove, output, norm_probs=True, tk_row=row
    )
