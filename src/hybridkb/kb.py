"""The facade: ``connect()`` -> :class:`KnowledgeBase` -> lazy :class:`Collection` handles.

Every front end (CLI, LangChain tools, MCP) calls these methods and never touches
a backend directly.
"""

from __future__ import annotations

import os
import threading
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .api import CollectionAPI, KnowledgeBaseAPI
from .embedders import Embedder, Recipe, get_embedder, recipe_of
from .errors import (
    BackendError,
    CollectionNotFound,
    ConfigError,
    EmbeddingMismatch,
    KBError,
    ModelUnavailable,
)
from .langid_model import set_cache_folder
from .lifecycle import EXIT_WAIT_SECONDS, join_background, start_background
from .limits import MAX_NAME_CHARS, check_text
from .rerank import Reranker, load_reranker
from .search import Target, run_search, search_by_vector
from .settings import Settings, with_overrides
from .storage import Storage
from .storage.base import (
    ChunkRecord,
    CollectionRecord,
    CollectionStats,
    DocumentRecord,
    chunk_key,
    make_chunk_id,
)
from .types import AddReport, CollectionInfo, DeleteReport, Hit, SyncReport

if TYPE_CHECKING:
    # Imported where they are used: ingest (the loaders, chunking, the files it opens)
    # and the embedding cache (SQLite) are for adds, and a cold CLI search paid for them.
    from .api import CopyProgress
    from .embed_cache import EmbeddingCache
    from .graph import Graph
    from .ingest import IngestContext
    from .sql_tool import SQLResult
    from .storage.base import CollectionHealth


def _resolved(paths: Iterable[str | Path] | None) -> list[Path] | None:
    if paths is None:
        return None
    return [Path(os.path.realpath(Path(p).expanduser())) for p in paths]


def check_name(name: str, what: str = "collection name") -> str:
    """Display names are free text; only blank, over-long or control characters are refused."""
    if not isinstance(name, str):
        raise ConfigError(f"{what}: expected text, got {type(name).__name__}")
    check_text(name, what)
    clean = unicodedata.normalize("NFC", name).strip()
    if not clean:
        raise ConfigError(f"{what}: empty; give it a name such as 'Tax Documents'")
    if len(clean) > MAX_NAME_CHARS:
        raise ConfigError(f"{what}: longer than {MAX_NAME_CHARS} characters; shorten it")
    if any(unicodedata.category(ch) == "Cc" for ch in clean):
        raise ConfigError(f"{what}: contains control characters; use printable text")
    return clean


def load_embedder(
    settings: Settings, given: Mapping[str, Embedder], model: str, recipe: Recipe | None
) -> Embedder:
    """The embedder for ``model``: one given by the caller, else loaded as the settings
    say (with ``recipe``, the one an existing collection's vectors were made with)."""
    found = given.get(model)
    if found is not None:
        return found
    return get_embedder(
        model,
        device=settings.device,
        backend=settings.embedding_backend,
        batch_size=settings.embed_batch_size,
        cache_dir=str(settings.cache_dir),
        recipe=recipe,
    )


def checked_embedder(
    load: Callable[[str, Recipe | None], Embedder], coll: CollectionRecord
) -> Embedder:
    """The collection's own model loaded by ``load`` (the catalog is the authority),
    checked against its dimension."""
    try:
        embedder = load(coll.model, Recipe.from_dict(coll.recipe))
    except ModelUnavailable as exc:
        raise ModelUnavailable(
            f"collection {coll.name!r} was embedded with {coll.model!r} ({coll.dim} dims), "
            f"which cannot be loaded here ({exc}); install that model, or re-embed the "
            f"collection with `hybridkb reembed {coll.name!r} --model M`"
        ) from exc
    if embedder.dim != coll.dim:
        raise EmbeddingMismatch(
            f"collection {coll.name!r} has {coll.dim}-dim vectors from {coll.model!r}, but the "
            f"loaded model gives {embedder.dim}; use the same model or re-embed the collection"
        )
    return embedder


