"""The stat walk of a sync: every supported file under a source, with its stat, and no
file opened.

The same rules as a folder add (``loaders.iter_files``): hidden entries and other types
are skipped (and said), a folder that cannot be listed is reported, a file that is not
regular is reported. Stricter on links: the walk stays inside the source, so a link
inside it that leads out (to a file or a folder) is reported as ``access_denied`` and
never followed. Plain strings and ``os.scandir`` rather than ``pathlib``: at 10,000
files, building paths cost more than the system calls.

The source itself is checked first (:func:`open_root`). Its recorded path was resolved
when it was added, so it holds no link: the root is opened from ``/`` one component at
a time with ``O_NOFOLLOW``, and a source folder (or any folder above it) since replaced
by a link is refused as a whole, never walked through. Every folder below is then
listed through a descriptor opened beneath the root's the same way, so a folder swapped
for a link while the walk runs cannot redirect it either. A root that is missing is said
so, not taken as empty; so is one that was a mount point when it was added and is on
its parent's device now (unmounted, it shows the empty folder below). Where the OS
lacks ``dir_fd``/``O_NOFOLLOW`` (Windows), folders are listed by path and the root is
checked by resolving it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..loaders import SUPPORTED_EXTENSIONS
from ..normalize import display_name
from ..results import FailedFile, SkippedFile

Found = tuple[str, os.stat_result]  # a resolved file path and its stat

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# Folders opened as descriptors beneath the root, listed through them.
CONFINED = (
    bool(_NOFOLLOW and _DIRECTORY)
    and os.open in os.supports_dir_fd
    and os.stat in os.supports_dir_fd
    and os.scandir in os.supports_fd
)
_FOLDER = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
# The folders above a source are only passed through: where the OS can (O_PATH, Linux),
# opened without read permission, as a path lookup needs only search permission.
_ABOVE = (os.O_PATH | _DIRECTORY | _NOFOLLOW | _CLOEXEC) if hasattr(os, "O_PATH") else _FOLDER
# What opening a path with O_NOFOLLOW at every step says when a step is a link (or a
# file where a folder was).
_SWAPPED = (errno.ELOOP, errno.ENOTDIR)

Folder = int | str  # a folder's descriptor (CONFINED) or its path


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


def _parts(path: str, root: str) -> list[str]:
    """The components of ``path`` below ``root`` (both resolved; ``path`` inside ``root``)."""
    rest = path[len(root.rstrip(os.sep)) :].strip(os.sep)
    return rest.split(os.sep) if rest else []


def _close(folder: Folder) -> None:
    if isinstance(folder, int):
        os.close(folder)


def _open_beneath(top: Folder, parts: Sequence[str], flags: int = _FOLDER) -> Folder:
    """The folder ``parts`` below ``top`` opened with ``flags``, no step a link.

    Raises:
        OSError: a step is missing, unreadable, a link or a file (ELOOP, ENOTDIR).
    """
    if isinstance(top, str):  # by path: the caller checked the resolved path
        return os.path.join(top, *parts)
    folder = os.dup(top)
    try:
        for part in parts:
            child = os.open(part, flags, dir_fd=folder)
            os.close(folder)
            folder = child
    except BaseException:
        os.close(folder)
        raise
    return folder


def _lstat(folder: Folder, name: str) -> os.stat_result:
    if isinstance(folder, str):
        return os.stat(os.path.join(folder, name), follow_symlinks=False)
    return os.stat(name, dir_fd=folder, follow_symlinks=False)


@dataclass
class Root:
    """A source's root, opened without following a link: the folder's descriptor (or, for
    a file source or where descriptors cannot be used, its path) and its stat."""

    path: str
    folder: Folder | None  # None: the source is a file
    st: os.stat_result

    def close(self) -> None:
        """Close the root folder's descriptor (if one was opened)."""
        folder, self.folder = self.folder, None
        if folder is not None:
            _close(folder)

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _swapped(path: str) -> FailedFile:
    return _failed(
        path,
        "is no longer the folder that was added (it, or a folder above it, is now a link"
        " or a file), so it was not synced and its documents stay; remove the source"
        " (`hybridkb sources COLLECTION --remove PATH`) if it moved",
        "access_denied",
    )


