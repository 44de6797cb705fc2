"""One contract over the public API (the handles of hybridkb.kb and hybridkb.graph), run
at every door: a knowledge base this process opened (local DuckDB), and one another
process owns, served over a Unix socket and over loopback TCP, and Postgres (a server
this process talks to; marked ``postgres``). Each test runs once per door; where an
answer may differ by door, the test says why.

Also: what crosses to an owner is exactly the engine protocol's calls (hybridkb.engine),
and every handle method reaches its engine through one of them or the plumbing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from internals import through_owner
from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests
from owner_process import finish, start_owner_process

import hybridkb
from hybridkb import engine
from hybridkb.agents.langchain_store import HybridKBRetriever, HybridKBVectorStore
from hybridkb.agents.tools import make_tools
from hybridkb.embedders import FakeEmbedder
from hybridkb.errors import CollectionExists, CollectionNotFound, ConfigError
from hybridkb.graph_handle import Graph
from hybridkb.kb import Collection, KnowledgeBase
from hybridkb.serve.wire import WIRE

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

DOORS = ["local", "unix", "tcp", pytest.param("postgres", marks=pytest.mark.postgres)]


class Door:
    """A knowledge base reached through one door, and a folder its files live in."""

    def __init__(self, name: str, kb: KnowledgeBase, folder: Path) -> None:
        self.name = name
        self.kb = kb
        self.folder = folder

    @property
    def served(self) -> bool:
        return self.name in ("unix", "tcp")


@pytest.fixture(scope="module", params=DOORS)
def door(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Door]:
    name = str(request.param)
    folder = tmp_path_factory.mktemp(f"door-{name}")
    db = folder / "kb.duckdb"
    if name == "local":
        with hybridkb.connect(db, model="fake") as kb:
            yield Door(name, kb, folder)
        return
    if name == "postgres":  # a server this process talks to directly (no owner)
        import pg_server

        admin = request.getfixturevalue("pg_admin_url")
        template = request.getfixturevalue("pg_template")
        database = f"hkb_contract_{uuid.uuid4().hex[:8]}"
        url = pg_server.create_database(admin, database, template=template)
        try:
            with hybridkb.connect(url, model="fake") as kb:
                yield Door(name, kb, folder)
        finally:
            pg_server.drop_database(admin, database)
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HYBRIDKB_SERVE_TRANSPORT", name)
        proc = start_owner_process(db, folder, "--empty")
        try:
            with hybridkb.connect(db, model="fake") as kb:
                assert through_owner(kb)  # every call goes to the owner
                yield Door(name, kb, folder)
        finally:
            finish(proc)


@pytest.fixture
def coll(door: Door) -> Collection:
    """A fresh collection of its own for each test (the door's store is shared)."""
    return door.kb.create_collection(f"C {uuid.uuid4().hex[:8]}")


NOTES = [
    "The harbour lease runs for ten years from March.",
    "Receipts for the rental property go in the blue folder.",
    "Depreciation of the rental property is spread over forty years.",
]


def _fill(coll: Collection) -> None:
    coll.add_texts(NOTES, [{"n": n} for n in range(3)], ["lease", "receipts", "depreciation"])


# -- the declaration and the wire -------------------------------------------------------


def _methods(protocol: type) -> set[str]:
    return {n for n, v in vars(protocol).items() if not n.startswith("_") and callable(v)}


def test_the_wire_is_the_engine_protocol_and_nothing_else() -> None:
    # Derived, not kept: every flat call crosses by its own name, the graph's under
    # "graph.", and no plumbing or door member (models, closing, code objects) does.
    expected = _methods(engine.Engine) | {f"graph.{m}" for m in _methods(engine.GraphEngine)}
    assert set(WIRE) == expected
    stays = _methods(engine.Plumbing) | _methods(engine.Door)
    assert not stays & set(WIRE) and "graph" not in WIRE
    writes = {name for name, call in WIRE.items() if call.write is not None}
    assert {"add", "delete", "doctor", "graph.relate", "sync"} <= writes
    assert not {"search", "copy_to", "graph.export_folder", "sql"} & writes


def test_every_handle_method_is_a_call_or_plumbing() -> None:
    # A handle method either makes the flat call of its name (a collection's calls
    # name the collection; drop is drop_collection) or asks the door's plumbing.
    door_properties = {n for n, v in vars(engine.Door).items() if isinstance(v, property)}
    plumbing = (
        _methods(engine.Plumbing)
        | _methods(engine.Door)
        | door_properties  # storage, read_only
        | {"settings", "workspace"}
    )
    for handle, calls in (
        (KnowledgeBase, _methods(engine.Engine)),
        (Collection, _methods(engine.Engine) | {"drop"}),
        (Graph, _methods(engine.GraphEngine)),
    ):
        public = {n for n, v in vars(handle).items() if not n.startswith("_")}
        unplaced = public - calls - plumbing - {"graph", "record"}
        assert unplaced == set(), f"{handle.__name__}: {sorted(unplaced)}"


# -- collections -------------------------------------------------------------------------


def test_create_collection_records_its_settings(door: Door) -> None:
    name = f"Made {uuid.uuid4().hex[:6]}"
    made = door.kb.create_collection(name, chunk_strategy="size", chunk_size=300, chunk_overlap=0)
    assert made.name == name and made.record.chunking["size"] == 300
    info = door.kb.describe(name)
    assert (info.documents, info.embedding_model, info.chunking["strategy"]) == (0, "fake", "size")
    with pytest.raises(CollectionExists):
        door.kb.create_collection(name)
    assert door.kb.create_collection(name, exist_ok=True).name == name


def test_a_missing_collection_is_reported_the_same_at_every_door(door: Door) -> None:
    with pytest.raises(CollectionNotFound, match="'Nope' not found in workspace 'default'"):
        door.kb.collection("Nope")
    with pytest.raises(CollectionNotFound):
        door.kb.record("Nope")
    assert door.kb["Nope"].name == "Nope"  # a lazy handle: nothing read yet
    made = door.kb.collection(f"New {uuid.uuid4().hex[:6]}", create=True)
    assert made.name in door.kb.collection_names()


def test_list_collections_and_workspaces_are_separate(door: Door, coll: Collection) -> None:
    assert coll.name in {c.name for c in door.kb.list_collections()}
    other = door.kb.in_workspace(f"ws-{uuid.uuid4().hex[:6]}")
    assert other.collection_names() == []
    other.create_collection("Only there")
    assert "Only there" not in door.kb.collection_names()


def test_drop_removes_the_collection(door: Door, coll: Collection) -> None:
    coll.drop()
    assert coll.name not in door.kb.collection_names()
    with pytest.raises(CollectionNotFound):
        door.kb.drop_collection(coll.name)


# -- documents ---------------------------------------------------------------------------


def test_add_texts_is_idempotent_by_id(coll: Collection) -> None:
    first = coll.add_texts(["One note."], ids=["a"])
    again = coll.add_texts(["One note."], ids=["a"])
    assert [f.document_id for f in first.added] == ["a"]
    assert [f.document_id for f in again.unchanged] == ["a"] and coll.count() == 1


def test_add_files_confined_to_the_callers_folders(door: Door, coll: Collection) -> None:
    inside = door.folder / "inside"
    inside.mkdir(exist_ok=True)
    (inside / "memo.md").write_text("# Travel\n\nMileage is paid at 0.30 per km.")
    (door.folder / "outside.txt").write_text("Not in the agent's folder.")
    report = coll.add([inside / "memo.md", door.folder / "outside.txt"], allowed_paths=[inside])
    assert [f.filename for f in report.added] == ["memo.md"]
    assert [f.code for f in report.failed] == ["access_denied"]
    assert [f.filename for f in coll.add([door.folder / "outside.txt"]).added] == ["outside.txt"]


def test_delete_reports_missing_ids(coll: Collection) -> None:
    _fill(coll)
    report = coll.delete(["lease", "nope"])
    assert (report.deleted, report.not_found) == (["lease"], ["nope"])
    assert coll.get("lease") is None and coll.count() == 2


def test_get_chunks_and_text_give_the_document_back(coll: Collection) -> None:
    _fill(coll)
    doc = coll.get("receipts")
    assert doc is not None and doc.metadata == {"n": 1}
    assert "".join(c.text for c in coll.chunks("receipts")) == NOTES[1]
    assert coll.document_text("receipts") == NOTES[1]
    assert coll.chunks("nope") == [] and coll.document_text("nope") is None


def test_documents_page_and_count(coll: Collection) -> None:
    _fill(coll)
    page = coll.documents(limit=2, offset=1)
    assert len(page) == 2 and coll.count() == 3 == coll.describe().documents


# -- search ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "vector"])
def test_search_finds_the_note(coll: Collection, mode: str) -> None:
    _fill(coll)
    hits = coll.search("harbour lease", k=1, mode=mode)
    assert [h.document_id for h in hits] == ["lease"] and hits[0].collection == coll.name


def test_search_filters_and_spans_collections(door: Door, coll: Collection) -> None:
    _fill(coll)
    hits = door.kb.search("rental property", k=5, where={"n": 2}, collections=[coll.name])
    assert [h.document_id for h in hits] == ["depreciation"]


def test_search_by_vector_with_the_callers_embedding(door: Door, coll: Collection) -> None:
    _fill(coll)
    vector = door.kb.embedder_for(coll.record).embed_query("harbour lease ten years")
    assert coll.search_by_vector(vector, k=1)[0].document_id == "lease"


def test_a_callers_own_embedder_is_used(door: Door) -> None:
    # Served: the embedder stays in this process and the owner asks it for vectors.
    kb = door.kb.with_embedder(FakeEmbedder(8))
    made = kb.create_collection(f"Eight {uuid.uuid4().hex[:6]}", model="fake:8")
    made.add_texts(NOTES, ids=["a", "b", "c"])
    assert made.record.dim == 8 and made.search("harbour", k=1, mode="vector")


def test_a_reranker_object_works_only_where_the_store_was_opened(door: Door) -> None:
    class Reversed:
        name = "reversed"

        def score(self, query: str, texts: Any) -> list[float]:
            return [-float(n) for n in range(len(texts))]

    if door.served:  # a model object cannot cross processes: the owner ranks with its own
        with pytest.raises(ConfigError, match="HYBRIDKB_RERANKER"):
            door.kb.with_reranker(Reversed())
    else:
        assert door.kb.with_reranker(Reversed()).reranker() is not None


# -- graph and maintenance ---------------------------------------------------------------


def test_graph_links_queries_and_export(door: Door, coll: Collection) -> None:
    _fill(coll)
    g = door.kb.graph
    found = g.search("rental property depreciation", search_limit=1, collections=[coll.name])
    chunk = g.node_of_chunk(found.results[0].seed.chunk_id)
    other = g.add_node(f"topic:{uuid.uuid4().hex[:6]}", "topic")
    edge = g.relate(chunk.id, other.id, "about")
    assert edge.type == "about" and g.has_node(other.id)
    assert other.id in {n.node.id for n in g.neighbors(chunk.id, limit=50).neighbors}
    assert g.find_paths(chunk.id, other.id, max_depth=1).paths
    assert g.unrelate(chunk.id, other.id, "about") and g.remove_node(other.id)
    assert "<graphml" in g.export(collection=coll.name)
    assert g.stats()["workspace"] == "default"
    if door.served:  # an extractor is code: it cannot cross processes
        with pytest.raises(ConfigError, match="its own extractors"):
            g.add_extractor(object())  # type: ignore[arg-type]


def test_maintenance_verbs(door: Door, coll: Collection) -> None:
    _fill(coll)
    assert [h.collection for h in door.kb.doctor(coll.name)] == [coll.name]
    if door.name == "postgres":  # doctor and compact are the server's checks and VACUUM/REINDEX
        assert isinstance(door.kb.compact(), dict)
        with pytest.raises(ConfigError):  # reembed: through copy to DuckDB and back
            door.kb.reembed(coll.name, progress=False)
        return
    assert door.kb.reembed(coll.name, progress=False)["chunks"] == 3
    assert isinstance(door.kb.compact(), dict)
    rows = door.kb.sql(
        f"SELECT count(*) AS n FROM kb_documents WHERE collection = '{coll.name}'"
    ).rows
    assert rows == [(3,)]
    copied = door.kb.copy_to(str(door.folder / f"copy-{uuid.uuid4().hex[:6]}.duckdb"))
    assert coll.name in {c if isinstance(c, str) else c["name"] for c in copied["collections"]}


# -- the seven agent tools ----------------------------------------------------------------


def test_the_seven_agent_tools(door: Door) -> None:
    tools = {t.name: t for t in make_tools(door.kb, allowed_paths=[door.folder])}
    name = f"Tools {uuid.uuid4().hex[:6]}"
    (door.folder / "fees.md").write_text("# Fees\n\nHarbour fees are paid in April.")
    assert name in tools["create_kb_collection"].invoke({"collection_name": name})
    added = tools["add_kb_documents"].invoke(
        {"collection_name": name, "documents": str(door.folder / "fees.md")}
    )
    assert "fees.md" in added
    assert "Harbour fees" in tools["search_kb"].invoke({"query": "harbour fees", "limit": 1})
    assert name in tools["kb_list"].invoke({})
    assert "fees.md" in tools["describe_kb_collection"].invoke({"collection_name": name})
    assert (
        "deleted"
        in tools["delete_kb_documents"].invoke({"collection_name": name, "ids": "fees.md"}).lower()
    )
    tools["drop_kb_collection"].invoke({"collection_name": name})
    assert name not in door.kb.collection_names()


# -- LangChain ---------------------------------------------------------------------------


def test_the_langchain_store_and_retriever(door: Door) -> None:
    store = HybridKBVectorStore(f"LC {uuid.uuid4().hex[:6]}", kb=door.kb)
    store.add_documents([Document(t, id=i) for t, i in zip(NOTES, ["a", "b", "c"], strict=True)])
    assert [d.id for d in store.similarity_search("harbour lease", k=1)] == ["a"]
    found = HybridKBRetriever(kb=door.kb, collection_name=store.collection_name, k=1)
    assert found.invoke("blue folder")[0].metadata["hybridkb"]["document_id"] == "b"
    assert store.delete(["a"]) and store.get_by_ids(["a"]) == []


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
class TestTheLangChainStandardSuiteAtEveryDoor(VectorStoreIntegrationTests):
    """LangChain's own VectorStore suite on the served doors and Postgres
    (test_langchain_standard.py runs it on a DuckDB store this process opened)."""

    @pytest.fixture
    def vectorstore(self, door: Door) -> Iterator[VectorStore]:
        if door.name == "local":
            pytest.skip("the local door runs this suite in test_langchain_standard.py")
        yield HybridKBVectorStore(f"std {uuid.uuid4().hex[:8]}", self.get_embeddings(), kb=door.kb)