class KnowledgeBase:
    """A workspace of named collections in one store (this process opened it): one of
    the two implementations of :class:`hybridkb.api.KnowledgeBaseAPI`."""

    def __init__(
        self,
        storage: Storage,
        settings: Settings,
        *,
        embedders: Mapping[str, Embedder] | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.storage = storage
        self.settings = settings
        self.workspace = check_name(settings.workspace, "workspace")
        set_cache_folder(settings.cache_dir)  # the language model's fast copy
        # Embedders given by the caller (e.g. a LangChain model) for their model ids.
        self._given: dict[str, Embedder] = dict(embedders or {})
        self._reranker = reranker
        self._cache: EmbeddingCache | None = None
        self._languages: dict[tuple[int, int], list[str]] = {}
        self._graph: Graph | None = None
        if not storage.read_only and storage.graph_sql is not None:
            # The graph's write hook must be on the storage before the first write, so a
            # writable knowledge base attaches it now; a read-only one (the CLI's search)
            # waits for the first use of .graph and skips importing the graph (~0.2 s).
            self._graph = self.graph
        # Run at close, first: e.g. the owner server of a file other processes call into.
        self.on_close: list[Callable[[], None]] = []
        # prepare_search's threads: close waits for them (a model still loading in native
        # code at exit aborts the process; an index load reads the storage being closed).
        self._loading: list[threading.Thread] = []

    @property
    def graph(self) -> Graph:
        """The knowledge graph of this workspace (:class:`hybridkb.graph.Graph`)."""
        if self._graph is None:
            from .graph import attach_graph  # here: hybridkb.graph is imported on first use

            self._graph = attach_graph(self)
        return self._graph

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        """Wait for the background loads, run ``on_close``, close the storage; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.close`."""
        join_background(self._loading, EXIT_WAIT_SECONDS)
        self._loading.clear()
        while self.on_close:
            self.on_close.pop()()
        self.storage.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def in_workspace(self, workspace: str) -> KnowledgeBase:
        """Another workspace over this open store, sharing its embedders and reranker; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.in_workspace`."""
        return KnowledgeBase(
            self.storage,
            with_overrides(self.settings, workspace=workspace),
            embedders=self._given,
            reranker=self._reranker,
        )

    def with_embedder(self, embedder: Embedder) -> KnowledgeBase:
        """This store and workspace with ``embedder`` added to the given models; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.with_embedder`."""
        return KnowledgeBase(
            self.storage,
            self.settings,
            embedders={**self._given, embedder.model_id: embedder},
            reranker=self._reranker,
        )

    def with_reranker(self, reranker: Reranker) -> KnowledgeBase:
        """This store and workspace with ``reranker`` for searches; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.with_reranker`."""
        if not isinstance(reranker, Reranker):
            raise ConfigError(
                f"reranker: {type(reranker).__name__} has no name and score(query, texts); "
                "see hybridkb.rerank.Reranker"
            )
        return KnowledgeBase(self.storage, self.settings, embedders=self._given, reranker=reranker)

    def reranker(self) -> Reranker | None:
        """The one given, else HYBRIDKB_RERANKER's, loaded on first use; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.reranker`."""
        if self._reranker is None and self.settings.reranker:
            self._reranker = load_reranker(self.settings.reranker)
        return self._reranker

    # -- embedders ------------------------------------------------------------------

    def embedder(self, model: str, recipe: Recipe | None = None) -> Embedder:
        """The embedder for ``model``, loaded by :func:`load_embedder`; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.embedder`."""
        return load_embedder(self.settings, self._given, model, recipe)

    def prepare_search(self, collections: Iterable[str] | None = None) -> None:
        """Start loading what searching ``collections`` (default: all) needs, in two
        threads: the embedding models and the derived indexes. A one-shot search (the
        CLI's) then overlaps the model load (~0.2 s) with the index load (~0.15 s at
        100k chunks) and its own work; each search waits only for what it uses."""
        if collections is None:
            records = self.storage.list_collections(self.workspace)
        else:
            records = [
                r
                for r in (self.storage.get_collection(self.workspace, n) for n in collections)
                if r is not None
            ]

        def load_models() -> None:
            for record in records:
                try:
                    self.embedder_for(record)
                except KBError:
                    pass  # the search itself reports it

        def load_indexes() -> None:
            for record in records:
                try:
                    self.storage.prepare(record)
                except KBError:
                    pass  # as above

        for name, target in (("model", load_models), ("indexes", load_indexes)):
            self._loading.append(start_background(target, f"hybridkb-{name}-load"))

    def embedder_for(self, coll: CollectionRecord) -> Embedder:
        """The collection's own model, checked (:func:`checked_embedder`); see
        :meth:`hybridkb.api.KnowledgeBaseAPI.embedder_for`."""
        return checked_embedder(self.embedder, coll)

    def warm_up(self) -> None:
        """Load now, rather than inside the first call that needs them, the models the
        collections are searched with (each with its own recipe: one made while int8 was
        being judged stays float32), or the default model when there is no collection."""
        records = self.storage.list_collections(self.workspace)
        for record in records:
            try:
                self.embedder_for(record)
            except KBError:
                pass  # the call that needs it reports it
        if not records:
            self.embedder(self.settings.model)

    def embedding_cache(self) -> EmbeddingCache | None:
        """The on-disk embedding cache, opened on first use; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.embedding_cache`."""
        if self._given or self.settings.embed_cache_mb == 0:
            # The cache is keyed by model id, which cannot tell two given models apart.
            return None
        if self._cache is None:
            from .embed_cache import EmbeddingCache

            self._cache = EmbeddingCache(
                Path(self.settings.cache_dir), max_bytes=self.settings.embed_cache_mb << 20
            )
        return self._cache

    # -- collections ----------------------------------------------------------------

    def create_collection(
        self,
        name: str,
        *,
        model: str | None = None,
        chunk_strategy: str | None = None,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        language: str | None = None,
        exist_ok: bool = False,
    ) -> Collection:
        """Create a collection; see :meth:`hybridkb.api.KnowledgeBaseAPI.create_collection`."""
        name = check_name(name)
        existing = self.storage.get_collection(self.workspace, name)
        if existing is not None and exist_ok:
            return self.collection(name, model=model)
        s = self.settings
        model_id = model or s.model
        strategy = chunk_strategy or s.chunk_strategy
        if strategy not in ("paragraph", "page", "size"):
            raise ConfigError(f"chunk_strategy: {strategy!r} unknown; use paragraph, page or size")
        size = chunk_size or s.chunk_size
        overlap = s.chunk_overlap if chunk_overlap is None else chunk_overlap
        if not 0 <= overlap < size:
            raise ConfigError(
                f"chunk_overlap ({overlap}) must be >= 0 and below chunk_size ({size})"
            )
        embedder = self.embedder(model_id)
        record = self.storage.create_collection(
            self.workspace,
            name,
            model=embedder.model_id,
            dim=embedder.dim,
            chunking={"strategy": strategy, "size": size, "overlap": overlap},
            language=language or s.language,
            recipe=recipe_of(embedder).to_dict(),
        )
        return Collection(self, name, record)

    def collection(
        self, name: str, *, create: bool = False, model: str | None = None
    ) -> Collection:
        """A checked collection handle; see :meth:`hybridkb.api.KnowledgeBaseAPI.collection`."""
        name = check_name(name)
        record = self.storage.get_collection(self.workspace, name)
        if record is None:
            if create:
                return self.create_collection(name, model=model)
            raise self._not_found(name)
        if model is not None and model != record.model:
            raise EmbeddingMismatch(
                f"collection {name!r} uses {record.model!r}, not {model!r}; search it with its own "
                "model, or re-embed it with `hybridkb reembed`"
            )
        return Collection(self, name, record)

    def __getitem__(self, name: str) -> Collection:
        """A lazy handle: nothing is read until it is used."""
        return Collection(self, check_name(name), None)

    def _not_found(self, name: str) -> CollectionNotFound:
        names = [c.name for c in self.storage.list_collections(self.workspace)]
        known = ", ".join(repr(n) for n in names) if names else "none yet"
        return CollectionNotFound(
            f"collection {name!r} not found in workspace {self.workspace!r}; existing: {known}"
        )

    def record(self, name: str) -> CollectionRecord:
        """A collection's catalog record; see :meth:`hybridkb.api.KnowledgeBaseAPI.record`."""
        record = self.storage.get_collection(self.workspace, name)
        if record is None:
            raise self._not_found(name)
        return record

    def list_collections(self) -> list[CollectionInfo]:
        """Every collection with its counts (one stats query for all); see
        :meth:`hybridkb.api.KnowledgeBaseAPI.list_collections`."""
        records = self.storage.list_collections(self.workspace)
        stats = self.storage.stats_many(records)
        return [self._info(r, stats[r.id]) for r in records]

    def collection_names(self) -> list[str]:
        """The collections' names, no counts; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.collection_names`."""
        return [c.name for c in self.storage.list_collections(self.workspace)]

    def describe(self, name: str) -> CollectionInfo:
        """A collection's counts and sources; see :meth:`hybridkb.api.KnowledgeBaseAPI.describe`."""
        record = self.record(check_name(name))
        info = self._info(record, self.storage.stats(record))
        info.sources = Collection(self, record.name, record).sources()
        return info

    @staticmethod
    def _info(record: CollectionRecord, st: CollectionStats) -> CollectionInfo:
        return CollectionInfo(
            name=record.name,
            documents=st.documents,
            chunks=st.chunks,
            embedding_model=record.model,
            dim=record.dim,
            languages=st.languages,
            bytes=st.bytes,
            updated_at=st.updated_at,
            created_at=record.created_at,
            chunking=dict(record.chunking),
            workspace=record.workspace,
        )

    def drop_collection(self, name: str) -> None:
        """Drop a collection; see :meth:`hybridkb.api.KnowledgeBaseAPI.drop_collection`."""
        self.storage.drop_collection(self.record(check_name(name)))

    # -- search ---------------------------------------------------------------------

    def _target(self, record: CollectionRecord) -> Target:
        if record.language and record.language != "auto":
            languages: Sequence[str] = [record.language]
        else:
            # Every write bumps the generation, so (id, generation) keys a safe cache.
            key = (record.id, record.generation)
            cached = self._languages.get(key)
            if cached is None:
                cached = self._languages[key] = self.storage.stats(record).languages
            languages = cached
        return Target(record, self.embedder_for(record), languages)

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        mode: str | None = None,
        where: Mapping[str, Any] | str | None = None,
        collections: Iterable[str] | None = None,
        rerank: bool | None = None,
    ) -> list[Hit]:
        """Search several collections as one ranking (:func:`hybridkb.search.run_search`);
        see :meth:`hybridkb.api.KnowledgeBaseAPI.search`."""
        if rerank is not None and not isinstance(rerank, bool):
            raise ConfigError(f"rerank: expected true, false or nothing, got {rerank!r}")
        check_text(query, "query")
        check_text(where, "where")
        reranker = None if rerank is False else self.reranker()
        if rerank and reranker is None:
            raise ConfigError(
                "rerank: no reranker is set; set HYBRIDKB_RERANKER to the folder of a "
                "cross-encoder, or use KnowledgeBase.with_reranker"
            )
        if collections is None:
            records = self.storage.list_collections(self.workspace)
        else:
            records = [self.record(check_name(n)) for n in dict.fromkeys(collections)]
        return run_search(
            self.storage,
            [self._target(r) for r in records],
            query,
            k=self.settings.default_k if k is None else k,
            mode=mode or self.settings.default_mode,
            where=where,
            settings=self.settings,
            reranker=reranker,
        )

    # -- maintenance verbs (the implementations live in their modules) ----------------

    def doctor(self, name: str | None = None, *, repair: bool = False) -> list[CollectionHealth]:
        """Check collections (:func:`hybridkb.maintenance.doctor_here`); see
        :meth:`hybridkb.api.KnowledgeBaseAPI.doctor`."""
        from .maintenance import doctor_here

        return doctor_here(self, name, repair=repair)

    def reembed(
        self, name: str, *, model: str | None = None, progress: bool = True
    ) -> dict[str, Any]:
        """Re-embed a collection (:func:`hybridkb.maintenance.reembed_here`); see
        :meth:`hybridkb.api.KnowledgeBaseAPI.reembed`."""
        from .maintenance import reembed_here

        return reembed_here(self, name, model=model, progress=progress)

    def compact(self) -> dict[str, int]:
        """Compact the store (:func:`hybridkb.maintenance.compact_here`); see
        :meth:`hybridkb.api.KnowledgeBaseAPI.compact`."""
        from .maintenance import compact_here

        return compact_here(self)

    def copy_to(
        self, dst_url: str, *, workspace: str | None = None, progress: CopyProgress | None = None
    ) -> dict[str, Any]:
        """Copy into another store (:func:`hybridkb.copy.copy_here`); see
        :meth:`hybridkb.api.KnowledgeBaseAPI.copy_to`."""
        from .copy import copy_here

        return copy_here(self, dst_url, workspace=workspace, progress=progress)

    def sql(
        self,
        sql: str,
        *,
        max_rows: int | None = None,
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> SQLResult:
        """Run one read-only SELECT (:func:`hybridkb.sql_tool.sql_here`; None: its default
        limits); see :meth:`hybridkb.api.KnowledgeBaseAPI.sql`."""
        from .sql_tool import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT, sql_here

        return sql_here(
            self,
            sql,
            max_rows=DEFAULT_MAX_ROWS if max_rows is None else max_rows,
            timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
            max_bytes=DEFAULT_MAX_BYTES if max_bytes is None else max_bytes,
        )


class Collection:
    """A handle on one collection; resolves its catalog record when first used."""

    def __init__(self, kb: KnowledgeBase, name: str, record: CollectionRecord | None) -> None:
        self.kb = kb
        self.name = name
        self._record = record

    def __repr__(self) -> str:
        return f"Collection({self.name!r})"

    @property
    def record(self) -> CollectionRecord:
        # Re-read each time: another handle may have dropped or changed it.
        """The catalog record, re-read on every access; see
        :attr:`hybridkb.api.CollectionAPI.record`."""
        self._record = self.kb.record(self.name)
        return self._record

    def _context(self, allowed: Sequence[Path] | None = None) -> IngestContext:
        from .ingest import IngestContext

        if self.kb.storage.read_only:
            # Refused before any file is read: every document would fail the same way.
            raise BackendError(
                "the knowledge base is open read-only; open it without read_only=True to add"
            )
        record = self.record
        return IngestContext(
            storage=self.kb.storage,
            coll=record,
            embedder=self.kb.embedder_for(record),
            settings=self.kb.settings,
            cache=self.kb.embedding_cache(),
            allowed=allowed,
        )

    def add(
        self,
        paths: str | Path | Iterable[str | Path],
        *,
        metadata: Mapping[str, Any] | None = None,
        allowed_paths: Iterable[str | Path] | None = None,
    ) -> AddReport:
        """Ingest files and folders, then remember them as sources; see
        :meth:`hybridkb.api.CollectionAPI.add`."""
        if isinstance(paths, (str, Path)):
            paths = [paths]
        check_text(metadata, "metadata")  # paths may hold surrogates: undecodable file names
        allowed = _resolved(allowed_paths)
        from .ingest import ingest_paths
        from .sync import remember_sources

        paths = list(paths)
        report = ingest_paths(self._context(allowed), paths, metadata)
        # Remembered once the add has checked the metadata: ``sync`` walks them again.
        remember_sources(
            self.kb.storage, self.record, paths, allowed=allowed, metadata=dict(metadata or {})
        )
        return report

    def sync(
        self,
        *,
        dry_run: bool = False,
        allowed_paths: Iterable[str | Path] | None = None,
        busy: Iterable[str] = (),
        paths: Iterable[str] | None = None,
    ) -> SyncReport:
        """Sync with the sources (:func:`hybridkb.sync.sync_collection`); an unchanged folder is a
        stat walk, with no file opened and no model loaded; see
        :meth:`hybridkb.api.CollectionAPI.sync`."""
        from .sync import sync_collection

        allowed = _resolved(allowed_paths)
        if not dry_run and self.kb.storage.read_only:
            self._context()  # raises the read-only error before anything is walked
        return sync_collection(
            self.kb.storage,
            self.record,
            context=self._context,
            allowed=allowed,
            dry_run=dry_run,
            busy=frozenset(busy),
            scope=None if paths is None else frozenset(paths),
        )

    def remove_source(self, path: str | Path) -> DeleteReport:
        """Forget a source and delete the documents only it covered; see
        :meth:`hybridkb.api.CollectionAPI.remove_source`."""
        from .files import resolve
        from .sync import in_source, stored_documents

        record = self.record
        storage = self.kb.storage
        sources = storage.list_sources(record)
        real = str(resolve(path))
        source = next((s for s in sources if s.path == real), None)
        if source is None:
            known = ", ".join(repr(s.path) for s in sources) or "none"
            raise ConfigError(
                f"{path}: not a source of collection {self.name!r}; its sources: {known}"
            )
        others = [s for s in sources if s is not source]
        doomed = [
            doc_id
            for doc_id, doc in stored_documents(storage, record).items()
            if doc.path
            and in_source(doc.path, source)
            and not any(in_source(doc.path, s) for s in others)
        ]
        storage.delete_source(record, source.path)
        report = self.delete(doomed) if doomed else DeleteReport()
        storage.delete_file_states(record, doomed)
        return report

    def sources(self) -> list[dict[str, Any]]:
        """The stored sources as dicts; see :meth:`hybridkb.api.CollectionAPI.sources`."""
        return [
            {"path": src.path, "recursive": src.recursive, "types": src.types}
            for src in self.kb.storage.list_sources(self.record)
        ]

    def add_texts(
        self,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        ids: Sequence[str] | None = None,
    ) -> AddReport:
        """Ingest raw texts as documents; see :meth:`hybridkb.api.CollectionAPI.add_texts`."""
        from .ingest import ingest_texts

        check_text(texts, "texts")
        check_text(metadatas, "metadatas")
        check_text(ids, "ids")
        return ingest_texts(self._context(), texts, metadatas, ids)

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        mode: str | None = None,
        where: Mapping[str, Any] | str | None = None,
        rerank: bool | None = None,
    ) -> list[Hit]:
        """Search this collection alone (``kb.search`` over one name); see
        :meth:`hybridkb.api.CollectionAPI.search`."""
        return self.kb.search(
            query, k=k, mode=mode, where=where, collections=[self.name], rerank=rerank
        )

    def delete(self, document_ids: str | Sequence[str]) -> DeleteReport:
        """Delete documents by id; see :meth:`hybridkb.api.CollectionAPI.delete`."""
        if isinstance(document_ids, str):
            document_ids = [document_ids]
        ids = [str(i) for i in document_ids]
        check_text(ids, "document ids")
        deleted = self.kb.storage.delete_documents(self.record, ids)
        gone = set(deleted)
        return DeleteReport(
            deleted=deleted, not_found=[i for i in dict.fromkeys(ids) if i not in gone]
        )

    def get(self, document_id: str) -> DocumentRecord | None:
        """A document's catalog record or None; see :meth:`hybridkb.api.CollectionAPI.get`."""
        check_text(document_id, "document id")
        return self.kb.storage.get_document(self.record, document_id)

    def chunks(self, document_id: str) -> list[ChunkRecord]:
        """A document's chunks, fetched by their derived keys; see
        :meth:`hybridkb.api.CollectionAPI.chunks`."""
        record = self.record
        doc = self.kb.storage.get_document(record, document_id)
        if doc is None or doc.chunk_count <= 0:
            return []
        keys = [
            chunk_key(make_chunk_id(record.id, doc.document_id, doc.content_hash, i))
            for i in range(doc.chunk_count)
        ]
        found = self.kb.storage.fetch_chunks(record, keys)
        return [found[k] for k in keys if k in found]

    def document_text(self, document_id: str) -> str | None:
        """A document's text stitched back from its chunks; see
        :meth:`hybridkb.api.CollectionAPI.document_text`."""
        doc = self.get(document_id)
        if doc is None:
            return None
        chunks = self.chunks(document_id)
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
        vector: np.ndarray | Sequence[float],
        *,
        k: int | None = None,
        where: Mapping[str, Any] | str | None = None,
    ) -> list[Hit]:
        """Nearest chunks to a caller's vector; see
        :meth:`hybridkb.api.CollectionAPI.search_by_vector`."""
        record = self.record
        return search_by_vector(
            self.kb.storage,
            Target(record, self.kb.embedder_for(record), []),
            np.asarray(vector, dtype=np.float32),
            k=self.kb.settings.default_k if k is None else k,
            where=where,
        )

    def documents(self, *, limit: int = 100, offset: int = 0) -> list[DocumentRecord]:
        """One page of documents; see :meth:`hybridkb.api.CollectionAPI.documents`."""
        return self.kb.storage.list_documents(self.record, limit=limit, offset=offset)

    def describe(self) -> CollectionInfo:
        """The collection's counts and sources; see :meth:`hybridkb.api.CollectionAPI.describe`."""
        return self.kb.describe(self.name)

    def count(self) -> int:
        """Number of documents; see :meth:`hybridkb.api.CollectionAPI.count`."""
        return self.kb.storage.stats(self.record).documents

    def drop(self) -> None:
        """Drop the collection; see :meth:`hybridkb.api.CollectionAPI.drop`."""
        self.kb.drop_collection(self.name)


# mypy checks this door against the one declaration (serve/client.py checks the other).
_checked: type[KnowledgeBaseAPI] = KnowledgeBase
_checked_collection: type[CollectionAPI] = Collection
