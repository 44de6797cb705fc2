"""LangChain's own standard suites (langchain-tests) for the tools, the VectorStore and the retriever.

The tool suites run once per tool; each test gets a fresh in-memory knowledge base
with a "Tax Documents" collection holding one note, so the example calls succeed.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.tools import BaseTool
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import (
    RetrieversIntegrationTests,
    ToolsIntegrationTests,
    VectorStoreIntegrationTests,
)
from langchain_tests.unit_tests import ToolsUnitTests

import hybridkb
from hybridkb.agents.langchain_store import TEXT_KEY, HybridKBRetriever, HybridKBVectorStore
from hybridkb.agents.tools import make_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _seeded_kb(name: str) -> hybridkb.KnowledgeBaseAPI:
    """A fresh in-memory knowledge base holding just what the tool's example call needs."""
    kb = hybridkb.connect(":memory:", model="fake", enable_sql_tool=True)
    if name in (
        "search_kb",
        "describe_kb_collection",
        "drop_kb_collection",
        "add_kb_documents",
        "delete_kb_documents",
    ):
        coll = kb.create_collection("Tax Documents")
        if name in ("search_kb", "delete_kb_documents"):
            coll.add_texts(["Depreciation of equipment is spread over five years."], ids=["note-1"])
    return kb


_SCHEMA_ONLY: dict[str, BaseTool] = {}  # unit suites only read schemas: one tool each


EXAMPLES: dict[str, dict[str, Any]] = {
    "create_kb_collection": {"collection_name": "Receipts", "documents": "Lunch with client: $42"},
    "search_kb": {"query": "depreciation", "collection_name": "Tax Documents", "limit": 3},
    "kb_list": {},
    "describe_kb_collection": {"collection_name": "Tax Documents"},
    "drop_kb_collection": {"collection_name": "Tax Documents"},
    "add_kb_documents": {"collection_name": "Tax Documents", "documents": "Mileage: 1,200 km"},
    "delete_kb_documents": {"collection_name": "Tax Documents", "ids": "note-1"},
    "query_kb_sql": {"sql": "SELECT collection, count(*) AS n FROM kb_documents GROUP BY 1"},
}


def _tool_suite(name: str, base: type) -> type:
    class Suite(base):  # type: ignore[misc]  # a base class chosen at run time
        # Cached: the suites' `tool` fixture reads it twice, which built two knowledge bases
        # per test. pytest makes a new instance for every test, so no test sees another's.
        @functools.cached_property
        def tool_constructor(self) -> BaseTool:
            if base is ToolsUnitTests:
                if name not in _SCHEMA_ONLY:
                    _SCHEMA_ONLY[name] = {t.name: t for t in make_tools(_seeded_kb(""))}[name]
                return _SCHEMA_ONLY[name]
            return {t.name: t for t in make_tools(_seeded_kb(name))}[name]

        @property
        def tool_invoke_params_example(self) -> dict[str, Any]:
            return dict(EXAMPLES[name])

    Suite.__name__ = Suite.__qualname__ = f"Test{base.__name__}_{name}"
    if name == "query_kb_sql" and base is ToolsIntegrationTests:
        # Invoking it runs the query in a worker process (hybridkb/sql/worker.py).
        return pytest.mark.process(Suite)
    return Suite


for _name in EXAMPLES:
    for _base in (ToolsUnitTests, ToolsIntegrationTests):
        _cls = _tool_suite(_name, _base)
        globals()[_cls.__name__] = _cls
del _cls, _base, _name


class TestHybridKBVectorStore(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self) -> Iterator[VectorStore]:
        kb = hybridkb.connect(":memory:", model="fake")
        try:
            yield HybridKBVectorStore("standard", self.get_embeddings(), kb=kb)
        finally:
            kb.close()


class TestHybridKBVectorStoreOwnModel(VectorStoreIntegrationTests):
    """The same suite with the knowledge base's own embedder instead of LangChain's."""

    @pytest.fixture
    def vectorstore(self) -> Iterator[VectorStore]:
        kb = hybridkb.connect(":memory:", model="fake")
        try:
            yield HybridKBVectorStore("standard", kb=kb)
        finally:
            kb.close()


def _retriever_kb() -> hybridkb.KnowledgeBaseAPI:
    kb = hybridkb.connect(":memory:", model="fake")
    texts = [f"Depreciation note {i}: assets lose value over {i + 2} years." for i in range(6)]
    kb.create_collection("Tax Documents").add_texts(texts, [{"n": i} for i in range(6)])
    return kb


class TestHybridKBRetriever(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[HybridKBRetriever]:
        return HybridKBRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"kb": _retriever_kb(), "collection_name": "Tax Documents"}

    @property
    def retriever_query_example(self) -> str:
        return "how fast do assets depreciate?"


# -- our own promises beyond the standard suites -----------------------------------------


@pytest.fixture
def store() -> Iterator[HybridKBVectorStore]:
    kb = hybridkb.connect(":memory:", model="fake", chunk_size=200, chunk_overlap=40)
    try:
        yield HybridKBVectorStore("docs", kb=kb)
    finally:
        kb.close()


