"""Ingest: files or texts -> blocks -> chunks -> vectors -> one atomic write per document.

Each document is written in a single transaction (old chunks out, new ones in),
so after any failure it is either wholly present or absent. One bad file never
stops the others: its error lands in the report.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..bars import progress_bar
from ..embedders import Embedder
from ..embedders.cache import EmbeddingCache, embed_with_cache
from ..errors import KBError
from ..index.derived import gc_paused
from ..lifecycle import raise_if_stopped, read_ahead
from ..loaders import (
    STREAMED_EXTENSIONS,
    check_streamed,
    check_supported,
    file_sha256,
    iter_files,
    load_file,
    parser_failure,
    stream_blocks,
)
from ..loaders.budget import FileLimits
from ..normalize import display_name, printable
from ..results import AddReport, Block, ChunkDraft, FailedFile, FileResult, SkippedFile
from ..settings import Settings
from ..storage.base import (
    ChunkRecord,
    CollectionRecord,
    DocumentRecord,
    FileState,
    PutItem,
    Storage,
    chunk_key,
    make_chunk_id,
)
from ..text.analysis import analyze, detect_language
from ..text.chunking import chunk_blocks, contextual_text, document_text, title_line
from ..text.files import OpenedFile, open_file
from .metadata_check import checked_file_metadata


@dataclass
class IngestContext:
    """What an add needs: the storage and collection, the collection's embedder, settings,
    the embedding cache, the folders it may read, and the file states it observed."""

    storage: Storage
    coll: CollectionRecord
    embedder: Embedder
    settings: Settings
    cache: EmbeddingCache | None
    # Resolved folders files must be read from (the agent tools'); None: any file.
    allowed: Sequence[Path] | None = None
    # Each file's size, mtime and hash as it was opened, by document id: recorded once
    # its document is stored (or found unchanged), so a sync can skip it unopened.
    observed: dict[str, FileState] = field(default_factory=dict)


def document_id_for_path(path: str | Path) -> str:
    """A file's document id: stable for (collection, resolved absolute path)."""
    return hashlib.blake2b(str(path).encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()


def signature(coll: CollectionRecord) -> str:
    """What, besides content, decides a document's chunks and vectors."""
    # v2: chunks embed and index their section ("title > heading") before their text.
    return json.dumps({"chunking": coll.chunking, "model": coll.model, "v": 2}, sort_keys=True)


def language_of(ctx: IngestContext, text: str) -> str:
    """The collection's language when it names one, else the one ``text`` is written in."""
    forced = ctx.coll.language
    if forced and forced != "auto":
        return forced
    return detect_language(text[:4000])


@dataclass
class Prepared:
    """A document parsed, chunked and analysed, waiting for its vectors."""

    doc: DocumentRecord
    drafts: list[ChunkDraft]
    result: FileResult


@dataclass
class Streamed:
    """A text, Markdown or CSV file too large to hold: chunked, embedded, written window by window.

    ``source`` stays open until the document is written (read once, from the descriptor
    that was hashed)."""

    doc: DocumentRecord
    source: OpenedFile
    result: FileResult


Outcome = Prepared | Streamed | FileResult | FailedFile  # FileResult alone = unchanged

# Text, Markdown and CSV files above this size are streamed in bounded memory.
STREAM_BYTES = 16 * 1024 * 1024
WINDOW_CHARS = 256 * 1024

# A batch is embedded in one call and written in one transaction.
BATCH_CHUNKS = 2048
BATCH_DOCS = 1024
PREFETCH = 4  # groups of prepared files read ahead of the writes


def _chunk_records(
    ctx: IngestContext, doc: DocumentRecord, drafts: Sequence[ChunkDraft], start: int = 0
) -> list[ChunkRecord]:
    records = []
    for i, draft in enumerate(drafts, start=start):
        chunk_id = make_chunk_id(ctx.coll.id, doc.document_id, doc.content_hash, i)
        records.append(
            ChunkRecord(
                key=chunk_key(chunk_id),
                chunk_id=chunk_id,
                document_id=doc.document_id,
                chunk_index=i,
                text=draft.text,
                page=draft.page,
                section=draft.section,
                char_start=draft.char_start,
                char_end=draft.char_end,
                content_hash=hashlib.sha256(
                    draft.text.encode("utf-8", "surrogatepass")
                ).hexdigest(),
                language=doc.language,
                terms=analyze(contextual_text(draft.section, draft.text), doc.language),
                metadata=doc.metadata,
                filename=doc.filename,
                path=doc.path,
            )
        )
    return records


def _write_batch(ctx: IngestContext, batch: list[Prepared], report: AddReport) -> None:
    """Embed a batch in one call and write it in one transaction; isolate failures per
    document. The cyclic GC waits meanwhile: a batch allocates rows by the hundred
    thousand and makes no cycles, and its collections walked every object the process
    holds (~400k with a model loaded: ~15 % of a bulk add's CPU)."""
    if not batch:
        return
    with gc_paused():
        _embed_and_put(ctx, batch, report)


def _embed_and_put(ctx: IngestContext, batch: list[Prepared], report: AddReport) -> None:
    try:
        records = [_chunk_records(ctx, item.doc, item.drafts) for item in batch]
        texts = [contextual_text(r.section, r.text) for recs in records for r in recs]
        vectors = embed_with_cache(ctx.embedder, texts, ctx.cache)
    except KBError as exc:
        raise_if_stopped()  # an interrupted model is a stop, not one failed document
        if len(batch) == 1:
            _failed(batch[0], exc, report)
            return
        for item in batch:  # find the culprit; the others still land
            _write_batch(ctx, [item], report)
        return
    items, start = [], 0
    for item, recs in zip(batch, records, strict=True):
        items.append(PutItem(item.doc, recs, vectors[start : start + len(recs)]))
        start += len(recs)
    _put_items(ctx, batch, items, report)


def _put_items(
    ctx: IngestContext, batch: list[Prepared], items: list[PutItem], report: AddReport
) -> None:
    """Write the batch in one transaction; if it fails, each half in its own, down to the
    documents that fail alone (their vectors are not computed again)."""
    try:
        ctx.storage.put_documents(ctx.coll, items)
    except KBError as exc:
        # A stop signal that a driver turned into its own error ("interrupted") is a
        # stop, not a failed write to try again in halves.
        raise_if_stopped()
        if len(items) == 1:
            _failed(batch[0], exc, report)
            return
        half = len(items) // 2
        _put_items(ctx, batch[:half], items[:half], report)
        _put_items(ctx, batch[half:], items[half:], report)
        return
    for item in batch:
        item.result.chunks = len(item.drafts)
        report.added.append(item.result)


def _failed(item: Prepared, exc: KBError, report: AddReport) -> None:
    report.failed.append(FailedFile(item.result.filename, str(exc), exc.code, item.result.path))


def _write_stream(ctx: IngestContext, item: Streamed, report: AddReport) -> None:
    """One huge document in bounded memory, all or nothing: window -> chunks -> vectors -> rows.

    The storage takes the batches as they come (DuckDB stages them beside the database
    and switches the document in at the end), so only one window is held here.
    """

    def batches() -> Iterator[tuple[list[ChunkRecord], np.ndarray]]:
        offset, index = 0, 0
        window: list[Block] = []
        size = 0
        # The document's title (if its first line is one) labels every window, not just
        # the first: a later window's first line is no title.
        title: str | None = None
        item.source.stream.seek(0)
        blocks = stream_blocks(item.source, limits=file_limits(ctx.settings))
        while True:
            block = next(blocks, None)
            if block is not None:
                window.append(block)
                size += len(block.text) + 2
                if size < WINDOW_CHARS:
                    continue
            if not window:
                return
            if index == 0:
                title = title_line(window, _chunk_size(ctx))
            if title is not None:
                window = [b if b.section else replace(b, section=title) for b in window]
            drafts = [
                ChunkDraft(d.text, d.page, d.section, d.char_start + offset, d.char_end + offset)
                for d in chunk_drafts(ctx, window, implicit_title=False)
            ]
            records = _chunk_records(ctx, item.doc, drafts, start=index)
            texts = [contextual_text(r.section, r.text) for r in records]
            yield records, embed_with_cache(ctx.embedder, texts, ctx.cache)
            offset += len(document_text(window)) + 2
            index += len(records)
            window, size = [], 0
            if block is None:
                return

    try:
        count = ctx.storage.put_document_stream(ctx.coll, item.doc, batches())
    except KBError as exc:
        raise_if_stopped()
        report.failed.append(FailedFile(item.result.filename, str(exc), exc.code, item.result.path))
        return
    finally:
        item.source.close()
    item.result.chunks = count
    report.added.append(item.result)


def _chunk_size(ctx: IngestContext) -> int:
    return int(ctx.coll.chunking.get("size", 1000))


def chunk_drafts(
    ctx: IngestContext, blocks: list[Block], *, implicit_title: bool = True
) -> list[ChunkDraft]:
    """``blocks`` cut into chunks as the collection's chunking settings say."""
    c = ctx.coll.chunking
    return chunk_blocks(
        blocks,
        strategy=c.get("strategy", "paragraph"),
        chunk_size=_chunk_size(ctx),
        chunk_overlap=int(c.get("overlap", 150)),
        implicit_title=implicit_title,
    )


def unchanged(
    existing: DocumentRecord | None, content_hash: str, sig: str, meta: dict[str, Any]
) -> bool:
    """Whether the stored document already holds this content, recipe and metadata."""
    return (
        existing is not None
        and existing.content_hash == content_hash
        and existing.signature == sig
        and existing.metadata == meta
    )


def prepare_file(ctx: IngestContext, path: Path, metadata: dict[str, Any]) -> Outcome:
    """Parse and chunk one file (no embedding); unchanged files stop at the hash check.

    The file is opened once (confined to ``ctx.allowed`` when set): its hash and its
    text come from the same descriptor, so what is stored is what was checked.
    """
    try:
        check_supported(path)
        opened = open_file(path, within=ctx.allowed)
    except KBError as exc:
        return FailedFile(display_name(path), str(exc), exc.code, printable(str(path)))
    keep_open = False
    try:
        real = opened.path
        document_id = document_id_for_path(real)
        content_hash = file_sha256(opened)
        ctx.observed[document_id] = FileState(
            document_id, printable(str(real)), opened.size, opened.mtime_ns, content_hash
        )
        sig = signature(ctx.coll)
        existing = ctx.storage.get_document(ctx.coll, document_id)
        if unchanged(existing, content_hash, sig, metadata):
            assert existing is not None
            return FileResult(
                display_name(real), document_id, existing.chunk_count, [], printable(str(real))
            )
        doc = DocumentRecord(
            document_id=document_id,
            path=printable(str(real)),
            filename=display_name(real),
            source="file",
            content_hash=content_hash,
            signature=sig,
            metadata=metadata,
            bytes=opened.size,
        )
        result = FileResult(doc.filename or "", document_id, 0, [], doc.path)
        if real.suffix.lower() in STREAMED_EXTENSIONS and opened.size > STREAM_BYTES:
            doc.language = language_of(ctx, _stream_sample(ctx, opened))
            keep_open = True  # read again, from the start, while it is written
            return Streamed(doc, opened, result)
        return _prepare_loaded(ctx, opened, doc, result)
    except KBError as exc:
        return FailedFile(opened.name, str(exc), exc.code, printable(str(opened.path)))
    except OSError as exc:
        return FailedFile(
            opened.name,
            f"{opened.name}: cannot read ({exc.strerror or exc}); check the file's permissions",
            "ingest_error",
            printable(str(opened.path)),
        )
    finally:
        if not keep_open:
            opened.close()


def _stream_sample(ctx: IngestContext, opened: OpenedFile) -> str:
    """The first 4,000 characters or so of a file too large to load whole: enough to
    tell its language."""
    sample = ""
    try:
        check_streamed(opened, limits=file_limits(ctx.settings))
        for block in stream_blocks(opened, limits=file_limits(ctx.settings)):
            sample += block.text + "\n\n"
            if len(sample) >= 4000:
                break
    except (KBError, OSError):
        raise
    except Exception as exc:  # noqa: BLE001 - as load_file: one file fails, not the add
        raise parser_failure(opened.name, exc) from exc
    return sample


def _prepare_loaded(
    ctx: IngestContext, opened: OpenedFile, doc: DocumentRecord, result: FileResult
) -> Prepared:
    """Load a whole file, tell its language and chunk it."""
    loaded = load_file(
        opened,
        pdf_password=ctx.settings.pdf_password,
        ocr=ctx.settings.ocr,
        limits=file_limits(ctx.settings),
    )
    doc.language = language_of(ctx, document_text(loaded.blocks))
    result.warnings = list(loaded.warnings)
    return Prepared(doc, chunk_drafts(ctx, loaded.blocks), result)


def file_limits(settings: Settings) -> FileLimits:
    """The per-file budgets of ``settings`` (HYBRIDKB_MAX_FILE_*)."""
    return FileLimits(
        archive_mb=settings.max_file_archive_mb,
        xml_mb=settings.max_file_xml_mb,
        text_chars=settings.max_file_text_chars,
        pages=settings.max_file_pages,
        ocr_pages=settings.max_file_ocr_pages,
        pdf_content_mb=settings.max_file_pdf_content_mb,
        rows=settings.max_file_rows,
        cells=settings.max_file_cells,
        seconds=settings.max_file_seconds,
    )


def run_pipeline(
    ctx: IngestContext, jobs: list[Callable[[], Outcome]], *, group: int = 1
) -> AddReport:
    """Prepare items in a background thread while the previous batch embeds and writes.

    Parsing (pypdf, python-docx) overlaps with embedding, which releases the GIL.
    ``group`` jobs go to the thread at once: a raw text's job is short (~0.1 ms), and
    handing each over on its own (a future, a wake-up of each thread) cost about as much
    CPU as normalising the text.
    """
    report = AddReport()
    bar = _progress(len(jobs))
    batch: list[Prepared] = []
    chunks = 0  # in batch
    groups = (job() for job in _grouped(jobs, group))
    with read_ahead(groups, PREFETCH, "hybridkb-prepare") as prepared:
        for outcome in itertools.chain.from_iterable(prepared):
            raise_if_stopped()  # a stop swallowed on the way still ends the add here
            if isinstance(outcome, FailedFile):
                report.failed.append(outcome)
            elif isinstance(outcome, FileResult):
                report.unchanged.append(outcome)
            elif isinstance(outcome, Streamed):
                _write_batch(ctx, batch, report)
                batch, chunks = [], 0
                _write_stream(ctx, outcome, report)
            else:
                batch.append(outcome)
                chunks += len(outcome.drafts)
                if len(batch) >= BATCH_DOCS or chunks >= BATCH_CHUNKS:
                    _write_batch(ctx, batch, report)
                    batch, chunks = [], 0
            if bar is not None:
                bar.update(1)
        _write_batch(ctx, batch, report)
    if bar is not None:
        bar.close()
    return report


def _grouped(jobs: list[Callable[[], Outcome]], group: int) -> list[Callable[[], list[Outcome]]]:
    """The jobs ``group`` at a time, each run of them one job of their outcomes in order."""
    return [
        functools.partial(_run_all, jobs[start : start + group])
        for start in range(0, len(jobs), max(1, group))
    ]


def _run_all(jobs: Sequence[Callable[[], Outcome]]) -> list[Outcome]:
    return [job() for job in jobs]


def ingest_paths(
    ctx: IngestContext, paths: Iterable[str | Path], metadata: Mapping[str, Any] | None = None
) -> AddReport:
    """Ingest files and folders; every file gets a line in the report."""
    user_meta = checked_file_metadata(metadata)
    failed: list[FailedFile] = []
    skipped: list[SkippedFile] = []
    files: list[tuple[Path, dict[str, Any]]] = []
    for item in iter_files([Path(p) for p in paths], within=ctx.allowed):
        if isinstance(item, FailedFile):
            failed.append(item)
        elif isinstance(item, SkippedFile):
            skipped.append(item)
        else:
            files.append((item, user_meta))
    report = ingest_files(ctx, files)
    report.failed[:0] = failed
    report.skipped = skipped
    return report


def ingest_files(ctx: IngestContext, files: Sequence[tuple[Path, dict[str, Any]]]) -> AddReport:
    """Ingest resolved files, each with its (validated) metadata, and record the state
    each stored or unchanged one was read in (a failed one keeps its old state)."""
    jobs: list[Callable[[], Outcome]] = [
        functools.partial(prepare_file, ctx, path, meta) for path, meta in files
    ]
    report = run_pipeline(ctx, jobs)
    stored = [r.document_id for r in (*report.added, *report.unchanged)]
    states = [ctx.observed[i] for i in stored if i in ctx.observed]
    if states:
        ctx.storage.put_file_states(ctx.coll, states)
    return report


def _progress(total: int) -> Any:
    # A bar only for a person at a terminal, and only when there is something to wait for.
    if total < 2 or not sys.stderr.isatty():
        return None
    return progress_bar(total, unit="file")
