"""The knowledge base a process gets when another process holds the DuckDB file.

Every call goes to the owner over its socket, so the client loads no model and no
index; results, errors and codes are the owner's. If the owner goes away (it
exited, or was killed), the next call takes the file over: this process opens it,
starts serving it itself, and runs the call locally; if another client won that
race, the call goes to the new owner. A call cut off mid-way is sent again with
the same request id (see ``call_settled``): a live owner answers it from memory, and
after a dead owner's commit the create, drop or delete says what it did.

:class:`RemoteKnowledgeBase` is the sibling of :class:`hybridkb.kb.KnowledgeBase`:
both implement :class:`hybridkb.api.KnowledgeBaseAPI` (checked by mypy below), and
hybridkb.serve.operations says where each declared member runs. What needs the file
itself (``storage``, an evaluation that builds its own collection) raises
DatabaseLocked naming the owner.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from hybridkb.api import CollectionAPI, GraphAPI, KnowledgeBaseAPI
from hybridkb.embedders import Embedder, Recipe
from hybridkb.errors import (
    BackendError,
    CollectionExists,
    CollectionNotFound,
    ConfigError,
    DatabaseLocked,
    KBError,
)
from hybridkb.kb import KnowledgeBase, check_name, checked_embedder, load_embedder
from hybridkb.serve.endpoint import Endpoint, live_endpoint, resolve_transport
from hybridkb.serve.handles import RemoteCollection, RemoteGraph
from hybridkb.serve.link import OwnerGone, OwnerLink
from hybridkb.serve.operations import OPERATIONS, is_write
from hybridkb.serve.server import OwnerServer
from hybridkb.settings import Settings, with_overrides
from hybridkb.storage import open_storage
from hybridkb.storage.base import CollectionHealth, CollectionRecord, Storage
from hybridkb.types import CollectionInfo, Hit

if TYPE_CHECKING:
    from hybridkb.api import CopyProgress
    from hybridkb.embed_cache import EmbeddingCache
    from hybridkb.rerank import Reranker
    from hybridkb.sql_tool import SQLResult

__all__ = ["OwnerLink", "RemoteCollection", "RemoteGraph", "RemoteKnowledgeBase", "serve_owned"]


def serve_owned(kb: KnowledgeBase, db_path: str) -> None:
    """Make ``kb`` (which holds ``db_path`` for writing) serve other processes until closed."""
    server = OwnerServer(kb, db_path, resolve_transport(kb.settings.serve_transport))

    def stop() -> None:
        if server in _SERVERS:
            _SERVERS.remove(server)
        server.close()

    kb.on_close.append(stop)
    _remove_on_sigterm(server)


_SERVERS: list[OwnerServer] = []


def _remove_on_sigterm(server: OwnerServer) -> None:
    """An owner stopped by SIGTERM removes its endpoint file (no client is sent to a
    dead owner's address). Only where nobody else handles SIGTERM: a program with its
    own handler (the MCP server) closes its knowledge base there, which does the same."""
    _SERVERS.append(server)
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def stop(signum: int, frame: object) -> None:
        for each in list(_SERVERS):
            each.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # then die of it, as before

    signal.signal(signal.SIGTERM, stop)


class RemoteKnowledgeBase:
    """A knowledge base whose calls run in the process that holds its DuckDB file: the
    sibling of :class:`hybridkb.kb.KnowledgeBase`, both :class:`~hybridkb.api.KnowledgeBaseAPI`."""

    def __init__(
        self,
        settings: Settings,
        db_path: str,
        endpoint: Endpoint,
        *,
        read_only: bool = False,
        embedders: Mapping[str, Embedder] | None = None,
    ) -> None:
        self.settings = settings
        self.workspace = check_name(settings.workspace, "workspace")
        self.on_close: list[Callable[[], None]] = []
        self.db_path = db_path
        self.read_only = read_only
        self._endpoint = endpoint
        self._link: OwnerLink | None = None
        self._local: KnowledgeBase | None = None
        self._lock = threading.Lock()
        self._sent = False  # the current attempt reached the owner's socket
        # This client's own embedders (with_embedder): the owner asks it for their vectors.
        self._given: dict[str, Embedder] = dict(embedders or {})

    # -- plumbing ---------------------------------------------------------------------

    @property
    def owner_pid(self) -> int:
        """The process that holds the file (and runs this client's calls)."""
        return self._endpoint.pid

    def _held(self) -> DatabaseLocked:
        return DatabaseLocked(
            f"{self.db_path}: process {self.owner_pid} holds the knowledge base and "
            "serves it to other processes; this operation needs the file itself: run it when "
            "that process has exited"
        )

    @property
    def storage(self) -> Storage:
        """The storage, only once this client has taken the file over from an owner that
        exited; while an owner holds it, DatabaseLocked (the file is not this process's)."""
        if self._local is not None:
            return self._local.storage
        raise self._held()

    @property
    def graph(self) -> RemoteGraph:
        """The owner's graph; see :attr:`hybridkb.api.KnowledgeBaseAPI.graph`."""
        return RemoteGraph(self)

    def call(self, op: str, **args: Any) -> Any:
        """Run ``op`` at the owner (or here, after taking the file over)."""
        return self.call_settled(op, args)

    def call_settled(
        self, op: str, args: dict[str, Any], settle: Callable[[Any], Any] | None = None
    ) -> Any:
        """Run ``op``; if an attempt was sent and its owner went away before answering
        (it may have committed it), the re-run's outcome (its result, or the KBError
        it raised) goes through ``settle``, which says what the call did.

        The same request id goes with every attempt: an owner still alive answers a
        re-sent write from its memory instead of running it twice.
        """
        if self.read_only and is_write(op, args):
            raise BackendError(
                "the knowledge base is open read-only; open it without read_only=True to add"
            )
        request_id = uuid.uuid4().hex
        sent_to: set[Endpoint] = set()  # owners an attempt reached before its link broke
        with self._lock:
            deadline = time.monotonic() + max(self.settings.lock_timeout, 1.0)
            while True:
                try:
                    if self._local is not None:  # opened with this client's settings
                        found = OPERATIONS[op](self._local, args)
                    else:
                        found = self._remote(op, args, request_id)
                except OwnerGone:
                    if self._sent:
                        sent_to.add(self._endpoint)
                    if time.monotonic() > deadline:
                        raise self._held() from None
                    self._find_owner(deadline)
                    continue
                except KBError as exc:
                    if settle is not None and self._other_owner_may_have_run(sent_to):
                        return settle(exc)
                    raise
                if settle is not None and self._other_owner_may_have_run(sent_to):
                    return settle(found)
                return found

    def _other_owner_may_have_run(self, sent_to: set[Endpoint]) -> bool:
        """Whether an owner other than the one that just answered got this request. The
        same owner (a connection dropped while idle) answers a re-sent write from its
        memory, so its answer needs no settling."""
        answered_by = None if self._local is not None else self._endpoint
        return bool(sent_to - {answered_by})

    def _remote(self, op: str, args: dict[str, Any], request_id: str) -> Any:
        """One attempt at the owner; OwnerGone if it went away (``_sent`` says whether
        the request reached it first)."""
        self._sent = False
        try:
            if self._link is None:
                self._link = OwnerLink(self._endpoint)
            self._sent = True
            return self._link.call(self.workspace, op, args, request_id, self._given)
        except (OSError, ConnectionError, ValueError) as exc:
            # The owner went away (or answered garbage): find or become the next one.
            if self._link is not None:
                self._link.close()
                self._link = None
            raise OwnerGone from exc

    def _find_owner(self, deadline: float) -> None:
        while True:
            endpoint = live_endpoint(self.db_path)
            if endpoint is not None:  # a new owner, or the same one answering again
                self._endpoint = endpoint
                return
            try:
                storage = open_storage(
                    self.db_path,
                    read_only=self.read_only,
                    lock_timeout=0.2,
                    row_cache_mb=self.settings.row_cache_mb,
                )
            except DatabaseLocked:
                if time.monotonic() > deadline:
                    raise self._held() from None
                time.sleep(0.05)
                continue
            local = KnowledgeBase(storage, self.settings, embedders=self._given)
            if not self.read_only:  # a read-only opener holds no write lock to serve
                serve_owned(local, self.db_path)
            self._local = local
            return

    def close(self) -> None:
        """Run ``on_close``, close the link to the owner (and the file if taken over); see
        :meth:`hybridkb.api.KnowledgeBaseAPI.close`."""
        while self.on_close:
            self.on_close.pop()()
        if self._link is not None:
            self._link.close()
            self._link = None
        if self._local is not None:
            self._local.close()

    def __enter__(self) -> RemoteKnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def in_workspace(self, workspace: str) -> RemoteKnowledgeBase:
        """Another workspace through the same owner; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.in_workspace`."""
        other = RemoteKnowledgeBase(
            with_overrides(self.settings, workspace=workspace),
            self.db_path,
            self._endpoint,
            read_only=self.read_only,
            embedders=self._given,
        )
        if self._local is not None:
            other._local = self._local.in_workspace(workspace)
        return other

    def with_embedder(self, embedder: Embedder) -> RemoteKnowledgeBase:
        """The same owner and workspace; collections made through it embed with
        ``embedder``, which stays in this process (the owner asks it for vectors)."""
        other = RemoteKnowledgeBase(
            self.settings,
            self.db_path,
            self._endpoint,
            read_only=self.read_only,
            embedders={**self._given, embedder.model_id: embedder},
        )
        if self._local is not None:
            other._local = self._local.with_embedder(embedder)
        return other

    # -- models: a client embeds only with its own given embedders (the owner asks) ----

    def embedder(self, model: str, recipe: Recipe | None = None) -> Embedder:
        """An embedder loaded in this process (the owner embeds for searches and adds); see
        :meth:`hybridkb.api.KnowledgeBaseAPI.embedder`."""
        return load_embedder(self.settings, self._given, model, recipe)

    def embedder_for(self, coll: CollectionRecord) -> Embedder:
        """The collection's model loaded in this process; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.embedder_for`."""
        return checked_embedder(self.embedder, coll)

    def embedding_cache(self) -> EmbeddingCache | None:
        """None: the owner embeds, and caches; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.embedding_cache`."""
        return None  # this process embeds nothing to cache: the owner does

    def reranker(self) -> Reranker | None:
        """None: the owner reranks with its own settings; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.reranker`."""
        return None  # the owner reranks, with its own settings

    def warm_up(self) -> None:
        """Nothing to load: the owner holds the models."""

    def prepare_search(self, collections: Iterable[str] | None = None) -> None:
        """Nothing to load here: the owner holds the models and indexes."""
        if self._local is not None:
            self._local.prepare_search(collections)

    def record(self, name: str) -> CollectionRecord:
        """A collection's catalog record from the owner; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.record`."""
        found: CollectionRecord = self.call("record", name=name)
        return found

    def with_reranker(self, reranker: Reranker) -> RemoteKnowledgeBase:
        """Refused with ConfigError: a reranker is code, and the owner ranks with its own (set
        HYBRIDKB_RERANKER where it runs); see :meth:`hybridkb.api.KnowledgeBaseAPI.with_reranker`.
        """
        raise ConfigError(
            f"{self.db_path}: process {self.owner_pid} holds the knowledge base and ranks "
            "for this process with its own settings; set HYBRIDKB_RERANKER where it runs"
        )

    # -- the facade ------------------------------------------------------------------------

    def list_collections(self) -> list[CollectionInfo]:
        """Every collection with its counts, from the owner; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.list_collections`."""
        return list(self.call("list_collections"))

    def collection_names(self) -> list[str]:
        """The collections' names, from the owner; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.collection_names`."""
        return list(self.call("collection_names"))

    def describe(self, name: str) -> CollectionInfo:
        """One collection's counts and sources, from the owner; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.describe`."""
        info: CollectionInfo = self.call("describe", name=name)
        return info

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
    ) -> RemoteCollection:
        """Create a collection at the owner; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.create_collection`.

        If the owner went away after it may have committed, the re-run's CollectionExists is
        this call's own collection, not a clash.
        """
        given = {
            "model": model,
            "chunk_strategy": chunk_strategy,
            "chunk_size": chunk_size,
            "chunk_overlap": chunk_overlap,
            "language": language,
            "exist_ok": exist_ok,
        }
        options = {k: v for k, v in given.items() if v is not None}

        def settle(outcome: Any) -> Any:
            # The owner that went away created it: this call's own collection, not a clash.
            if isinstance(outcome, CollectionExists):
                return check_name(name)
            if isinstance(outcome, KBError):
                raise outcome
            return outcome

        found = self.call_settled("create_collection", {"name": name, "options": options}, settle)
        return RemoteCollection(self, str(found))

    def collection(
        self, name: str, *, create: bool = False, model: str | None = None
    ) -> RemoteCollection:
        """A checked handle, the check run at the owner; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.collection`."""
        found = self.call("collection", name=name, create=create, model=model)
        return RemoteCollection(self, str(found))

    def __getitem__(self, name: str) -> RemoteCollection:
        return RemoteCollection(self, check_name(name))

    def drop_collection(self, name: str) -> None:
        """Drop a collection at the owner; see
        :meth:`hybridkb.api.KnowledgeBaseAPI.drop_collection`.

        If the owner went away after it may have committed, the re-run's CollectionNotFound
        means this call dropped it.
        """

        def settle(outcome: Any) -> None:
            # Gone when re-run: the owner that went away dropped it before exiting.
            if isinstance(outcome, KBError) and not isinstance(outcome, CollectionNotFound):
                raise outcome

        self.call_settled("drop_collection", {"name": name}, settle)

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
        """Search at the owner (which reranks with its own reranker); see
        :meth:`hybridkb.api.KnowledgeBaseAPI.search`."""
        names = None if collections is None else list(collections)
        # The owner reranks with its own reranker: a model object cannot cross the socket.
        return list(
            self.call(
                "search", query=query, k=k, mode=mode, where=where, collections=names, rerank=rerank
            )
        )

    # -- maintenance verbs: the owner runs them -------------------------------------------

    def doctor(self, name: str | None = None, *, repair: bool = False) -> list[CollectionHealth]:
        """Check collections at the owner; see :meth:`hybridkb.api.KnowledgeBaseAPI.doctor`."""
        return list(self.call("doctor", name=name, repair=repair))

    def reembed(
        self, name: str, *, model: str | None = None, progress: bool = True
    ) -> dict[str, Any]:
        """Re-embed at the owner (no progress bar here); see
        :meth:`hybridkb.api.KnowledgeBaseAPI.reembed`."""
        return dict(self.call("reembed", name=name, model=model))  # no bar: the owner embeds

    def compact(self) -> dict[str, int]:
        """Compact at the owner; see :meth:`hybridkb.api.KnowledgeBaseAPI.compact`."""
        return dict(self.call("compact"))

    def copy_to(
        self, dst_url: str, *, workspace: str | None = None, progress: CopyProgress | None = None
    ) -> dict[str, Any]:
        """Copy at the owner, a file ``dst_url`` made absolute here (``progress`` is not
        called: the owner copies); see :meth:`hybridkb.api.KnowledgeBaseAPI.copy_to`."""
        from hybridkb.copy import absolute_url

        return dict(self.call("copy", to=absolute_url(dst_url), workspace=workspace))

    def sql(
        self,
        sql: str,
        *,
        max_rows: int | None = None,
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> SQLResult:
        """Run the SELECT at the owner; see :meth:`hybridkb.api.KnowledgeBaseAPI.sql`."""
        from hybridkb.sql_tool import sql_from_dict

        limits = {"max_rows": max_rows, "timeout": timeout, "max_bytes": max_bytes}
        given = {k: v for k, v in limits.items() if v is not None}
        return sql_from_dict(self.call("sql", sql=sql, limits=given))


# mypy checks the two doors against the one declaration (a method missing here fails).
_checked: type[KnowledgeBaseAPI] = RemoteKnowledgeBase
_checked_collection: type[CollectionAPI] = RemoteCollection
_checked_graph: type[GraphAPI] = RemoteGraph
