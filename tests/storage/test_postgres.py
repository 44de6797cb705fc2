"""PostgreSQL-only promises: concurrency, migrations, the HNSW path, copy between backends.

The shared promises (collections, ingest, search modes, filters, delete, drop,
workspaces) are in test_storage_contract.py and run against both backends.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from conftest import DB_COUNTER
from internals import local, postgres_storage

import hybridkb
from hybridkb.errors import BackendError, CollectionExists, CollectionNotFound, KBError
from hybridkb.local import LocalEngine
from hybridkb.settings import load_settings
from hybridkb.storage.base import (
    ChunkRecord,
    CollectionRecord,
    Connection,
    DocumentRecord,
    chunk_key,
    make_chunk_id,
)
from hybridkb.storage.postgres import search as pg_search_module
from hybridkb.storage.transfer import copy_kb
from hybridkb.text.filters import POSTGRES, parse_filter, to_sql

if TYPE_CHECKING:
    from hybridkb.storage.postgres import PostgresStorage

pytestmark = [pytest.mark.process, pytest.mark.postgres]


@pytest.fixture
def pg_empty_url(pg_admin_url: str) -> Iterator[str]:
    """A database with nothing in it: not even the hybridkb schema."""
    import pg_server

    name = f"hkb_pg_empty_{os.getpid()}_{next(DB_COUNTER)}"
    url = pg_server.create_database(pg_admin_url, name)
    yield url
    pg_server.drop_database(pg_admin_url, name)


@pytest.fixture
def pg_kb(pg_url: str) -> Iterator[hybridkb.KnowledgeBase]:
    with hybridkb.connect(pg_url, model="fake") as kb:
        yield local(kb)


def _storage(url: str) -> PostgresStorage:
    from hybridkb.storage.postgres import PostgresStorage

    return PostgresStorage(url)


# -- selection and set-up --------------------------------------------------------------


def test_env_url_selects_postgres(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_DB", pg_url.replace("postgresql://", "postgres://", 1))
    with local(hybridkb.connect(model="fake")) as kb:
        assert kb.storage.capabilities.name == "postgres"
        kb.create_collection("From Env")
    with hybridkb.connect(pg_url, model="fake") as kb:
        assert kb.collection_names() == ["From Env"]


def test_workspaces_get_their_own_schema(pg_kb: hybridkb.KnowledgeBase) -> None:
    pg_kb.create_collection("A")
    pg_kb.in_workspace("other").create_collection("A")
    rows = postgres_storage(pg_kb).query(
        "SELECT table_schema, count(*) FROM information_schema.tables"
        " WHERE table_schema LIKE 'hkb_ws%%' GROUP BY 1 ORDER BY 1"
    )
    assert [n for _, n in rows] == [3, 3] and len({s for s, _ in rows}) == 2


def test_collection_indexes_use_hnsw_cosine_and_language_config(
    pg_kb: hybridkb.KnowledgeBase,
) -> None:
    coll = pg_kb.create_collection("German", language="de")
    rows = postgres_storage(pg_kb).query(
        "SELECT indexdef FROM pg_indexes WHERE tablename = %s", [f"c{coll.record.id}_chunks"]
    )
    defs = " ".join(r[0] for r in rows)
    assert "'german'::regconfig" in defs
    coll.add_texts(["Die Häuser wurden gebaut"], ids=["h"])
    matched = postgres_storage(pg_kb).query(
        f"SELECT count(*) FROM hkb_ws1.c{coll.record.id}_chunks"
        " WHERE to_tsvector('german'::regconfig, text) @@ to_tsquery('german', 'Haus')"
    )
    assert matched == [(1,)]


def hnsw_index(storage: PostgresStorage, record: CollectionRecord) -> list[tuple[Any, ...]]:
    """(definition, valid) of the collection's HNSW index, if it has one."""
    return storage.query(
        "SELECT pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i"
        " WHERE i.indexrelid = to_regclass(%s)",
        [f"hkb_ws1.c{record.id}_chunks_hnsw"],
    )


