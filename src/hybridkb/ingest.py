"""Ingest: files or texts -> blocks -> chunks -> vectors -> one atomic write per document.

Each document is written in a single transaction (old chunks out, new ones in),
so after any failure it is either wholly present or absent. One bad file never
stops the others: its error lands in the report.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .analysis import analyze, detect_language
from .chunking import chunk_blocks, document_text
from .embed_cache import EmbeddingCache, embed_with_cache
from .embedders import Embedder
from .errors import ConfigError, KBError
from .loaders import file_sha256, iter_files, load_file
from .settings import Settings
from .storage.base import (
    ChunkRecord,
    CollectionRecord,
    DocumentRecord,
    Storage,
    chunk_key,
    make_chunk_id,
)
from .types import AddReport, Block, ChunkDraft, FailedFile, FileResult

# Chunk metadata fields the system owns; user metadata never overrides them.
RESERVED_KEYS = frozenset(
    {
        "filename", "path", "document_id", "chunk_id", "page", "section", "chunk_index",
        "char_start", "char_end", "content_hash", "added_at", "language", "collection",
    }
)


@dataclass
class IngestContext:
    storage: Storage
    coll: CollectionRecord
    embedder: Embedder
    settings: Settings
    cache: EmbeddingCache | None


def document_id_for_path(path: Path) -> str:
    """A file's document id: stable for (collection, resolved absolute path)."""
    return hashlib.blake2b(str(path).encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()


def signature(coll: CollectionRecord) -> str:
    """What, besides content, decides a document's chunks and vectors."""
    return json.dumps({"chunking": coll.chunking, "model": coll.model, "v": 1}, sort_keys=True)


def _user_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ConfigError("metadata: expected an object mapping keys to values")
    try:
        json.dumps(metadata)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"metadata: not JSON-serialisable ({exc})") from exc
    return {str(k): v for k, v in metadata.items()}


def _language(ctx: IngestContext, text: str) -> str:
    forced = ctx.coll.language
    if forced and forced != "auto":
        return forced
    return detect_language(text[:4000])


def _store(
    ctx: IngestContext,
    doc: DocumentRecord,
    drafts: Sequence[ChunkDraft],
    language: str,
) -> int:
    texts = [d.text for d in drafts]
    vectors = embed_with_cache(ctx.embedder, texts, ctx.cache)
    chunks = []
    for i, draft in enumerate(drafts):
        chunk_id = make_chunk_id(ctx.coll.id, doc.document_id, doc.content_hash, i)
        chunks.append(
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
                content_hash=hashlib.sha256(draft.text.encode("utf-8", "surrogatepass")).hexdigest(),
                language=language,
                terms=analyze(draft.text, language),
                metadata=doc.metadata,
                filename=doc.filename,
                path=doc.path,
            )
        )
    doc.chunk_count = len(chunks)
    doc.language = language
    ctx.storage.put_document(ctx.coll, doc, chunks, vectors)
    return len(chunks)


def _chunk(ctx: IngestContext, blocks: list[Block]) -> list[ChunkDraft]:
    c = ctx.coll.chunking
    return chunk_blocks(
        blocks,
        strategy=c.get("strategy", "paragraph"),
        chunk_size=int(c.get("size", 1000)),
        chunk_overlap=int(c.get("overlap", 150)),
    )


def ingest_file(ctx: IngestContext, path: Path, metadata: dict[str, Any]) -> tuple[str, FileResult]:
    """Ingest one file; returns ("added" | "unchanged", result). Raises KBError on bad input."""
    path = path.resolve()
    document_id = document_id_for_path(path)
    content_hash = file_sha256(path)
    sig = signature(ctx.coll)
    existing = ctx.storage.get_document(ctx.coll, document_id)
    if (
        existing is not None
        and existing.content_hash == content_hash
        and existing.signature == sig
        and existing.metadata == metadata
    ):
        return "unchanged", FileResult(path.name, document_id, existing.chunk_count, [], str(path))
    loaded = load_file(path, pdf_password=ctx.settings.pdf_password)
    blocks = loaded.blocks
    language = _language(ctx, document_text(blocks))
    drafts = _chunk(ctx, blocks)
    doc = DocumentRecord(
        document_id=document_id,
        path=str(path),
        filename=path.name,
        source="file",
        content_hash=content_hash,
        signature=sig,
        metadata=metadata,
        bytes=path.stat().st_size,
    )
    count = _store(ctx, doc, drafts, language)
    return "added", FileResult(path.name, document_id, count, list(loaded.warnings), str(path))


