"""The facade's promises: collections, ingest, search, delete, describe, workspaces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from internals import local_engine, sql_rows

import hybridkb
from hybridkb.errors import (
    CollectionExists,
    CollectionNotFound,
    ConfigError,
    EmbeddingMismatch,
    InvalidFilter,
)
from hybridkb.storage.duckdb.schema import table_names

TAX = (
    "Depreciation of assets\n\nThe decline in value of a depreciating asset is worked out with the "
    "diminishing value method or the prime cost method.\n\nSection 40-880 covers business related costs."
)
LEAVE = "Leave policy\n\nEmployees accrue four weeks of annual leave each year.\n\nSick leave needs a certificate."


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path


def test_create_and_list_collections_with_free_text_names(kb: hybridkb.KnowledgeBase) -> None:
    for name in [
        "Tax Documents",
        "Steuerunterlagen 2024",
        "税务文件",
        'it\'s "quoted"; DROP TABLE x',
    ]:
        kb.create_collection(name)
    names = kb.collection_names()
    assert sorted(names) == sorted(
        ["Tax Documents", "Steuerunterlagen 2024", "税务文件", 'it\'s "quoted"; DROP TABLE x']
    )
    info = {c.name: c for c in kb.list_collections()}
    assert info["税务文件"].documents == 0 and info["税务文件"].dim == 64


def test_table_names_never_come_from_user_text(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("x'; DROP TABLE hybridkb_collections; --")
    names = table_names(coll.record.id)
    assert all(n.startswith(f"kb_c{coll.record.id}_") for n in names.values())
    assert kb.collection_names() == ["x'; DROP TABLE hybridkb_collections; --"]


def test_duplicate_collection_is_refused(kb: hybridkb.KnowledgeBase) -> None:
    kb.create_collection("Tax Documents")
    with pytest.raises(CollectionExists):
        kb.create_collection("Tax Documents")
    assert kb.create_collection("Tax Documents", exist_ok=True).name == "Tax Documents"


def test_unknown_collection_lists_existing(kb: hybridkb.KnowledgeBase) -> None:
    kb.create_collection("Tax Documents")
    with pytest.raises(CollectionNotFound, match="Tax Documents"):
        kb.collection("Taxes")
    handle = kb["Nope"]  # lazy: no error until used
    with pytest.raises(CollectionNotFound):
        handle.describe()


@pytest.mark.parametrize("bad", ["", "   ", "a\x00b", "x" * 201])
def test_bad_collection_names_are_refused(kb: hybridkb.KnowledgeBase, bad: str) -> None:
    with pytest.raises(ConfigError):
        kb.create_collection(bad)


def test_add_files_and_folders_then_search(kb: hybridkb.KnowledgeBase, tmp_path: Path) -> None:
    write(tmp_path / "docs" / "tax.txt", TAX)
    write(tmp_path / "docs" / "sub" / "leave.md", "# Leave\n\n" + LEAVE)
    coll = kb.create_collection("Tax Documents")
    report = coll.add([tmp_path / "docs"])
    assert [f.filename for f in report.added] == ["leave.md", "tax.txt"] or sorted(
        f.filename for f in report.added
    ) == ["leave.md", "tax.txt"]
    assert not report.failed
    hits = coll.search("depreciation of assets", k=3)
    assert hits and hits[0].filename == "tax.txt"
    top = hits[0]
    assert top.rank == 1 and top.collection == "Tax Documents"
    assert set(top.scores) == {"bm25", "bm25_rank", "vector", "vector_rank", "fused", "rerank"}
    assert top.scores["fused"] == pytest.approx(top.score)
    assert top.metadata["filename"] == "tax.txt" and top.metadata["document_id"] == top.document_id
    assert top.document_node == f"doc:{coll.record.id}:{top.document_id}"


def test_add_is_idempotent_and_changed_file_replaces_chunks(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    path = write(tmp_path / "tax.txt", TAX)
    coll = kb.create_collection("Tax")
    first = coll.add(path)
    assert len(first.added) == 1
    gen = coll.record.generation
    again = coll.add(path)
    assert not again.added and [f.document_id for f in again.unchanged] == [
        first.added[0].document_id
    ]
    assert coll.record.generation == gen, "an unchanged file must write nothing"
    write(path, "Completely new text about payroll tax thresholds.")
    changed = coll.add(path)
    assert [f.document_id for f in changed.added] == [first.added[0].document_id]
    info = coll.describe()
    assert info.documents == 1
    assert not [h for h in coll.search("diminishing value method", k=5, mode="keyword")]
    assert (
        coll.search("payroll thresholds", k=1, mode="keyword")[0].document_id
        == first.added[0].document_id
    )


def test_same_content_under_two_paths_is_two_documents(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    a = write(tmp_path / "a.txt", TAX)
    b = write(tmp_path / "b.txt", TAX)
    coll = kb.create_collection("Tax")
    report = coll.add([a, b])
    assert len({f.document_id for f in report.added}) == 2


def test_one_bad_file_does_not_stop_the_others(kb: hybridkb.KnowledgeBase, tmp_path: Path) -> None:
    good = write(tmp_path / "good.txt", TAX)
    empty = write(tmp_path / "empty.txt", "   \n")
    junk = tmp_path / "junk.txt"
    junk.write_bytes(bytes(range(256)) * 8)
    missing = tmp_path / "missing.pdf"
    coll = kb.create_collection("Tax")
    report = coll.add([good, empty, junk, missing])
    assert [f.filename for f in report.added] == ["good.txt"]
    failed = {f.filename: f.error for f in report.failed}
    assert set(failed) == {"empty.txt", "junk.txt", "missing.pdf"}
    for name, error in failed.items():
        assert name in error and ";" in error  # names the file and the fix
    assert coll.describe().documents == 1


def test_add_texts_uses_caller_ids_and_metadata(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Notes")
    report = coll.add_texts(
        [TAX, LEAVE], metadatas=[{"tag": "tax", "year": 2024}, {"tag": "hr"}], ids=["t1", "l1"]
    )
    assert [f.document_id for f in report.added] == ["t1", "l1"]
    hits = coll.search("annual leave", k=1)
    assert hits[0].document_id == "l1" and hits[0].metadata["tag"] == "hr"
    again = coll.add_texts([TAX], ids=["t1"], metadatas=[{"tag": "tax", "year": 2024}])
    assert [f.document_id for f in again.unchanged] == ["t1"]
    with pytest.raises(ConfigError):
        coll.add_texts(["a", "b"], ids=["same", "same"])


def test_file_metadata_naming_a_builtin_field_is_refused_with_the_fix(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    """A value under a built-in name (filename, page, ...) would be stored but never found
    by a filter or shown by a citation, which read the file's own; it is refused."""
    coll = kb.create_collection("Tax")
    path = write(tmp_path / "tax.txt", TAX)
    with pytest.raises(ConfigError, match=r"'page' is a built-in field.*'doc_page'"):
        coll.add(path, metadata={"page": 99, "owner": "ann"})
    assert coll.count() == 0
    coll.add(path, metadata={"owner": "ann"})
    hit = coll.search("depreciation", k=1)[0]
    assert hit.filename == "tax.txt" and hit.metadata["filename"] == "tax.txt"
    assert hit.metadata["page"] is None and hit.metadata["owner"] == "ann"


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword", "filter"])
def test_every_mode_returns_ranked_hits_with_mode_scores(
    kb: hybridkb.KnowledgeBase, mode: str
) -> None:
    coll = kb.create_collection("Notes")
    coll.add_texts([TAX, LEAVE, "Unrelated text about cooking pasta."], ids=["t", "l", "c"])
    hits = coll.search("annual leave policy", k=2, mode=mode)
    assert hits and hits[0].document_id == "l"
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))
    first = hits[0]
    if mode == "keyword":
        assert first.score == pytest.approx(first.scores["bm25"]) and first.scores["fused"] is None
    if mode in ("vector", "filter"):
        assert first.score == pytest.approx(first.scores["vector"])


