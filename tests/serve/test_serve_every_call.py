"""A script on a file that another process owns can call every public method and use
the LangChain store and retriever exactly as on a file it opened itself (issue 24:
Collection.chunks, Collection.record, KnowledgeBase.record, with_embedder and the
HybridKBVectorStore constructor failed with DatabaseLocked)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from internals import through_owner
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from owner_process import finish, start_owner_process
from rerankers import WordCount

import hybridkb
from hybridkb.agents.langchain_store import HybridKBRetriever, HybridKBVectorStore
from hybridkb.embedders import FakeEmbedder
from hybridkb.kb import Collection, KnowledgeBase

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)


@pytest.fixture(params=["unix", "tcp"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    monkeypatch.setenv("HYBRIDKB_SERVE_TRANSPORT", request.param)
    db = tmp_path / "kb.duckdb"
    proc: subprocess.Popen[str] = start_owner_process(db, tmp_path)
    yield db
    finish(proc)


@pytest.mark.parametrize("embedding", [None, DeterministicFakeEmbedding(size=16)])
def test_the_langchain_store_and_retriever_work_through_an_owner(
    served: Path, embedding: DeterministicFakeEmbedding | None
) -> None:
    with hybridkb.connect(served, model="fake") as kb:
        assert through_owner(kb)
        store = HybridKBVectorStore("Notes", embedding, kb=kb)
        ids = store.add_texts(
            ["The harbour lease runs ten years.", "Receipts go in the blue folder."],
            metadatas=[{"kind": "lease"}, {"kind": "receipt"}],
            ids=["lease", "receipt"],
        )
        assert ids == ["lease", "receipt"]
        found = store.similarity_search("harbour lease", k=1)
        assert [d.id for d in found] == ["lease"] and found[0].metadata == {"kind": "lease"}
        assert store.similarity_search("blue folder", k=1, mode="vector")
        assert [d.id for d in store.get_by_ids(["receipt"])] == ["receipt"]
        retrieved = store.as_retriever(search_kwargs={"k": 1}).invoke("harbour lease")
        assert [d.id for d in retrieved] == ["lease"]
        passages = HybridKBRetriever(kb=store.kb, collection_name="Notes", k=1).invoke("lease")
        assert passages[0].metadata["hybridkb"]["document_id"] == "lease"
        store.add_documents([Document("Mileage is paid per km.", id="mileage")])
        assert store.delete(["receipt"]) is True
        assert sorted(d.document_id for d in store.collection.documents()) == ["lease", "mileage"]
        assert store.collection.record.model == (
            "fake" if embedding is None else store.kb.embedder_for(store.collection.record).model_id
        )


def declared(handle: type) -> set[str]:
    """The public methods and properties of a handle class (KnowledgeBase, Collection,
    Graph)."""
    dunders = {"__getitem__", "__enter__", "__exit__"}
    return {
        name
        for name, value in vars(handle).items()
        if (not name.startswith("_") or name in dunders)
        and (callable(value) or isinstance(value, property))
    }


def _every_public_call(kb: KnowledgeBase, folder: Path) -> dict[str, Callable[[], Any]]:
    """One call of every public method and property of KnowledgeBase and Collection."""
    (folder / "memo.md").write_text("# Travel\n\nMileage is paid at 0.30 per km.")
    tax = kb.collection("Tax")
    tax.add_texts(["The harbour lease runs ten years."], ids=["lease"])
    kb_calls: dict[str, Callable[[], Any] | None] = {  # None: checked elsewhere
        "settings": lambda: kb.settings.model,
        "workspace": lambda: kb.workspace,
        "read_only": lambda: kb.read_only,
        "storage": None,  # the file itself: DatabaseLocked through an owner (test_serve)
        "graph": lambda: kb.graph.stats()["workspace"],
        "in_workspace": lambda: kb.in_workspace("other").collection_names(),
        "with_embedder": lambda: (
            kb.with_embedder(FakeEmbedder(8))
            .create_collection("Small", model="fake:8")
            .add_texts(["eight dims"], ids=["e"])
            .added[0]
            .document_id
        ),
        "with_reranker": None,  # refused through an owner: see the test
        "reranker": lambda: kb.reranker(),
        "embedder": lambda: kb.embedder("fake").dim,
        "prepare_search": lambda: kb.prepare_search(),
        "prepare_graph": lambda: kb.prepare_graph(),
        "embedder_for": lambda: kb.embedder_for(kb.record("Tax")).dim,
        # Differs by door: a client embeds nothing here, so it has no cache (the owner has).
        "embedding_cache": lambda: (kb.embedding_cache() is None) == through_owner(kb),
        "create_collection": lambda: kb.create_collection("Made").name,
        "collection": lambda: kb.collection("Made").name,
        "record": lambda: kb.record("Tax").name,
        "list_collections": lambda: sorted(c.name for c in kb.list_collections()),
        "collection_names": lambda: sorted(kb.collection_names()),
        "describe": lambda: kb.describe("Tax").documents,
        "drop_collection": lambda: kb.drop_collection("Made"),
        "search": lambda: [h.document_id for h in kb.search("harbour", k=1, mode="keyword")],
        "close": None,  # at the end, by the with block
        "__enter__": None,
        "__exit__": None,
        "__getitem__": lambda: kb["Tax"].count(),
        "warm_up": lambda: kb.warm_up(),
        "doctor": lambda: [h.collection for h in kb.doctor("Tax")],
        "reembed": lambda: kb.reembed("Tax")["chunks"],
        "compact": lambda: sorted(kb.compact()),
        "copy_to": lambda: kb.copy_to(str(folder / f"copy-{id(kb)}.duckdb"))["collections"],
        "sql": lambda: kb.sql("SELECT count(*) AS n FROM kb_documents").rows,
    }
    coll_calls: dict[str, Callable[[], Any]] = {
        "record": lambda: tax.record.name,
        "add": lambda: [f.filename for f in tax.add([folder / "memo.md"]).added],
        "add_texts": lambda: tax.add_texts(["Receipts in blue."], ids=["r"]).added[0].document_id,
        "search": lambda: [h.document_id for h in tax.search("receipts", k=1, mode="keyword")],
        "delete": lambda: tax.delete(["r", "nope"]).not_found,
        "get": lambda: tax.get("lease") is not None,
        "chunks": lambda: [c.text for c in tax.chunks("lease")],
        "document_text": lambda: tax.document_text("lease"),
        "search_by_vector": lambda: [
            h.document_id
            for h in tax.search_by_vector(kb.embedder("fake").embed_query("harbour lease"), k=1)
        ],
        "documents": lambda: sorted(d.filename or d.document_id for d in tax.documents()),
        "describe": lambda: tax.describe().name,
        "count": lambda: tax.count(),
        "sync": lambda: {k: len(v) for k, v in tax.sync().to_dict().items() if isinstance(v, list)},
        "sources": lambda: [Path(src["path"]).name for src in tax.sources()],
        "remove_source": lambda: len(tax.remove_source(folder / "memo.md").deleted),
        "drop": lambda: kb.collection("Small").drop(),
    }
    public_kb = declared(KnowledgeBase)
    public_coll = declared(Collection)
    assert set(kb_calls) == public_kb, "a public method without a call here"
    assert set(coll_calls) == public_coll, "a public method without a call here"
    calls = {f"kb.{k}": v for k, v in kb_calls.items() if v is not None}
    calls.update({f"collection.{k}": v for k, v in coll_calls.items()})
    return calls


def _results(kb: KnowledgeBase, folder: Path) -> dict[str, Any]:
    kb.create_collection("Tax", exist_ok=True)
    return {name: call() for name, call in _every_public_call(kb, folder).items()}


def test_every_public_method_gives_the_same_answer_through_an_owner(
    served: Path, tmp_path: Path
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    with hybridkb.connect(here / "kb.duckdb", model="fake") as kb:
        direct = _results(kb, here)
    with hybridkb.connect(served, model="fake") as kb:
        assert through_owner(kb)
        through = _results(kb, here)
        with pytest.raises(hybridkb.ConfigError, match="ranks for this process"):
            kb.with_reranker(WordCount("lease"))  # a model object cannot cross processes
    assert through == direct
