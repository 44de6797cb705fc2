"""What the cache folder (``HYBRIDKB_CACHE_DIR``, default ``~/.cache/hybridkb``) holds,
and clearing it. Everything in it can be made again: nothing there is the user's data.

Only the entries hybridkb writes are counted and removed, by name: the folder may be
one the user named, with other files in it.
"""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..locations import CACHE_FIX
from ..private_files import check_folder
from .cache import CACHE_FILE

__all__ = ["ENTRIES", "clear_cache", "describe_cache"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One file or folder the cache folder may hold, and what it holds (``hybridkb cache`` prints
    it)."""

    name: str  # file or folder in the cache folder
    holds: str  # what it is, for people


ENTRIES = (
    Entry(
        "onnx",
        "models exported for ONNX Runtime (float32 and int8 graphs) and the int8 verdicts "
        "measured on this CPU; remade on first use (about a minute) or by `hybridkb setup`",
    ),
    Entry(
        CACHE_FILE,
        "embedding cache: vectors of texts already embedded, so adding them again costs "
        "nothing; bounded by HYBRIDKB_EMBED_CACHE_MB, oldest out",
    ),
    Entry("langid", "an uncompressed copy of the language-detection model, for fast loading"),
)
# SQLite's write-ahead log and index beside the cache file belong to it.
_COMPANIONS = {CACHE_FILE: (f"{CACHE_FILE}-wal", f"{CACHE_FILE}-shm")}


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    if not path.is_dir():
        return 0
    total = 0
    for item in path.rglob("*"):
        try:
            if not item.is_symlink() and item.is_file():
                total += item.stat().st_size
        except OSError:  # removed while we walk (another process's temp file)
            continue
    return total


def _paths(folder: Path, entry: Entry) -> list[Path]:
    return [folder / entry.name, *(folder / n for n in _COMPANIONS.get(entry.name, ()))]


def _cached_vectors(path: Path) -> int | None:
    if not path.is_file():
        return None
    try:
        con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=2)
        try:
            return int(con.execute("SELECT count(*) FROM emb").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:  # busy, damaged or not made yet: the size still says enough
        return None


def _checked(folder: Path) -> None:
    """The cache folder's rule (:func:`~hybridkb.private_files.check_folder`), when it exists:
    nothing is listed from, or removed in, a folder another user controls."""
    if folder.exists() or folder.is_symlink():
        check_folder(folder, secret=False, fix=CACHE_FIX)


def describe_cache(folder: Path, *, embed_cache_mb: int) -> dict[str, Any]:
    """Where the cache is, each entry with what it holds and its size, and the total.

    Raises:
        NotPrivate: the folder is a link, another user's, or writable by others.
    """
    _checked(folder)
    entries = []
    for entry in ENTRIES:
        paths = _paths(folder, entry)
        row: dict[str, Any] = {
            "name": entry.name,
            "holds": entry.holds,
            "exists": paths[0].exists(),
            "bytes": sum(_size(p) for p in paths),
        }
        if entry.name == CACHE_FILE:
            row["vectors"] = _cached_vectors(paths[0])
            row["limit_bytes"] = embed_cache_mb << 20
        entries.append(row)
    return {
        "folder": str(folder),
        "entries": entries,
        "bytes": sum(e["bytes"] for e in entries),
    }


def clear_cache(folder: Path) -> dict[str, Any]:
    """Remove what hybridkb keeps in ``folder`` (and nothing else); what was freed.

    Raises:
        NotPrivate: the folder is a link, another user's, or writable by others.
    """
    _checked(folder)
    freed = 0
    removed = []
    for entry in ENTRIES:
        for path in _paths(folder, entry):
            if not (path.exists() or path.is_symlink()):
                continue
            freed += _size(path)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path.name)
    return {"folder": str(folder), "removed": removed, "bytes": freed}
