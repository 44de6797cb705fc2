"""The backend contract: every storage backend keeps the same promises.

``StorageContract`` is abstract: its ``db_url`` fixture returns the URL of an EMPTY
store. Each backend subclasses it once (DuckDB in a tmp file, PostgreSQL in a fresh
database on a throwaway server), so a promise is written once and checked on both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from internals import local, through_owner
from owner_process import start_owner_process, stop
from streams import Batches, streamed_batches

import hybridkb
from hybridkb.errors import CollectionExists, CollectionNotFound, InvalidFilter, KBError
from hybridkb.index.keywords import KeywordIndex
from hybridkb.storage.base import (
    DocumentRecord,
    FileState,
    SourceRecord,
    WriteEvent,
)
from hybridkb.text.analysis import analyze
from hybridkb.text.filters import matches, parse_filter

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

MODES = ("hybrid", "vector", "keyword", "filter")

# 48 small documents with metadata that exercises every filter operator.
COLORS = ["red", "green", "blue"]


def _token(i: int) -> str:
    """A letters-only word found in document i alone (analysers keep it whole)."""
    return "zq" + "".join(chr(97 + int(c)) for c in f"{i:02d}") + "zq"


DOCS: list[dict[str, Any]] = [
    {
        "id": f"doc{i:02d}",
        "text": f"Report {i} on {COLORS[i % 3]} apples and pears. "
        + ("Depreciation schedule for assets. " if i % 4 == 0 else "Orchard notes. ")
        + f"Token {_token(i)}.",
        "meta": {
            "n": i,
            "color": COLORS[i % 3],
            "flag": i % 2 == 0,
            **({"year": 2000 + i % 5} if i % 6 else {}),  # some lack the key
            "odd key/~": i % 4,
        },
    }
    for i in range(48)
]

FILTERS: list[dict[str, Any]] = [
    {"color": "red"},
    {"n": 7},
    {"flag": True},
    {"year": None},
    {"color": {"$ne": "blue"}},
    {"year": {"$ne": 2001}},
    {"color": {"$in": ["red", "blue"]}},
    {"color": {"$nin": ["red"]}},
    {"n": {"$gt": 40}},
    {"n": {"$gte": 40, "$lt": 44}},
    {"year": {"$lte": 2001}},
    {"odd key/~": 3},
    {"missing": "x"},
    {"missing": {"$ne": "x"}},
    {"document_id": "doc05"},
    {"document_id": {"$in": ["doc01", "doc02", "doc40"]}},
    {"chunk_index": 0},
    {"language": "en"},
    {"color": "green", "n": {"$lt": 20}},
    {"$or": [{"n": 1}, {"color": "blue", "flag": True}]},
    {"$and": [{"color": "red"}, {"$or": [{"n": {"$lt": 5}}, {"n": {"$gt": 44}}]}]},
]


# The filters a document (not a chunk) can be tested with: no chunk-only field.
DOCUMENT_FILTERS: list[dict[str, Any]] = [
    *(w for w in FILTERS if "chunk_index" not in json.dumps(w)),
    {"filename": None},
    {"added_at": {"$gte": "2000-01-01"}},
    {"$or": [{"document_id": {"$lt": "doc03"}}, {"year": 2004, "flag": False}]},
]


def _nested(depth: int) -> dict[str, Any]:
    """A filter ``depth`` ``$and`` levels deep."""
    found: dict[str, Any] = {"n": 1}
    for _ in range(depth):
        found = {"$and": [found]}
    return found


# Each refused with one line naming what is wrong, before anything is read.
HOSTILE_DOCUMENT_FILTERS: list[Any] = [
    {"page": 3},  # a passage's field: a document has no page
    {"$or": [{"color": "red"}, {"chunk_id": "x"}]},
    {"color": {"$regex": ".*"}},
    {"$where": "1=1; DROP TABLE hybridkb_collections"},
    '{"color": "red"',
    {"n": [1, 2]},
    {"n": {"$in": []}},
    {"$or": [{"n": i} for i in range(2000)]},  # past the filter's node budget
    _nested(40),  # past the depth budget
    "x" * 100_000,
]


def _row(doc: dict[str, Any]) -> dict[str, Any]:
    """The fields a filter sees for the (single) chunk of a test document."""
    return {**doc["meta"], "document_id": doc["id"], "chunk_index": 0, "language": "en"}


def _document_row(doc: DocumentRecord) -> dict[str, Any]:
    """The fields a filter sees for a document: its metadata and its catalog columns."""
    fields = ("filename", "path", "document_id", "content_hash", "added_at", "language")
    return {**doc.metadata, **{name: getattr(doc, name) for name in fields}}


def _ids(hits: list[hybridkb.Hit]) -> list[str]:
    return [h.document_id for h in hits]


def _fill(
    kb: hybridkb.KnowledgeBaseAPI, docs: list[dict[str, Any]] = DOCS
) -> hybridkb.CollectionAPI:
    coll = kb.create_collection("Fruit Reports", language="en")
    report = coll.add_texts(
        [d["text"] for d in docs], metadatas=[d["meta"] for d in docs], ids=[d["id"] for d in docs]
    )
    assert report.ok and len(report.added) == len(docs)
    return coll


SMALL = DOCS[:8]


class StorageContract:
    """Promises every backend keeps. Subclasses provide ``db_url`` (an empty store)."""

    # Tests a subclass leaves out, with why (a client has no storage of its own).
    not_here: ClassVar[dict[str, str]] = {}

    @pytest.fixture(autouse=True)
    def _applies(self, request: pytest.FixtureRequest) -> None:
        why = self.not_here.get(request.node.originalname)
        if why:
            pytest.skip(why)

    @pytest.fixture
    def db_url(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def empty_kb(self, db_url: str) -> Iterator[hybridkb.KnowledgeBaseAPI]:
        with hybridkb.connect(db_url, model="fake") as kb:
            yield kb

    @pytest.fixture(scope="class")
    def shared_url(self) -> str:
        """An empty store made once per backend class (for the read-only tests)."""
        raise NotImplementedError

    @pytest.fixture(scope="class")
    def shared(
        self, shared_url: str, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[hybridkb.CollectionAPI]:
        """DOCS in one collection, written once per backend; tests using it must not write."""
        cache = tmp_path_factory.mktemp("cache")
        with hybridkb.connect(shared_url, model="fake", cache_dir=cache) as kb:
            yield _fill(kb)

    @pytest.fixture
    def filled(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> hybridkb.CollectionAPI:
        """The first 8 DOCS in a fresh store, for tests that change it."""
        return _fill(empty_kb, SMALL)

    # -- catalog --------------------------------------------------------------------

    def test_store_starts_empty(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        assert empty_kb.collection_names() == []
        assert empty_kb.list_collections() == []
        assert empty_kb.search("anything", k=3) == []

    def test_create_describe_and_list_collections(
        self, empty_kb: hybridkb.KnowledgeBaseAPI
    ) -> None:
        empty_kb.create_collection("Tax Documents")
        empty_kb.create_collection('l\'été "quoted"; DROP TABLE x; --')
        assert empty_kb.collection_names() == sorted(
            ["Tax Documents", 'l\'été "quoted"; DROP TABLE x; --']
        )
        info = empty_kb.describe("Tax Documents")
        assert (info.documents, info.chunks, info.dim, info.embedding_model) == (0, 0, 64, "fake")
        assert info.chunking["strategy"] == "paragraph"
        assert info.workspace == "default"

    def test_listing_counts_follow_every_write(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        a, b = empty_kb.create_collection("A"), empty_kb.create_collection("B")

        def counts() -> dict[str, tuple[int, int]]:
            listed = {i.name: (i.documents, i.chunks) for i in empty_kb.list_collections()}
            described = {
                n: (empty_kb.describe(n).documents, empty_kb.describe(n).chunks) for n in ("A", "B")
            }
            assert listed == described
            return listed

        assert counts() == {"A": (0, 0), "B": (0, 0)}
        a.add_texts(["one", "two"], ids=["1", "2"])
        assert counts() == {"A": (2, 2), "B": (0, 0)}
        b.add_texts(["three"], ids=["3"])
        a.delete("1")
        assert counts() == {"A": (1, 1), "B": (1, 1)}
        info = next(i for i in empty_kb.list_collections() if i.name == "B")
        assert info.languages and info.bytes > 0
        empty_kb.drop_collection("A")
        assert [i.name for i in empty_kb.list_collections()] == ["B"]

    def test_duplicate_collection_is_refused(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        empty_kb.create_collection("A")
        with pytest.raises(CollectionExists):
            empty_kb.create_collection("A")
        assert empty_kb.create_collection("A", exist_ok=True).name == "A"
        assert empty_kb.collection_names() == ["A"]

    def test_missing_collection_is_not_found(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        empty_kb.create_collection("Present")
        with pytest.raises(CollectionNotFound, match="Present"):
            empty_kb.collection("Absent")

    # -- writes ---------------------------------------------------------------------

    def test_add_is_idempotent(self, filled: hybridkb.CollectionAPI) -> None:
        before = filled.describe()
        again = filled.add_texts(
            [d["text"] for d in SMALL],
            metadatas=[d["meta"] for d in SMALL],
            ids=[d["id"] for d in SMALL],
        )
        assert not again.added and len(again.unchanged) == len(SMALL)
        after = filled.describe()
        assert (after.documents, after.chunks) == (before.documents, before.chunks) == (8, 8)
        hits = filled.search(_token(7), k=10, mode="keyword")
        assert _ids(hits) == ["doc07"]

    def test_add_files_is_idempotent(
        self, empty_kb: hybridkb.KnowledgeBaseAPI, tmp_path: Path
    ) -> None:
        folder = tmp_path / "docs"
        folder.mkdir()
        (folder / "a.txt").write_text(
            "Alpha paragraph about quokkas.\n\nSecond paragraph.", "utf-8"
        )
        (folder / "b.md").write_text("# Heading\n\nBeta text about wombats.", "utf-8")
        coll = empty_kb.create_collection("Files")
        first = coll.add(folder)
        assert len(first.added) == 2 and not first.failed
        second = coll.add(folder)
        assert not second.added and len(second.unchanged) == 2
        assert coll.count() == 2
        hit = coll.search("wombats", k=1, mode="keyword")[0]
        assert hit.filename == "b.md" and hit.metadata["path"].endswith("b.md")

    def test_sources_and_file_states_round_trip(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        storage = local(empty_kb).storage
        record = empty_kb.create_collection("Files").record
        assert storage.list_sources(record) == [] and storage.file_states(record) == {}
        storage.put_source(record, SourceRecord("/b", metadata={"year": 2024}))
        storage.put_source(record, SourceRecord("/a", recursive=False, types=[".md"]))
        storage.put_source(record, SourceRecord("/b", metadata={"year": 2025}))  # replaces
        listed = storage.list_sources(record)
        assert [(s.path, s.recursive, s.types, s.metadata) for s in listed] == [
            ("/a", False, [".md"], {}),
            ("/b", True, None, {"year": 2025}),
        ]
        assert storage.delete_source(record, "/a") and not storage.delete_source(record, "/a")
        states = [FileState(f"d{i}", f"/b/{i}.md", i, 10**18 + i, f"h{i}") for i in range(3)]
        storage.put_file_states(record, states)
        storage.put_file_states(record, [FileState("d1", "/b/1.md", 7, 8, "h9")])  # replaces
        got = storage.file_states(record)
        assert got["d0"] == states[0] and got["d1"] == FileState("d1", "/b/1.md", 7, 8, "h9")
        storage.delete_file_states(record, ["d0", "unknown"])
        assert sorted(storage.file_states(record)) == ["d1", "d2"]
        empty_kb.drop_collection("Files")
        again = empty_kb.create_collection("Files").record
        assert storage.list_sources(again) == [] and storage.file_states(again) == {}

    def test_sync_follows_the_folder(
        self, empty_kb: hybridkb.KnowledgeBaseAPI, tmp_path: Path
    ) -> None:
        folder = tmp_path / "docs"
        folder.mkdir()
        (folder / "a.txt").write_text("Alpha paragraph about quokkas.", "utf-8")
        (folder / "b.md").write_text("# Heading\n\nBeta text about wombats.", "utf-8")
        (folder / "c.md").write_text("Gamma text about narwhals.", "utf-8")
        coll = empty_kb.create_collection("Files")
        coll.add(folder)
        assert [s["path"] for s in coll.describe().sources] == [str(folder.resolve())]
        assert coll.sync().counts()["unchanged"] == 3
        (folder / "a.txt").unlink()
        (folder / "b.md").rename(folder / "renamed.md")
        (folder / "d.md").write_text("Delta text about axolotls.", "utf-8")
        report = coll.sync()
        counts = report.counts()
        assert (counts["added"], counts["moved"], counts["removed"]) == (1, 1, 1)
        assert [h.filename for h in coll.search("wombats", k=3, mode="keyword")] == ["renamed.md"]
        assert coll.search("quokkas", k=3, mode="keyword") == []
        assert coll.count() == 3
        assert len(coll.remove_source(folder).deleted) == 3 and coll.count() == 0

    def test_each_source_says_when_it_was_last_synced(
        self, empty_kb: hybridkb.KnowledgeBaseAPI, tmp_path: Path
    ) -> None:
        kept, gone = tmp_path / "kept", tmp_path / "gone"
        for folder in (kept, gone):
            folder.mkdir()
            (folder / "a.md").write_text(f"Notes kept in {folder.name}.", "utf-8")
        coll = empty_kb.create_collection("Files")
        coll.add(kept)
        coll.add(gone)

        def synced() -> dict[str, tuple[str, str | None]]:
            return {Path(s["path"]).name: (s["state"], s["synced_at"]) for s in coll.sources()}

        added = synced()  # the add read each folder whole: that is a sync
        assert added["kept"][1] and added["gone"][1] and added["gone"][1] > added["kept"][1]
        coll.sync(dry_run=True)  # looks, changes nothing: no sync recorded
        assert synced() == added
        (gone / "a.md").unlink()
        gone.rmdir()
        coll.sync()
        after = synced()
        assert after["kept"][0] == "ok" and after["kept"][1] > added["gone"][1]  # type: ignore[operator]
        assert after["gone"] == ("missing", added["gone"][1])  # not walked: its time stays
        assert {s["synced_at"] for s in coll.describe().sources} == {
            after["kept"][1],
            added["gone"][1],
        }

    def test_changed_document_replaces_chunks(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        coll = empty_kb.create_collection("C")
        coll.add_texts(["old words about zebras\n\nmore zebras"], ids=["x"])
        coll.add_texts(["new words about giraffes"], ids=["x"])
        assert coll.count() == 1
        assert coll.describe().chunks == 1
        for mode in MODES:
            assert coll.search("zebras", k=5, mode=mode) == [] or all(
                "zebras" not in h.text for h in coll.search("zebras", k=5, mode=mode)
            )
        assert _ids(coll.search("giraffes", k=5, mode="keyword")) == ["x"]
        record = coll.get("x")
        assert record is not None and record.chunk_count == 1

    def test_delete_missing_is_noop(self, filled: hybridkb.CollectionAPI) -> None:
        report = filled.delete(["nope", "also-nope"])
        assert report.deleted == [] and report.not_found == ["nope", "also-nope"]
        assert filled.count() == 8

    def test_delete_removes_from_every_mode(self, filled: hybridkb.CollectionAPI) -> None:
        report = filled.delete(["doc07", "nope", "doc07"])
        assert report.deleted == ["doc07"] and report.not_found == ["nope"]
        assert filled.get("doc07") is None
        for mode in MODES:
            assert "doc07" not in _ids(filled.search(_token(7) + " apples", k=8, mode=mode))
        assert filled.describe().chunks == 7

    def test_failed_write_leaves_nothing(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        coll = empty_kb.create_collection("Atomic")
        coll.add_texts(["keep this text"], ids=["keep"])

        def boom(con: Any, event: WriteEvent) -> None:
            if event.kind == "put":
                raise RuntimeError("hook failed")

        local(empty_kb).storage.hooks.append(boom)
        try:
            with pytest.raises(RuntimeError):
                coll.add_texts(["replacement text"], ids=["keep"])
            with pytest.raises(RuntimeError):
                coll.add_texts(["brand new text"], ids=["new"])
        finally:
            local(empty_kb).storage.hooks.remove(boom)
        assert coll.count() == 1
        assert [h.text for h in coll.search("keep text", k=5, mode="keyword")] == ["keep this text"]
        assert coll.get("new") is None

    def test_write_hooks_see_every_change(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        seen: list[tuple[str, list[str], int]] = []

        def hook(con: object, ev: WriteEvent) -> None:
            # A backend may report a batch as one "put_batch": the same change, per document.
            if ev.kind == "put_batch":
                seen.extend(("put", [i.document.document_id], len(i.chunks)) for i in ev.items)
            else:
                seen.append((ev.kind, list(ev.document_ids), len(ev.chunks)))

        local(empty_kb).storage.hooks.append(hook)
        coll = empty_kb.create_collection("Hooked")
        coll.add_texts(["one text", "two text"], ids=["a", "b"])
        coll.delete(["a", "zzz"])
        coll.drop()
        assert seen == [("put", ["a"], 1), ("put", ["b"], 1), ("delete", ["a"], 0), ("drop", [], 0)]

    def test_streamed_document_replaces_in_one_write(
        self, empty_kb: hybridkb.KnowledgeBaseAPI
    ) -> None:
        """put_document_stream (huge files): batches land in one transaction, old chunks go."""
        coll = empty_kb.create_collection("Stream", language="en")
        record = coll.record
        embedder = empty_kb.embedder("fake")

        def batches(version: str, n: int) -> Batches:
            return streamed_batches(record.id, embedder, version, n)

        doc = DocumentRecord("big", "/big.txt", "big.txt", "file", "v1", "sig")
        assert local(empty_kb).storage.put_document_stream(record, doc, batches("v1", 4)) == 12
        doc2 = DocumentRecord("big", "/big.txt", "big.txt", "file", "v2", "sig")
        assert local(empty_kb).storage.put_document_stream(record, doc2, batches("v2", 2)) == 6
        info = coll.describe()
        assert (info.documents, info.chunks) == (1, 6)
        hits = coll.search("lemurs streamed", k=20, mode="keyword")
        assert len(hits) == 6 and all(h.text.startswith("v2") for h in hits)
        got = coll.get("big")
        assert got is not None and got.chunk_count == 6 and got.content_hash == "v2"

    def test_drop_removes_everything(self, filled: hybridkb.CollectionAPI) -> None:
        kb = filled.kb
        filled.drop()
        assert kb.collection_names() == []
        with pytest.raises(CollectionNotFound):
            kb.describe("Fruit Reports")
        again = kb.create_collection("Fruit Reports")
        assert again.count() == 0
        assert again.search("apples", k=5) == []
        assert kb.search("apples", k=5) == []

    # -- reads ----------------------------------------------------------------------

    def test_get_and_list_documents(self, shared: hybridkb.CollectionAPI) -> None:
        record = shared.get("doc03")
        assert record is not None
        assert record.metadata == DOCS[3]["meta"] and record.source == "text"
        assert record.chunk_count == 1 and record.added_at
        page1 = shared.documents(limit=20)
        page2 = shared.documents(limit=20, offset=20)
        page3 = shared.documents(limit=20, offset=40)
        ids = [d.document_id for d in page1 + page2 + page3]
        assert len(ids) == 48 and set(ids) == {d["id"] for d in DOCS}

    @pytest.mark.parametrize("where", DOCUMENT_FILTERS, ids=lambda w: json.dumps(w))
    def test_documents_filter_equals_the_reference(
        self, shared: hybridkb.CollectionAPI, where: dict[str, Any]
    ) -> None:
        tree = parse_filter(where)
        listed = shared.documents(limit=100)
        expected = [d.document_id for d in listed if matches(tree, _document_row(d))]
        got = [d.document_id for d in shared.documents(limit=100, where=where)]
        assert got == expected  # the same documents, in the listing's order
        # Pages of the filtered listing: offset counts matching documents.
        paged = shared.documents(limit=3, offset=1, where=json.dumps(where))
        assert [d.document_id for d in paged] == expected[1:4]

    @pytest.mark.parametrize("where", HOSTILE_DOCUMENT_FILTERS, ids=lambda w: str(w)[:40])
    def test_documents_filter_refuses_what_a_document_cannot_match(
        self, shared: hybridkb.CollectionAPI, where: Any
    ) -> None:
        with pytest.raises(InvalidFilter) as refused:
            shared.documents(where=where)
        message = str(refused.value)
        assert message.startswith("where") and "\n" not in message and len(message) < 400
        assert shared.count() == len(DOCS)  # nothing changed

    def test_documents_filter_keys_are_data(self, shared: hybridkb.CollectionAPI) -> None:
        # A key is bound as a JSON path, never spliced into SQL.
        assert shared.documents(where={"n' OR 1=1 --": 1}) == []
        assert shared.documents(where={'n") OR TRUE OR ("': {"$ne": 1}}) != []
        assert shared.count() == len(DOCS)

    def test_get_documents_reads_many_at_once(self, shared: hybridkb.CollectionAPI) -> None:
        storage = local(shared.kb).storage
        record = shared.record
        wanted = ["doc07", "nosuch", "doc03", "doc07", "doc'; DROP TABLE x; --", "doc40"]
        found = storage.get_documents(record, wanted)
        assert sorted(found) == ["doc03", "doc07", "doc40"]
        for doc_id, doc in found.items():
            assert doc == storage.get_document(record, doc_id)
        assert storage.get_documents(record, []) == {}

    def test_describe_counts(self, shared: hybridkb.CollectionAPI) -> None:
        info = shared.describe()
        assert (info.documents, info.chunks) == (48, 48)
        assert info.languages == ["en"]
        assert info.bytes > 0 and info.updated_at and info.created_at

    @pytest.mark.parametrize("mode", MODES)
    def test_hits_carry_citations(self, shared: hybridkb.CollectionAPI, mode: str) -> None:
        hits = shared.search("depreciation apples", k=5, mode=mode)
        assert hits and [h.rank for h in hits] == list(range(1, len(hits) + 1))
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        for h in hits:
            assert h.collection == "Fruit Reports" and h.chunk_id and h.document_node
            assert h.metadata["document_id"] == h.document_id
            assert h.metadata["color"] in COLORS

    def test_keyword_scores_are_bm25(self, shared: hybridkb.CollectionAPI) -> None:
        """Same BM25 (formula, k1, b, N, avgdl) as the reference index, so rankings agree."""
        ref = KeywordIndex()
        ref.add(list(range(len(DOCS))), [analyze(d["text"], "en") for d in DOCS])
        for query in ("depreciation apples", "red pears", _token(3) + " schedule"):
            from hybridkb.text.analysis import analyze_query

            expected = ref.search(analyze_query(query, ["en"]), 10)
            got = shared.search(query, k=10, mode="keyword")
            assert [round(h.score, 6) for h in got] == [round(s, 6) for _, s in expected]
            assert {h.document_id for h in got} == {DOCS[i]["id"] for i, _ in expected} or len(
                {round(s, 6) for _, s in expected}
            ) < len(expected)  # ties may order differently but score lists must match

    def test_vector_scores_are_cosine(self, shared: hybridkb.CollectionAPI) -> None:
        embedder = shared.kb.embedder("fake")
        query = "apples and pears"
        q = embedder.embed_query(query)
        hits = shared.search(query, k=48, mode="vector")
        assert len(hits) == 48
        texts = {d["id"]: d["text"] for d in DOCS}
        for h in hits:
            expected = float(np.dot(q, embedder.embed_documents([texts[h.document_id]])[0]))
            # DuckDB ranks on int8 vectors (exact re-rank is opt-in): cosines to ~1e-3.
            assert h.score == pytest.approx(expected, abs=5e-3)

    def test_filtered_search_returns_k(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        # One document of 300 one-paragraph chunks: one write, 1 % and 10 % filters.
        coll = empty_kb.create_collection("Many", chunk_size=100, chunk_overlap=0)
        paragraphs = [
            f"common words item {i} shared vocabulary padding padding pad" for i in range(300)
        ]
        coll.add_texts(["\n\n".join(paragraphs)], ids=["big"])
        assert coll.describe().chunks == 300
        for mode in MODES:
            rare = coll.search(
                "common words", k=10, mode=mode, where={"chunk_index": {"$in": [0, 100, 200]}}
            )
            assert sorted(h.metadata["chunk_index"] for h in rare) == [0, 100, 200], mode
            tenth = coll.search("common words", k=10, mode=mode, where={"chunk_index": {"$lt": 30}})
            assert len(tenth) == 10, mode
            assert all(h.metadata["chunk_index"] < 30 for h in tenth), mode

    @pytest.mark.parametrize("where", FILTERS, ids=lambda w: json.dumps(w))
    def test_every_mode_and_filter_operator(
        self, shared: hybridkb.CollectionAPI, where: dict[str, Any]
    ) -> None:
        tree = parse_filter(where)
        expected = {d["id"] for d in DOCS if matches(tree, _row(d))}
        # vector/hybrid rank every chunk, so with k = all they return exactly the matches.
        for mode in ("vector", "hybrid"):
            got = _ids(shared.search("apples pears report", k=100, mode=mode, where=where))
            assert len(got) == len(set(got)) and set(got) == expected, mode
        # keyword/filter return the matches that contain a query term ("report" is in all).
        for mode in ("keyword", "filter"):
            got = _ids(shared.search("report", k=100, mode=mode, where=where))
            assert set(got) == expected, mode
        # JSON text filters behave as dicts.
        assert (
            set(_ids(shared.search("report", k=100, mode="keyword", where=json.dumps(where))))
            == expected
        )

    def test_search_across_collections(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        a = empty_kb.create_collection("A")
        b = empty_kb.create_collection("B")
        a.add_texts(["kangaroo facts in collection A"], ids=["a1"])
        b.add_texts(["kangaroo habitats in collection B"], ids=["b1"])
        for mode in MODES:
            hits = empty_kb.search("kangaroo", k=5, mode=mode)
            assert {(h.collection, h.document_id) for h in hits} == {("A", "a1"), ("B", "b1")}
        only_b = empty_kb.search("kangaroo", k=5, collections=["B"])
        assert [h.collection for h in only_b] == ["B"]

    def test_workspaces_are_isolated(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        other = empty_kb.in_workspace("team b")
        mine = empty_kb.create_collection("Notes")
        theirs = other.create_collection("Notes")
        mine.add_texts(["alpha secret of workspace one"], ids=["m"])
        theirs.add_texts(["beta secret of workspace two"], ids=["t"])
        assert empty_kb.collection_names() == ["Notes"] == other.collection_names()
        for mode in MODES:
            assert {
                h.document_id for h in empty_kb.search("secret workspace", k=10, mode=mode)
            } == {"m"}
            assert {h.document_id for h in other.search("secret workspace", k=10, mode=mode)} == {
                "t"
            }
        theirs.drop()
        assert other.collection_names() == [] and mine.count() == 1
        assert empty_kb.in_workspace("nobody").collection_names() == []

    def test_unicode_and_hostile_text_are_data(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        coll = empty_kb.create_collection("Ünïcødé 📚 '; DROP TABLE hybridkb_collections; --")
        texts = [
            "多线程编程 is multi-threaded programming",
            "Grüße aus Köln: Straße, Maß und Fuß",
            "quotes ' \" \\ and %s %(name)s ? $1 placeholders",
        ]
        metas: list[dict[str, Any]] = [
            {"tag": "中文"},
            {"tag": "de", "nested": {"a": [1, 2]}},
            {"tag": 'it\'s "odd" %s'},
        ]
        report = coll.add_texts(texts, metadatas=metas, ids=["zh", "de", "odd ' id"])
        assert report.ok
        assert _ids(coll.search("线程", k=3, mode="keyword"))[:1] == ["zh"]
        assert _ids(coll.search("placeholders %s", k=3, mode="keyword"))[:1] == ["odd ' id"]
        assert _ids(coll.search("anything", k=3, where={"tag": 'it\'s "odd" %s'})) == ["odd ' id"]
        got = coll.get("de")
        assert got is not None and got.metadata == metas[1]
        assert coll.delete(["odd ' id"]).deleted == ["odd ' id"]

    def test_data_survives_reopen(self, db_url: str) -> None:
        with hybridkb.connect(db_url, model="fake") as kb:
            kb.create_collection("Keep").add_texts(["persistent platypus"], ids=["p"])
        with hybridkb.connect(db_url, model="fake") as kb:
            assert kb.collection_names() == ["Keep"]
            assert _ids(kb.search("platypus", k=3)) == ["p"]
            assert kb["Keep"].count() == 1

    def test_storage_returns_ranked_pairs(self, shared: hybridkb.CollectionAPI) -> None:
        storage = local(shared.kb).storage
        record = shared.record
        q = shared.kb.embedder("fake").embed_query("apples")
        for ranked in (
            storage.keyword_search(record, ["appl"], 5, None),
            storage.vector_search(record, q, 5, None),
            storage.filter_search(record, ["appl"], q, 5, None),
        ):
            assert len(ranked) == 5
            assert all(isinstance(k, int) and isinstance(s, float) for k, s in ranked)
            assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
        assert storage.keyword_search(record, [], 5, None) == []
        assert storage.keyword_search(record, ["nosuchterm"], 5, None) == []
        keys = [k for k, _ in storage.vector_search(record, q, 3, None)]
        vecs = storage.fetch_vectors(record, [*keys, 12345])
        assert vecs.shape == (4, 64) and not vecs[3].any()
        assert np.allclose(np.linalg.norm(vecs[:3], axis=1), 1.0, atol=1e-5)
        # Directions (for query feedback) point where the stored vectors do.
        dirs = storage.vector_directions(record, [*keys, 12345])
        assert dirs.shape == (4, 64) and not dirs[3].any()
        cosines = (dirs[:3] * vecs[:3]).sum(axis=1) / np.linalg.norm(dirs[:3], axis=1)
        assert np.all(cosines >= 0.999)
        chunks = storage.fetch_chunks(record, keys)
        assert set(chunks) == set(keys)

    # -- the rest of the declared protocol ------------------------------------------

    def test_capabilities_match_the_declarations(
        self, db_url: str, empty_kb: hybridkb.KnowledgeBaseAPI
    ) -> None:
        from hybridkb.storage.backends import backend_for

        storage = local(empty_kb).storage
        caps = storage.capabilities
        # The store is the backend opening chose (whose declarations said who serves).
        assert caps.name == backend_for(db_url).name
        # Both built-in backends offer these optional parts (None would say one is absent);
        # re-embedding in place is DuckDB's alone (PostgreSQL says how to copy instead).
        assert storage.graph_sql is not None and storage.maintenance is not None
        assert (storage.reembedding is not None) == (caps.name == "duckdb")
        assert storage.read_only is False

    def test_prepare_loads_ahead_and_changes_no_answer(
        self, empty_kb: hybridkb.KnowledgeBaseAPI
    ) -> None:
        coll = empty_kb.create_collection("P")
        local(empty_kb).storage.prepare(coll.record)  # empty: nothing to load, no error
        coll.add_texts(["harbour fees rise", "the lease runs ten years"], ids=["a", "b"])
        before = [(h.chunk_id, h.score) for h in coll.search("harbour lease", k=2)]
        local(empty_kb).storage.prepare(coll.record)
        local(empty_kb).storage.prepare(coll.record)  # twice: still one set of indexes
        assert [(h.chunk_id, h.score) for h in coll.search("harbour lease", k=2)] == before

    def test_list_workspaces_names_those_with_collections(
        self, empty_kb: hybridkb.KnowledgeBaseAPI
    ) -> None:
        assert local(empty_kb).storage.list_workspaces() == []
        empty_kb.in_workspace("zeta").create_collection("Z")
        empty_kb.create_collection("D")
        empty_kb.in_workspace("alpha").create_collection("A")
        assert local(empty_kb).storage.list_workspaces() == ["alpha", "default", "zeta"]
        empty_kb.in_workspace("zeta").drop_collection("Z")
        assert local(empty_kb).storage.list_workspaces() == ["alpha", "default"]

    def test_transaction_commits_or_rolls_back(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        storage = local(empty_kb).storage
        assert storage.graph_sql is not None
        sql = storage.graph_sql
        storage.transaction(sql.ensure_schema)
        before = storage.transaction(lambda con: sql.version(con, "default"))
        assert storage.transaction(lambda con: sql.bump(con, "default")) == (before, before + 1)

        class Stop(Exception):
            pass

        def bump_then_fail(con: Any) -> None:
            sql.bump(con, "default")
            raise Stop

        with pytest.raises(Stop):
            storage.transaction(bump_then_fail)
        assert storage.transaction(lambda con: sql.version(con, "default")) == before + 1

    def test_export_gives_back_every_row_and_vector(self, filled: hybridkb.CollectionAPI) -> None:
        storage = local(filled.kb).storage
        record = filled.record
        exported = list(storage.export_documents(record, batch=3))  # several batches
        assert sorted(d.document_id for d, _, _ in exported) == [d["id"] for d in SMALL]
        for doc, chunks, vectors in exported:
            assert len(chunks) == doc.chunk_count == len(vectors) == 1
            assert chunks[0].terms == analyze(chunks[0].text, "en")
            want = storage.fetch_vectors(record, [chunks[0].key])
            assert np.allclose(vectors, want, atol=1e-6)
        assert storage.count_vectors(record) == len(SMALL)

    def test_export_tables_have_the_declared_schemas(self, filled: hybridkb.CollectionAPI) -> None:
        import datetime

        from hybridkb.storage.columns import EXPORT_CHUNKS, EXPORT_DOCUMENTS

        docs, chunks = local(filled.kb).storage.export_tables(filled.record)
        assert docs.schema == EXPORT_DOCUMENTS
        assert chunks.schema == EXPORT_CHUNKS
        assert sorted(docs.column("document_id")) == [d["id"] for d in SMALL]
        first = next(r for r in docs.to_pylist() if r["document_id"] == "doc03")
        assert json.loads(first["metadata"])["n"] == 3
        # Timestamps are text DuckDB casts (the SQL tool's engine), with their time zone.
        added = datetime.datetime.fromisoformat(first["added_at"])
        assert added.tzinfo is not None and added.year >= 2024
        assert chunks.num_rows == len(SMALL) and all(chunks.column("text"))
        empty = filled.kb.create_collection("Empty")
        docs, chunks = local(filled.kb).storage.export_tables(empty.record)
        assert (docs.num_rows, chunks.num_rows) == (0, 0)
        assert (docs.schema, chunks.schema) == (EXPORT_DOCUMENTS, EXPORT_CHUNKS)
        # Some documents only (the SQL tool sends a worker what changed).
        storage = local(filled.kb).storage
        docs, chunks = storage.export_tables(filled.record, ["doc03", "doc05", "nope"])
        assert sorted(docs.column("document_id")) == ["doc03", "doc05"]
        assert sorted(chunks.column("document_id")) == ["doc03", "doc05"]
        docs, chunks = storage.export_tables(filled.record, [])
        assert (docs.num_rows, chunks.num_rows) == (0, 0)

    def test_document_fingerprints_change_with_the_document_only(
        self, filled: hybridkb.CollectionAPI
    ) -> None:
        storage = local(filled.kb).storage
        before = storage.document_fingerprints(filled.record)
        assert sorted(before) == [d["id"] for d in SMALL]
        assert len(set(before.values())) == len(SMALL)
        filled.add_texts(["A new text for doc03."], ids=["doc03"], metadatas=[{"n": 3}])
        filled.add_texts([SMALL[4]["text"]], ids=["doc04"], metadatas=[{"n": 44}])
        filled.delete(["doc05"])
        after = storage.document_fingerprints(filled.record)
        changed = {i for i in before if after.get(i) != before[i]}
        assert changed == {"doc03", "doc04", "doc05"} and "doc05" not in after

    def test_read_only_store_refuses_writes_with_backend_error(
        self, db_url: str, filled: hybridkb.CollectionAPI
    ) -> None:
        from hybridkb.errors import BackendError
        from hybridkb.storage.backends import backend_for

        if not backend_for(db_url).concurrent_writers:
            filled.kb.close()  # one process holds a DuckDB file for writing
        with hybridkb.connect(db_url, model="fake", read_only=True) as ro:
            assert local(ro).storage.read_only
            with pytest.raises(BackendError, match="read-only"):
                ro.create_collection("New")
            with pytest.raises(BackendError, match="read-only"):
                ro.collection("Fruit Reports").delete(["doc01"])
            assert ro.collection("Fruit Reports").count() == len(SMALL)


# -- backends ------------------------------------------------------------------------


class TestDuckDBContract(StorageContract):
    @pytest.fixture
    def db_url(self, tmp_path: Path) -> str:
        return str(tmp_path / "contract.duckdb")

    @pytest.fixture(scope="class")
    def shared_url(self, tmp_path_factory: pytest.TempPathFactory) -> str:
        return str(tmp_path_factory.mktemp("shared") / "shared.duckdb")


@pytest.mark.postgres
class TestPostgresContract(StorageContract):
    @pytest.fixture
    def db_url(self, pg_url: str) -> str:
        return pg_url

    @pytest.fixture(scope="class")
    def shared_url(self, pg_admin_url: str) -> Iterator[str]:
        import pg_server

        name = f"hkb_contract_{os.getpid()}_shared"
        yield pg_server.create_database(pg_admin_url, name)
        pg_server.drop_database(pg_admin_url, name)

    def test_connect_reports_postgres(self, empty_kb: hybridkb.KnowledgeBaseAPI) -> None:
        assert local(empty_kb).storage.capabilities.name == "postgres"


_STORAGE_LEVEL = (
    "calls the Storage protocol itself; the owner's storage passes it as TestDuckDBContract"
)


class TestClientContract(StorageContract):
    """The same promises through a client: another process holds the file and serves it."""

    not_here: ClassVar[dict[str, str]] = {
        name: _STORAGE_LEVEL
        for name in (
            "test_capabilities_match_the_declarations",
            "test_export_gives_back_every_row_and_vector",
            "test_export_tables_have_the_declared_schemas",
            "test_document_fingerprints_change_with_the_document_only",
            "test_failed_write_leaves_nothing",
            "test_list_workspaces_names_those_with_collections",
            "test_prepare_loads_ahead_and_changes_no_answer",
            "test_sources_and_file_states_round_trip",
            "test_storage_returns_ranked_pairs",
            "test_get_documents_reads_many_at_once",
            "test_streamed_document_replaces_in_one_write",
            "test_transaction_commits_or_rolls_back",
            "test_write_hooks_see_every_change",
        )
    }

    @staticmethod
    def _owner(db: Path) -> Iterator[str]:
        proc = start_owner_process(db, db.parent, "--empty")
        try:
            yield str(db)
        finally:
            stop(proc)

    @pytest.fixture
    def db_url(self, tmp_path: Path) -> Iterator[str]:
        yield from self._owner(tmp_path / "contract.duckdb")

    @pytest.fixture(scope="class")
    def shared_url(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
        yield from self._owner(tmp_path_factory.mktemp("shared") / "shared.duckdb")

    @pytest.fixture
    def empty_kb(self, db_url: str) -> Iterator[hybridkb.KnowledgeBaseAPI]:
        with hybridkb.connect(db_url, model="fake") as kb:
            assert through_owner(kb)  # every call goes to the owner
            yield kb

    def test_read_only_store_refuses_writes_with_backend_error(
        self, db_url: str, filled: hybridkb.CollectionAPI
    ) -> None:
        from hybridkb.errors import BackendError

        with hybridkb.connect(db_url, model="fake", read_only=True) as ro:
            assert through_owner(ro)
            with pytest.raises(BackendError, match="read-only"):
                ro.create_collection("New")
            with pytest.raises(BackendError, match="read-only"):
                ro.collection("Fruit Reports").delete(["doc01"])
            assert ro.collection("Fruit Reports").count() == len(SMALL)


def test_contract_errors_are_kb_errors() -> None:
    # The suite relies on these being KBError subclasses (front ends render them).
    assert issubclass(CollectionExists, KBError) and issubclass(CollectionNotFound, KBError)
