"""The knowledge base a process gets when another process holds the DuckDB file.

Every call goes to the owner over its socket, so the client loads no model and no
index; results, errors and codes are the owner's. If the owner goes away (it
exited, or was killed), the next call takes the file over: this process opens it,
starts serving it itself, and runs the call locally; if another client won that
race, the call goes to the new owner. A call cut off mid-way is sent again:
adding the same file or text again is recognised by document identity (nothing is
stored twice), a repeated delete reports the ids as not found.

The knowledge graph, the SQL tool, the maintenance verbs (doctor, reembed, compact)
and copies to another store run in the owner too. What needs the file itself (the
Storage protocol, an evaluation that builds its own collection) raises
DatabaseLocked naming the owner.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from hybridkb.errors import BackendError, ConfigError, DatabaseLocked
from hybridkb.kb import Collection, KnowledgeBase, check_name
from hybridkb.serve.codec import MAX_MESSAGE_BYTES, decode, dumps, encode, error_from
from hybridkb.serve.endpoint import Endpoint, live_endpoint, open_connection, resolve_transport
from hybridkb.serve.server import GRAPH_METHODS, GRAPH_WRITES, OPERATIONS, OwnerServer
from hybridkb.settings import Settings, with_overrides
from hybridkb.storage import open_storage
from hybridkb.storage.base import DocumentRecord, Storage
from hybridkb.types import AddReport, CollectionInfo, DeleteReport, Hit, SyncReport

__all__ = ["OwnerLink", "RemoteCollection", "RemoteGraph", "RemoteKnowledgeBase", "serve_owned"]

_WRITES = frozenset(
    {"create_collection", "drop_collection", "add", "add_texts", "delete", "reembed", "compact"}
)


def _writes(op: str, args: Mapping[str, Any]) -> bool:
    if op == "graph":
        return args.get("method") in GRAPH_WRITES
    return (
        op in _WRITES or bool(args.get("create")) or (op == "doctor" and bool(args.get("repair")))
    )


def serve_owned(kb: KnowledgeBase, db_path: str) -> None:
    """Make ``kb`` (which holds ``db_path`` for writing) serve other processes until closed."""
    server = OwnerServer(kb, db_path, resolve_transport(kb.settings.serve_transport))
    kb.on_close.append(server.close)


class OwnerLink:
    """One connection to the owner, used by one call at a time."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.sock = open_connection(endpoint)
        self.reader: BinaryIO = self.sock.makefile("rb")

    def call(self, workspace: str, op: str, args: dict[str, Any]) -> Any:
        message = {"token": self.endpoint.token, "workspace": workspace, "op": op, "args": args}
        self.sock.sendall(dumps(message))
        line = self.reader.readline(MAX_MESSAGE_BYTES + 1)
        if not line:
            raise ConnectionError("the owner closed the connection")
        answer = json.loads(line)
        if "error" in answer:
            raise error_from(answer["error"])
        return decode(answer["ok"])

    def close(self) -> None:
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass


class RemoteKnowledgeBase(KnowledgeBase):
    """A knowledge base whose calls run in the process that holds its DuckDB file."""

    is_client = True

    def __init__(
        self, settings: Settings, db_path: str, endpoint: Endpoint, *, read_only: bool = False
    ) -> None:
        # No storage of its own: KnowledgeBase.__init__ would open the file's graph.
        self.settings = settings
        self.workspace = check_name(settings.workspace, "workspace")
        self.on_close = []
        self.db_path = db_path
        self.read_only = read_only
        self._endpoint = endpoint
        self._link: OwnerLink | None = None
        self._local: KnowledgeBase | None = None
        self._lock = threading.Lock()
        self._reranker = None
        # What KnowledgeBase.embedder reads: a model asked for by name loads here.
        self._given = {}
        self._cache = None
        self._languages = {}

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
        if self._local is not None:
            return self._local.storage
        raise self._held()

    @storage.setter
    def storage(self, value: Storage) -> None:
        raise AttributeError("a client's storage is the owner's")

    @property
    def graph(self) -> Any:
        return RemoteGraph(self)

    @graph.setter
    def graph(self, value: Any) -> None:
        raise AttributeError("a client's graph is the owner's")

    def call(self, op: str, **args: Any) -> Any:
        """Run ``op`` at the owner (or here, after taking the file over)."""
        if self.read_only and _writes(op, args):
            raise BackendError(
                "the knowledge base is open read-only; open it without read_only=True to add"
            )
        with self._lock:
            deadline = time.monotonic() + max(self.settings.lock_timeout, 1.0)
            while True:
                if self._local is not None:  # opened with this client's settings and workspace
                    return OPERATIONS[op](self._local, args)
                try:
                    if self._link is None:
                        self._link = OwnerLink(self._endpoint)
                    return self._link.call(self.workspace, op, args)
                except (OSError, ConnectionError, ValueError):
                    # The owner went away (or answered garbage): find or become the next one.
                    if self._link is not None:
                        self._link.close()
                        self._link = None
                    if time.monotonic() > deadline:
                        raise self._held() from None
                    self._find_owner(deadline)

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
            local = KnowledgeBase(storage, self.settings)
            if not self.read_only:  # a read-only opener holds no write lock to serve
                serve_owned(local, self.db_path)
            self._local = local
            return

    def close(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None
        if self._local is not None:
            self._local.close()

    def in_workspace(self, workspace: str) -> KnowledgeBase:
        other = RemoteKnowledgeBase(
            with_overrides(self.settings, workspace=workspace),
            self.db_path,
            self._endpoint,
            read_only=self.read_only,
        )
        if self._local is not None:
            other._local = self._local.in_workspace(workspace)
        return other

    def with_reranker(self, reranker: Any) -> KnowledgeBase:
        raise ConfigError(
            f"{self.db_path}: process {self.owner_pid} holds the knowledge base and ranks "
            "for this process with its own settings; set HYBRIDKB_RERANKER where it runs"
        )

    # -- the facade ------------------------------------------------------------------------

    def list_collections(self) -> list[CollectionInfo]:
        return list(self.call("list_collections"))

    def collection_names(self) -> list[str]:
        return list(self.call("collection_names"))

    def describe(self, name: str) -> CollectionInfo:
        info: CollectionInfo = self.call("describe", name=name)
        return info

    def create_collection(self, name: str, **options: Any) -> Collection:
        options = {k: v for k, v in options.items() if v is not None}
        return RemoteCollection(
            self, str(self.call("create_collection", name=name, options=options))
        )

    def collection(
        self, name: str, *, create: bool = False, model: str | None = None
    ) -> Collection:
        found = self.call("collection", name=name, create=create, model=model)
        return RemoteCollection(self, str(found))

    def __getitem__(self, name: str) -> Collection:
        return RemoteCollection(self, check_name(name))

    def drop_collection(self, name: str) -> None:
        self.call("drop_collection", name=name)

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
        names = None if collections is None else list(collections)
        # The owner reranks with its own reranker: a model object cannot cross the socket.
        return list(
            self.call(
                "search", query=query, k=k, mode=mode, where=where, collections=names, rerank=rerank
            )
        )


class RemoteGraph:
    """The owner's knowledge graph: the same methods, arguments, results and errors as
    ``hybridkb.graph.Graph`` (those in ``GRAPH_METHODS``), each run in the owner."""

    def __init__(self, kb: RemoteKnowledgeBase) -> None:
        self.kb = kb

    def __getattr__(self, method: str) -> Any:
        if method not in GRAPH_METHODS:
            if method == "add_extractor":
                raise ConfigError(
                    f"{self.kb.db_path}: process {self.kb.owner_pid} holds the knowledge "
                    "base and extracts entities with its own extractors; add yours where it runs"
                )
            raise AttributeError(method)

        def forward(*args: Any, **kwargs: Any) -> Any:
            if method in ("export_folder", "import_folder") and len(args) > 1:
                args = (args[0], _absolute(args[1]), *args[2:])  # the owner runs elsewhere
            if "folder" in kwargs:
                kwargs["folder"] = _absolute(kwargs["folder"])
            found = self.kb.call(
                "graph", method=method, args=encode(list(args)), kwargs=encode(kwargs)
            )
            if method == "export_folder":
                return [Path(p) for p in found]
            return found

        return forward


def _absolute(path: str | Path) -> str:
    # The owner runs in another folder: send paths as this process means them.
    return os.path.abspath(os.path.expanduser(str(path)))


class RemoteCollection(Collection):
    """A collection handle whose calls go through a RemoteKnowledgeBase."""

    kb: RemoteKnowledgeBase

    def __init__(self, kb: RemoteKnowledgeBase, name: str) -> None:
        super().__init__(kb, name, None)

    def add(
        self,
        paths: str | Path | Iterable[str | Path],
        *,
        metadata: Mapping[str, Any] | None = None,
        allowed_paths: Iterable[str | Path] | None = None,
    ) -> AddReport:
        if isinstance(paths, (str, Path)):
            paths = [paths]
        report: AddReport = self.kb.call(
            "add",
            collection=self.name,
            paths=[_absolute(p) for p in paths],
            metadata=dict(metadata) if metadata is not None else None,
        )
        return report

    def add_texts(
        self,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        ids: Sequence[str] | None = None,
    ) -> AddReport:
        report: AddReport = self.kb.call(
            "add_texts",
            collection=self.name,
            texts=list(texts),
            metadatas=None if metadatas is None else [dict(m or {}) for m in metadatas],
            ids=None if ids is None else list(ids),
        )
        return report

    def delete(self, document_ids: str | Sequence[str]) -> DeleteReport:
        ids = [document_ids] if isinstance(document_ids, str) else [str(i) for i in document_ids]
        report: DeleteReport = self.kb.call("delete", collection=self.name, ids=ids)
        return report

    def get(self, document_id: str) -> DocumentRecord | None:
        found: DocumentRecord | None = self.kb.call(
            "get", collection=self.name, document_id=document_id
        )
        return found

    def search_by_vector(
        self,
        vector: np.ndarray | Sequence[float],
        *,
        k: int | None = None,
        where: Mapping[str, Any] | str | None = None,
    ) -> list[Hit]:
        found = self.kb.call(
            "search_by_vector",
            collection=self.name,
            vector=[float(x) for x in np.asarray(vector, dtype=np.float32).ravel()],
            k=k,
            where=where,
        )
        return list(found)

    def documents(self, *, limit: int = 100, offset: int = 0) -> list[DocumentRecord]:
        return list(self.kb.call("documents", collection=self.name, limit=limit, offset=offset))

    def count(self) -> int:
        return int(self.kb.call("count", collection=self.name))

    def document_text(self, document_id: str) -> str | None:
        text: str | None = self.kb.call(
            "document_text", collection=self.name, document_id=document_id
        )
        return text

    def sync(
        self,
        *,
        dry_run: bool = False,
        allowed_paths: Iterable[str | Path] | None = None,
        busy: Iterable[str] = (),
        paths: Iterable[str] | None = None,
    ) -> SyncReport:
        # The owner syncs inside its own allowed folders (a client may not widen them).
        found = self.kb.call(
            "sync",
            collection=self.name,
            dry_run=dry_run,
            busy=list(busy),
            paths=None if paths is None else list(paths),
        )
        return SyncReport.from_dict(found)

    def sources(self) -> list[dict[str, Any]]:
        return list(self.kb.call("describe", name=self.name).sources)

    def remove_source(self, path: str | Path) -> DeleteReport:
        report: DeleteReport = self.kb.call(
            "remove_source", collection=self.name, path=_absolute(path)
        )
        return report