def test_hnsw_index_comes_when_the_collection_outgrows_exact_scans(
    pg_kb: hybridkb.KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_search_module, "EXACT_SCAN_ROWS", 4)
    coll = pg_kb.create_collection("Growing")
    storage = postgres_storage(pg_kb)
    coll.add_texts([f"note {i}" for i in range(4)])
    assert hnsw_index(storage, coll.record) == []  # exact scans: no graph to keep up
    coll.add_texts(["note 4"])
    [(definition, valid)] = hnsw_index(storage, coll.record)
    assert "USING hnsw (embedding vector_cosine_ops)" in definition and valid
    # A build killed half-way leaves an invalid index: the next write builds it again.
    storage.query(
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(%s)",
        [f"hkb_ws1.c{coll.record.id}_chunks_hnsw"],
    )
    with hybridkb.connect(storage.url, model="fake") as other:
        other.collection("Growing").add_texts(["note 5"])
    assert [valid for _, valid in hnsw_index(storage, coll.record)] == [True]
    assert coll.search("note 5", k=1, mode="vector")[0].text == "note 5"


def test_migrations_are_versioned(pg_empty_url: str) -> None:
    from hybridkb.storage.postgres.schema import MIGRATIONS

    # Concurrent first connections: the advisory lock lets one migrate, the rest wait.
    versions: list[int] = []
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            s = _storage(pg_empty_url)
            versions.append(s.schema_version)
            s.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=connect) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and versions == [len(MIGRATIONS)] * 4
    s = _storage(pg_empty_url)
    assert s.query("SELECT value FROM hybridkb_meta WHERE key = 'schema_version'") == [
        (str(len(MIGRATIONS)),)
    ]
    s.query("UPDATE hybridkb_meta SET value = '999' WHERE key = 'schema_version'")
    s.close()
    with pytest.raises(BackendError, match="newer than this hybridkb"):
        _storage(pg_empty_url)


def test_read_only_reads_and_refuses_writes(pg_empty_url: str) -> None:
    with pytest.raises(BackendError, match="no knowledge base here yet"):
        hybridkb.connect(pg_empty_url, model="fake", read_only=True)
    with hybridkb.connect(pg_empty_url, model="fake") as kb:
        kb.create_collection("R").add_texts(["readable text"], ids=["r"])
    with hybridkb.connect(pg_empty_url, model="fake", read_only=True) as kb:
        assert [h.document_id for h in kb.search("readable", k=3)] == ["r"]
        with pytest.raises(BackendError, match="read-only"):  # refused before any file is read
            kb["R"].add_texts(["another text"], ids=["x"])
        with pytest.raises(BackendError, match="read-only"):
            kb["R"].delete(["r"])
        with pytest.raises(BackendError, match="read-only"):
            kb.create_collection("New")


def test_bad_server_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="cannot connect") as info:
        hybridkb.connect("postgresql://nobody:secret@/nodb?host=/nonexistent-dir", model="fake")
    assert "secret" not in str(info.value)


def test_lost_connection_is_replaced_and_closed_is_final(pg_url: str, pg_admin_url: str) -> None:
    import psycopg

    with hybridkb.connect(pg_url, model="fake") as kb:
        kb.create_collection("C").add_texts(["survives a server-side disconnect"], ids=["s"])
        storage = postgres_storage(kb)
        (pid,) = storage.query("SELECT pg_backend_pid()")[0]
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        assert [h.document_id for h in kb.search("disconnect", k=1)] == ["s"]  # read retried
    with pytest.raises(BackendError, match="closed"):
        storage.query("SELECT 1")


# -- search paths ----------------------------------------------------------------------


