"""LangChain ``VectorStore`` over one collection, and a hybrid-search ``BaseRetriever``.

:class:`HybridKBVectorStore`: one LangChain ``Document`` is one stored document.
Its id is the document id, its metadata comes back exactly as given (our chunk
fields stay out), and its text comes back exactly as given, even when the
collection cut it into several chunks. ``similarity_search`` runs the collection's
hybrid search by default (``mode="vector"`` for pure vector similarity) and
returns each document once.

:class:`HybridKBRetriever`: hybrid search over one, several or all collections of a
knowledge base, returning passages (chunks) with their citation under
``metadata["hybridkb"]`` (collection, filename, page, section, ids, scores).

Example:
    >>> store = HybridKBVectorStore("notes", kb=hybridkb.connect("kb.duckdb"))  # doctest: +SKIP
    >>> store.add_documents([Document("Depreciation is spread over 5 years.")])
    >>> retriever = HybridKBRetriever(kb=store.kb, collection_name="notes", k=3)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict

from ..embedders import Embedder, normalize_rows
from ..errors import ConfigError, EmbeddingMismatch
from ..kb import Collection, KnowledgeBase
from ..limits import MAX_K
from ..opening import connect
from ..results import SEARCH_MODES, Hit, SearchMode
from ..storage.base import DocumentRecord

__all__ = ["HybridKBEmbeddings", "HybridKBRetriever", "HybridKBVectorStore"]

# Holds a document's exact text when its chunks cannot give it back (normalised
# whitespace, overlapping cuts). Never shown: stripped from metadata on the way out.
TEXT_KEY = "_hybridkb_page_content"
Mode = SearchMode


class _EmbeddingsAdapter:
    """A LangChain ``Embeddings`` seen as a hybridkb :class:`Embedder` (rows L2-normalised)."""

    def __init__(self, embeddings: Embeddings) -> None:
        self.embeddings = embeddings
        cls = type(embeddings)
        self.model_id = f"langchain:{cls.__module__}.{cls.__qualname__}"
        self.dim = len(embeddings.embed_query("dimension probe"))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalize_rows(
            np.asarray(self.embeddings.embed_documents(list(texts)), dtype=np.float32)
        )

    def embed_query(self, text: str) -> np.ndarray:
        return normalize_rows(np.asarray(self.embeddings.embed_query(text), dtype=np.float32))


class HybridKBEmbeddings(Embeddings):
    """A hybridkb embedder offered as LangChain ``Embeddings``."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The embedder's vectors for ``texts`` as lists of floats (LangChain's shape)."""
        return [list(map(float, row)) for row in self.embedder.embed_documents(list(texts))]

    def embed_query(self, text: str) -> list[float]:
        """The query vector as a list of floats (a model may embed queries differently)."""
        return list(map(float, self.embedder.embed_query(text)))


def _user_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k != TEXT_KEY}


def stored_text(collection: Collection, doc: DocumentRecord) -> str | None:
    """A document's text: kept verbatim in metadata, or stitched back from its chunks."""
    if TEXT_KEY in doc.metadata:
        return str(doc.metadata[TEXT_KEY])
    if doc.chunk_count <= 0:
        return ""
    return collection.document_text(doc.document_id)


