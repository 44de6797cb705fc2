"""The collection and graph handles of a client (serve/client.py): each call goes to
the owner through the client's knowledge base."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybridkb.errors import ConfigError, KBError
from hybridkb.serve.codec import encode
from hybridkb.storage.base import ChunkRecord, CollectionRecord, DocumentRecord
from hybridkb.types import AddReport, CollectionInfo, DeleteReport, Hit, SyncReport

if TYPE_CHECKING:
    from hybridkb.serve.client import RemoteKnowledgeBase

__all__ = ["RemoteCollection", "RemoteGraph", "absolute_path"]


class RemoteGraph:
    """The owner's knowledge graph: the methods of :class:`hybridkb.api.GraphAPI`, with
    the same arguments, results and errors as ``hybridkb.graph.Graph``, each run in the
    owner (one method each, so mypy sees one missing; the owner allows only
    ``GRAPH_METHODS``)."""

    def __init__(self, kb: RemoteKnowledgeBase) -> None:
        self.kb = kb

    def _forward(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method in ("export_folder", "import_folder") and len(args) > 1:
            args = (args[0], absolute_path(args[1]), *args[2:])  # the owner runs elsewhere
        if "folder" in kwargs:
            kwargs["folder"] = absolute_path(kwargs["folder"])
        return self.kb.call("graph", method=method, args=encode(list(args)), kwargs=encode(kwargs))

    def node(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.node`."""
        return self._forward("node", args, kwargs)

    def has_node(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.has_node`."""
        return self._forward("has_node", args, kwargs)

    def node_of_chunk(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.node_of_chunk`."""
        return self._forward("node_of_chunk", args, kwargs)

    def chunks_of(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.chunks_of`."""
        return self._forward("chunks_of", args, kwargs)

    def neighbors(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.neighbors`."""
        return self._forward("neighbors", args, kwargs)

    def traverse(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.traverse`."""
        return self._forward("traverse", args, kwargs)

    def find_paths(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.find_paths`."""
        return self._forward("find_paths", args, kwargs)

    def shortest_path(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.shortest_path`."""
        return self._forward("shortest_path", args, kwargs)

    def subgraph(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.subgraph`."""
        return self._forward("subgraph", args, kwargs)

    def search(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.search`."""
        return self._forward("search", args, kwargs)

    def stats(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.stats`."""
        return self._forward("stats", args, kwargs)

    def relate(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.relate`."""
        return self._forward("relate", args, kwargs)

    def unrelate(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.unrelate`."""
        return self._forward("unrelate", args, kwargs)

    def add_node(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.add_node`."""
        return self._forward("add_node", args, kwargs)

    def add_nodes(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.add_nodes`."""
        return self._forward("add_nodes", args, kwargs)

    def add_edges(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.add_edges`."""
        return self._forward("add_edges", args, kwargs)

    def remove_node(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.remove_node`."""
        return self._forward("remove_node", args, kwargs)

    def aliases(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.aliases`."""
        return self._forward("aliases", args, kwargs)

    def set_alias(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.set_alias`."""
        return self._forward("set_alias", args, kwargs)

    def rebuild(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.rebuild`."""
        return self._forward("rebuild", args, kwargs)

    def export(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner; see :meth:`hybridkb.api.GraphAPI.export`."""
        return self._forward("export", args, kwargs)

    def import_folder(self, *args: Any, **kwargs: Any) -> Any:
        """Run at the owner, ``folder`` made absolute here; see
        :meth:`hybridkb.api.GraphAPI.import_folder`."""
        return self._forward("import_folder", args, kwargs)

    def export_folder(self, *args: Any, **kwargs: Any) -> list[Path]:
        """Run at the owner, ``folder`` made absolute here; see
        :meth:`hybridkb.api.GraphAPI.export_folder`."""
        return [Path(p) for p in self._forward("export_folder", args, kwargs)]

    def add_extractor(self, extractor: Any) -> None:
        """Refused with ConfigError: an extractor is code, which cannot cross to the owner;
        see :meth:`hybridkb.api.GraphAPI.add_extractor`."""
        raise ConfigError(
            f"{self.kb.db_path}: process {self.kb.owner_pid} holds the knowledge "
            "base and extracts entities with its own extractors; add yours where it runs"
        )


def absolute_path(path: str | Path) -> str:
    """``path`` as this process means it (the owner runs in another folder)."""
    return os.path.abspath(os.path.expanduser(str(path)))


class RemoteCollection:
    """A collection handle whose calls go through a RemoteKnowledgeBase (the sibling of
    :class:`hybridkb.kb.Collection`, both :class:`hybridkb.api.CollectionAPI`)."""

    def __init__(self, kb: RemoteKnowledgeBase, name: str) -> None:
        self.kb = kb
        self.name = name

    def __repr__(self) -> str:
        return f"Collection({self.name!r})"

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        mode: str | None = None,
        where: Mapping[str, Any] | str | None = None,
        rerank: bool | None = None,
    ) -> list[Hit]:
        """Search this collection at the owner; see :meth:`hybridkb.api.CollectionAPI.search`."""
        return self.kb.search(
            query, k=k, mode=mode, where=where, collections=[self.name], rerank=rerank
        )

    def describe(self) -> CollectionInfo:
        """The collection's counts and sources, from the owner; see
        :meth:`hybridkb.api.CollectionAPI.describe`."""
        return self.kb.describe(self.name)

    def drop(self) -> None:
        """Drop the collection at the owner; see :meth:`hybridkb.api.CollectionAPI.drop`."""
        self.kb.drop_collection(self.name)

    def add(
        self,
        paths: str | Path | Iterable[str | Path],
        *,
        metadata: Mapping[str, Any] | None = None,
        allowed_paths: Iterable[str | Path] | None = None,
    ) -> AddReport:
        """Add files at the owner: paths and ``allowed_paths`` are resolved here (the owner runs in
        another folder) and the confinement is never widened; see
        :meth:`hybridkb.api.CollectionAPI.add`."""
        if isinstance(paths, (str, Path)):
            paths = [paths]
        report: AddReport = self.kb.call(
            "add",
            collection=self.name,
            paths=[absolute_path(p) for p in paths],
            metadata=dict(metadata) if metadata is not None else None,
            # The caller's confinement goes with the paths; the owner never widens it.
            allowed_paths=None
            if allowed_paths is None
            else [os.path.realpath(absolute_path(p)) for p in allowed_paths],
        )
        return report

    def add_texts(
        self,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        ids: Sequence[str] | None = None,
    ) -> AddReport:
        """Add texts at the owner; see :meth:`hybridkb.api.CollectionAPI.add_texts`."""
        report: AddReport = self.kb.call(
            "add_texts",
            collection=self.name,
            texts=list(texts),
            metadatas=None if metadatas is None else [dict(m or {}) for m in metadatas],
            ids=None if ids is None else list(ids),
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
        """Sync at the owner, paths resolved here as for :meth:`add`; see
        :meth:`hybridkb.api.CollectionAPI.sync`."""
        found = self.kb.call(
            "sync",
            collection=self.name,
            dry_run=dry_run,
            # The caller's confinement, as for add: the owner never widens it.
            allowed_paths=None
            if allowed_paths is None
            else [os.path.realpath(absolute_path(p)) for p in allowed_paths],
            busy=list(busy),
            paths=None if paths is None else [absolute_path(p) for p in paths],
        )
        return SyncReport.from_dict(found)

    def sources(self) -> list[dict[str, Any]]:
        """The sources, as the owner's ``describe`` lists them; see
        :meth:`hybridkb.api.CollectionAPI.sources`."""
        return list(self.kb.describe(self.name).sources)

    def remove_source(self, path: str | Path) -> DeleteReport:
        """Remove a source at the owner; see :meth:`hybridkb.api.CollectionAPI.remove_source`."""
        report: DeleteReport = self.kb.call(
            "remove_source", collection=self.name, path=absolute_path(path)
        )
        return report

    def delete(self, document_ids: str | Sequence[str]) -> DeleteReport:
        """Delete at the owner; see :meth:`hybridkb.api.CollectionAPI.delete`.

        If the owner went away after it may have committed, the re-run finds every id gone;
        the ids stored before the call are then reported deleted, the others not found.
        """
        ids = [document_ids] if isinstance(document_ids, str) else [str(i) for i in document_ids]
        # Which ids are stored before the call: if the owner commits the delete and dies
        # unanswered, the re-run finds every id missing, and only this says which of them
        # the dead owner deleted and which never existed. One read per id, as get_by_ids;
        # an id another process adds between this read and the delete can be misreported,
        # and only when an owner dies in that window.
        stored = {i for i in dict.fromkeys(ids) if self.get(i) is not None}

        def settle(outcome: Any) -> DeleteReport:
            if isinstance(outcome, KBError):
                raise outcome
            gone = [*outcome.deleted, *outcome.not_found]
            return DeleteReport(
                deleted=[i for i in gone if i in stored],
                not_found=[i for i in gone if i not in stored],
            )

        report: DeleteReport = self.kb.call_settled(
            "delete", {"collection": self.name, "ids": ids}, settle
        )
        return report

    def get(self, document_id: str) -> DocumentRecord | None:
        """A document's record from the owner; see :meth:`hybridkb.api.CollectionAPI.get`."""
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
        """Nearest chunks to ``vector``, sent as floats to the owner; see
        :meth:`hybridkb.api.CollectionAPI.search_by_vector`."""
        found = self.kb.call(
            "search_by_vector",
            collection=self.name,
            vector=[float(x) for x in np.asarray(vector, dtype=np.float32).ravel()],
            k=k,
            where=where,
        )
        return list(found)

    def documents(self, *, limit: int = 100, offset: int = 0) -> list[DocumentRecord]:
        """A page of documents from the owner; see :meth:`hybridkb.api.CollectionAPI.documents`."""
        return list(self.kb.call("documents", collection=self.name, limit=limit, offset=offset))

    @property
    def record(self) -> CollectionRecord:
        """The catalog record, asked of the owner on every access; see
        :attr:`hybridkb.api.CollectionAPI.record`."""
        return self.kb.record(self.name)

    def chunks(self, document_id: str) -> list[ChunkRecord]:
        """A document's chunks from the owner; see :meth:`hybridkb.api.CollectionAPI.chunks`."""
        return list(self.kb.call("chunks", collection=self.name, document_id=document_id))

    def count(self) -> int:
        """Number of documents, from the owner; see :meth:`hybridkb.api.CollectionAPI.count`."""
        return int(self.kb.call("count", collection=self.name))

    def document_text(self, document_id: str) -> str | None:
        """A document's text, stitched by the owner; see
        :meth:`hybridkb.api.CollectionAPI.document_text`."""
        text: str | None = self.kb.call(
            "document_text", collection=self.name, document_id=document_id
        )
        return text
