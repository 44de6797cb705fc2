"""The local engine's calls on the documents of one collection: add, sync, sources,
delete, get, chunks, a document's text, listing, counting and nearest-vector search.

:class:`LocalDocuments` adds them to :class:`hybridkb.local_plumbing.LocalPlumbing`;
:class:`hybridkb.local.LocalEngine` is its subclass, which adds the collections, search
and maintenance calls. Its own module: these calls are the half of the engine that
reads and writes documents (ingest, sync and their sources), each taking a collection
name first, as :class:`hybridkb.kb.Collection`'s methods do.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import BackendError, ConfigError
from .limits import check_text
from .local_plumbing import LocalPlumbing
from .results import AddReport, DeleteReport, Hit, SyncReport
from .search.hybrid import Target, search_by_vector
from .storage.base import ChunkRecord, CollectionRecord, DocumentRecord, chunk_key, make_chunk_id
from .text.filters import parse_document_filter

if TYPE_CHECKING:
    # Imported where they are used: ingest (the loaders, chunking, the files it opens)
    # is for other calls than a cold CLI search, which paid for it.
    from .engine import Vector
    from .ingest.pipeline import IngestContext

__all__ = ["LocalDocuments"]


def _resolved(paths: Iterable[str | Path] | None) -> list[Path] | None:
    if paths is None:
        return None
    return [Path(os.path.realpath(Path(p).expanduser())) for p in paths]


class LocalDocuments(LocalPlumbing):
    """The calls on one collection's documents (see the module docstring)."""

    def _context(self, collection: str, allowed: Sequence[Path] | None = None) -> IngestContext:
        from .ingest.pipeline import IngestContext

        if self.storage.read_only:
            # Refused before any file is read: every document would fail the same way.
            raise BackendError(self.storage.write_refusal())
        record = self.record(collection)
        return IngestContext(
            storage=self.storage,
            coll=record,
            embedder=self.embedder_for(record),
            settings=self.settings,
            cache=self.embedding_cache(),
            allowed=allowed,
        )

    def add(
        self,
        collection: str,
        paths: Sequence[str | Path],
        *,
        metadata: Mapping[str, Any] | None = None,
        allowed: Sequence[str | Path] | None = None,
    ) -> AddReport:
        """Ingest files and folders, then remember them as sources."""
        from .ingest.pipeline import ingest_paths
        from .ingest.sync import remember_sources

        check_text(metadata, "metadata")  # paths may hold surrogates: undecodable file names
        folders = _resolved(allowed)
        paths = list(paths)
        report = ingest_paths(self._context(collection, folders), paths, metadata)
        # Remembered once the add has checked the metadata: ``sync`` walks them again.
        remember_sources(
            self.storage,
            self.record(collection),
            paths,
            allowed=folders,
            metadata=dict(metadata or {}),
        )
        return report

    def sync(
        self,
        collection: str,
        *,
        dry_run: bool = False,
        allowed: Sequence[str | Path] | None = None,
        busy: Sequence[str] = (),
        paths: Sequence[str | Path] | None = None,
    ) -> SyncReport:
        """Sync with the sources (:func:`hybridkb.ingest.sync.sync_collection`): an unchanged
        folder is a stat walk, with no file opened and no model loaded."""
        from .ingest.sync import sync_collection

        folders = _resolved(allowed)
        if not dry_run and self.storage.read_only:
            self._context(collection)  # raises the read-only error before anything is walked
        return sync_collection(
            self.storage,
            self.record(collection),
            context=lambda confined: self._context(collection, confined),
            allowed=folders,
            dry_run=dry_run,
            busy=frozenset(busy),
            scope=None if paths is None else frozenset(str(p) for p in paths),
        )

    def _sources(self, record: CollectionRecord) -> list[dict[str, Any]]:
        from .ingest.statwalk import root_state

        return [
            {
                "path": src.path,
                "recursive": src.recursive,
                "types": src.types,
                "state": root_state(src.path, mount_point=src.mount_point),
                "added_at": src.added_at,
                "synced_at": src.synced_at,
            }
            for src in self.storage.list_sources(record)
        ]

    def sources(self, collection: str) -> list[dict[str, Any]]:
        """The stored sources as dicts."""
        return self._sources(self.record(collection))

    def remove_source(self, collection: str, path: str | Path) -> DeleteReport:
        """Forget a source and delete the documents only it covered."""
        from .ingest.sync import in_source, stored_documents
        from .text.files import resolve

        record = self.record(collection)
        sources = self.storage.list_sources(record)
        # As recorded (resolved at add time) or as named: a source since replaced by a link
        # resolves elsewhere now.
        named = {str(resolve(path)), os.path.abspath(os.path.expanduser(path))}
        source = next((s for s in sources if s.path in named), None)
        if source is None:
            known = ", ".join(repr(s.path) for s in sources) or "none"
            raise ConfigError(
                f"{path}: not a source of collection {collection!r}; its sources: {known}"
            )
        others = [s for s in sources if s is not source]
        doomed = [
            doc_id
            for doc_id, doc in stored_documents(self.storage, record).items()
            if doc.path
            and in_source(doc.path, source)
            and not any(in_source(doc.path, s) for s in others)
        ]
        self.storage.delete_source(record, source.path)
        report = self.delete(collection, doomed) if doomed else DeleteReport()
        self.storage.delete_file_states(record, doomed)
        return report

    def add_texts(
        self,
        collection: str,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        ids: Sequence[str] | None = None,
    ) -> AddReport:
        """Ingest raw texts as documents."""
        from .ingest.texts import ingest_texts

        check_text(texts, "texts")
        check_text(metadatas, "metadatas")
        check_text(ids, "ids")
        return ingest_texts(self._context(collection), texts, metadatas, ids)

    def delete(self, collection: str, ids: Sequence[str]) -> DeleteReport:
        """Delete documents by id."""
        wanted = [str(i) for i in ids]
        check_text(wanted, "document ids")
        deleted = self.storage.delete_documents(self.record(collection), wanted)
        gone = set(deleted)
        return DeleteReport(
            deleted=deleted, not_found=[i for i in dict.fromkeys(wanted) if i not in gone]
        )

    def get(self, collection: str, document_id: str) -> DocumentRecord | None:
        """A document's catalog record or None."""
        check_text(document_id, "document id")
        return self.storage.get_document(self.record(collection), document_id)

    def chunks(self, collection: str, document_id: str) -> list[ChunkRecord]:
        """A document's chunks, fetched by their derived keys."""
        record = self.record(collection)
        doc = self.storage.get_document(record, document_id)
        if doc is None or doc.chunk_count <= 0:
            return []
        keys = [
            chunk_key(make_chunk_id(record.id, doc.document_id, doc.content_hash, i))
            for i in range(doc.chunk_count)
        ]
        found = self.storage.fetch_chunks(record, keys)
        return [found[k] for k in keys if k in found]

    def document_text(self, collection: str, document_id: str) -> str | None:
        """A document's text stitched back from its chunks (None if they cannot give it)."""
        doc = self.get(collection, document_id)
        if doc is None:
            return None
        chunks = self.chunks(collection, document_id)
        if len(chunks) != doc.chunk_count:
            return None
        text = ""
        for c in chunks:
            if c.char_end - c.char_start != len(c.text) or c.char_start > len(text):
                return None
            if c.char_end <= len(text):
                if text[c.char_start : c.char_end] != c.text:
                    return None
                continue
            if not text.startswith(c.text[: max(len(text) - c.char_start, 0)], c.char_start):
                return None
            text = text[: c.char_start] + c.text
        return text

    def search_by_vector(
        self,
        collection: str,
        vector: Vector,
        *,
        k: int | None = None,
        where: Mapping[str, Any] | str | None = None,
    ) -> list[Hit]:
        """Nearest chunks to a caller's vector."""
        record = self.record(collection)
        return search_by_vector(
            self.storage,
            Target(record, self.embedder_for(record), []),
            np.asarray(vector, dtype=np.float32),
            k=self.settings.default_k if k is None else k,
            where=where,
        )

    def documents(
        self,
        collection: str,
        *,
        limit: int = 100,
        offset: int = 0,
        where: Mapping[str, Any] | str | None = None,
    ) -> list[DocumentRecord]:
        """One page of documents, those matching ``where`` (checked before anything is
        read; the storage runs it in the database)."""
        check_text(where, "where")
        node = parse_document_filter(where)
        return self.storage.list_documents(
            self.record(collection), limit=limit, offset=offset, where=node
        )

    def count(self, collection: str) -> int:
        """Number of documents."""
        return self.storage.stats(self.record(collection)).documents
