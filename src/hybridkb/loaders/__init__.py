"""Find files and extract their text as blocks, one loader per file type.

``iter_files`` turns what the user named (files, folders, ``~`` paths) into the
files to ingest; ``load_file`` picks the loader by extension. Every problem a
user can fix is raised as an :class:`~hybridkb.errors.IngestError` whose message is
one line, "<file>: <what is wrong>; <the fix>", so front ends can show it as is.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from hybridkb.errors import ExtractionError, UnsupportedFileType
from hybridkb.loaders.text import iter_text_blocks
from hybridkb.normalize import display_name
from hybridkb.types import FailedFile, LoadedFile

__all__ = ["SUPPORTED_EXTENSIONS", "file_sha256", "iter_files", "iter_text_blocks", "load_file"]

SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(
    {".pdf", ".docx", ".md", ".markdown", ".txt", ".text"}
)
_SUPPORTED_HINT = "supported: .docx, .md, .pdf, .txt"
_HASH_BLOCK = 1 << 20


def _load_pdf(path: Path, password: str | None) -> LoadedFile:
    from hybridkb.loaders.pdf import load_pdf  # pypdf is imported only for PDFs

    return load_pdf(path, password=password)


def _load_docx(path: Path, password: str | None) -> LoadedFile:
    from hybridkb.loaders.docx import load_docx

    return load_docx(path)


def _load_markdown(path: Path, password: str | None) -> LoadedFile:
    from hybridkb.loaders.text import load_markdown

    return load_markdown(path)


def _load_text(path: Path, password: str | None) -> LoadedFile:
    from hybridkb.loaders.text import load_text

    return load_text(path)


_LOADERS: dict[str, Callable[[Path, str | None], LoadedFile]] = {
    ".pdf": _load_pdf,
    ".docx": _load_docx,
    ".md": _load_markdown,
    ".markdown": _load_markdown,
    ".txt": _load_text,
    ".text": _load_text,
}


def _os_error(name: str, exc: OSError) -> ExtractionError:
    if isinstance(exc, FileNotFoundError):
        return ExtractionError(f"{name}: no such file or folder; check the path")
    if isinstance(exc, IsADirectoryError):
        return ExtractionError(f"{name}: is a folder, not a file; add the folder instead")
    if isinstance(exc, PermissionError):
        return ExtractionError(f"{name}: cannot read it (permission denied); check its permissions")
    return ExtractionError(f"{name}: cannot read it ({exc.strerror or exc}); check the file")


def load_file(path: Path, *, pdf_password: str | None = None) -> LoadedFile:
    """Extract the text of one file as blocks, choosing the loader by extension.

    Args:
        path: A .pdf, .docx, .md/.markdown or .txt/.text file (case-insensitive).
        pdf_password: User password for encrypted PDFs.

    Returns:
        The normalised, non-empty blocks and any warnings (e.g. PDF pages without
        a text layer).

    Raises:
        UnsupportedFileType: Any other extension.
        ExtractionError: The file cannot be read or has no usable text; the
            message names the file, the problem and the fix.
    """
    path = Path(path)
    name = display_name(path)
    suffix = path.suffix.lower()
    loader = _LOADERS.get(suffix)
    if loader is None:
        kind = suffix or "(no extension)"
        raise UnsupportedFileType(f"{name}: unsupported file type {kind}; {_SUPPORTED_HINT}")
    if "\x00" in str(path):
        raise ExtractionError(f"{name}: not a usable path (NUL character); check the path")
    try:
        return loader(path, pdf_password)
    except OSError as exc:
        raise _os_error(name, exc) from exc


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks so size does not matter.

    Raises:
        ExtractionError: The file cannot be read.
    """
    digest = hashlib.sha256()
    try:
        with Path(path).open("rb") as handle:
            while block := handle.read(_HASH_BLOCK):
                digest.update(block)
    except OSError as exc:
        raise _os_error(display_name(path), exc) from exc
    return digest.hexdigest()


