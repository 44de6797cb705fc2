"""The stat walk of a sync: every supported file under a source, with its stat, and no
file opened.

The same rules as a folder add (``loaders.iter_files``): hidden entries and other types
are skipped (and said), a folder that cannot be listed is reported, a file that is not
regular is reported. Stricter on links: the walk stays inside the source, so a link
inside it that leads out (to a file or a folder) is reported as ``access_denied`` and
never followed. Plain strings and ``os.scandir`` rather than ``pathlib``: at 10,000
files, building paths cost more than the system calls.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence

from .loaders import SUPPORTED_EXTENSIONS
from .normalize import display_name
from .types import FailedFile, SkippedFile

Found = tuple[str, os.stat_result]  # a resolved file path and its stat


def inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies under it (compared as strings: pass resolved paths)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _failed(path: str, error: str, code: str = "ingest_error") -> FailedFile:
    name = display_name(path)
    return FailedFile(name, f"{name}: {error}", code, path)


def _outside(path: str) -> FailedFile:
    return _failed(
        path, "links outside the folder being synced; it was not followed", "access_denied"
    )


def _suffix(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def stat_walk(
    root: str, *, recursive: bool = True, types: Sequence[str] | None = None
) -> Iterator[Found | FailedFile | SkippedFile]:
    """Yield the supported files under the resolved folder or file ``root``."""
    wanted = frozenset(types) if types is not None else SUPPORTED_EXTENSIONS
    try:
        top = os.stat(root)
    except OSError as exc:
        yield _failed(root, f"cannot read it ({exc.strerror or exc}); check its permissions")
        return
    if not stat.S_ISDIR(top.st_mode):
        if stat.S_ISREG(top.st_mode):
            yield root, top
        else:
            yield _failed(root, "not a regular file (a pipe, socket or device)")
        return
    stack = [root]
    seen = {root}
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            yield _failed(folder, f"cannot list the folder ({reason}); check its permissions")
            continue
        for entry in entries:
            path = entry.path
            if entry.name.startswith("."):
                yield SkippedFile(display_name(path), "hidden (a name starting with '.')", path)
                continue
            try:
                if entry.is_symlink():
                    path = os.path.realpath(path)
                    if not inside(path, root):
                        yield _outside(entry.path)
                        continue
                    st = os.stat(path)
                else:
                    st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since it was listed, or a link that leads nowhere: not there
            if stat.S_ISDIR(st.st_mode):
                if recursive and path not in seen:
                    seen.add(path)
                    stack.append(path)
            elif _suffix(entry.name) not in wanted:
                if stat.S_ISREG(st.st_mode) and types is None:
                    kind = _suffix(entry.name) or "(no extension)"
                    yield SkippedFile(display_name(path), f"unsupported type {kind}", path)
            elif stat.S_ISREG(st.st_mode):
                yield path, st
            else:
                yield _failed(entry.path, "not a regular file (a pipe, socket or device)")