class HybridKBVectorStore(VectorStore):
    """A LangChain vector store over one hybridkb collection.

    Args:
        collection_name: The collection (created when missing).
        embedding: A LangChain embedding model; default: the knowledge base's model
            (``HYBRIDKB_MODEL``). A collection keeps the model it was created with.
        kb: An open knowledge base; default: ``hybridkb.connect(db, workspace=..., **kwargs)``.
        mode: Search used by ``similarity_search``: ``hybrid`` (default), ``vector``,
            ``keyword`` or ``filter``.
        db: Database for ``connect`` when ``kb`` is not given.
        workspace: Workspace for ``connect`` when ``kb`` is not given.
        **connect_kwargs: Settings overrides for ``connect`` (e.g. ``model="fake"``).
    """

    def __init__(
        self,
        collection_name: str = "langchain",
        embedding: Embeddings | None = None,
        *,
        kb: KnowledgeBase | None = None,
        mode: Mode = "hybrid",
        db: str | None = None,
        workspace: str | None = None,
        **connect_kwargs: Any,
    ) -> None:
        base = kb if kb is not None else connect(db, workspace=workspace, **connect_kwargs)
        self._embedding = embedding
        if embedding is not None:
            adapter = _EmbeddingsAdapter(embedding)
            self.kb: KnowledgeBase = base.with_embedder(adapter)
            model: str | None = adapter.model_id
        else:
            self.kb = base
            model = None
        if mode not in SEARCH_MODES:
            raise ConfigError(f"mode: unknown mode {mode!r}; use hybrid, vector, keyword or filter")
        self.mode: Mode = mode
        self.collection: Collection = self.kb.collection(collection_name, create=True, model=model)
        self.collection_name = self.collection.name
        stored_model = self.collection.record.model
        if embedding is None and stored_model.startswith("langchain:"):
            raise EmbeddingMismatch(
                f"collection {self.collection_name!r} was embedded with the LangChain model "
                f"{stored_model[len('langchain:') :]}; pass the same model as embedding="
            )

    # -- VectorStore API --------------------------------------------------------------

    @property
    def embeddings(self) -> Embeddings:
        """The embedding model given, else the collection's own model wrapped as LangChain
        ``Embeddings`` (loaded on first use)."""
        if self._embedding is not None:
            return self._embedding
        return HybridKBEmbeddings(self.kb.embedder_for(self.collection.record))

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Store each text as one document and return the ids (those given, else new UUIDs).

        A repeated id is an upsert: the last text under it wins. A text that its chunks
        cannot give back verbatim (whitespace normalised) is stored again with the original
        in its metadata, so :meth:`get_by_ids` returns exactly what was added.

        Raises:
            ConfigError: Lengths differ, a metadata key is reserved, or a text failed.
        """
        texts = list(texts)
        if metadatas is not None and len(metadatas) != len(texts):
            raise ConfigError(f"metadatas: {len(metadatas)} given for {len(texts)} texts")
        if ids is not None and len(ids) != len(texts):
            raise ConfigError(f"ids: {len(ids)} given for {len(texts)} texts")
        metas = [dict(m or {}) for m in metadatas] if metadatas is not None else [{} for _ in texts]
        if any(TEXT_KEY in m for m in metas):
            raise ConfigError(f"metadata key {TEXT_KEY!r} is reserved")
        # add_documents passes None for documents without an id: generate those.
        given: list[Any] = list(ids) if ids is not None else [None] * len(texts)
        out_ids = [str(i) if i else uuid.uuid4().hex for i in given]
        # The last of several texts given one id wins, as an upsert would.
        last = {doc_id: n for n, doc_id in enumerate(out_ids)}
        order = sorted(last.values())
        if not order:
            return []
        report = self.collection.add_texts(
            [texts[n] for n in order], [metas[n] for n in order], [out_ids[n] for n in order]
        )
        if report.failed:
            raise ConfigError("; ".join(f.error for f in report.failed))
        added = {f.document_id for f in report.added}
        for n in order:
            if out_ids[n] not in added:
                continue
            doc = self.collection.get(out_ids[n])
            if doc is not None and stored_text(self.collection, doc) != texts[n]:
                self.collection.add_texts(
                    [texts[n]], [{**metas[n], TEXT_KEY: texts[n]}], [out_ids[n]]
                )
        return out_ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete documents by id; ``ids=None`` deletes every document of the collection."""
        if ids is None:
            while True:
                page = self.collection.documents(limit=1000)
                if not page:
                    return True
                self.collection.delete([d.document_id for d in page])
        self.collection.delete([str(i) for i in ids])
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents with these ids, in the order given, repeats once; unknown ids left out."""
        docs = []
        for doc_id in dict.fromkeys(str(i) for i in ids):
            doc = self.collection.get(doc_id)
            if doc is not None:
                docs.append(self._document(doc))
        return docs

    def similarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | str | None = None, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` best documents (not chunks: each document once, at its best chunk's rank),
        searched in the store's ``mode``; ``filter`` is a hybridkb ``where``."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | str | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Best ``k`` documents with the search mode's score (higher is better)."""
        return [(doc, hit.score) for doc, hit in self._search(query, k, filter, kwargs.get("mode"))]

    def _similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        # Relevance in [0, 1] from the cosine similarity, whatever mode ranked them.
        found = self._search(query, k, kwargs.get("filter"), kwargs.get("mode"))
        return [(doc, _relevance(hit)) for doc, hit in found]

    def similarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | str | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """The ``k`` documents nearest to ``embedding`` (each once, at its best chunk), searching
        deeper when several of the best chunks share a document."""
        vec = np.asarray(embedding, dtype=np.float32)
        depth = max(4 * k, k + 10)
        while True:
            hits = self.collection.search_by_vector(vec, k=min(depth, MAX_K), where=filter)
            ids = list(dict.fromkeys(h.document_id for h in hits))
            if len(ids) >= k or len(hits) < depth or depth >= MAX_K:
                break
            depth *= 4
        return self.get_by_ids(ids[:k])

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | None = None,
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        collection_name: str = "langchain",
        kb: KnowledgeBase | None = None,
        **kwargs: Any,
    ) -> HybridKBVectorStore:
        """A store over ``collection_name`` (created when missing) with ``texts`` added."""
        store = cls(collection_name, embedding, kb=kb, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    # -- helpers ----------------------------------------------------------------------

    def _document(self, doc: DocumentRecord, hit: Hit | None = None) -> Document:
        text = stored_text(self.collection, doc)
        if text is None:  # only if chunks were changed behind our back
            text = hit.text if hit is not None else ""
        return Document(
            id=doc.document_id, page_content=text, metadata=_user_metadata(doc.metadata)
        )

    def _search(
        self, query: str, k: int, where: dict[str, Any] | str | None, mode: str | None
    ) -> list[tuple[Document, Hit]]:
        if k <= 0:
            return []
        depth = min(max(3 * k, k + 10), MAX_K)
        while True:
            hits = self.collection.search(query, k=depth, mode=mode or self.mode, where=where)
            best: dict[str, Hit] = {}
            for h in hits:
                best.setdefault(h.document_id, h)
            if len(best) >= k or len(hits) < depth or depth >= MAX_K:
                break
            depth = min(depth * 4, MAX_K)
        out = []
        for doc_id, hit in list(best.items())[:k]:
            doc = self.collection.get(doc_id)
            if doc is not None:
                out.append((self._document(doc, hit), hit))
        return out


def _relevance(hit: Hit) -> float:
    cosine = hit.scores.get("vector")
    return max(0.0, min(1.0, (1.0 + float(cosine)) / 2.0)) if cosine is not None else 0.0


class HybridKBRetriever(BaseRetriever):
    """Hybrid (BM25 + vector) search over a knowledge base, returning cited passages.

    Each ``Document`` is one passage (chunk): ``page_content`` is its text, ``id`` its
    chunk id, and ``metadata`` the document's own metadata plus ``metadata["hybridkb"]``
    with ``collection, filename, page, section, document_id, chunk_id, rank, score, scores``.

    Args:
        kb: An open knowledge base.
        collection_name: One collection, a list of them, or None for every collection.
        k: Passages to return (``invoke(query, k=...)`` overrides it).
        mode: ``hybrid`` (default), ``vector``, ``keyword`` or ``filter``.
        where: Metadata filter, e.g. ``{"year": {"$gte": 2023}}``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kb: Any
    collection_name: str | list[str] | None = None
    k: int = 4
    mode: Mode = "hybrid"
    where: dict[str, Any] | str | None = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k = int(kwargs.get("k", self.k))
        names = self.collection_name
        collections = [names] if isinstance(names, str) else names
        hits = self.kb.search(
            query,
            k=k,
            mode=kwargs.get("mode", self.mode),
            where=kwargs.get("where", self.where),
            collections=collections,
        )
        docs = []
        for h in hits:
            stored = self.kb[h.collection].get(h.document_id)
            meta = _user_metadata(stored.metadata) if stored is not None else {}
            meta["hybridkb"] = {
                "collection": h.collection,
                "filename": h.filename,
                "page": h.page,
                "section": h.section,
                "document_id": h.document_id,
                "chunk_id": h.chunk_id,
                "rank": h.rank,
                "score": h.score,
                "scores": dict(h.scores),
            }
            docs.append(Document(id=h.chunk_id, page_content=h.text, metadata=meta))
        return docs
