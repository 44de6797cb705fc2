"""The engine of a process whose DuckDB file another process holds: every call goes there.

:class:`OwnerEngine` implements the flat calls of :class:`hybridkb.engine.Engine`
(and its graph's) with one method: a call's name and keyword arguments, checked
against the declaration (:mod:`hybridkb.serve.wire`), cross to the owner over its
socket, so this process loads no model and no index, and results, errors and codes
are the owner's. The handles above (hybridkb.kb) do not know which engine they hold.

If the owner goes away (it exited, or was killed), the next call takes the file over:
this process opens it and runs that call and every later one in a
:class:`~hybridkb.local.LocalEngine` (serving it in turn if it asked to serve); if
another client won that race, the call goes to the new owner. A call cut off
mid-way is sent again with the same request id: a live owner answers it from memory,
and after a dead owner's commit the create, drop or delete says what it did
(:data:`SETTLE`). What needs the file itself (``storage``, an evaluation that builds
its own collection) raises DatabaseLocked naming the owner.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from hybridkb.embedders import Embedder, Recipe
from hybridkb.errors import (
    BackendError,
    CollectionExists,
    CollectionNotFound,
    ConfigError,
    DatabaseLocked,
    KBError,
)
from hybridkb.limits import check_name
from hybridkb.local import LocalEngine
from hybridkb.local_plumbing import checked_embedder, load_embedder
from hybridkb.results import DeleteReport
from hybridkb.serve.codec import encode
from hybridkb.serve.endpoint import Endpoint, live_endpoint
from hybridkb.serve.link import OwnerGone, OwnerLink
from hybridkb.serve.server import serve_owned
from hybridkb.serve.wire import WIRE, Call
from hybridkb.settings import Settings, with_overrides
from hybridkb.storage import open_storage
from hybridkb.storage.base import CollectionRecord, Storage
from hybridkb.storage.shared import OPENED_READ_ONLY

if TYPE_CHECKING:
    from hybridkb.embedders.cache import EmbeddingCache
    from hybridkb.engine import Door
    from hybridkb.graph.extract import EntityExtractor
    from hybridkb.search.rerank import Reranker

__all__ = ["SETTLE", "OwnerEngine", "OwnerGraph"]

Settle = Callable[[object], object]  # a re-run's outcome (result or KBError) -> what the call did


def _settle_create(engine: OwnerEngine, arguments: Mapping[str, Any]) -> Settle:
    def settle(outcome: object) -> object:
        # The owner that went away created it: this call's own collection, not a clash.
        if isinstance(outcome, CollectionExists):
            return check_name(arguments["name"])
        if isinstance(outcome, KBError):
            raise outcome
        return outcome

    return settle


def _settle_drop(engine: OwnerEngine, arguments: Mapping[str, Any]) -> Settle:
    def settle(outcome: object) -> object:
        # Gone when re-run: the owner that went away dropped it before exiting.
        if isinstance(outcome, KBError) and not isinstance(outcome, CollectionNotFound):
            raise outcome
        return None

    return settle


def _settle_delete(engine: OwnerEngine, arguments: Mapping[str, Any]) -> Settle:
    # Which ids are stored before the call: if the owner commits the delete and dies
    # unanswered, the re-run finds every id missing, and only this says which of them
    # the dead owner deleted and which never existed. One read per id, as get_by_ids;
    # an id another process adds between this read and the delete can be misreported,
    # and only when an owner dies in that window.
    collection = arguments["collection"]
    stored = {i for i in dict.fromkeys(arguments["ids"]) if engine.get(collection, i) is not None}

    def settle(outcome: object) -> object:
        if isinstance(outcome, KBError):
            raise outcome
        assert isinstance(outcome, DeleteReport)
        gone = [*outcome.deleted, *outcome.not_found]
        return DeleteReport(
            deleted=[i for i in gone if i in stored],
            not_found=[i for i in gone if i not in stored],
        )

    return settle


# The writes whose re-run after a dead owner's commit must be read differently.
SETTLE: dict[str, Callable[[OwnerEngine, Mapping[str, Any]], Settle]] = {
    "create_collection": _settle_create,
    "drop_collection": _settle_drop,
    "delete": _settle_delete,
}


class OwnerGraph:
    """The owner's graph: every call of :class:`hybridkb.engine.GraphEngine`, by name."""

    def __init__(self, engine: OwnerEngine) -> None:
        self.engine = engine

    def __getattr__(self, method: str) -> Callable[..., Any]:
        call = WIRE.get(f"graph.{method}")
        if call is None:
            raise AttributeError(f"the owner's graph has no call {method!r}")
        return functools.partial(self.engine.run, call)


