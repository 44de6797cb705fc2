"""Files uploaded from the page: received, placed in an allowed folder, then added.

Threat: an upload is bytes and a name from the network. A huge body fills the disk
or memory; a name like ``../../.bashrc`` or ``a\\nb`` writes elsewhere or breaks a
message; a file already there would be overwritten; a crafted file costs its
reader far more than its size.

Rule: the body streams to a file in a private temporary folder (``mkdtemp``, 0700),
counted as it arrives and cut off past ``max_upload_bytes`` (a declared length over
it is refused before a byte is read). The name is reduced to a plain file name. The
file is then copied into the folder the user chose, which must be inside the allowed
folders (``HYBRIDKB_ALLOWED_PATHS``, what the agent tools may read), under a new name
if one is taken (never over another file: ``O_EXCL``), and added with those allowed
folders, so the loaders' budgets apply as to any add. The uploaded file stays there
as the document's file (the page image and sync read it); a file the add refused is
removed again, with the source the add remembered for it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AccessDenied, ConfigError
from ..normalize import printable
from ..text.files import allowed_root, resolve
from .common import Problem

if TYPE_CHECKING:
    from .. import CollectionAPI
    from ..results import AddReport, SyncReport

__all__ = ["MAX_NAME_BYTES", "add_upload", "allowed_folder", "plain_name", "receive"]

MAX_NAME_BYTES = 200
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def plain_name(raw: str) -> str:
    """The upload's name as a plain file name (no folders, no control characters).

    Raises:
        ConfigError: Nothing usable is left, or the name is hidden or too long.
    """
    name = raw.replace("\\", "/").rsplit("/", 1)[-1].strip()
    name = "".join(ch for ch in name if ch.isprintable())
    if not name or name in (".", ".."):
        raise ConfigError(f"upload: {printable(raw)[:80]!r} is not a file name; name the file")
    if name.startswith("."):
        raise ConfigError(f"upload: {name[:80]!r} is a hidden file name; rename the file")
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise ConfigError(f"upload: the name is over {MAX_NAME_BYTES} bytes; rename the file")
    return name


def allowed_folder(raw: str, allowed: list[Path], *, what: str = "uploads go") -> Path:
    """The folder ``raw``, resolved, if it is a folder inside the allowed ones (where
    uploads are saved and folders followed).

    Raises:
        AccessDenied: Outside the allowed folders, or none is set.
        ConfigError: Not a folder.
    """
    if not allowed:
        raise AccessDenied(
            f"{what} only inside HYBRIDKB_ALLOWED_PATHS, and none is set (started in / or "
            "the home folder); restart `hybridkb ui` with HYBRIDKB_ALLOWED_PATHS set"
        )
    folder = resolve(raw)
    if allowed_root(folder, allowed) is None:
        raise AccessDenied(
            f"{printable(raw)}: outside the allowed folders "
            f"({', '.join(str(p) for p in allowed)}); pick a folder inside one of them"
        )
    if not folder.is_dir():
        raise ConfigError(f"{printable(raw)}: not a folder; give an existing folder")
    return folder


async def receive(
    chunks: AsyncIterator[bytes], declared: str | None, limit: int, name: str
) -> Path:
    """The body streamed to a private temporary file (its folder is removed with it by
    :func:`add_upload`).

    Raises:
        Problem: Over ``limit`` (413), declared or counted.
    """
    too_big = Problem(
        f"{name}: over the upload limit of {limit >> 20} MB; add it from its folder "
        "instead, or restart `hybridkb ui` with a larger --max-upload-mb",
        413,
    )
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_big
    folder = Path(tempfile.mkdtemp(prefix="hybridkb-ui-upload-"))
    target = folder / "upload"
    total = 0
    try:
        with open(target, "xb") as out:
            async for chunk in chunks:
                total += len(chunk)
                if total > limit:
                    raise too_big
                out.write(chunk)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return target


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as src:
        while block := src.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _place(received: Path, folder: Path, name: str) -> tuple[Path, bool]:
    """Copy into ``folder`` under ``name`` (or ``name (2)``...); returns the path and
    whether we created it (False: the same bytes were already there)."""
    stem, dot, ext = name.rpartition(".")
    if not stem:
        stem, dot, ext = name, "", ""
    wanted = _digest(received)
    dirfd = os.open(folder, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    try:
        for n in range(1, 100):
            candidate = name if n == 1 else f"{stem} ({n}){dot}{ext}"
            try:
                fd = os.open(
                    candidate,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC,
                    0o644,
                    dir_fd=dirfd,
                )
            except FileExistsError:
                there = folder / candidate
                if there.is_file() and not there.is_symlink() and _digest(there) == wanted:
                    return there, False
                continue
            with os.fdopen(fd, "wb") as out, open(received, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
            return folder / candidate, True
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise Problem(f"{name}: no space left in {folder}", 507) from None
        raise
    finally:
        os.close(dirfd)
    raise Problem(f"{name}: {folder} has 99 files of that name; rename the file")


def _followed(coll: CollectionAPI, path: Path) -> bool:
    """Whether a source of ``coll`` already covers ``path`` (so no new source is needed)."""
    for source in coll.sources():
        root = Path(source["path"])
        inside = path.parent == root or (source["recursive"] and path.is_relative_to(root))
        types = source.get("types")
        if inside and (not types or path.suffix.lower() in types):
            return True
    return False


def _updated(report: AddReport | SyncReport) -> bool:
    return bool(getattr(report, "updated", None))


def add_upload(
    coll: CollectionAPI, received: Path, folder: Path, name: str, allowed: list[Path]
) -> tuple[Path, AddReport | SyncReport]:
    """Place the received file in ``folder`` and add it to ``coll`` within ``allowed``
    (synced in, when a followed folder covers it; added as a source of its own
    otherwise); a file we placed that was refused is removed again. Always removes the
    temporary folder."""
    try:
        placed, created = _place(received, folder, name)
    finally:
        shutil.rmtree(received.parent, ignore_errors=True)
    try:
        if _followed(coll, placed):  # the next sync would find it: add it the same way
            report: AddReport | SyncReport = coll.sync(paths=[str(placed)], allowed_paths=allowed)
        else:
            report = coll.add([placed], allowed_paths=allowed)
    except BaseException:
        if created:
            placed.unlink(missing_ok=True)
        raise
    if created and not (report.added or report.unchanged or _updated(report)):
        if any(s["path"] == str(placed) for s in coll.sources()):
            coll.remove_source(placed)
        placed.unlink(missing_ok=True)
    return placed, report