def test_filter_mode_only_returns_chunks_with_a_query_term(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Notes")
    coll.add_texts(["alpha beta", "gamma delta", "beta epsilon"], ids=["1", "2", "3"])
    hits = coll.search("beta zeta", k=10, mode="filter")
    assert sorted(h.document_id for h in hits) == ["1", "3"]


def _corpus(coll: hybridkb.Collection, n: int = 200) -> None:
    texts = [f"report number {i} about topic {i % 7} and shared words" for i in range(n)]
    metas = [{"group": f"g{i % 100}", "n": i, "flag": i % 2 == 0} for i in range(n)]
    coll.add_texts(texts, metadatas=metas, ids=[f"d{i}" for i in range(n)])


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword", "filter"])
def test_filtered_search_returns_exactly_k_at_one_percent(
    kb: hybridkb.KnowledgeBase, mode: str
) -> None:
    coll = kb.create_collection("Reports")
    _corpus(coll, 400)  # 4 docs per group: 1% selectivity
    hits = coll.search("report shared words", k=4, mode=mode, where={"group": "g7"})
    assert len(hits) == 4
    assert {h.metadata["group"] for h in hits} == {"g7"}


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"n": 5}, {5}),
        ({"n": {"$in": [1, 2, 3]}}, {1, 2, 3}),
        ({"n": {"$gte": 10, "$lte": 12}}, {10, 11, 12}),
        ({"$and": [{"n": {"$lt": 6}}, {"flag": True}]}, {0, 2, 4}),
        ({"$or": [{"n": 1}, {"group": "g2"}]}, {1, 2}),
        ({"$and": [{"n": {"$lt": 4}}, {"n": {"$ne": 2}}]}, {0, 1, 3}),
        ({"$and": [{"n": {"$lt": 4}}, {"group": {"$nin": ["g0", "g1"]}}]}, {2, 3}),
    ],
)
def test_filter_operators(
    kb: hybridkb.KnowledgeBase, where: dict[str, Any], expected: set[int]
) -> None:
    coll = kb.create_collection("Reports")
    _corpus(coll, 100)
    hits = coll.search("report", k=50, mode="vector", where=where)
    assert {h.metadata["n"] for h in hits} == expected
    hits_json = coll.search("report", k=50, mode="keyword", where=json.dumps(where))
    assert {h.metadata["n"] for h in hits_json} == expected


