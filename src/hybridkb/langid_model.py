"""py3langid's language model, loaded from an uncompressed copy kept in the cache.

The model ships LZMA-compressed: decompressing it took 0.65-1.7 s on a 2-core AMD
EPYC, the largest single cost of a cold ``hybridkb search`` (the query's language is
detected to pick its stop words). The first load writes the arrays to
``<cache>/langid/`` as a plain ``.npz`` (no pickle), which later processes read in
~0.1 s. A copy that is missing, stale or unreadable is simply rebuilt.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["load_identifier", "set_cache_folder"]

_cache_folder: Path | None = None
_TYPECODES = {2: "H", 4: "I", 8: "Q"}


def set_cache_folder(folder: Path | None) -> None:
    """Where the uncompressed copy lives (``Settings.cache_dir``); None: no copy."""
    global _cache_folder
    _cache_folder = None if folder is None else Path(folder).expanduser() / "langid"


def _as_array(values: np.ndarray) -> array[int]:
    out = array(_TYPECODES[values.dtype.itemsize])
    out.frombytes(np.ascontiguousarray(values).tobytes())
    return out


def _copy_path(source: Path) -> Path | None:
    if _cache_folder is None:
        return None
    stat = source.stat()
    return _cache_folder / f"model-{stat.st_size}-{stat.st_mtime_ns}.npz"


def _read_copy(path: Path) -> tuple[Any, ...]:
    with np.load(path, allow_pickle=False) as data:
        return (
            data["ptc"],
            data["pc"],
            data["classes"].tolist(),
            _as_array(data["nextmove"]),
            _as_array(data["row"]),
            data["output"].tolist(),
        )


def _write_copy(path: Path, model: tuple[Any, ...]) -> None:
    ptc, pc, classes, nextmove, row, output = model
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
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
        except (OSError, ValueError, KeyError):
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