def _missing(path: str) -> FailedFile:
    return _failed(
        path,
        "missing (a drive unmounted, a share gone?), so it was not synced and its documents"
        " stay; remove the source (`hybridkb sources COLLECTION --remove PATH`) to remove them",
    )


def _unmounted(path: str) -> FailedFile:
    return _failed(
        path,
        "is no longer mounted (it was a mount point when it was added; the folder below"
        " shows now), so it was not synced and its documents stay; mount it again, or remove"
        " the source (`hybridkb sources COLLECTION --remove PATH`) to remove them",
    )


@dataclass
class RootRefused:
    """Why a source's root cannot be walked: ``state`` is ``missing``, ``replaced`` (it, or
    a folder above it, is now a link or a file) or ``unreadable``; ``failed`` says it in
    one line for a sync report."""

    state: str
    failed: FailedFile


def open_root(path: str, *, mount_point: bool = False) -> Root | RootRefused:
    """Open the source root ``path`` (resolved when it was added) without following any
    link, or say why it cannot be walked. ``mount_point``: it was one when it was added
    (``SourceRecord.mount_point``); on the same device as its parent now, it is the
    empty folder an unmount leaves, and counts as missing (its documents stay)."""
    try:
        if not CONFINED:
            if os.path.realpath(path) != path:
                return RootRefused("replaced", _swapped(path))
            st = os.stat(path, follow_symlinks=False)
            if mount_point and st.st_dev == os.stat(os.path.dirname(path)).st_dev:
                return RootRefused("missing", _unmounted(path))
            return Root(path, path if stat.S_ISDIR(st.st_mode) else None, st)
        parent, name = os.path.split(path)
        top = os.open(os.sep, _ABOVE)
        try:
            above = _open_beneath(top, _parts(parent, os.sep), _ABOVE)
        finally:
            os.close(top)
        assert isinstance(above, int)
        try:
            st = os.stat(name, dir_fd=above, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                return RootRefused("replaced", _swapped(path))
            if mount_point and st.st_dev == os.fstat(above).st_dev:
                return RootRefused("missing", _unmounted(path))
            folder = os.open(name, _FOLDER, dir_fd=above) if stat.S_ISDIR(st.st_mode) else None
        finally:
            os.close(above)
        return Root(path, folder, st)
    except FileNotFoundError:
        return RootRefused("missing", _missing(path))
    except OSError as exc:
        if exc.errno in _SWAPPED:
            return RootRefused("replaced", _swapped(path))
        reason = exc.strerror or str(exc)
        return RootRefused(
            "unreadable", _failed(path, f"cannot read it ({reason}); check its permissions")
        )


def root_state(path: str, *, mount_point: bool = False) -> str:
    """``ok`` if the source root ``path`` can be walked, else :attr:`RootRefused.state`
    (``mount_point``: see :func:`open_root`)."""
    root = open_root(path, mount_point=mount_point)
    if isinstance(root, RootRefused):
        return root.state
    root.close()
    return "ok"


def _locate(root: Root, path: str) -> tuple[str, os.stat_result, Folder | None] | FailedFile | None:
    """``path`` (inside the root) with its stat and, for a folder, the folder opened; a link
    on the way is followed only to a place inside the root. None: not there."""
    assert root.folder is not None
    for attempt in (path, os.path.realpath(path)):
        if not inside(attempt, root.path):
            return _outside(path)
        if isinstance(root.folder, str) and os.path.realpath(attempt) != attempt:
            continue  # by path: a link on the way is only followed once resolved
        parts = _parts(attempt, root.path)
        if not parts:
            return attempt, root.st, _open_beneath(root.folder, [])
        try:
            parent = _open_beneath(root.folder, parts[:-1])
            try:
                st = _lstat(parent, parts[-1])
                if stat.S_ISLNK(st.st_mode):
                    continue  # resolved and checked on the second attempt
                folder = _open_beneath(parent, parts[-1:]) if stat.S_ISDIR(st.st_mode) else None
            finally:
                _close(parent)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in _SWAPPED:
                continue
            return _failed(path, f"cannot read it ({exc.strerror or exc}); check its permissions")
        return attempt, st, folder
    return None  # a link that leads nowhere, or one swapped in while being looked at


def stat_walk(
    root: Root, start: str, *, recursive: bool = True, types: Sequence[str] | None = None
) -> Iterator[Found | FailedFile | SkippedFile]:
    """Yield the supported files under ``start`` (resolved; the root or a path inside it),
    never leaving the root. A ``start`` that is not there yields nothing."""
    if root.folder is None:  # a file source
        if start == root.path:
            if stat.S_ISREG(root.st.st_mode):
                yield root.path, root.st
            else:
                yield _failed(root.path, "not a regular file (a pipe, socket or device)")
        return
    yield from _Walk(root, recursive, types).run(start)


class _Walk:
    """One walk below an opened root: folders to list (opened when their turn comes, so a
    wide tree never holds a descriptor per folder) and folders already met."""

    def __init__(self, root: Root, recursive: bool, types: Sequence[str] | None) -> None:
        assert root.folder is not None
        self.root, self.top = root, root.folder
        self.recursive, self.types = recursive, types
        self.wanted = frozenset(types) if types is not None else SUPPORTED_EXTENSIONS
        self.stack: list[tuple[str, Folder | None]] = []
        self.seen: set[str] = set()

    def run(self, start: str) -> Iterator[Found | FailedFile | SkippedFile]:
        located = _locate(self.root, start)
        if located is None or isinstance(located, FailedFile):
            if located is not None:
                yield located
            return
        top, st, folder = located
        if folder is None:
            if stat.S_ISREG(st.st_mode) and _suffix(top) in self.wanted:
                yield top, st
            return
        self.stack.append((top, folder))
        self.seen.add(top)
        while self.stack:
            yield from self.folder(*self.stack.pop())

    def folder(
        self, path: str, handle: Folder | None
    ) -> Iterator[Found | FailedFile | SkippedFile]:
        """One folder's entries: files yielded, subfolders pushed."""
        try:
            if handle is None:
                handle = _open_beneath(self.top, _parts(path, self.root.path))
            with os.scandir(handle) as listing:
                entries = list(listing)
        except OSError as exc:
            if handle is not None:
                _close(handle)
            reason = exc.strerror or str(exc)
            if exc.errno in _SWAPPED:
                reason = "it became a link while being synced"
            yield _failed(path, f"cannot list the folder ({reason}); check its permissions")
            return
        try:  # the entries' stat() reads through the folder's descriptor: open until done
            for entry in entries:
                yield from self.entry(path, entry)
        finally:
            _close(handle)

    def entry(
        self, folder: str, entry: os.DirEntry[str]
    ) -> Iterator[Found | FailedFile | SkippedFile]:
        """One listed entry: a file yielded, a subfolder pushed, the rest said or passed over."""
        path = os.path.join(folder, entry.name)
        if entry.name.startswith("."):
            yield SkippedFile(display_name(path), "hidden (a name starting with '.')", path)
            return
        try:
            is_link = entry.is_symlink()
            st = entry.stat(follow_symlinks=False)
        except OSError:
            return  # gone since it was listed: not there
        if is_link:
            target = self._link_target(path)
            if target is None or isinstance(target, FailedFile):
                if target is not None:
                    yield target
                return
            path, st = target
        if stat.S_ISDIR(st.st_mode):
            self._push_folder(path)
        elif _suffix(entry.name) not in self.wanted:
            if stat.S_ISREG(st.st_mode) and self.types is None:
                kind = _suffix(entry.name) or "(no extension)"
                yield SkippedFile(display_name(path), f"unsupported type {kind}", path)
        elif stat.S_ISREG(st.st_mode):
            yield path, st
        else:
            yield _failed(path, "not a regular file (a pipe, socket or device)")

    def _link_target(self, path: str) -> tuple[str, os.stat_result] | FailedFile | None:
        """Where a link leads, its path and stat, when that is inside the root; a refusal
        (FailedFile) when it leads outside; None when it leads nowhere (not there)."""
        located = _locate(self.root, path)
        if located is None or isinstance(located, FailedFile):
            return located
        target, st, linked = located
        if linked is not None:
            _close(linked)  # opened again when its turn comes
        return target, st

    def _push_folder(self, path: str) -> None:
        """A subfolder to list later: once, and only in a recursive walk."""
        if self.recursive and path not in self.seen:
            self.seen.add(path)
            self.stack.append((path, None))