def test_filter_on_builtin_fields(kb: hybridkb.KnowledgeBase, tmp_path: Path) -> None:
    coll = kb.create_collection("Tax")
    coll.add([write(tmp_path / "tax.txt", TAX), write(tmp_path / "leave.txt", LEAVE)])
    hits = coll.search("policy assets", k=10, where={"filename": "leave.txt"})
    assert hits and {h.filename for h in hits} == {"leave.txt"}


@pytest.mark.parametrize(
    "bad", ['{"n": {"$regex": "x"}}', "{not json", '{"$and": []}', '{"n": [1, 2]}']
)
def test_bad_filters_are_refused_clearly(kb: hybridkb.KnowledgeBase, bad: str) -> None:
    coll = kb.create_collection("Reports")
    _corpus(coll, 5)
    with pytest.raises(InvalidFilter):
        coll.search("report", where=bad)


def test_search_across_all_and_several_collections(kb: hybridkb.KnowledgeBase) -> None:
    kb.create_collection("Tax").add_texts([TAX], ids=["t"])
    kb.create_collection("HR").add_texts([LEAVE], ids=["l"])
    kb.create_collection("Food").add_texts(["pasta recipes"], ids=["p"])
    hits = kb.search("annual leave", k=5)
    assert hits[0].collection == "HR"
    assert {h.collection for h in kb.search("leave assets", k=10, collections=["Tax", "HR"])} <= {
        "Tax",
        "HR",
    }