def test_long_text_comes_back_exactly_although_chunked(store: HybridKBVectorStore) -> None:
    text = (
        "\n\n".join(
            f"  Paragraph {i}:\tthe  depreciation\u00a0schedule   spans {i} years.  " * 3
            for i in range(8)
        )
        + "\n"
    )
    meta = {"filename": "mine.txt", "page": 7, "nested": {"a": [1, 2]}, "source": "user"}
    [doc_id] = store.add_documents([Document(text, metadata=meta)])
    stored = store.collection.get(doc_id)
    assert stored is not None and stored.chunk_count > 1
    [got] = store.get_by_ids([doc_id])
    assert got.page_content == text
    assert got.metadata == meta  # exactly as given, nothing of ours
    [found] = store.similarity_search("depreciation schedule", k=1)
    assert found == Document(id=doc_id, page_content=text, metadata=meta)


def test_plain_text_round_trips_without_a_stored_copy(store: HybridKBVectorStore) -> None:
    text = "Short, already normal text."
    [doc_id] = store.add_texts([text])
    stored = store.collection.get(doc_id)
    assert stored is not None and TEXT_KEY not in stored.metadata
    assert store.get_by_ids([doc_id])[0].page_content == text


def test_search_returns_each_document_once(store: HybridKBVectorStore) -> None:
    long_text = " ".join(f"Depreciation detail number {i}." for i in range(60))
    store.add_texts(
        [long_text, "Depreciation in brief.", "Unrelated gardening tips."],
        ids=["long", "brief", "garden"],
    )
    docs = store.similarity_search("depreciation detail", k=3)
    assert [d.id for d in docs][:2] == ["long", "brief"]
    assert len({d.id for d in docs}) == len(docs) == 3


def test_filter_mode_scores_and_vector_search(store: HybridKBVectorStore) -> None:
    store.add_texts(
        ["apples in 2023", "apples in 2024"], [{"year": 2023}, {"year": 2024}], ids=["a", "b"]
    )
    assert [d.id for d in store.similarity_search("apples", k=2, filter={"year": 2024})] == ["b"]
    assert store.similarity_search("apples", k=1, mode="keyword")[0].metadata in (
        {"year": 2023},
        {"year": 2024},
    )
    scored = store.similarity_search_with_relevance_scores("apples in 2024", k=2)
    assert scored[0][0].id == "b" and all(0.0 <= s <= 1.0 for _, s in scored)
    vec = store.embeddings.embed_query("apples in 2023")
    assert store.similarity_search_by_vector(vec, k=1)[0].id == "a"


def test_delete_all_and_reserved_key(store: HybridKBVectorStore) -> None:
    store.add_texts(["one", "two"])
    store.delete()
    assert store.collection.count() == 0
    with pytest.raises(hybridkb.ConfigError, match="reserved"):
        store.add_texts(["x"], [{TEXT_KEY: "y"}])


def test_as_retriever_uses_hybrid_search(store: HybridKBVectorStore) -> None:
    store.add_texts(
        ["The SKU X-1138 is discontinued.", "Our products are great."], ids=["sku", "p"]
    )
    docs = store.as_retriever(search_kwargs={"k": 1}).invoke("X-1138")
    assert [d.id for d in docs] == ["sku"]


def test_store_and_model_must_agree(tmp_path: Any) -> None:
    kb = hybridkb.connect(tmp_path / "m.duckdb", model="fake")
    try:
        HybridKBVectorStore("c", DeterministicFakeEmbedding(size=6), kb=kb)
        with pytest.raises(hybridkb.EmbeddingMismatch):
            HybridKBVectorStore("c", kb=kb)  # created with the LangChain model
    finally:
        kb.close()


def test_retriever_passages_carry_citations() -> None:
    kb = _retriever_kb()
    kb.create_collection("Other").add_texts(["Depreciation elsewhere."], [{"src": "x"}], ids=["o1"])
    docs = HybridKBRetriever(kb=kb, k=10).invoke("depreciation")
    assert {d.metadata["hybridkb"]["collection"] for d in docs} == {"Tax Documents", "Other"}
    other = next(d for d in docs if d.metadata["hybridkb"]["collection"] == "Other")
    assert other.metadata["src"] == "x" and other.metadata["hybridkb"]["document_id"] == "o1"
    assert other.id == other.metadata["hybridkb"]["chunk_id"]
    only = HybridKBRetriever(kb=kb, collection_name=["Other"], k=5).invoke("depreciation")
    assert [d.metadata["hybridkb"]["document_id"] for d in only] == ["o1"]
    filtered = HybridKBRetriever(kb=kb, collection_name="Tax Documents", where={"n": 3}).invoke("x")
    assert [d.metadata["n"] for d in filtered] == [3]
    kb.close()


def test_unique_ids_are_generated() -> None:
    kb = hybridkb.connect(":memory:", model="fake")
    store = HybridKBVectorStore("u", kb=kb)
    ids = store.add_texts(["same", "same"])
    assert len(set(ids)) == 2 and all(uuid.UUID(i) for i in ids)
    kb.close()


def test_tools_search_all_skips_langchain_embedded_collections() -> None:
    kb = hybridkb.connect(":memory:", model="fake")
    HybridKBVectorStore("lc", DeterministicFakeEmbedding(size=6), kb=kb).add_texts(["hello there"])
    kb.create_collection("own").add_texts(["hello again"])
    search = {t.name: t for t in make_tools(kb)}["search_kb"]
    text = search.invoke({"query": "hello"})
    assert "hello again" in text and "skipped" in text and "'lc'" in text
    kb.close()
