"""On PostgreSQL a hybrid search is one statement (``Storage.hybrid``, issue 37) that ranks
as the core does with the same store's own legs: fusion (every method, floors and ties),
vector feedback, filters, exactly k under a 1 % filter.

The vectors are random (seeded), not the fake model's: its integer-count vectors tie
often, and a tie broken by one float32 ulp differently is no disagreement worth a test.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pg_server
import psycopg
import pytest
from internals import postgres_storage

import hybridkb
from hybridkb.results import Hit
from hybridkb.search.hybrid import Target, run_search
from hybridkb.settings import load_settings
from hybridkb.storage import open_storage
from hybridkb.storage.base import (
    ChunkRecord,
    CollectionRecord,
    DocumentRecord,
    PutItem,
    Storage,
    chunk_key,
    make_chunk_id,
)
from hybridkb.storage.postgres import PostgresStorage
from hybridkb.storage.postgres import search as pg_search
from hybridkb.text.analysis import analyze
from hybridkb.text.filters import parse_filter

pytestmark = [pytest.mark.process, pytest.mark.postgres]

DIM = 64  # the fake model's, which made the collection
WORDS = (
    "tax leave salary laptop car trip depreciation asset annual weeks employee claim "
    "kilometre policy travel meal office rent insurance pension bonus invoice receipt "
    "audit budget contract notice parental sick holiday overtime remote equipment"
).split()


@dataclass
class Fixed:
    """An embedder answering every query with the vector the test chose."""

    vectors: dict[str, np.ndarray]
    model_id: str = "fake"
    dim: int = DIM

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self.vectors[text]


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    raw = rng.standard_normal((n, DIM)).astype(np.float32)
    out: np.ndarray = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)
    return out


def put_corpus(storage: Storage, coll: CollectionRecord, n: int, seed: int = 7) -> None:
    rng, pick = np.random.default_rng(seed), random.Random(seed)
    vectors = unit(rng, n)
    items = []
    for i in range(n):
        text = " ".join(pick.choice(WORDS) for _ in range(pick.randint(4, 40)))
        digest = hashlib.sha256(text.encode()).hexdigest()
        doc = DocumentRecord(f"d{i}", None, None, "text", digest, "t", {"n": i % 100}, "en")
        cid = make_chunk_id(coll.id, doc.document_id, digest, 0)
        chunk = ChunkRecord(
            chunk_key(cid), cid, doc.document_id, 0, text, None, None, 0, len(text), digest,
            "en", analyze(text, "en"), doc.metadata, None, None,
        )  # fmt: skip
        items.append(PutItem(doc, [chunk], vectors[i : i + 1]))
    for start in range(0, n, 200):
        storage.put_documents(coll, items[start : start + 200])


@pytest.fixture(scope="module")
def store(
    pg_admin_url: str, pg_template: str
) -> Iterator[tuple[PostgresStorage, Target, list[str]]]:
    """One filled collection for the module (the tests only read it)."""
    name = f"hkb_pg_hybrid_{os.getpid()}"
    url = pg_server.create_database(pg_admin_url, name, template=pg_template)
    try:
        with hybridkb.connect(url, model="fake") as kb:
            storage = postgres_storage(kb)
            kb.create_collection("Notes")
            coll = kb.record("Notes")
            put_corpus(storage, coll, 600)
            pick, rng = random.Random(11), np.random.default_rng(11)
            queries = [" ".join(pick.choices(WORDS, k=pick.randint(1, 6))) for _ in range(12)]
            queries = list(dict.fromkeys(queries))
            embedder = Fixed(dict(zip(queries, unit(rng, len(queries)), strict=True)))
            yield storage, Target(coll, embedder, ["en"]), queries
    finally:
        pg_server.drop_database(pg_admin_url, name)


def both_ways(
    storage: PostgresStorage, target: Target, query: str, **options: Any
) -> tuple[list[Hit], list[Hit]]:
    """The store's one-statement hybrid and the core's, on the same store."""
    settings = load_settings(
        model="fake",
        **{k: v for k, v in options.items() if k in ("fusion", "vector_feedback", "candidates")},
    )
    where = options.get("where")
    k = int(options.get("k", 10))
    in_store = run_search(
        storage, [target], query, k=k, mode="hybrid", where=where, settings=settings
    )
    saved, storage.hybrid = storage.hybrid, None
    try:
        in_core = run_search(
            storage, [target], query, k=k, mode="hybrid", where=where, settings=settings
        )
    finally:
        storage.hybrid = saved
    return in_store, in_core


def shown(hits: list[Hit]) -> list[tuple[Any, ...]]:
    return [
        (h.chunk_id, h.scores["bm25_rank"], h.scores["vector_rank"], h.text, h.metadata["n"])
        for h in hits
    ]  # fmt: skip


def test_keyword_scores_are_the_keyword_index_s(
    store: tuple[PostgresStorage, Target, list[str]],
) -> None:
    """The SQL BM25 (each term's weight computed once, k1 and b folded) scores every match
    as the DuckDB backend's keyword index does, filtered or not, with a query term
    repeated or matching nothing."""
    storage, target, queries = store
    duck = open_storage(":memory:")
    try:
        coll = duck.create_collection(
            "default", "Notes", model="fake", dim=DIM, chunking={}, language="en"
        )
        put_corpus(duck, coll, 600)
        few = parse_filter({"n": {"$lt": 30}})
        for query, where in itertools.product([*queries, "tax tax nosuchword"], [None, few]):
            terms = analyze(query, "en")
            got = by_document(storage, target.coll, terms, where)
            want = by_document(duck, coll, terms, where)
            assert got.keys() == want.keys() and got, (query, where)
            for doc, score in want.items():
                assert got[doc] == pytest.approx(score, rel=1e-12), (query, where, doc)
    finally:
        duck.close()


def by_document(
    storage: Storage, coll: CollectionRecord, terms: list[str], where: Any
) -> dict[str, float]:
    """Every keyword match's BM25 score, by document id (chunk keys differ per store)."""
    ranked = storage.keyword_search(coll, terms, 1000, where)
    rows = storage.fetch_chunks(coll, [key for key, _ in ranked])
    return {rows[key].document_id: score for key, score in ranked}


@pytest.mark.parametrize("fusion", ["zscore", "weighted", "rrf"])
@pytest.mark.parametrize("feedback", [0.4, 0.0])
@pytest.mark.parametrize("exact_below", [pg_search.EXACT_SCAN_ROWS, 0])  # 0: the HNSW path
def test_store_hybrid_ranks_as_the_core_does(
    store: tuple[PostgresStorage, Target, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    fusion: str,
    feedback: float,
    exact_below: int,
) -> None:
    storage, target, queries = store
    monkeypatch.setattr(pg_search, "EXACT_SCAN_ROWS", exact_below)
    # candidates 100: keyword legs shorter than the depth (floors); 5: cut legs.
    for query, candidates, where in itertools.product(
        queries, (100, 5), (None, {"n": {"$lt": 30}})
    ):
        in_store, in_core = both_ways(
            storage, target, query, fusion=fusion, vector_feedback=feedback,
            candidates=candidates, where=where,
        )  # fmt: skip
        assert shown(in_store) == shown(in_core), (query, where)
        for ours, theirs in zip(in_store, in_core, strict=True):
            assert ours.score == pytest.approx(theirs.score, abs=1e-6)
            for leg in ("bm25", "vector"):
                assert ours.scores[leg] == pytest.approx(theirs.scores[leg], abs=1e-6)


def test_store_hybrid_is_one_statement(
    store: tuple[PostgresStorage, Target, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, target, queries = store
    settings = load_settings(model="fake")
    run_search(storage, [target], queries[0], k=5, mode="hybrid", where=None, settings=settings)
    statements: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query)[:40])
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    hits = run_search(
        storage, [target], queries[1], k=5, mode="hybrid", where=None, settings=settings
    )
    assert len(hits) == 5 and len(statements) == 1, statements


@pytest.mark.parametrize("exact_below", [pg_search.EXACT_SCAN_ROWS, 0])  # 0: the HNSW path
def test_store_hybrid_returns_k_under_a_one_percent_filter(
    store: tuple[PostgresStorage, Target, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    exact_below: int,
) -> None:
    storage, target, queries = store
    monkeypatch.setattr(pg_search, "EXACT_SCAN_ROWS", exact_below)
    settings = load_settings(model="fake")
    for query in queries:
        hits = run_search(
            storage, [target], query, k=5, mode="hybrid", where={"n": 7}, settings=settings
        )  # 6 of 600 chunks match
        assert len(hits) == 5 and {h.metadata["n"] for h in hits} == {7}
