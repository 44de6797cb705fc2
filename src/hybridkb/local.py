"""The local engine: this process opened the store, and runs every call itself.

:class:`LocalEngine` implements the flat calls of :class:`hybridkb.engine.Engine`
(their bodies: the handles in kb.py only take the caller's arguments) and the
plumbing of :class:`hybridkb.engine.Door`. An owner process (hybridkb.serve) runs its
clients' calls on one of these, and a client that takes a file over runs the rest of
its calls on one.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .bars import progress_bar
from .embedders import Embedder, Recipe, get_embedder, recipe_of
from .errors import (
    BackendError,
    CollectionNotFound,
    ConfigError,
    EmbeddingMismatch,
    KBError,
    ModelUnavailable,
)
from .lifecycle import EXIT_WAIT_SECONDS, join_background, start_background
from .limits import check_name, check_text
from .results import AddReport, CollectionInfo, DeleteReport, Hit, SyncReport
from .search.hybrid import Target, run_search, search_by_vector
from .search.rerank import Reranker, load_reranker
from .settings import Settings, with_overrides
from .storage import Storage
from .storage.base import (
    ChunkRecord,
    CollectionHealth,
    CollectionRecord,
    CollectionStats,
    DocumentRecord,
    Maintenance,
    chunk_key,
    make_chunk_id,
)
from .storage.shared import staged_target, unfinished_copy
from .text.filters import parse_document_filter
from .text.langid_model import set_cache_folder

if TYPE_CHECKING:
    # Imported where they are used: ingest (the loaders, chunking, the files it opens),
    # the embedding cache (SQLite), the graph, copy and SQL are for other calls than a
    # cold CLI search, which paid for them.
    from .embedders.cache import EmbeddingCache
    from .engine import CopyProgress, Door, Vector
    from .graph.api import LocalGraph
    from .graph.extract import EntityExtractor
    from .ingest.pipeline import IngestContext
    from .sql.tool import SQLResult

__all__ = ["LocalEngine", "checked_embedder", "load_embedder"]


def _resolved(paths: Iterable[str | Path] | None) -> list[Path] | None:
    if paths is None:
        return None
    return [Path(os.path.realpath(Path(p).expanduser())) for p in paths]


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


class LocalEngine:
    """One workspace of a store this process opened (see the module docstring).

    Args:
        storage: The open store.
        settings: The settings (``settings.workspace`` is the workspace).
        embedders: Embedders the caller gives (e.g. a LangChain model), by model id.
        reranker: The reranker searches use (None: ``HYBRIDKB_RERANKER``'s, if set).
    """

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
        self._given: dict[str, Embedder] = dict(embedders or {})
        self._reranker = reranker
        self._cache: EmbeddingCache | None = None
        self._languages: dict[tuple[int, int], list[str]] = {}
        self._graph: LocalGraph | None = None
        if not storage.read_only and storage.graph_sql is not None:
            # The graph's write hook must be on the storage before the first write, so a
            # writable engine attaches it now; a read-only one (the CLI's search) waits
            # for the first use of .graph and skips importing the graph (~0.2 s).
            self._graph = self.graph
        # Run at close, first: e.g. the owner server of a file other processes call into.
        self.on_close: list[Callable[[], None]] = []
        # prepare_search's threads: close waits for them (a model still loading in native
        # code at exit aborts the process; an index load reads the storage being closed).
        self._loading: list[threading.Thread] = []

    @property
    def graph(self) -> LocalGraph:
        """The workspace's graph (hybridkb.graph.api), attached on first use."""
        if self._graph is None:
            from .graph import attach_graph

            self._graph = attach_graph(self)
        return self._graph

    # -- the door ---------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        """Whether the store refuses writes (opened so, or its role may only read)."""
        return self.storage.read_only

    def close(self) -> None:
        """Wait for the background loads, run ``on_close`` (last added first), close the
        store."""
        join_background(self._loading, EXIT_WAIT_SECONDS)
        self._loading.clear()
        while self.on_close:
            self.on_close.pop()()
        self.storage.close()

    def in_workspace(self, workspace: str) -> LocalEngine:
        """Another workspace over this open store, with the same embedders and reranker."""
        return LocalEngine(
            self.storage,
            with_overrides(self.settings, workspace=workspace),
            embedders=self._given,
            reranker=self._reranker,
        )

    def with_embedder(self, embedder: Embedder) -> LocalEngine:
        """This store and workspace with ``embedder`` added to the given models."""
        return LocalEngine(
            self.storage,
            self.settings,
            embedders={**self._given, embedder.model_id: embedder},
            reranker=self._reranker,
        )

    def with_reranker(self, reranker: Reranker) -> LocalEngine:
        """This store and workspace with ``reranker`` for searches."""
        if not isinstance(reranker, Reranker):
            raise ConfigError(
                f"reranker: {type(reranker).__name__} has no name and score(query, texts); "
                "see hybridkb.search.rerank.Reranker"
            )
        return LocalEngine(self.storage, self.settings, embedders=self._given, reranker=reranker)

    def add_extractor(self, extractor: EntityExtractor) -> None:
        """Run ``extractor`` on every chunk ingested from now on (the graph's)."""
        self.graph.add_extractor(extractor)

    # -- plumbing -----------------------------------------------------------------------

    def reranker(self) -> Reranker | None:
        """The one given, else HYBRIDKB_RERANKER's, loaded on first use."""
        if self._reranker is None and self.settings.reranker:
            self._reranker = load_reranker(self.settings.reranker)
        return self._reranker

    def embedder(self, model: str, recipe: Recipe | None = None) -> Embedder:
        """The embedder for ``model``, loaded by :func:`load_embedder`."""
        return load_embedder(self.settings, self._given, model, recipe)

    def embedder_for(self, coll: CollectionRecord) -> Embedder:
        """The collection's own model, checked (:func:`checked_embedder`)."""
        return checked_embedder(self.embedder, coll)

    def prepare_search(self, collections: Iterable[str] | None = None) -> None:
        """Start loading what searching ``collections`` (default: all) needs, in two
        threads: the embedding models and the derived indexes. A one-shot search (the
        CLI's) then overlaps the model load (~0.2 s) with the index load (~0.15 s at
        100k chunks) and its own work; each search waits only for what it uses. Close
        waits for both."""
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

    def prepare_graph(self) -> None:
        """Start loading the workspace's graph in a thread (close waits for it), unless
        it is in memory or on its way; queries meanwhile answer without it."""
        store = self.graph.store
        if self.workspace in store.graphs or self.workspace in store.preloading:
            return
        workspace = self.workspace
        self._loading[:] = [t for t in self._loading if t.is_alive()]  # a long-lived process

        def load() -> None:
            try:
                store.preload(workspace)
            except KBError:
                pass  # the store closed, or broke: the next graph query says what

        self._loading.append(start_background(load, "hybridkb-graph-load"))

    def warm_up(self) -> None:
        """Load now the models the collections are searched with (each with its own
        recipe: one made while int8 was being judged stays float32), or the default model
        when there is no collection."""
        records = self.storage.list_collections(self.workspace)
        for record in records:
            try:
                self.embedder_for(record)
            except KBError:
                pass  # the call that needs it reports it
        if not records:
            self.embedder(self.settings.model)

    def embedding_cache(self) -> EmbeddingCache | None:
        """The on-disk embedding cache, opened on first use; None when it is off or models
        were given (the cache is keyed by model id, which cannot tell them apart)."""
        if self._given or self.settings.embed_cache_mb == 0:
            return None
        if self._cache is None:
            from .embedders.cache import EmbeddingCache

            self._cache = EmbeddingCache(
                Path(self.settings.cache_dir), max_bytes=self.settings.embed_cache_mb << 20
            )
        return self._cache

    # -- collections --------------------------------------------------------------------

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
    ) -> str:
        """Create a collection (its model loaded now, for the dimension); its name."""
        name = check_name(name)
        existing = self.storage.get_collection(self.workspace, name)
        if existing is not None and exist_ok:
            return self.collection(name, model=model)
        check_name(name, new=True)
        check_name(self.workspace, "workspace", new=True)  # its first collection makes it
        s = self.settings
        strategy = chunk_strategy or s.chunk_strategy
        if strategy not in ("paragraph", "page", "size"):
            raise ConfigError(f"chunk_strategy: {strategy!r} unknown; use paragraph, page or size")
        size = chunk_size or s.chunk_size
        overlap = s.chunk_overlap if chunk_overlap is None else chunk_overlap
        if not 0 <= overlap < size:
            raise ConfigError(
                f"chunk_overlap ({overlap}) must be >= 0 and below chunk_size ({size})"
            )
        embedder = self.embedder(model or s.model)
        self.storage.create_collection(
            self.workspace,
            name,
            model=embedder.model_id,
            dim=embedder.dim,
            chunking={"strategy": strategy, "size": size, "overlap": overlap},
            language=language or s.language,
            recipe=recipe_of(embedder).to_dict(),
        )
        return name

    def collection(self, name: str, *, create: bool = False, model: str | None = None) -> str:
        """An existing collection's name, checked (created when missing with ``create``)."""
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
        return name

    def _not_found(self, name: str) -> CollectionNotFound:
        names = [c.name for c in self.storage.list_collections(self.workspace)]
        known = ", ".join(repr(n) for n in names) if names else "none yet"
        return CollectionNotFound(
            f"collection {name!r} not found in workspace {self.workspace!r}; existing: {known}"
        )

    def record(self, name: str) -> CollectionRecord:
        """A collection's catalog record."""
        record = self.storage.get_collection(self.workspace, name)
        if record is None:
            raise self._not_found(name)
        return record

    def list_collections(self) -> list[CollectionInfo]:
        """Every collection with its counts (one stats query for all)."""
        records = self.storage.list_collections(self.workspace)
        stats = self.storage.stats_many(records)
        return [self._info(r, stats[r.id]) for r in records]

    def collection_names(self) -> list[str]:
        """The collections' names, no counts."""
        return [c.name for c in self.storage.list_collections(self.workspace)]

    def describe(self, name: str) -> CollectionInfo:
        """A collection's counts and sources."""
        record = self.record(check_name(name))
        info = self._info(record, self.storage.stats(record))
        info.sources = self._sources(record)
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
        """Drop a collection and everything in it."""
        self.storage.drop_collection(self.record(check_name(name)))

    # -- search -------------------------------------------------------------------------

    def target(self, record: CollectionRecord) -> Target:
        """What a search of this collection runs with: its record, its model and the
        languages its keyword leg analyses the query in."""
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
        """Search several collections as one ranking (:func:`hybridkb.search.hybrid.run_search`)."""
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
            [self.target(r) for r in records],
            query,
            k=self.settings.default_k if k is None else k,
            mode=mode or self.settings.default_mode,
            where=where,
            settings=self.settings,
            reranker=reranker,
        )

    # -- documents of one collection ------------------------------------------------------

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
        from .ingest.pipeline import ingest_texts

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

    # -- maintenance --------------------------------------------------------------------

    def _maintenance(self, verb: str) -> Maintenance:
        found = self.storage.maintenance
        if found is None:
            raise ConfigError(
                f"{verb}: the {self.storage.capabilities.name} backend does not offer it; "
                "it runs on the embedded DuckDB and the PostgreSQL backends"
            )
        return found

    def doctor(self, name: str | None = None, *, repair: bool = False) -> list[CollectionHealth]:
        """Check one or every collection (``repair``: fix what is found), and the half
        copies a stopped copy left (``repair`` drops them)."""
        tools = self._maintenance("doctor")
        staged = self.storage.list_collections(self.workspace, staged=True)
        if name:
            name = check_name(name)
            staged = [r for r in staged if staged_target(r.name) == name]
            only_staged = staged and self.storage.get_collection(self.workspace, name) is None
            records = [] if only_staged else [self.record(name)]  # CollectionNotFound if neither
        else:
            records = self.storage.list_collections(self.workspace)
        health = [tools.check(r, repair=repair) for r in records]
        return health + [unfinished_copy(self.storage, r, repair=repair) for r in staged]

    def reembed(
        self, name: str, *, model: str | None = None, progress: bool = False
    ) -> dict[str, Any]:
        """Re-embed a collection into a side table, then switch over in one transaction
        (``progress``: a bar on this process's terminal)."""
        from .ingest.pipeline import signature

        tools = self.storage.reembedding
        if tools is None:
            raise ConfigError(
                f"reembed: the {self.storage.capabilities.name} backend does not offer it yet; "
                "copy the knowledge base to a DuckDB file (hybridkb copy --to kb.duckdb), "
                "reembed there, and copy it to a new database"
            )
        record = self.record(check_name(name))
        embedder = self.embedder(model or record.model)
        bar: Any = None
        if progress and sys.stderr.isatty():
            bar = progress_bar(0, unit="chunk")

        def tick(done: int, total: int) -> None:
            if bar is not None:
                bar.total = total
                bar.n = done
                bar.refresh()

        target_sig = signature(
            type(record)(**{**record.__dict__, "model": embedder.model_id, "dim": embedder.dim})
        )
        try:
            count = tools.reembed(record, embedder, signature=target_sig, progress=tick)
        finally:
            if bar is not None:
                bar.close()
        return {
            "collection": record.name,
            "model": embedder.model_id,
            "dim": embedder.dim,
            "chunks": count,
            "previous_model": record.model,
        }

    def compact(self) -> dict[str, int]:
        """Reclaim space; the sizes before and after."""
        return self._maintenance("compact").compact()

    def copy_to(
        self,
        dst_url: str,
        *,
        workspace: str | None = None,
        progress: CopyProgress | None = None,
    ) -> dict[str, Any]:
        """Copy this store's collections into another store (:func:`hybridkb.storage.transfer.copy_from`)."""
        from .storage.backends import absolute_url
        from .storage.transfer import copy_from

        if absolute_url(dst_url) == absolute_url(self.settings.db):
            raise ConfigError("copy: source and destination are the same store; name another one")
        return copy_from(
            self.storage, self.settings.db, dst_url, workspace=workspace, progress=progress
        )

    def sql(
        self,
        sql: str,
        *,
        max_rows: int | None = None,
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> SQLResult:
        """Run one read-only SELECT (:func:`hybridkb.sql.tool.sql_here`; None: its default
        limits)."""
        from .sql.tool import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT, sql_here

        return sql_here(
            self,
            sql,
            max_rows=DEFAULT_MAX_ROWS if max_rows is None else max_rows,
            timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
            max_bytes=DEFAULT_MAX_BYTES if max_bytes is None else max_bytes,
        )


if TYPE_CHECKING:
    # mypy checks this door against the one declaration (serve/owner.py checks the other).
    _checked: type[Door] = LocalEngine