def test_filtered_hnsw_search_returns_k(
    pg_kb: hybridkb.KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the exact-scan size the HNSW index answers; a 1 % filter still yields k."""
    monkeypatch.setattr(pg_search_module, "EXACT_SCAN_ROWS", 500)  # the add builds the index
    coll = pg_kb.create_collection("Big", chunk_size=100, chunk_overlap=0)
    paragraphs = [
        f"paragraph {i} words {'alpha' if i % 2 else 'beta'} common text padding padding padding pad"
        for i in range(1000)
    ]
    coll.add_texts(["\n\n".join(paragraphs)], ids=["big"])
    assert coll.describe().chunks == 1000
    storage = postgres_storage(pg_kb)
    monkeypatch.setattr(pg_search_module, "EXACT_SCAN_ROWS", 0)  # force the index path
    record = coll.record
    q = pg_kb.embedder("fake").embed_query("paragraph words common")
    plan = storage.query(
        f"EXPLAIN SELECT key FROM hkb_ws1.c{record.id}_chunks ORDER BY embedding <=> %s::vector LIMIT 10",
        ["[" + ",".join(map(str, q.tolist())) + "]"],
    )
    assert any("_chunks_hnsw" in r[0] for r in plan)
    rare = {"chunk_index": {"$in": list(range(0, 1000, 100))}}  # 1 %
    for mode in ("vector", "hybrid", "filter"):
        hits = coll.search("paragraph words common", k=10, mode=mode, where=rare)
        assert sorted(h.metadata["chunk_index"] for h in hits) == list(range(0, 1000, 100)), mode
    ranked = storage.vector_search(record, q, 50, parse_filter({"chunk_index": {"$lt": 500}}))
    assert len(ranked) == 50
    exact = _exact(storage, record, q, 50, "chunk_index < 500")
    kth = exact[-1][1]
    # Approximate, but close to exact (scores, since the fake embedder makes many ties).
    assert sum(s >= kth - 1e-6 for _, s in ranked) >= 45
    unfiltered = storage.vector_search(record, q, 10, None)
    assert len(unfiltered) == 10
    assert [s for _, s in unfiltered] == sorted((s for _, s in unfiltered), reverse=True)


def _exact(
    storage: PostgresStorage, record: CollectionRecord, q: np.ndarray, k: int, predicate: str
) -> list[tuple[int, float]]:
    t = storage.tables(record)
    rows = storage.query(
        f"SELECT key, 1 - (embedding <=> %s::vector) FROM {t['chunks']} WHERE {predicate}"
        " ORDER BY 2 DESC LIMIT %s",
        ["[" + ",".join(map(str, q.tolist())) + "]", k],
    )
    return [(int(a), float(b)) for a, b in rows]


def test_postgres_filter_dialect_survives_odd_values(
    pg_kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    """Numeric comparisons on text that is not a number neither fail nor differ from DuckDB."""
    values = ["e", "-", "+", ".", "1e3", " 7 ", "12", "abc", "3.5", "-2", True, None, 5, "1e5x"]
    wheres: list[dict[str, Any]] = [
        {"v": {"$gt": 4}},
        {"v": {"$lte": 3.5}},
        {"v": 12},
        {"v": {"$ne": 5}},
        {"v": "e"},
    ]
    found = []
    with hybridkb.connect(tmp_path / "odd.duckdb", model="fake") as duck:
        for kb in (pg_kb, duck):
            coll = kb.create_collection("Odd")
            coll.add_texts(
                [f"odd value text {i}" for i in range(len(values))],
                metadatas=[{"v": v} for v in values],
                ids=[f"o{i}" for i in range(len(values))],
            )
            found.append(
                [
                    sorted(h.document_id for h in coll.search("odd value", k=20, where=w))
                    for w in wheres
                ]
            )
    assert found[0] == found[1]
    assert found[0][0] == ["o12", "o4", "o5", "o6"]
    gte_one = parse_filter({"v": {"$gte": 1}})
    assert gte_one is not None
    sql, params = to_sql(gte_one, POSTGRES)
    assert sql.count("%s") == len(params)


# -- concurrency -----------------------------------------------------------------------


def _worker(url: str, idx: int, go: Any, out: Any) -> None:
    """One ingesting process (forked: no import cost): shared, private and conflicting ids."""
    import random

    try:
        kb = hybridkb.connect(url, model="fake")
        coll = kb.collection("shared")
        items = [(f"s{j}", f"shared document {j} identical everywhere") for j in range(10)]
        items += [
            (f"p{idx}_{j}", f"private document from worker w{idx}x number {j}") for j in range(10)
        ]
        items += [
            (
                f"c{j}",
                "\n\n".join(
                    f"conflicting version w{idx}x of {j} paragraph {p} " + "pad " * 12
                    for p in range(3)
                ),
            )
            for j in range(5)
        ]
        random.Random(idx).shuffle(items)
        go.wait(60)
        added = unchanged = failed = 0
        for doc_id, text in items:
            r = coll.add_texts([text], ids=[doc_id])
            added, unchanged, failed = (
                added + len(r.added),
                unchanged + len(r.unchanged),
                failed + len(r.failed),
            )
        kb.close()
        out.put({"idx": idx, "added": added, "unchanged": unchanged, "failed": failed})
    except BaseException as exc:  # reported by the parent
        out.put({"idx": idx, "error": repr(exc)})


def test_eight_processes_ingesting_lose_nothing_and_duplicate_nothing(pg_url: str) -> None:
    import multiprocessing

    workers = 8
    with hybridkb.connect(pg_url, model="fake") as kb:
        kb.create_collection("shared", chunk_size=100, chunk_overlap=0, language="en")
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(pg_url, i, go, out)) for i in range(workers)]
    for p in procs:
        p.start()
    go.set()  # all start writing at once
    results = [out.get(timeout=120) for _ in range(workers)]
    for p in procs:
        p.join(30)
    assert [r for r in results if "error" in r] == []
    assert all(p.exitcode == 0 for p in procs)
    assert all(r["failed"] == 0 for r in results)

    with hybridkb.connect(pg_url, model="fake") as kb:
        coll = kb.collection("shared")
        record = coll.record
        expected_ids = (
            {f"s{j}" for j in range(10)}
            | {f"c{j}" for j in range(5)}
            | {f"p{i}_{j}" for i in range(workers) for j in range(10)}
        )
        docs = coll.documents(limit=1000)
        assert sorted(d.document_id for d in docs) == sorted(
            expected_ids
        )  # nothing lost or doubled
        storage = postgres_storage(kb)
        counts = storage.consistency(record)
        assert counts["documents"] == len(expected_ids)
        assert counts["chunks"] == counts["document_chunk_count"] == counts["distinct_chunk_ids"]
        assert counts["stat_chunks"] == counts["chunks"]
        assert counts["stat_total_len"] == counts["terms"]
        assert counts["postings"] == counts["expected_postings"]
        # Each document's chunks are exactly the set its stored version produces.
        t = storage.tables(record)
        rows = storage.query(f"SELECT document_id, chunk_index, chunk_id, text FROM {t['chunks']}")
        by_doc: dict[str, list[tuple[int, str, str]]] = {}
        for doc_id, index, chunk_id, text in rows:
            by_doc.setdefault(doc_id, []).append((index, chunk_id, text))
        for d in docs:
            mine = sorted(by_doc[d.document_id])
            assert [i for i, _, _ in mine] == list(range(d.chunk_count))
            assert [c for _, c, _ in mine] == [
                make_chunk_id(record.id, d.document_id, d.content_hash, i)
                for i in range(d.chunk_count)
            ]
            if d.document_id.startswith("c"):
                writers = {w for _, _, text in mine for w in text.split() if w.startswith("w")}
                assert len(writers) == 1, (d.document_id, writers)  # one version, never a mix
        for i in range(workers):
            hits = coll.search(
                f"w{i}x private",
                k=50,
                mode="keyword",
                where={"document_id": {"$in": [f"p{i}_{j}" for j in range(10)]}},
            )
            assert sorted(h.document_id for h in hits) == sorted(f"p{i}_{j}" for j in range(10))
    assert sum(r["added"] for r in results) >= len(expected_ids)


@pytest.mark.parametrize("graph", [True, False], ids=["with-graph", "storage-only"])
def test_readers_are_never_blocked_by_writers(pg_url: str, graph: bool) -> None:
    """A write paused inside its transaction blocks no reader (MVCC). Without the graph hook,
    a writer of another document does not wait either; the graph's per-workspace version
    row serialises graph writes, so with it the second writer finishes after the first."""
    settings = load_settings(db=pg_url, model="fake")
    with hybridkb.connect(pg_url, model="fake") as setup:
        setup.create_collection("live", language="en").add_texts(
            ["existing text about otters"], ids=["old"]
        )
    reader = hybridkb.KnowledgeBase(LocalEngine(_storage(pg_url), settings))
    writer = hybridkb.KnowledgeBase(LocalEngine(_storage(pg_url), settings))
    other = hybridkb.KnowledgeBase(LocalEngine(_storage(pg_url), settings))
    if not graph:
        writer.storage.hooks.clear()
        other.storage.hooks.clear()
    inside, release = threading.Event(), threading.Event()

    def pause(con: Any, event: Any) -> None:
        if event.kind == "put" and event.document_ids[0] == "old":
            inside.set()
            release.wait(30)

    writer.storage.hooks.append(pause)
    failure: list[BaseException] = []

    def run(fn: Any) -> threading.Thread:
        def body() -> None:
            try:
                fn()
            except BaseException as exc:  # pragma: no cover - reported below
                failure.append(exc)

        thread = threading.Thread(target=body)
        thread.start()
        return thread

    first = run(lambda: writer["live"].add_texts(["replaced text about beavers"], ids=["old"]))
    try:
        assert inside.wait(30), "writer never reached its transaction"
        seen: dict[str, Any] = {}

        def read() -> None:
            for mode in ("hybrid", "vector", "keyword", "filter"):
                seen[mode] = [h.text for h in reader.search("otters", k=5, mode=mode)]
            seen["describe"] = reader.describe("live").documents
            seen["doc"] = reader["live"].get("old")
            seen["graph"] = reader.graph.neighbors(reader["live"].search("otters", k=1)[0].chunk_id)

        reading = run(read)
        reading.join(20)
        assert not reading.is_alive(), "a reader waited for the open write"
        assert seen["keyword"] == ["existing text about otters"]  # the committed version
        assert seen["describe"] == 1 and seen["doc"] is not None
        second = run(
            lambda: other["live"].add_texts(["independent text about herons"], ids=["new"])
        )
        second.join(0.5 if graph else 20)
        assert second.is_alive() == graph
    finally:
        release.set()
        first.join(30)
    second.join(30)
    assert not failure
    assert [h.text for h in reader.search("beavers", k=5, mode="keyword")] == [
        "replaced text about beavers"
    ]
    assert reader["live"].count() == 2
    for kb in (reader, writer, other):
        kb.close()


def test_same_document_from_two_writers_ends_once(pg_url: str) -> None:
    settings = load_settings(db=pg_url, model="fake", chunk_size=100, chunk_overlap=0)
    with hybridkb.connect(pg_url, model="fake") as kb:
        kb.create_collection("race", chunk_size=100, chunk_overlap=0)
    kbs = [hybridkb.KnowledgeBase(LocalEngine(_storage(pg_url), settings)) for _ in range(2)]
    errors: list[BaseException] = []

    def hammer(n: int) -> None:
        try:
            for round_ in range(8):
                text = "\n\n".join(
                    f"writer {n} round {round_} part {p} " + "pad " * 15
                    for p in range(1 + round_ % 3)
                )
                kbs[n]["race"].add_texts([text], ids=["same"])
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    coll = kbs[0]["race"]
    counts = postgres_storage(kbs[0]).consistency(coll.record)
    assert counts["documents"] == 1
    assert counts["chunks"] == counts["document_chunk_count"] == counts["stat_chunks"]
    assert counts["postings"] == counts["expected_postings"]
    for kb in kbs:
        kb.close()


def test_dropped_collection_elsewhere_is_not_found(pg_url: str) -> None:
    with (
        local(hybridkb.connect(pg_url, model="fake")) as a,
        hybridkb.connect(pg_url, model="fake") as b,
    ):
        coll = a.create_collection("Gone")
        record = coll.record
        b.drop_collection("Gone")
        with pytest.raises(CollectionNotFound):
            coll.add_texts(["too late"])
        doc = DocumentRecord("d", None, None, "text", "h", "s")
        chunk_id = make_chunk_id(record.id, "d", "h", 0)
        chunk = ChunkRecord(
            chunk_key(chunk_id),
            chunk_id,
            "d",
            0,
            "t",
            None,
            None,
            0,
            1,
            "h",
            "en",
            ["t"],
            {},
            None,
            None,
        )
        with pytest.raises(CollectionNotFound):
            a.storage.put_document(record, doc, [chunk], np.ones((1, 64), np.float32) / 8)


def test_text_postgres_cannot_hold_is_stored_safely(pg_kb: hybridkb.KnowledgeBase) -> None:
    coll = pg_kb.create_collection("Odd Text")
    record = coll.record
    doc = DocumentRecord(
        "weird\x00id",
        "/tmp/bad-\udcff.txt",
        "bad-\udcff.txt",
        "file",
        "h",
        "s",
        metadata={"k\x00": "v\x00", "list": ["\udcfe"]},
    )
    chunk_id = make_chunk_id(record.id, doc.document_id, "h", 0)
    chunk = ChunkRecord(
        chunk_key(chunk_id),
        chunk_id,
        doc.document_id,
        0,
        "text with NUL \x00 inside",
        None,
        None,
        0,
        10,
        "h",
        "en",
        ["text", "nul"],
        doc.metadata,
        doc.filename,
        doc.path,
    )
    pg_kb.storage.put_document(record, doc, [chunk], np.ones((1, 64), np.float32) / 8)
    got = pg_kb.storage.get_document(record, "weird\x00id")
    assert (
        got is not None
        and got.filename == "bad-\ufffd.txt"
        and got.metadata["k\ufffd"] == "v\ufffd"
    )
    assert [h.text for h in coll.search("nul", k=3, mode="keyword")] == [
        "text with NUL \ufffd inside"
    ]
    assert pg_kb.storage.delete_documents(record, ["weird\x00id"]) == ["weird\x00id"]


def test_terms_with_copy_text_s_control_characters_are_posted_as_they_are(
    pg_kb: hybridkb.KnowledgeBase,
) -> None:
    """Postings go in as COPY text (rows.postings_copy): a term holding a tab, newline,
    carriage return or backslash (or reading as COPY's NULL) is stored, found and deleted
    as itself."""
    record = pg_kb.create_collection("Odd Terms").record
    odd = ["tab\there", "new\nline", "cr\rhere", "back\\slash", "\\N", "plain", "plain"]
    doc = DocumentRecord("d", None, None, "text", "h", "s")
    chunk_id = make_chunk_id(record.id, "d", "h", 0)
    chunk = ChunkRecord(
        chunk_key(chunk_id), chunk_id, "d", 0, "odd", None, None, 0, 3, "h", "en", odd, {},
        None, None,
    )  # fmt: skip
    storage = postgres_storage(pg_kb)
    storage.put_document(record, doc, [chunk], np.ones((1, 64), np.float32) / 8)
    postings = storage.tables(record)["postings"]
    rows = storage.query(f"SELECT term, key, tf, dl FROM {postings} ORDER BY term")
    assert sorted(rows) == sorted(
        [(t, chunk.key, 2 if t == "plain" else 1, len(odd)) for t in dict.fromkeys(odd)]
    )
    for term in odd:
        assert [key for key, _ in storage.keyword_search(record, [term], 5, None)] == [chunk.key]
    storage.delete_documents(record, ["d"])
    assert storage.query(f"SELECT count(*) FROM {postings}") == [(0,)]


# -- copy between backends -------------------------------------------------------------


def _fill(kb: hybridkb.KnowledgeBaseAPI) -> None:
    a = kb.create_collection("Tax Documents", chunk_size=100, chunk_overlap=0)
    a.add_texts(
        [
            f"Depreciation rule {i} for business assets, with a schedule over several years.\n\n"
            f"Second part {i} about laptops and cars bought for work, and their effective life."
            for i in range(15)
        ],
        metadatas=[{"year": 2015 + i % 5} for i in range(15)],
        ids=[f"t{i}" for i in range(15)],
    )
    kb.in_workspace("team").create_collection("Notes").add_texts(
        ["meeting notes about budgets"], ids=["n"]
    )


def _snapshot(url: str) -> dict[str, Any]:
    """What a copy must keep: collections, every stored row and vector, keyword ranking."""
    out: dict[str, Any] = {}
    with local(hybridkb.connect(url, model="fake")) as kb:
        for ws in ("default", "team"):
            w = kb.in_workspace(ws)
            for info in w.list_collections():
                out[f"{ws}/{info.name}"] = (info.documents, info.chunks, info.dim, info.chunking)
                record = w.record(info.name)
                rows = []
                for doc, chunks, vectors in kb.storage.export_documents(record):
                    rows.append(
                        (
                            doc.document_id,
                            doc.content_hash,
                            doc.metadata,
                            [(c.chunk_index, c.text, c.page, list(c.terms)) for c in chunks],
                            np.round(np.asarray(vectors, dtype=np.float64), 6).tolist(),
                        )
                    )
                out[f"{ws}/{info.name}:rows"] = sorted(rows, key=lambda r: r[0])
            out[f"{ws}:keyword"] = [
                (h.collection, h.document_id, round(h.score, 4))
                for h in w.search(
                    "depreciation laptops budgets",
                    k=8,
                    mode="keyword",
                    where={"year": {"$gte": 2016}} if ws == "default" else None,
                )
            ]
    return out


def test_copy_duckdb_to_postgres_and_back(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = str(tmp_path / "src.duckdb")
    with hybridkb.connect(src, model="fake") as kb:
        _fill(kb)
    before = _snapshot(src)
    report = copy_kb(src, pg_url)
    assert [
        (c["workspace"], c["name"], c["documents"], c["chunks"], c["vectors"])
        for c in report["collections"]
    ] == [("default", "Tax Documents", 15, 30, 30), ("team", "Notes", 1, 1, 1)]
    assert _snapshot(pg_url) == before
    back = str(tmp_path / "back.duckdb")
    report_back = copy_kb(pg_url, back)
    assert report_back["chunks"] == 31
    assert _snapshot(back) == before
    # Chunk ids follow the destination's collection ids, as an ingest there makes them.
    with hybridkb.connect(pg_url, model="fake") as kb:
        coll = kb["Tax Documents"]
        d = coll.get("t3")
        assert d is not None
        hit = coll.search("rule 3", k=1, mode="keyword", where={"document_id": "t3"})[0]
        assert hit.chunk_id in {
            make_chunk_id(coll.record.id, "t3", d.content_hash, i) for i in range(2)
        }
        # Re-adding the same text is a no-op: the copy kept hashes and signatures.
        again = coll.add_texts(
            [
                "Depreciation rule 3 for business assets, with a schedule over several years.\n\n"
                "Second part 3 about laptops and cars bought for work, and their effective life."
            ],
            metadatas=[{"year": 2018}],
            ids=["t3"],
        )
        assert again.unchanged and not again.added


def test_copy_refuses_to_overwrite(pg_url: str, tmp_path: Path) -> None:
    src = str(tmp_path / "src.duckdb")
    with hybridkb.connect(src, model="fake") as kb:
        _fill(kb)
    with hybridkb.connect(pg_url, model="fake") as kb:
        kb.in_workspace("team").create_collection("Notes")
    with pytest.raises(CollectionExists, match="team/Notes"):
        copy_kb(src, pg_url)
    with hybridkb.connect(pg_url, model="fake") as kb:
        assert kb.collection_names() == []  # nothing was copied
    only = copy_kb(src, pg_url, workspace="default")
    assert [c["name"] for c in only["collections"]] == ["Tax Documents"]
    with pytest.raises(KBError):
        copy_kb(src, src)


# -- graph -----------------------------------------------------------------------------

GRAPH_DOCS = [
    "# Depreciation\n\nThe ITAA 1997 section 40-880 covers business costs over five years.\n\n"
    "Laptops bought by Acme Corp are depreciated under ITAA 1997 rules over their effective life.",
    "Another text mentioning ITAA 1997 and Acme Corp, with enough words to make a whole chunk.",
]


def _graph_view(kb: hybridkb.KnowledgeBaseAPI) -> dict[str, Any]:
    coll = kb["Tax"]
    hit = coll.search("laptops depreciation", k=1)[0]
    assert hit.document_node is not None
    walk = kb.graph.traverse(hit.document_node, max_depth=2).to_dict()
    nodes = {
        n["id"].replace(f":{coll.record.id}:", ":C:") for p in walk["paths"] for n in p["nodes"]
    }
    neighbours = kb.graph.neighbors(hit.chunk_id).to_dict()
    return {"nodes": sorted(nodes), "neighbour_count": len(json.dumps(neighbours, sort_keys=True))}


def test_graph_on_postgres_matches_duckdb(pg_kb: hybridkb.KnowledgeBase, tmp_path: Path) -> None:
    from hybridkb.storage.postgres.graph import PostgresGraphSQL

    views = []
    with hybridkb.connect(tmp_path / "graph.duckdb", model="fake") as duck:
        for kb in (duck, pg_kb):
            coll = kb.create_collection("Tax", chunk_size=100, chunk_overlap=0, language="en")
            coll.add_texts(GRAPH_DOCS, ids=["a", "b"])
            g = kb.graph
            cid = coll.record.id
            g.add_node("topic:tax", "category", {"label": "Tax"})
            g.relate(f"doc:{cid}:a", "topic:tax", "about", properties={"by": "test"})
            g.relate(f"doc:{cid}:b", "topic:tax", "about")
            assert g.unrelate(f"doc:{cid}:b", "topic:tax", "about")
            g.set_alias("acme", "Acme Corp")
            assert g.rebuild("Tax") == 2
            views.append(
                {
                    **_graph_view(kb),
                    "stats": {k: v for k, v in g.stats().items() if k != "workspace"},
                    "aliases": g.aliases(),
                    "about": [
                        n.node.id
                        for n in g.neighbors(f"doc:{cid}:a", edge_types=["about"]).neighbors
                    ],
                }
            )
    assert views[0] == views[1] and len(views[0]["nodes"]) > 4
    # The same reach in SQL (recursive CTE) as in memory.
    hit = pg_kb["Tax"].search("laptops depreciation", k=1)[0]
    start = hit.document_node
    assert start is not None
    for direction in ("out", "both"):

        def reach(con: Connection, d: str = direction) -> list[tuple[str, int]]:
            return PostgresGraphSQL().traverse(con, "default", start, max_depth=2, direction=d)

        in_sql = pg_kb.storage.transaction(reach)
        in_memory = pg_kb.graph.traverse(start, max_depth=2, direction=direction).to_dict()
        assert {n for n, _ in in_sql} == {n["id"] for p in in_memory["paths"] for n in p["nodes"]}
    # Deleting a document prunes its rows in the same transaction.
    pg_kb["Tax"].delete(["b"])
    rows = postgres_storage(pg_kb).query(
        "SELECT count(*) FROM hybridkb_graph_nodes WHERE document_id = 'b'"
    )
    assert rows == [(0,)]


def test_copy_moves_the_graph_both_ways(pg_url: str, tmp_path: Path) -> None:
    src, back = str(tmp_path / "g1.duckdb"), str(tmp_path / "g2.duckdb")
    with hybridkb.connect(src, model="fake") as kb:
        coll = kb.create_collection("Tax", chunk_size=100, chunk_overlap=0, language="en")
        coll.add_texts(GRAPH_DOCS, ids=["a", "b"])
        before = _graph_view(kb)
    there = copy_kb(src, pg_url)
    assert there["graph"]["copied"] and there["collections"][0]["graph_edges"] > 0
    with hybridkb.connect(pg_url, model="fake") as kb:
        assert _graph_view(kb) == before
    again = copy_kb(pg_url, back)
    assert again["collections"][0]["graph_nodes"] == there["collections"][0]["graph_nodes"]
    with hybridkb.connect(back, model="fake") as kb:
        assert _graph_view(kb) == before
