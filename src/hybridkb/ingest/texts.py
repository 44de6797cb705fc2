"""Ingest of raw texts (``Collection.add_texts``): arguments checked, and a window of
texts' stored records and languages worked out at once as the prepare thread reaches
them; the texts then go through the same pipeline as files (:mod:`.pipeline`).

Its own module because texts never touch a file: no loader, no budget, no stream.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..normalize import normalize_text
from ..results import AddReport, Block, FailedFile, FileResult
from ..storage.base import DocumentRecord
from ..text.analysis import detect_languages
from .metadata_check import checked_metadata
from .pipeline import (
    IngestContext,
    Outcome,
    Prepared,
    chunk_drafts,
    language_of,
    run_pipeline,
    signature,
    unchanged,
)

# Texts handed to the prepare thread at once. Small, so that a stop or a batch write
# waits on no more than ~32 texts' preparation (a few ms), and the thread keeps ahead.
TEXTS_A_JOB = 32


def ingest_texts(
    ctx: IngestContext,
    texts: Sequence[str],
    metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ids: Sequence[str] | None = None,
) -> AddReport:
    """Store raw texts as documents under the caller's ids (or content-derived ones)."""
    if isinstance(texts, str):
        raise ConfigError("texts: expected a list of strings, got one string; wrap it in a list")
    texts = list(texts)
    if metadatas is not None and len(metadatas) != len(texts):
        raise ConfigError(
            f"metadatas: {len(metadatas)} given for {len(texts)} texts; pass one per text"
        )
    if ids is not None:
        if len(ids) != len(texts):
            raise ConfigError(f"ids: {len(ids)} given for {len(texts)} texts; pass one per text")
        if any(not isinstance(i, str) or not i for i in ids):
            raise ConfigError("ids: every id must be a non-empty string")
        if len(set(ids)) != len(ids):
            raise ConfigError(
                "ids: duplicates in one call; ids must be unique within the collection"
            )
    for n, text in enumerate(texts):
        if not isinstance(text, str):
            raise ConfigError(f"texts[{n}]: expected a string, got {type(text).__name__}")
    metas = [
        checked_metadata(metadatas[n] if metadatas is not None else None) for n in range(len(texts))
    ]
    doc_ids = list(ids) if ids is not None else [text_hash(t)[:16] for t in texts]
    if ids is None and len(set(doc_ids)) != len(doc_ids):
        raise ConfigError("texts: the same text appears twice; pass ids to store both copies")
    sig = signature(ctx.coll)
    ahead = TextWindows(ctx, texts, doc_ids)
    jobs: list[Callable[[], Outcome]] = [
        functools.partial(_prepare_text, ctx, texts[n], metas[n], doc_ids[n], sig, ahead.at(n))
        for n in range(len(texts))
    ]
    return run_pipeline(ctx, jobs, group=TEXTS_A_JOB)


@dataclass
class TextAhead:
    """What is known of a text before its job runs: its stored record (None: new), its
    content hash, the language of its normalised text (None: not detected here) and that
    text when detection made it and it is short (None: the job normalises it)."""

    stored: DocumentRecord | None
    content_hash: str
    language: str | None
    clean: str | None = None


class TextWindows:
    """The texts of an add, a window at a time, as the prepare thread reaches them: the
    stored records of the window's ids in one statement (a point lookup per text cost
    ~0.4 ms of CPU, the most of adding a short text) and the languages of its new or
    changed texts detected together (``detect_languages``: the same codes at a fraction
    of the CPU). A window holds at most WINDOW texts' records, codes and (short) normalised
    texts."""

    WINDOW = 2048
    # Longest text whose normalised copy is kept for its job: normalising twice cost ~12 us
    # a 60-word text, and the copies a window keeps stay small (2048 x 16k characters).
    KEEP_CLEAN = 16_384

    def __init__(self, ctx: IngestContext, texts: Sequence[str], ids: Sequence[str]) -> None:
        self.ctx = ctx
        self.texts = texts
        self.ids = ids
        self.start = -1
        self.known: list[TextAhead] = []

    def at(self, n: int) -> Callable[[], TextAhead]:
        """What is known of text ``n``, worked out with its window when its job runs."""
        return functools.partial(self.get, n)

    def get(self, n: int) -> TextAhead:
        start = n - n % self.WINDOW
        if start != self.start:
            self.known = self._window(start)
            self.start = start
        return self.known[n - start]

    def _window(self, start: int) -> list[TextAhead]:
        ids = self.ids[start : start + self.WINDOW]
        texts = self.texts[start : start + self.WINDOW]
        stored = self.ctx.storage.get_documents(self.ctx.coll, ids)
        hashes = [text_hash(t) for t in texts]
        out = [TextAhead(stored.get(i), h, None) for i, h in zip(ids, hashes, strict=True)]
        forced = self.ctx.coll.language
        if forced and forced != "auto":
            return out  # every text gets the collection's language
        new = [
            i
            for i, a in enumerate(out)
            if a.stored is None or a.stored.content_hash != a.content_hash
        ]
        samples = []
        for i in new:
            clean = normalize_text(texts[i])
            if len(clean) <= self.KEEP_CLEAN:
                out[i].clean = clean
            samples.append(clean[:4000])
        for i, code in zip(new, detect_languages(samples), strict=True):
            out[i].language = code
        return out


def text_hash(text: str) -> str:
    """SHA-256 of a text (its id, when the caller gives none, is the first 16 digits)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _prepare_text(
    ctx: IngestContext,
    text: str,
    meta: dict[str, Any],
    document_id: str,
    sig: str,
    known: Callable[[], TextAhead],
) -> Outcome:
    label = str(meta.get("filename") or meta.get("source") or document_id)
    ahead = known()
    content_hash = ahead.content_hash
    existing = ahead.stored
    if unchanged(existing, content_hash, sig, meta):
        assert existing is not None
        return FileResult(label, document_id, existing.chunk_count)
    clean = ahead.clean if ahead.clean is not None else normalize_text(text)
    ahead.clean = None  # its job has it: the window need not hold it
    if not clean.strip():
        return FailedFile(label, f"{label}: empty text; nothing to add", "extraction_error")
    blocks = [Block(p.strip()) for p in clean.split("\n\n") if p.strip()]
    doc = DocumentRecord(
        document_id=document_id,
        path=None,
        filename=str(meta["filename"]) if "filename" in meta else None,
        source="text",
        content_hash=content_hash,
        signature=sig,
        metadata=meta,
        language=ahead.language or language_of(ctx, clean),
        bytes=len(text.encode("utf-8", "surrogatepass")),
    )
    return Prepared(doc, chunk_drafts(ctx, blocks), FileResult(label, document_id, 0))
