"""The files of an export folder: the lock its writers take, and the record of what each
graph hashed to when it was written, checked before the graph is loaded.

Threat: a process runs whatever ONNX graph lies in the cache folder. Another user who
could write there swapped in an edited graph, and the victim's next process loaded it:
every query got the same vector, and new documents were embedded through it.

Rule: each graph (float32 and int8, and the mapped copy and its weights file that a
session really loads) is hashed (sha256) when it is written and recorded in
``graphs.json`` beside them, with the tokenizer it was built for. Before a load,
:func:`check` compares the file with its record: a graph that no longer matches, or
that has no record (written by an older version, or by a writer killed before it
recorded), is made again; one line says so when a record existed. A changed tokenizer
cannot be made again: it is refused (:func:`check_tokenizer`).

Cost: hashing the 90 MB float32 graph takes 0.1-0.2 s, a fifth of a cold search, at
every start. So the record keeps each file's identity too (device, inode, size,
modification and change time). The kernel sets the change time on every write, rename
or chmod, and no user can set it back, so a file whose identity is unchanged has not
been written since it was hashed and is not hashed again; a file whose identity changed
(a copied cache, a restored backup, an edit) is hashed, and its new identity recorded
when the bytes still match.

The record is only as safe as its folder: anyone who can write the graph can write the
record. The folder rule (:func:`hybridkb.private_files.private_folder`) keeps other users
out of both; the record catches what still gets in (a file replaced while the folder was
open, a damaged copy).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from ..errors import ModelUnavailable
from ..normalize import printable
from .onnx_model import atomic_write

__all__ = [
    "RECORD_FILE",
    "Verdict",
    "check",
    "check_tokenizer",
    "export_lock",
    "forget",
    "lock_is_held",
    "record",
    "record_tokenizer",
    "trusted",
]

RECORD_FILE = "graphs.json"
_RECORD_LOCK = ".graphs.lock"  # its own lock: the mapped folder's writers hold another
_TOKENIZER = "tokenizer"

Verdict = Literal["ok", "changed", "unrecorded"]

_log = logging.getLogger("hybridkb")


@contextlib.contextmanager
def export_lock(folder: Path, name: str = ".lock") -> Iterator[None]:
    """Exclusive lock across processes; the OS drops it if the holder dies. Not
    re-entrant: a holder taking the same ``name`` again would wait for itself."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
            import msvcrt

            while True:
                try:
                    msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
                    break
                except OSError:  # LK_LOCK gives up after ~10 s; an export takes longer
                    time.sleep(1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def lock_is_held(folder: Path, name: str = ".lock") -> bool:
    """Whether another process holds :func:`export_lock` ``name`` in ``folder`` now (a
    look that never waits; a folder or lock file that does not exist is not held)."""
    try:
        fd = os.open(folder / name, os.O_RDWR)
    except OSError:
        return False
    try:
        if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
            import msvcrt

            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            except OSError:
                return True
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
            return False
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


# -- the record ------------------------------------------------------------------------


def _identity(path: Path) -> list[int]:
    info = path.stat()
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _entry(path: Path) -> dict[str, Any]:
    identity = _identity(path)  # before hashing: a write during the hash changes it
    return {"sha256": _sha256(path), "identity": identity}


def _read(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _key(folder: Path, file: Path) -> str:
    return file.relative_to(folder).as_posix()


@contextlib.contextmanager
def _updating(folder: Path) -> Iterator[dict[str, Any]]:
    """The record to change in place, written back whole when the block ends."""
    with export_lock(folder, _RECORD_LOCK):
        data = _read(folder)
        yield data
        text = json.dumps(data, indent=1, sort_keys=True)
        atomic_write(folder / RECORD_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def record(folder: Path, files: Iterable[Path]) -> None:
    """Hash ``files`` (inside ``folder``, just written) and record them."""
    entries = {_key(folder, f): _entry(f) for f in files if f.is_file()}
    with _updating(folder) as data:
        data.setdefault("files", {}).update(entries)


def forget(folder: Path, files: Iterable[Path]) -> None:
    """Drop the records of ``files`` (removed, or about to be made again)."""
    with _updating(folder) as data:
        for f in files:
            data.get("files", {}).pop(_key(folder, f), None)


def _matches(entry: object, path: Path) -> tuple[bool, bool]:
    """(the file matches ``entry``, its identity changed and should be recorded anew)."""
    if not isinstance(entry, dict):
        return False, False
    if entry.get("identity") == _identity(path):
        return True, False
    return _sha256(path) == entry.get("sha256"), True


def check(folder: Path, file: Path) -> Verdict:
    """Whether ``file`` (inside ``folder``) is what was recorded when it was written."""
    key = _key(folder, file)
    try:
        entry = _read(folder).get("files", {}).get(key)
        if entry is None:
            return "unrecorded"
        same, moved = _matches(entry, file)
    except OSError:
        return "changed"  # gone or unreadable since: make it again
    if not same:
        return "changed"
    if moved:  # the same bytes in a new file (a copy, a backup): skip the hash next time
        with contextlib.suppress(OSError), _updating(folder) as data:
            data.get("files", {}).get(key, {})["identity"] = _identity(file)
    return "ok"


def trusted(folder: Path, file: Path, what: str) -> bool:
    """Whether ``file`` may be loaded; a file that changed since it was recorded is
    reported in one line (``what`` names it) and its record dropped, to be made again."""
    verdict = check(folder, file)
    if verdict == "changed":
        _log.warning(
            "hybridkb: %s %s does not match the hash recorded when it was written; making it again",
            what,
            printable(str(file)),
        )
        forget(folder, [file])
    return verdict == "ok"


def record_tokenizer(folder: Path, tokenizer: Path) -> None:
    """Record the tokenizer the graphs in ``folder`` were built for."""
    entry = {"path": str(tokenizer), **_entry(tokenizer)}
    with _updating(folder) as data:
        data[_TOKENIZER] = entry


def check_tokenizer(folder: Path, tokenizer: Path, model_id: str) -> None:
    """Refuse a tokenizer other than the one the graphs in ``folder`` were built for
    (graphs recorded before tokenizers were are made again anyway).

    Raises:
        ModelUnavailable: one line naming the file and what to do.
    """
    entry = _read(folder).get(_TOKENIZER)
    if entry is None:
        return
    try:
        same, moved = _matches(entry, tokenizer)
    except OSError:
        same, moved = False, False
    if not same:
        raise ModelUnavailable(
            f"{tokenizer}: not the tokenizer {model_id}'s ONNX graphs were built for "
            "(its hash changed); reinstall the model, or if it changed on purpose run "
            "`hybridkb cache clear` to build the graphs again"
        )
    if moved:
        with contextlib.suppress(OSError), _updating(folder) as data:
            data[_TOKENIZER]["identity"] = _identity(tokenizer)