def ingest_paths(
    ctx: IngestContext, paths: Iterable[str | Path], metadata: Mapping[str, Any] | None = None
) -> AddReport:
    """Ingest files and folders; every file gets a line in the report."""
    user_meta = _user_metadata(metadata)
    report = AddReport()
    items = list(iter_files([Path(p) for p in paths]))
    bar = _progress(len(items))
    try:
        for item in items:
            if isinstance(item, FailedFile):
                report.failed.append(item)
            else:
                try:
                    status, result = ingest_file(ctx, item, user_meta)
                    (report.added if status == "added" else report.unchanged).append(result)
                except KBError as exc:
                    report.failed.append(FailedFile(item.name, str(exc), exc.code, str(item)))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return report


def _progress(total: int) -> Any:
    # A bar only for a person at a terminal, and only when there is something to wait for.
    if total < 2 or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="file", file=sys.stderr, leave=False)


def ingest_texts(
    ctx: IngestContext,
    texts: Sequence[str],
    metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ids: Sequence[str] | None = None,
) -> AddReport:
    """Store raw texts as documents under the caller's ids (or content-derived ones)."""
    if isinstance(texts, str):
        raise ConfigError("texts: expected a list of strings, got one string; wrap it in a list")
    if metadatas is not None and len(metadatas) != len(texts):
        raise ConfigError(f"metadatas: {len(metadatas)} given for {len(texts)} texts; pass one per text")
    if ids is not None:
        if len(ids) != len(texts):
            raise ConfigError(f"ids: {len(ids)} given for {len(texts)} texts; pass one per text")
        if len(set(ids)) != len(ids):
            raise ConfigError("ids: duplicates in one call; ids must be unique within the collection")
        if any(not isinstance(i, str) or not i for i in ids):
            raise ConfigError("ids: every id must be a non-empty string")
    report = AddReport()
    sig = signature(ctx.coll)
    for n, text in enumerate(texts):
        if not isinstance(text, str):
            raise ConfigError(f"texts[{n}]: expected a string")
        meta = _user_metadata(metadatas[n] if metadatas is not None else None)
        content_hash = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        document_id = ids[n] if ids is not None else content_hash[:16]
        label = str(meta.get("filename") or meta.get("source") or document_id)
        existing = ctx.storage.get_document(ctx.coll, document_id)
        if (
            existing is not None
            and existing.content_hash == content_hash
            and existing.signature == sig
            and existing.metadata == meta
        ):
            report.unchanged.append(FileResult(label, document_id, existing.chunk_count))
            continue
        from .normalize import normalize_text

        clean = normalize_text(text)
        if not clean.strip():
            report.failed.append(
                FailedFile(label, f"{label}: empty text; nothing to add", "extraction_error")
            )
            continue
        blocks = [Block(p.strip()) for p in clean.split("\n\n") if p.strip()]
        language = _language(ctx, clean)
        doc = DocumentRecord(
            document_id=document_id,
            path=None,
            filename=str(meta["filename"]) if "filename" in meta else None,
            source="text",
            content_hash=content_hash,
            signature=sig,
            metadata=meta,
            bytes=len(text.encode("utf-8", "surrogatepass")),
        )
        count = _store(ctx, doc, _chunk(ctx, blocks), language)
        report.added.append(FileResult(label, document_id, count))
    return report