class OwnerEngine:
    """A door whose calls run in the process that holds the DuckDB file (see the module
    docstring): the sibling of :class:`~hybridkb.local.LocalEngine`.

    Args:
        settings: This process's settings (``settings.workspace`` names the workspace).
        db_path: The DuckDB file the owner holds.
        endpoint: Where the owner listens.
        read_only: Refuse every write here, before it is sent.
        serve: Serve the file to others once this process takes it over.
        embedders: This process's own embedders, by model id: the owner asks for vectors.
    """

    def __init__(
        self,
        settings: Settings,
        db_path: str,
        endpoint: Endpoint,
        *,
        read_only: bool = False,
        serve: bool = False,
        embedders: Mapping[str, Embedder] | None = None,
    ) -> None:
        self.settings = settings
        self.workspace = check_name(settings.workspace, "workspace")
        self.db_path = db_path
        self.read_only = read_only
        self.serve = serve
        self._endpoint = endpoint
        self._link: OwnerLink | None = None
        self._local: LocalEngine | None = None
        self._lock = threading.Lock()
        self._sent = False  # the current attempt reached the owner's socket
        self._given: dict[str, Embedder] = dict(embedders or {})

    def __getattr__(self, method: str) -> Callable[..., Any]:
        call = WIRE.get(method)
        if call is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {method!r}")
        return functools.partial(self.run, call)

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
    def graph(self) -> OwnerGraph:
        """The owner's graph calls."""
        return OwnerGraph(self)

    # -- one call -------------------------------------------------------------------------

    def run(self, call: Call, *args: Any, **kwargs: Any) -> Any:
        """Run ``call`` with these arguments at the owner (or here, once taken over)."""
        arguments = call.bind(args, kwargs)
        if self.read_only and call.writes(arguments):
            raise BackendError(OPENED_READ_ONLY)
        settle = SETTLE.get(call.name)
        # Prepared before the call (a delete reads first, through this same engine).
        settling = None if settle is None or self._local is not None else settle(self, arguments)
        request_id = uuid.uuid4().hex
        sent = encode(call.outgoing(arguments))
        owners: set[Endpoint] = set()  # owners an attempt reached before its link broke
        with self._lock:
            deadline = time.monotonic() + max(self.settings.lock_timeout, 1.0)
            while True:
                try:
                    if self._local is not None:  # opened with this client's settings
                        found = call.target(self._local)(**arguments)
                    else:
                        found = self._remote(call.name, sent, request_id)
                except OwnerGone:
                    if self._sent:
                        owners.add(self._endpoint)
                    if time.monotonic() > deadline:
                        raise self._held() from None
                    self._find_owner(deadline)
                    continue
                except KBError as exc:
                    if settling is not None and self._other_owner_may_have_run(owners):
                        return settling(exc)
                    raise
                if settling is not None and self._other_owner_may_have_run(owners):
                    return settling(found)
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
            local = LocalEngine(storage, self.settings, embedders=self._given)
            if self.serve and not self.read_only:  # a reader holds no write lock to serve
                serve_owned(local, self.db_path)
            self._local = local
            return

    # -- the door ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the link to the owner (and the file, if taken over)."""
        if self._link is not None:
            self._link.close()
            self._link = None
        if self._local is not None:
            self._local.close()

    def _sibling(self, settings: Settings, embedders: Mapping[str, Embedder]) -> OwnerEngine:
        return OwnerEngine(
            settings,
            self.db_path,
            self._endpoint,
            read_only=self.read_only,
            serve=self.serve,
            embedders=embedders,
        )

    def in_workspace(self, workspace: str) -> OwnerEngine:
        """Another workspace through the same owner (calls name it)."""
        other = self._sibling(with_overrides(self.settings, workspace=workspace), self._given)
        if self._local is not None:
            other._local = self._local.in_workspace(workspace)
        return other

    def with_embedder(self, embedder: Embedder) -> OwnerEngine:
        """The same owner and workspace; ``embedder`` stays in this process (the owner asks
        it for vectors)."""
        other = self._sibling(self.settings, {**self._given, embedder.model_id: embedder})
        if self._local is not None:
            other._local = self._local.with_embedder(embedder)
        return other

    def with_reranker(self, reranker: Reranker) -> OwnerEngine:
        """Refused with ConfigError: a reranker is code, and the owner ranks with its own."""
        raise ConfigError(
            f"{self.db_path}: process {self.owner_pid} holds the knowledge base and ranks "
            "for this process with its own settings; set HYBRIDKB_RERANKER where it runs"
        )

    def add_extractor(self, extractor: EntityExtractor) -> None:
        """Refused with ConfigError: an extractor is code, which cannot cross to the owner."""
        raise ConfigError(
            f"{self.db_path}: process {self.owner_pid} holds the knowledge "
            "base and extracts entities with its own extractors; add yours where it runs"
        )

    # -- plumbing: a client embeds only with its own given embedders (the owner asks) ------

    def embedder(self, model: str, recipe: Recipe | None = None) -> Embedder:
        """An embedder loaded in this process (e.g. for vectors the caller embeds)."""
        return load_embedder(self.settings, self._given, model, recipe)

    def embedder_for(self, coll: CollectionRecord) -> Embedder:
        """The collection's model loaded in this process."""
        return checked_embedder(self.embedder, coll)

    def embedding_cache(self) -> EmbeddingCache | None:
        """None: this process embeds nothing to cache (the owner does)."""
        return None

    def reranker(self) -> Reranker | None:
        """None: the owner reranks, with its own settings."""
        return None

    def warm_up(self) -> None:
        """Nothing to load: the owner holds the models."""

    def prepare_search(self, collections: Iterable[str] | None = None) -> None:
        """Nothing to load here while the owner holds the models and indexes."""
        if self._local is not None:
            self._local.prepare_search(collections)

    def prepare_graph(self) -> None:
        """Nothing to load here while the owner holds the graph."""
        if self._local is not None:
            self._local.prepare_graph()


if TYPE_CHECKING:
    # mypy checks this door against the one declaration, calls and graph included.
    _checked: type[Door] = OwnerEngine