def test_delete_removes_chunks_and_reports_unknown(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Notes")
    coll.add_texts([TAX, LEAVE], ids=["t", "l"])
    report = coll.delete(["t", "nope"])
    assert report.deleted == ["t"] and report.not_found == ["nope"]
    assert all(h.document_id != "t" for h in coll.search("depreciation", k=10))
    assert all(h.document_id != "t" for h in coll.search("depreciation", k=10, mode="keyword"))
    assert coll.describe().documents == 1
    assert coll.delete(["nope"]).deleted == []


def test_drop_removes_everything(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Notes")
    coll.add_texts([TAX], ids=["t"])
    tables = table_names(coll.record.id)
    kb.drop_collection("Notes")
    assert kb.collection_names() == []
    existing = {r[0] for r in sql_rows(kb, "SELECT table_name FROM information_schema.tables")}
    assert not set(tables.values()) & existing
    with pytest.raises(CollectionNotFound):
        kb.drop_collection("Notes")


def test_describe_reports_counts_model_languages_bytes(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Notes")
    coll.add_texts(
        [TAX, "Die Abschreibung von Wirtschaftsgütern erfolgt linear über die Nutzungsdauer."],
        ids=["en", "de"],
    )
    info = coll.describe()
    assert (info.documents, info.embedding_model, info.dim) == (2, "fake", 64)
    assert info.chunks >= 2 and info.bytes > 0 and info.updated_at
    assert set(info.languages) == {"en", "de"}


def test_workspaces_are_isolated(tmp_path: Path) -> None:
    db = tmp_path / "shared.duckdb"
    with hybridkb.connect(db, model="fake", workspace="alice") as alice:
        alice.create_collection("Private").add_texts([TAX], ids=["a"])
        bob = alice.in_workspace("bob")
        assert bob.collection_names() == []
        with pytest.raises(CollectionNotFound):
            bob.collection("Private")
        assert bob.search("depreciation") == []
        bob.create_collection("Private")  # same name, different workspace
        assert alice.collection("Private").count() == 1


def test_data_survives_reopen(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add_texts([TAX, LEAVE], ids=["t", "l"])
    with hybridkb.connect(db, model="fake") as kb:
        hits = kb.collection("Notes").search("annual leave", k=1)
        assert hits[0].document_id == "l"


def test_collection_keeps_its_model(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add_texts([TAX], ids=["t"])
    with hybridkb.connect(
        db, model="fake:32"
    ) as kb:  # a new default does not touch old collections
        assert kb.collection("Notes").search("depreciation", k=1)[0].document_id == "t"
        assert kb.create_collection("New").describe().dim == 32
        with pytest.raises(EmbeddingMismatch, match="fake"):
            kb.collection("Notes", model="fake:32")


def test_nan_and_zero_vectors_are_refused_before_storage(
    kb: hybridkb.KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hybridkb.embedders import validate_vectors

    bad = np.ones((2, 64), dtype=np.float32)
    bad[1, 3] = np.nan
    with pytest.raises(EmbeddingMismatch, match="NaN"):
        validate_vectors(bad, 64)
    with pytest.raises(EmbeddingMismatch, match="zero-norm"):
        validate_vectors(np.zeros((1, 64)), 64)

    class NaNEmbedder:
        model_id, dim = "fake", 64

        def embed_documents(self, texts: list[str]) -> np.ndarray:
            out = np.ones((len(texts), 64), dtype=np.float32)
            out[:, 0] = np.nan
            return out

        def embed_query(self, text: str) -> np.ndarray:
            vector: np.ndarray = self.embed_documents([text])[0]
            return vector

    coll = kb.create_collection("Notes")
    coll.add_texts([LEAVE], ids=["ok"])
    monkeypatch.setattr(local_engine(kb), "embedder", lambda model, recipe=None: NaNEmbedder())
    report = coll.add_texts([TAX], ids=["t"])
    assert [(f.filename, f.code) for f in report.failed] == [("t", "embedding_mismatch")]
    assert "NaN" in report.failed[0].error
    assert coll.get("t") is None and coll.count() == 1


@pytest.mark.parametrize(("k", "query"), [(0, "x"), (10_001, "x"), (3, ""), (3, "x" * 100_001)])
def test_bad_search_arguments_are_refused(kb: hybridkb.KnowledgeBase, k: int, query: str) -> None:
    kb.create_collection("Notes").add_texts([TAX], ids=["t"])
    with pytest.raises(ConfigError):
        kb.search(query, k=k)


def test_hostile_strings_behave_as_data(kb: hybridkb.KnowledgeBase) -> None:
    nasty = ["'; DROP TABLE x; --", "100%", "a\x00b", "🙂" * 50, "q" * 10_000, '"\\']
    coll = kb.create_collection("Notes")
    coll.add_texts(["plain text"] + nasty[:1], ids=nasty[:2])
    for q in nasty:
        for mode in ("hybrid", "keyword", "vector", "filter"):
            coll.search(q, k=3, mode=mode, where={q[:50] or "k": q[:50]})
    assert coll.delete(nasty).deleted == nasty[:2]


# -- the facade front ends use (no front end reaches the storage) ----------------------


def test_document_text_and_chunks_give_the_document_back(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Notes", chunk_size=100, chunk_overlap=20)
    text = " ".join(f"Sentence number {i} about depreciation." for i in range(30))
    coll.add_texts([text], ids=["long"])
    chunks = coll.chunks("long")
    assert len(chunks) > 3 and [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert coll.document_text("long") == text
    assert coll.chunks("missing") == [] and coll.document_text("missing") is None


def test_search_by_vector_ranks_like_vector_mode(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Notes")
    coll.add_texts(["alpha beta", "gamma delta", "beta epsilon"], ids=["1", "2", "3"])
    vec = kb.embedder("fake").embed_query("beta")
    by_vector = coll.search_by_vector(vec, k=3)
    by_text = coll.search("beta", k=3, mode="vector")
    assert [h.chunk_id for h in by_vector] == [h.chunk_id for h in by_text]
    assert [h.score for h in by_vector] == pytest.approx([h.score for h in by_text])
    assert [h.document_id for h in coll.search_by_vector(vec, k=3, where={"document_id": "3"})] == [
        "3"
    ]
    with pytest.raises(hybridkb.ConfigError, match="vector"):
        coll.search_by_vector([1.0, 2.0], k=3)


def test_with_embedder_serves_its_model_id_on_the_same_store(kb: hybridkb.KnowledgeBase) -> None:
    from hybridkb.embedders import FakeEmbedder

    class Named(FakeEmbedder):
        def __init__(self) -> None:
            super().__init__(16)
            self.model_id = "custom:named"

    other = kb.with_embedder(Named())
    coll = other.create_collection("Custom", model="custom:named")
    coll.add_texts(["apples and pears"], ids=["a"])
    assert other.embedding_cache() is None  # keyed by model id, which cannot tell them apart
    assert coll.describe().dim == 16
    assert other.collection("Custom").search("pears", k=1)[0].document_id == "a"
    assert "Custom" in kb.collection_names()  # the same store


def test_unchanged_texts_are_found_whatever_their_ids(tmp_path: Path) -> None:
    """The unchanged check inlines plain ids into its SQL and binds the others."""
    ids = ["plain-1.a", "it's", "x' OR '1'='1", "tab\there"]
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        coll = kb.create_collection("Ids")
        coll.add_texts([f"text number {i}" for i in range(4)], ids=ids)
        again = coll.add_texts([f"text number {i}" for i in range(4)], ids=ids)
        assert sorted(r.document_id for r in again.unchanged) == sorted(ids)
        assert not again.added