def _missing(path: Path) -> FailedFile:
    name = display_name(path)
    return FailedFile(
        filename=name,
        error=f"{name}: no such file or folder; check the path",
        code="ingest_error",
        path=str(path),
    )


def _unusable(path: Path, exc: Exception) -> FailedFile:
    name = display_name(path)
    cause = getattr(exc, "strerror", None) or str(exc)
    return FailedFile(
        filename=name,
        error=f"{name}: not a usable path ({cause}); check the path",
        code="ingest_error",
        path=str(path),
    )


def _not_regular(path: Path) -> FailedFile:
    # Reading a pipe blocks until someone writes to it; /dev/zero never ends.
    name = display_name(path)
    return FailedFile(
        filename=name,
        error=f"{name}: not a regular file (a pipe, socket or device); add a regular file",
        code="ingest_error",
        path=str(path),
    )


def _listing(folder: Path) -> list[os.DirEntry[str]] | FailedFile:
    try:
        return sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        name = display_name(folder)
        return FailedFile(
            filename=name,
            error=f"{name}: cannot list the folder ({exc.strerror or exc}); check its permissions",
            code="ingest_error",
            path=str(folder),
        )


def _walk(folder: Path, seen_dirs: set[Path]) -> Iterator[Path | FailedFile]:
    """Yield supported files under ``folder`` in sorted order, following symlinks once.

    Depth first with an explicit stack rather than recursion: folders nested a
    thousand deep would otherwise hit Python's recursion limit.
    """
    first = _listing(folder)
    if isinstance(first, FailedFile):
        yield first
        return
    stack: list[Iterator[os.DirEntry[str]]] = [iter(first)]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        if entry.name.startswith("."):
            continue
        try:
            is_dir, is_file = entry.is_dir(), entry.is_file()  # both follow symlinks
        except OSError:  # a link pointing at itself (ELOOP)
            is_dir = is_file = False
        if is_dir:
            # A symlink back up the tree would loop forever; resolved paths repeat. The
            # folder being listed is resolved already, so only links need resolving.
            target = Path(entry.path).resolve() if entry.is_symlink() else Path(entry.path)
            if target not in seen_dirs:
                seen_dirs.add(target)
                listing = _listing(target)
                if isinstance(listing, FailedFile):
                    yield listing
                else:
                    stack.append(iter(listing))
        elif Path(entry.name).suffix.lower() in SUPPORTED_EXTENSIONS:
            if is_file:
                yield Path(entry.path).resolve()
            elif entry.is_symlink() and not os.path.exists(entry.path):  # dangling or looping
                yield _missing(Path(entry.path))
            else:  # a pipe, socket or device with a supported extension
                yield _not_regular(Path(entry.path))


def iter_files(paths: Iterable[str | Path]) -> Iterator[Path | FailedFile]:
    """Expand the paths a user named into the files to ingest.

    ``~`` is expanded and paths are resolved. Folders are walked recursively in
    sorted order, keeping files with a supported extension and skipping hidden
    files and folders; symlinks are followed, but a folder is never entered twice.
    A file named explicitly is yielded whatever its extension, so the user hears
    why it was not added (``load_file`` raises UnsupportedFileType). Each resolved
    file is yielded once.

    Args:
        paths: Files and folders, as strings or paths.

    Yields:
        Resolved file paths, or a FailedFile for a path that does not exist.
    """
    seen_files: set[Path] = set()
    seen_dirs: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        try:
            path = path.expanduser()
            exists = path.exists()
        except (OSError, ValueError, RuntimeError) as exc:
            # Name too long, NUL byte, unknown ~user: still one report line, not a crash.
            yield _unusable(path, exc)
            continue
        if not exists:
            yield _missing(path)
            continue
        resolved = path.resolve()
        if resolved.is_dir():
            if resolved in seen_dirs:
                continue
            seen_dirs.add(resolved)
            found: Iterable[Path | FailedFile] = _walk(resolved, seen_dirs)
        else:
            found = [resolved] if resolved.is_file() else [_not_regular(path)]
        for item in found:
            if isinstance(item, Path):
                if item in seen_files:
                    continue
                seen_files.add(item)
            yield item
