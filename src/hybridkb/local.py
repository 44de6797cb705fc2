"""The local engine: this process opened the store, and runs every call itself.

:class:`LocalEngine` implements the flat calls of :class:`hybridkb.engine.Engine`
(their bodies: the handles in kb.py only take the caller's arguments) and the
plumbing of :class:`hybridkb.engine.Door`. An owner process (hybridkb.serve) runs its
clients' calls on one of these, and a client that takes a file over runs the rest of
its calls on one.

The class is written in three modules, each a group of calls: its state, models and
background loads (:mod:`hybridkb.local_plumbing`), the calls on a collection's documents
(:mod:`hybridkb.local_documents`), and here the door, the graph, the collections,
search and maintenance.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .bars import progress_bar
from .embedders import Embedder, recipe_of
from .errors import ConfigError, EmbeddingMismatch, KBError
from .lifecycle import start_background
from .limits import check_name, check_text
from .local_documents import LocalDocuments
from .local_plumbing import checked_embedder, load_embedder
from .results import CollectionInfo, Hit
from .search.hybrid import Target, run_search
from .search.rerank import Reranker
from .settings import Settings, with_overrides
from .storage import Storage
from .storage.base import CollectionHealth, CollectionRecord, CollectionStats, Maintenance
from .storage.shared import staged_target, unfinished_copy

if TYPE_CHECKING:
    # Imported where they are used: the graph, copy and SQL are for other calls than a
    # cold CLI search, which paid for them.
    from .engine import CopyProgress, Door
    from .graph.api import LocalGraph
    from .graph.extract import EntityExtractor
    from .sql.tool import SQLResult

__all__ = ["LocalEngine", "checked_embedder", "load_embedder"]


class LocalEngine(LocalDocuments):
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
        super().__init__(storage, settings, embedders=embedders, reranker=reranker)
        self._languages: dict[tuple[int, int], list[str]] = {}
        self._graph: LocalGraph | None = None
        if not storage.read_only and storage.graph_sql is not None:
            # The graph's write hook must be on the storage before the first write, so a
            # writable engine attaches it now; a read-only one (the CLI's search) waits
            # for the first use of .graph and skips importing the graph (~0.2 s).
            self._graph = self.graph

    @property
    def graph(self) -> LocalGraph:
        """The workspace's graph (hybridkb.graph.api), attached on first use."""
        if self._graph is None:
            from .graph import attach_graph

            self._graph = attach_graph(self)
        return self._graph

    # -- the door ---------------------------------------------------------------------

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
