"""What a user can call on a knowledge base: ``connect()`` -> :class:`KnowledgeBase` ->
lazy :class:`Collection` handles (and ``kb.graph``, :class:`hybridkb.graph.Graph`).

The handles are written once, for every door: each method takes the caller's
arguments and makes one flat call on the knowledge base's engine (hybridkb.engine),
which runs it in this process (:class:`~hybridkb.local.LocalEngine`) or in the
process that holds the DuckDB file (:class:`~hybridkb.serve.owner.OwnerEngine`).
Every front end (CLI, LangChain tools, MCP) calls these methods and never touches a
backend; tests/test_api_contract.py runs them at every door.

Rules every method keeps (each docstring below adds its own):

* Errors a caller can cause are :class:`~hybridkb.errors.KBError` subclasses with a
  one-line message naming the argument and the fix; anything else is a bug. Through
  an owner the same class arrives (``hybridkb.serve.codec`` rebuilds it by name).
* Bad arguments (wrong type, empty or over-long text, text that is not valid Unicode,
  a number out of range) raise :class:`~hybridkb.errors.ConfigError` before anything is read
  or written; a malformed ``where`` raises :class:`~hybridkb.errors.InvalidFilter`.
* Any method may raise :class:`~hybridkb.errors.BackendError` for a database failure,
  and :class:`~hybridkb.errors.DatabaseLocked` when another process holds a DuckDB
  file past ``HYBRIDKB_LOCK_TIMEOUT`` and serves no calls for it.
* A collection handle reads its catalog record on every use: a handle whose
  collection was dropped raises :class:`~hybridkb.errors.CollectionNotFound`.
* Writes are atomic per document: a reader sees a document's old version or its new
  one, never a mix, and a failure leaves the old version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .limits import check_name

if TYPE_CHECKING:
    import numpy as np

    from .embedders import Embedder, Recipe
    from .embedders.cache import EmbeddingCache
    from .engine import CopyProgress, Door
    from .graph_handle import Graph
    from .results import AddReport, CollectionInfo, DeleteReport, Hit, SyncReport
    from .search.rerank import Reranker
    from .settings import Settings
    from .sql.tool import SQLResult
    from .storage import Storage
    from .storage.base import ChunkRecord, CollectionHealth, CollectionRecord, DocumentRecord

__all__ = ["Collection", "CollectionAPI", "KnowledgeBase", "KnowledgeBaseAPI"]


class KnowledgeBase:
    """A workspace of named collections in one store, and its maintenance verbs.

    ``hybridkb.connect(url)`` returns one, whichever door it came through: this process
    opened the store, or another process owns the DuckDB file and runs the calls (the
    ``door`` is the engine that runs them). Collection names are free text (trimmed, NFC
    normalised, at most ``MAX_NAME_CHARS``, no control characters) and unique within a
    workspace; workspaces in one store never see each other's collections.

    Args:
        door: The engine the calls go to (:class:`hybridkb.engine.Door`).
    """

    def __init__(self, door: Door) -> None:
        self.door = door
        # Run at close, first, last added first: e.g. a watcher of the collections' folders.
        self.on_close: list[Callable[[], None]] = []
        self._graph: Graph | None = None

    def __repr__(self) -> str:
        return f"KnowledgeBase(workspace={self.workspace!r})"

    @property
    def settings(self) -> Settings:
        """The settings this knowledge base was opened with."""
        return self.door.settings

    @property
    def workspace(self) -> str:
        """The workspace the handles see and change."""
        return self.door.workspace

    @property
    def read_only(self) -> bool:
        """Whether writes are refused: opened with ``read_only=True``, or connected to a
        database as a role that may only read (its writes raise BackendError naming the
        role; the tools of :func:`hybridkb.agents.tools.make_tools` and ``hybridkb mcp`` then
        leave out the writers)."""
        return self.door.read_only

    @property
    def storage(self) -> Storage:
        """The open store itself, for code below the API (tests, benchmarks).

        Raises:
            DatabaseLocked: Another process holds the DuckDB file and runs the calls.
        """
        return self.door.storage

    @property
    def graph(self) -> Graph:
        """The knowledge graph of this workspace (:class:`hybridkb.graph.Graph`).

        Raises:
            GraphError: The backend keeps no graph.
        """
        if self._graph is None:
            from .graph_handle import Graph

            self.door.graph  # noqa: B018 - attached now: a backend without one says so here
            self._graph = Graph(self.door)
        return self._graph

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Wait for background loads, run the ``on_close`` callbacks (last added
        first), and close the store (or the connection to its owner). Handles made
        from this knowledge base must not be used afterwards.
        """
        while self.on_close:
            self.on_close.pop()()
        self.door.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def in_workspace(self, workspace: str) -> KnowledgeBase:
        """Another workspace over the same open store (one process serving many users),
        with this one's embedders and reranker. Locally the two share the open store:
        closing either closes it for both.

        Raises:
            ConfigError: ``workspace`` is not a valid name.
        """
        return KnowledgeBase(self.door.in_workspace(workspace))

    def with_embedder(self, embedder: Embedder) -> KnowledgeBase:
        """The same store and workspace, embedding with ``embedder`` wherever its
        ``model_id`` is asked for (e.g. a LangChain model); collections created through
        it record that id. A collection made with another model still uses its own.
        """
        return KnowledgeBase(self.door.with_embedder(embedder))

    def with_reranker(self, reranker: Reranker) -> KnowledgeBase:
        """The same store and workspace, reranking searches with ``reranker`` (any object
        with ``name`` and ``score(query, texts) -> scores``; see :mod:`hybridkb.search.rerank`).

        Raises:
            ConfigError: The object lacks ``name`` or ``score``; through an owner,
                always (a reranker is code: the owner ranks with its own).
        """
        return KnowledgeBase(self.door.with_reranker(reranker))

    # -- models (this process's plumbing) -------------------------------------------------

    def embedder(self, model: str, recipe: Recipe | None = None) -> Embedder:
        """The embedder for ``model``, loaded in this process: one given with
        :meth:`with_embedder`, else loaded as the settings say (device, backend), with
        ``recipe`` when it must match how an existing collection's vectors were made. A
        client loads it too (for vectors the caller embeds); the owner embeds for its
        own searches and adds.

        Raises:
            ModelUnavailable: The model cannot be found or loaded here.
            MissingDependency: Its backend's extra is not installed.
        """
        return self.door.embedder(model, recipe)

    def embedder_for(self, coll: CollectionRecord) -> Embedder:
        """The collection's own model (the catalog is the authority), loaded with its
        recipe.

        Raises:
            ModelUnavailable: That model cannot be loaded here (the message says how to
                re-embed with another).
            EmbeddingMismatch: The loaded model's dimension differs from the stored one.
        """
        return self.door.embedder_for(coll)

    def embedding_cache(self) -> EmbeddingCache | None:
        """The on-disk cache of embeddings by model id and text this process uses; None
        when it is off (``HYBRIDKB_EMBED_CACHE_MB=0``) or models were given (their ids
        cannot tell two given models apart).
        """
        return self.door.embedding_cache()

    def reranker(self) -> Reranker | None:
        """The reranker searches use when asked (None: none is set)."""
        return self.door.reranker()

    def prepare_search(self, collections: Iterable[str] | None = None) -> None:
        """Start loading what searching ``collections`` needs (nothing to load for a
        client of an owner).
        """
        self.door.prepare_search(collections)

    def warm_up(self) -> None:
        """Load the collections' models (or, with none, the default one) now rather
        than in the first call (a client of an owner has nothing to load).
        """
        self.door.warm_up()

    def prepare_graph(self) -> None:
        """Start loading the workspace's graph into memory in the background (a client
        of an owner has nothing to load): the first neighbourhoods are read from their
        own rows meanwhile, later queries answer from memory. For a process that serves
        the graph for a while (``hybridkb ui``); it ends when the knowledge base closes.
        """
        self.door.prepare_graph()

    # -- collections ----------------------------------------------------------------------

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
        """Create an empty collection in this workspace.

        The model, chunking and language are fixed at creation and recorded in the
        catalog: every later add and search of the collection uses them, whatever the
        settings say then (change the model with :meth:`reembed`).

        Args:
            name: The display name (free text, see the class docstring).
            model: Embedding model id; None: ``HYBRIDKB_MODEL``. It is loaded now, to
                record its dimension.
            chunk_strategy: ``paragraph``, ``page`` or ``size``; None: the setting.
            chunk_size: Characters per chunk; None: the setting.
            chunk_overlap: Characters shared by neighbouring chunks, from 0 to below
                ``chunk_size``; None: the setting.
            language: Language code for keyword analysis, or ``auto`` (detected per
                chunk); None: the setting.
            exist_ok: Return the existing collection of that name instead of raising
                (its own chunking stays; a ``model`` it does not use raises
                EmbeddingMismatch).

        Raises:
            CollectionExists: The name is taken and ``exist_ok`` is False.
            ConfigError: A bad name, strategy, size or overlap.
            ModelUnavailable: The model cannot be loaded here.
        """
        made = self.door.create_collection(
            name,
            model=model,
            chunk_strategy=chunk_strategy,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            language=language,
            exist_ok=exist_ok,
        )
        return Collection(self, made)

    def collection(
        self, name: str, *, create: bool = False, model: str | None = None
    ) -> Collection:
        """A handle on an existing collection, checked now.

        Args:
            name: The collection's name.
            create: Create it (with ``model`` and the settings' chunking) when missing.
            model: When given, the model the collection must use.

        Raises:
            CollectionNotFound: No such collection and ``create`` is False (the
                message lists the existing ones).
            EmbeddingMismatch: The collection uses another model than ``model``.
            ConfigError: A bad name.
        """
        return Collection(self, self.door.collection(name, create=create, model=model))

    def __getitem__(self, name: str) -> Collection:
        """A lazy handle (``kb["Notes"]``): nothing is read until it is used, so a
        missing collection raises CollectionNotFound at the first call."""
        return Collection(self, check_name(name))

    def record(self, name: str) -> CollectionRecord:
        """A collection's catalog record: id, model, dimension, chunking, language,
        recipe, generation (bumped by every write).

        Raises:
            CollectionNotFound: No such collection (the message lists the existing
                ones).
        """
        return self.door.record(name)

    def list_collections(self) -> list[CollectionInfo]:
        """Every collection of this workspace with its counts, model and size, sorted by
        name (``sources`` is left empty: :meth:`describe` fills it).
        """
        return self.door.list_collections()

    def collection_names(self) -> list[str]:
        """The names of this workspace's collections, sorted; cheaper than
        :meth:`list_collections` (no counts).
        """
        return self.door.collection_names()

    def describe(self, name: str) -> CollectionInfo:
        """One collection's counts, model, dimension, chunking, languages, size, dates
        and sources; CollectionNotFound if there is none.
        """
        return self.door.describe(name)

    def drop_collection(self, name: str) -> None:
        """Delete a collection and everything in it, atomically; CollectionNotFound if
        there is none (dropping twice is an error: the name is checked).
        """
        self.door.drop_collection(name)

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
        """Search several collections as one ranking.

        The query is embedded once per model; each collection's legs are ranked, then
        merged and fused across collections, so scores compare across them. Arguments,
        hits and errors as :meth:`Collection.search`; each hit's ``collection`` says
        where it came from.

        Args:
            collections: Names to search (repeats ignored); None: every collection of
                this workspace. With no collection at all, the result is empty.
        """
        return self.door.search(
            query,
            k=k,
            mode=mode,
            where=where,
            collections=None if collections is None else list(collections),
            rerank=rerank,
        )

    # -- maintenance ----------------------------------------------------------------------

    def doctor(self, name: str | None = None, *, repair: bool = False) -> list[CollectionHealth]:
        """Check one or every collection of the workspace: tables against each other,
        against the derived indexes and the graph.

        Args:
            name: One collection; None: every collection of the workspace.
            repair: Fix what is found (rebuild indexes, remove orphans); a finding
                fixed is marked ``repaired``.

        Returns:
            One health record per collection, each listing its findings.

        Raises:
            CollectionNotFound: ``name`` is not a collection.
            ConfigError: The backend offers no maintenance.
        """
        return self.door.doctor(name, repair=repair)

    def reembed(
        self, name: str, *, model: str | None = None, progress: bool = True
    ) -> dict[str, Any]:
        """Re-embed every chunk of a collection with ``model`` (default: its own, e.g.
        after a model update) into a side table, then switch over in one transaction:
        searches keep working on the old vectors meanwhile, and a failure leaves them.

        Returns:
            ``collection``, ``model`` and ``dim`` (the new ones), ``chunks``
            re-embedded and ``previous_model``.

        Raises:
            CollectionNotFound: No such collection.
            ModelUnavailable: ``model`` cannot be loaded here.
            ConfigError: The backend offers no maintenance.
        """
        return self.door.reembed(name, model=model, progress=progress)

    def compact(self) -> dict[str, int]:
        """Reclaim the space deletes and re-ingests left in the store file; returns the
        sizes before and after, in bytes. Searches give the same answers afterwards.

        Raises:
            ConfigError: The backend offers no maintenance (e.g. ``:memory:``).
        """
        return self.door.compact()

    def copy_to(
        self, dst_url: str, *, workspace: str | None = None, progress: CopyProgress | None = None
    ) -> dict[str, Any]:
        """Copy this store's collections (or one ``workspace``'s) into the store at
        ``dst_url`` (a DuckDB path or a Postgres URL), documents, chunks, vectors,
        sources and graph, without embedding again.

        Args:
            dst_url: Where to copy to; collections there of the same names are refused,
                never overwritten.
            workspace: Copy only this workspace; None: every workspace.
            progress: Called as ``(collection, documents done, total)``.

        Returns:
            Per collection what was copied, and totals of documents, chunks and graph
            rows.

        Raises:
            CollectionExists: A collection of the same name exists at ``dst_url``
                (nothing is copied).
            ConfigError: The destination is this store.
        """
        return self.door.copy_to(dst_url, workspace=workspace, progress=progress)

    def sql(
        self,
        sql: str,
        *,
        max_rows: int | None = None,
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> SQLResult:
        """Run one read-only SELECT over this workspace's views (``kb_collections``,
        ``kb_documents``, ``kb_chunks``, ``kb_graph_nodes``, ``kb_graph_edges``) in a
        separate engine that holds a copy of this workspace's rows and nothing else; the
        defaults are those of :mod:`hybridkb.sql.tool`.

        Args:
            sql: One SELECT (or WITH ... SELECT) statement.
            max_rows: Rows returned at most; ``truncated`` says more existed.
            timeout: Seconds before the query is cancelled.
            max_bytes: Size of the result at most.

        Returns:
            Column names, rows, whether the caps cut the result, and the statement
            that ran.

        Raises:
            ConfigError: Not a single read-only SELECT over the views, a SQL error,
                or stopped at ``timeout``.
            BackendError: The engine could not be started.
        """
        return self.door.sql(sql, max_rows=max_rows, timeout=timeout, max_bytes=max_bytes)


class Collection:
    """A handle on one collection (``kb.collection(name)``, ``kb[name]``).

    A handle is cheap and holds no lock or cursor: every call reads the collection's
    catalog record afresh, so a handle stays valid across other processes' writes and
    raises :class:`~hybridkb.errors.CollectionNotFound` once the collection is dropped.
    Writes on a knowledge base opened read-only raise
    :class:`~hybridkb.errors.BackendError` before anything is read.
    """

    def __init__(self, kb: KnowledgeBase, name: str) -> None:
        self.kb = kb
        self.name = name

    def __repr__(self) -> str:
        return f"Collection({self.name!r})"

    @property
    def record(self) -> CollectionRecord:
        """The catalog record (id, model, dimension, chunking, language), read afresh.

        Raises:
            CollectionNotFound: The collection does not exist (or no longer does).
        """
        return self.kb.door.record(self.name)

    def add(
        self,
        paths: str | Path | Iterable[str | Path],
        *,
        metadata: Mapping[str, Any] | None = None,
        allowed_paths: Iterable[str | Path] | None = None,
    ) -> AddReport:
        """Add files and folders (folders walked recursively), and remember them as
        sources for :meth:`sync`.

        A file's document id is derived from its resolved path, so adding a file
        again replaces its document when its bytes, the chunking or the model changed,
        and skips it (``unchanged``) otherwise. Each document is replaced atomically.
        A file that cannot be read or parsed does not stop the others: it is reported
        in ``failed`` with its error code, and its previous version stays searchable.

        Args:
            paths: A file or folder, or several.
            metadata: User metadata stored on every document added (filterable with
                ``where``); keys of the built-in fields (``filename``, ``page``...) are
                refused.
            allowed_paths: Read only inside these folders (what the agent tools pass):
                a file or link leading elsewhere is reported in ``failed``, never read,
                even if swapped in while the add runs. None reads any file the process
                can read, following links.

        Returns:
            The files ``added``, ``unchanged``, ``failed`` (with the reason) and
            ``skipped`` (unsupported types, hidden files).

        Raises:
            ConfigError: Bad metadata (a built-in key, a value that is not JSON).
            BackendError: The knowledge base is read-only.
            ModelUnavailable: The collection's model cannot be loaded here.
        """
        return self.kb.door.add(
            self.name,
            [paths] if isinstance(paths, (str, Path)) else list(paths),
            metadata=metadata,
            allowed=None if allowed_paths is None else list(allowed_paths),
        )

    def add_texts(
        self,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        ids: Sequence[str] | None = None,
    ) -> AddReport:
        """Add raw texts as documents, one per text, chunked and embedded like files.

        Args:
            texts: The texts (a list: one string alone is refused).
            metadatas: One metadata mapping (or None) per text.
            ids: One document id per text, unique within the call; a text under an id
                that exists replaces that document. Default: a hash of the text, so
                adding the same text again stores it once.

        Returns:
            The documents ``added``, ``unchanged`` (the same text, metadata and
            chunking under the same id) and ``failed`` (an empty text).

        Raises:
            ConfigError: Lengths differ, an id is empty or repeated, the same text twice
                without ids, a text is not a string, or a metadata value is not JSON.
            BackendError: The knowledge base is read-only.
        """
        return self.kb.door.add_texts(self.name, texts, metadatas, ids)

    def sync(
        self,
        *,
        dry_run: bool = False,
        allowed_paths: Iterable[str | Path] | None = None,
        busy: Iterable[str] = (),
        paths: Iterable[str] | None = None,
    ) -> SyncReport:
        """Bring the collection in step with its sources (what :meth:`add` was given).

        New files are added, changed ones re-read, vanished ones removed, renamed ones
        re-keyed without embedding again. An unchanged file (same size and
        modification time as when it was read) is not opened. A file that fails keeps
        its previous version searchable and is reported in ``failed``.

        Args:
            dry_run: Report what would change and change nothing.
            allowed_paths: Sync only sources inside these folders (the agent tools').
            busy: Resolved paths of files still being written: left as they are this
                time, neither read nor removed.
            paths: Look only at these files and folders (absolute paths, e.g. a
                watcher's events); None walks every source.

        Raises:
            BackendError: The knowledge base is read-only (unless ``dry_run``).
        """
        return self.kb.door.sync(
            self.name,
            dry_run=dry_run,
            allowed=None if allowed_paths is None else list(allowed_paths),
            busy=list(busy),
            paths=None if paths is None else list(paths),
        )

    def sources(self) -> list[dict[str, Any]]:
        """The folders and files the collection was added from, sorted by path: each
        ``{"path", "recursive", "types", "state"}`` (``types`` None: every supported type;
        ``state``: ``ok``, or why a sync cannot walk it and keeps its documents:
        ``missing``, ``replaced`` by a link, ``unreadable``).
        """
        return self.kb.door.sources(self.name)

    def remove_source(self, path: str | Path) -> DeleteReport:
        """Forget a source and delete the documents that came from it, except those
        another source also covers.

        Raises:
            ConfigError: ``path`` is not a source of the collection (the message lists
                them).
        """
        return self.kb.door.remove_source(self.name, path)

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        mode: str | None = None,
        where: Mapping[str, Any] | str | None = None,
        rerank: bool | None = None,
    ) -> list[Hit]:
        """The ``k`` chunks of this collection that best answer ``query``.

        Modes:

        * ``hybrid`` (default, ``HYBRIDKB_DEFAULT_MODE``): a BM25 keyword leg and a
          vector leg, each ``HYBRIDKB_CANDIDATES`` deep (at least ``k``), fused in the
          core by ``HYBRIDKB_FUSION`` (z-score by default, or weighted, or reciprocal
          rank), so every backend ranks the same way;
        * ``vector``: cosine similarity to the embedded query;
        * ``keyword``: BM25 over the query's terms, analysed in the collection's
          languages;
        * ``filter``: chunks containing at least one query term, ranked by vector
          similarity.

        Args:
            query: The words or question (not empty, at most ``MAX_QUERY_CHARS``).
            k: Hits wanted, 1 to ``MAX_K`` (10,000); None: ``HYBRIDKB_DEFAULT_K``.
            mode: ``hybrid``, ``vector``, ``keyword`` or ``filter``; None: the default.
            where: A metadata filter (a mapping or its JSON text) on built-in chunk
                fields (``filename``, ``path``, ``document_id``, ``page``,
                ``section``, ``language``, ...) or user metadata keys, with ``$eq``,
                ``$ne``, ``$gt``/``$gte``/``$lt``/``$lte``, ``$in``/``$nin``, ``$and``
                and ``$or`` (see :mod:`hybridkb.text.filters`). It is applied inside each
                leg, before the cut to ``k``: a filtered search returns ``k`` hits
                whenever ``k`` chunks match.
            rerank: None reranks when a reranker is set (``with_reranker`` or
                ``HYBRIDKB_RERANKER``), True requires one, False skips it.

        Returns:
            At most ``k`` hits, best first: ``rank`` runs 1, 2, ... and ``score`` (the
            mode's own score, or the reranker's; higher is better, comparable within
            one call only) never increases; ties keep a stable order. Fewer than ``k``
            when fewer chunks match. Each hit carries the chunk's ``text``,
            ``chunk_id``, ``document_id``, ``collection``, its citation (``filename``,
            ``page``, ``section``), ``metadata`` (the user's keys plus the built-in
            fields, ``char_start``/``char_end`` into the document text included),
            ``scores`` (``bm25``/``bm25_rank``, ``vector``/``vector_rank``,
            ``fused``, ``rerank``: None for a leg that did not find it) and
            ``document_node`` (its document's graph node id). An empty collection
            gives no hits, not an error.

        Raises:
            ConfigError: Empty or over-long query, ``k`` out of range, unknown mode,
                or ``rerank=True`` with no reranker set.
            InvalidFilter: ``where`` is malformed (unknown operator, bad value).
            CollectionNotFound: The collection does not exist.
            ModelUnavailable: The collection's model (or the reranker) cannot run here.
            EmbeddingMismatch: The model loaded gives another dimension than stored.
        """
        return self.kb.door.search(
            query, k=k, mode=mode, where=where, collections=[self.name], rerank=rerank
        )

    def delete(self, document_ids: str | Sequence[str]) -> DeleteReport:
        """Delete documents (their chunks, vectors and graph rows) by id, atomically.

        Unknown ids change nothing and are listed in ``not_found``; deleting twice is
        not an error. A deleted file comes back with the next :meth:`sync` if it is
        still in a source: :meth:`remove_source` forgets the source.

        Returns:
            The ids ``deleted`` and ``not_found``, in the order given.
        """
        ids = [document_ids] if isinstance(document_ids, str) else list(document_ids)
        return self.kb.door.delete(self.name, ids)

    def get(self, document_id: str) -> DocumentRecord | None:
        """A document's record, or None if the collection has no such document.

        The record is what the catalog holds, not the text: ``document_id``,
        ``filename`` and resolved ``path`` (None for texts), ``source`` (``file`` or
        ``text``), ``content_hash``, user ``metadata``, ``language``, ``bytes``,
        ``chunk_count`` and ``added_at``. Read the text with :meth:`document_text`
        or :meth:`chunks`.

        Raises:
            ConfigError: ``document_id`` is not valid Unicode (a lone surrogate).
            CollectionNotFound: The collection does not exist.
        """
        return self.kb.door.get(self.name, document_id)

    def chunks(self, document_id: str) -> list[ChunkRecord]:
        """A document's chunks in reading order (``chunk_index`` 0, 1, ...), with their
        text, citation fields and offsets; empty if there is no such document.
        """
        return self.kb.door.chunks(self.name, document_id)

    def document_text(self, document_id: str) -> str | None:
        """A document's text stitched back from its chunks (overlaps removed), or None
        when there is no such document or its chunks cannot give the text back exactly
        (a chunk is missing, or its whitespace was normalised).
        """
        return self.kb.door.document_text(self.name, document_id)

    def search_by_vector(
        self,
        vector: np.ndarray | Sequence[float],
        *,
        k: int | None = None,
        where: Mapping[str, Any] | str | None = None,
    ) -> list[Hit]:
        """The ``k`` chunks nearest to ``vector``, a query the caller embedded with the
        collection's model; hits as :meth:`search` in ``vector`` mode.

        Raises:
            ConfigError: The vector does not have the collection's dimension, holds a
                value that is not finite, or is all zeros; ``k`` out of range.
            InvalidFilter: ``where`` is malformed.
        """
        return self.kb.door.search_by_vector(self.name, vector, k=k, where=where)

    def documents(
        self,
        *,
        limit: int = 100,
        offset: int = 0,
        where: Mapping[str, Any] | str | None = None,
    ) -> list[DocumentRecord]:
        """One page of the collection's documents (records as :meth:`get`), oldest
        first (by ``added_at``, then ``document_id``); page on with ``offset``.

        ``where`` keeps the documents it matches (``offset`` then counts those): the
        filter of :meth:`search` on a document's metadata and its fields ``filename``,
        ``path``, ``document_id``, ``content_hash``, ``added_at`` and ``language``,
        run by the database.

        Raises:
            InvalidFilter: ``where`` is malformed, or names a passage's field
                (``page``, ``section``, ``chunk_index``...).
        """
        return self.kb.door.documents(self.name, limit=limit, offset=offset, where=where)

    def describe(self) -> CollectionInfo:
        """The collection's counts (documents, chunks), model and dimension, chunking,
        languages, size in bytes, dates and sources.
        """
        return self.kb.door.describe(self.name)

    def count(self) -> int:
        """Number of documents (not chunks)."""
        return self.kb.door.count(self.name)

    def drop(self) -> None:
        """Delete the collection and everything in it (documents, vectors, sources,
        graph rows), atomically; CollectionNotFound if it does not exist.
        """
        self.kb.door.drop_collection(self.name)


# The names front ends typed against while the API was a protocol over two classes.
KnowledgeBaseAPI = KnowledgeBase
CollectionAPI = Collection
