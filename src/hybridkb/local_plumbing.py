"""The plumbing of the local engine: the open store, its settings and workspace, the
models and caches loaded for it, the threads that load them ahead, and the catalog
lookup every call starts with.

:class:`LocalPlumbing` is the base of :class:`hybridkb.local.LocalEngine` (through
:class:`hybridkb.local_documents.LocalDocuments`): what :class:`hybridkb.engine.Plumbing`
declares, and the state the engine's calls share. Its own module: it holds the
engine's lifetime (what it opens, what ``close`` waits for), which no single call does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .embedders import Embedder, Recipe, get_embedder
from .errors import CollectionNotFound, EmbeddingMismatch, KBError, ModelUnavailable
from .lifecycle import EXIT_WAIT_SECONDS, join_background, start_background
from .limits import check_name
from .search.rerank import Reranker, load_reranker
from .settings import Settings
from .storage import Storage
from .storage.base import CollectionRecord
from .text.langid_model import set_cache_folder

if TYPE_CHECKING:
    # The embedding cache (SQLite) is imported where it is used: a cold CLI search
    # does not pay for it.
    from .embedders.cache import EmbeddingCache

__all__ = ["LocalPlumbing", "checked_embedder", "load_embedder"]


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


class LocalPlumbing:
    """One workspace of a store this process opened: its state and plumbing (see the
    module docstring; :class:`hybridkb.local.LocalEngine` documents the arguments)."""

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
        # Run at close, first: e.g. the owner server of a file other processes call into.
        self.on_close: list[Callable[[], None]] = []
        # prepare_search's threads: close waits for them (a model still loading in native
        # code at exit aborts the process; an index load reads the storage being closed).
        self._loading: list[threading.Thread] = []

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

    # -- the catalog --------------------------------------------------------------------

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
