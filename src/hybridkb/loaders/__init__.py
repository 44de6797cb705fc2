"""Find files and extract their text as blocks, one loader per file type.

``iter_files`` turns what the user named (files, folders, ``~`` paths) into the
files to ingest; ``load_file`` picks the loader by extension. Every problem a
user can fix is raised as an :class:`~hybridkb.errors.IngestError` whose message is
one line, "<file>: <what is wrong>; <the fix>", so front ends can show it as is.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from hybridkb.errors import ExtractionError, KBError
from hybridkb.loaders.budget import FileBudget, FileLimits, ReadingClock, timed_while_read
from hybridkb.loaders.registry import (
    LOADERS,
    SUPPORTED_EXTENSIONS,
    SUPPORTED_HINT,
    LoadOptions,
    check_supported,
)
from hybridkb.loaders.snapshot import as_opened
from hybridkb.loaders.text import iter_text_blocks, stream_markdown
from hybridkb.normalize import display_name
from hybridkb.results import Block, FailedFile, LoadedFile, SkippedFile
from hybridkb.text.files import OpenedFile, allowed_root, open_file

__all__ = [
    "STREAMED_EXTENSIONS",
    "SUPPORTED_EXTENSIONS",
    "FileLimits",
    "check_streamed",
    "check_supported",
    "file_sha256",
    "iter_files",
    "iter_text_blocks",
    "load_file",
    "parser_failure",
    "stream_blocks",
]

_HASH_BLOCK = 1 << 20


def load_file(
    source: str | Path | OpenedFile,
    *,
    pdf_password: str | None = None,
    ocr: bool = True,
    limits: FileLimits | None = None,
) -> LoadedFile:
    """Extract the text of one file as blocks, choosing the loader by extension.

    Args:
        source: A file of a supported type (SUPPORTED_EXTENSIONS, case-insensitive):
            a path (opened here), or a file opened by :func:`hybridkb.text.files.open_file`,
            read from its start up to the size it had when opened.
        pdf_password: User password for encrypted PDFs.
        ocr: Read PDF pages without a text layer by OCR, if the OCR extra is installed.
        limits: What reading the file may cost (default :class:`FileLimits()`); going
            over raises :class:`~hybridkb.loaders.budget.BudgetExceeded`.

    Returns:
        The normalised, non-empty blocks and any warnings (e.g. PDF pages without
        a text layer).

    Raises:
        UnsupportedFileType: Any other extension.
        ExtractionError: The file cannot be read, has no usable text or costs more
            than ``limits``; the message names the file, the problem and the fix. So
            does any exception the parser raises: one bad file is one failed file.
    """
    if not isinstance(source, OpenedFile):
        path = Path(source)
        check_supported(path)
        with open_file(path) as opened:
            return load_file(opened, pdf_password=pdf_password, ocr=ocr, limits=limits)
    check_supported(source.path)
    loader = LOADERS[source.path.suffix.lower()]
    budget = FileBudget(source.name, limits or FileLimits())
    try:
        stream = as_opened(source)
        loaded = loader(stream, source.name, LoadOptions(pdf_password, ocr), budget)
        budget.charge_blocks(max(0, len(loaded.blocks) - budget.blocks))  # not yet charged
        return loaded
    except KBError:
        raise
    except OSError as exc:
        raise ExtractionError(
            f"{source.name}: cannot read it ({exc.strerror or exc}); check the file"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - parsers raise anything on crafted input
        raise parser_failure(source.name, exc) from exc


def parser_failure(name: str, exc: BaseException) -> ExtractionError:
    """The one-line failure for an exception a parser raised that no loader expected.

    Third-party parsers raise KeyError, RecursionError, MemoryError, PdfiumError,
    lxml and zipfile errors on crafted files; each becomes this file's failure in the
    report rather than the end of the folder add.
    """
    if isinstance(exc, MemoryError):
        return ExtractionError(
            f"{name}: ran out of memory reading it (a crafted or damaged file); "
            "check the file or lower HYBRIDKB_MAX_FILE_* budgets"
        )
    cause = " ".join(str(exc).split())[:80]
    cause = f"{type(exc).__name__}: {cause}" if cause else type(exc).__name__
    return ExtractionError(
        f"{name}: the parser failed ({cause}); the file may be damaged, check it"
    )


# Ingest reads large files of these types block by block while it writes them, never
# whole (a 500 MB log file, a 400 MB CSV, a 150 MB Markdown file).
STREAMED_EXTENSIONS = frozenset({".txt", ".text", ".md", ".markdown", ".csv", ".tsv"})


def stream_blocks(source: OpenedFile, *, limits: FileLimits | None = None) -> Iterator[Block]:
    """The blocks of a large text, Markdown or CSV file, read from its start as needed.

    The file is read up to the size it had when it was opened (a log still being
    written ends there) and charged like any other: only one block is held, so its
    text may be :meth:`FileLimits.streamed` larger, and only the time spent reading
    counts against ``limits.seconds``, not the embedding done between two blocks.

    Raises:
        ExtractionError: Binary content, no text, or unreadable CSV.
        BudgetExceeded: More text, rows, cells or reading time than ``limits`` allow.
    """
    from hybridkb.loaders.sheets import stream_csv

    clock = ReadingClock()
    budget = FileBudget(source.name, (limits or FileLimits()).streamed(), clock=clock)
    stream = as_opened(source)
    suffix = source.path.suffix.lower()
    if suffix in (".md", ".markdown"):
        blocks = budget.charged(stream_markdown(stream, name=source.name))
    elif suffix in (".csv", ".tsv"):  # charged by rows, cells and text as they are read
        blocks = stream_csv(stream, name=source.name, budget=budget)
    else:
        blocks = budget.charged(iter_text_blocks(stream, name=source.name))
    return timed_while_read(blocks, clock)


def check_streamed(source: OpenedFile, *, limits: FileLimits | None = None) -> None:
    """Refuse a large file over its budgets before any of it is embedded.

    One extra read of the file (csv parses ~50 MB/s, text faster) instead of embedding
    up to a billion characters or a million rows and then throwing them away.

    Raises:
        ExtractionError: As :func:`stream_blocks` would while reading.
    """
    for _ in stream_blocks(source, limits=limits):
        pass


def file_sha256(source: str | Path | OpenedFile) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks so size does not matter.

    An opened file is hashed from its start up to the size it had when opened.

    Raises:
        ExtractionError: The file cannot be read.
    """
    if not isinstance(source, OpenedFile):
        with open_file(source) as opened:
            return file_sha256(opened)
    digest = hashlib.sha256()
    stream = as_opened(source)  # what the loaders read: the file as it was when opened
    try:
        while block := stream.read(_HASH_BLOCK):
            digest.update(block)
    except OSError as exc:
        raise ExtractionError(
            f"{source.name}: cannot read it ({exc.strerror or exc}); check the file"
        ) from exc
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


def _outside(path: Path) -> FailedFile:
    name = display_name(path)
    return FailedFile(
        filename=name,
        error=f"{name}: links outside the folders this tool may read; it was not read",
        code="access_denied",
        path=str(path),
    )


def _skipped(path: Path, reason: str) -> SkippedFile:
    return SkippedFile(filename=display_name(path), reason=reason, path=str(path))


def _walk(
    folder: Path, seen_dirs: set[Path], within: Sequence[Path] | None
) -> Iterator[Path | FailedFile | SkippedFile]:
    """Yield supported files under ``folder`` in sorted order, following symlinks once.

    Hidden entries (a name starting with ".") and files of other types are yielded as
    SkippedFile, so a folder add can say what it passed over instead of dropping it.

    Depth first with an explicit stack rather than recursion: folders nested a
    thousand deep would otherwise hit Python's recursion limit. With ``within``, a
    link whose target is outside those folders is reported, not followed (the files
    themselves are opened confined later, so a link swapped in afterwards is caught
    there too).
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
            yield _skipped(Path(entry.path), "hidden (a name starting with '.')")
            continue
        try:
            is_dir, is_file = entry.is_dir(), entry.is_file()  # both follow symlinks
        except OSError:  # a link pointing at itself (ELOOP)
            is_dir = is_file = False
        if is_dir:
            listing = _enter(entry, seen_dirs, within)
            if isinstance(listing, FailedFile):
                yield listing
            elif listing is not None:
                stack.append(iter(listing))
            continue
        found = _file_entry(entry, is_file, within)
        if found is not None:
            yield found


def _enter(
    entry: os.DirEntry[str], seen_dirs: set[Path], within: Sequence[Path] | None
) -> list[os.DirEntry[str]] | FailedFile | None:
    """The listing of a folder met in a walk; None for a folder walked already."""
    # A symlink back up the tree would loop forever; resolved paths repeat. The
    # folder being listed is resolved already, so only links need resolving.
    try:
        target = Path(entry.path).resolve() if entry.is_symlink() else Path(entry.path)
    except (OSError, RuntimeError) as exc:
        return _unusable(Path(entry.path), exc)
    if within is not None and allowed_root(target, within) is None:
        return _outside(Path(entry.path))
    if target in seen_dirs:
        return None
    seen_dirs.add(target)
    return _listing(target)


def _file_entry(
    entry: os.DirEntry[str], is_file: bool, within: Sequence[Path] | None
) -> Path | FailedFile | SkippedFile | None:
    """What a walk yields for an entry that is no folder (None: nothing, e.g. a pipe with
    an extension we do not read)."""
    if Path(entry.name).suffix.lower() in SUPPORTED_EXTENSIONS:
        return _supported_entry(entry, is_file, within)
    if is_file:
        kind = Path(entry.name).suffix.lower() or "(no extension)"
        return _skipped(Path(entry.path), f"unsupported type {kind}; {SUPPORTED_HINT}")
    return None


def _supported_entry(
    entry: os.DirEntry[str], is_file: bool, within: Sequence[Path] | None
) -> Path | FailedFile:
    """A file with a supported extension, resolved; or why it cannot be read."""
    if is_file:
        try:
            # The folder listed is resolved, so only a link needs resolving (a
            # sync of 10k unchanged files spent a fifth of its time here).
            found = Path(entry.path)
            if entry.is_symlink():
                found = found.resolve()
        except (OSError, RuntimeError) as exc:
            return _unusable(Path(entry.path), exc)
        if within is not None and allowed_root(found, within) is None:
            return _outside(Path(entry.path))
        return found
    if entry.is_symlink() and not os.path.exists(entry.path):  # dangling or looping
        return _missing(Path(entry.path))
    return _not_regular(Path(entry.path))  # a pipe, socket or device with a supported extension


def iter_files(
    paths: Iterable[str | Path], *, within: Sequence[Path] | None = None
) -> Iterator[Path | FailedFile | SkippedFile]:
    """Expand the paths a user named into the files to ingest.

    ``~`` is expanded and paths are resolved. Folders are walked recursively in
    sorted order, keeping files with a supported extension and skipping hidden
    files and folders; symlinks are followed, but a folder is never entered twice.
    A file named explicitly is yielded whatever its extension, so the user hears
    why it was not added (``load_file`` raises UnsupportedFileType). Each resolved
    file is yielded once.

    Args:
        paths: Files and folders, as strings or paths.
        within: Resolved folders to stay in (the agent tools' allowed folders): files
            and folder links resolving elsewhere are reported as ``access_denied``.

    Yields:
        Resolved file paths, a FailedFile for a path that does not exist or may not
        be read, a SkippedFile for a hidden or unsupported entry inside a folder.
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
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            yield _unusable(path, exc)
            continue
        if within is not None and allowed_root(resolved, within) is None:
            yield _outside(path)
            continue
        if resolved.is_dir():
            if resolved in seen_dirs:
                continue
            seen_dirs.add(resolved)
            found: Iterable[Path | FailedFile | SkippedFile] = _walk(resolved, seen_dirs, within)
        else:
            found = [resolved] if resolved.is_file() else [_not_regular(path)]
        yield from _once(found, seen_files)


def _once(
    found: Iterable[Path | FailedFile | SkippedFile], seen_files: set[Path]
) -> Iterator[Path | FailedFile | SkippedFile]:
    """``found`` without the files yielded before (named twice, or reached by two links)."""
    for item in found:
        if isinstance(item, Path):
            if item in seen_files:
                continue
            seen_files.add(item)
        yield item
