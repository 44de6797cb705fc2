"""The hybrid search path: its keyword legs run in a helper thread beside the vector
legs and the candidates are fused as arrays; none of it may change a result."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from internals import local, local_engine

import hybridkb
from hybridkb.embedders import cache_key
from hybridkb.errors import BackendError
from hybridkb.search import fusion, legs
from hybridkb.search.hybrid import Target, feedback_leg
from hybridkb.storage.base import chunk_key
from hybridkb.text.analysis import analyze_query

TEXTS = {
    "Tax": [
        "Straight-line depreciation spreads the cost of equipment over its useful life.",
        "Invoices are kept for seven years; depreciation schedules for the life of the asset.",
        "Capital gains on shares are taxed when the shares are sold.",
        "Depreciation of a car used for business is limited each year.",
    ],
    "HR": [
        "Annual leave accrues monthly and carries over for one year.",
        "Sick leave needs a note from a doctor after two days.",
        "Equipment bought for home offices is depreciated over three years.",
    ],
}
QUERIES = ["depreciation of equipment", "leave", "shares sold", "doctor note", "zebra"]


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        for name, texts in TEXTS.items():
            kb.create_collection(name).add_texts(texts)
    return db


def _inline(monkeypatch: pytest.MonkeyPatch) -> None:
    def run_here(fn: Any, kind: Any = None) -> legs.Pending[Any]:
        job: legs.Pending[Any] = legs.Pending(fn)
        job.run()
        return job

    monkeypatch.setattr(legs.HELPER, "start", run_here)


def _every_search(kb: hybridkb.KnowledgeBaseAPI) -> list[Any]:
    return [
        [h.to_dict() for h in kb.search(q, k=k, mode=mode, collections=names)]
        for q in QUERIES
        for mode in ("hybrid", "keyword", "vector", "filter")
        for k in (1, 3, 10)
        for names in (["Tax"], ["Tax", "HR"])
    ]


def _chunk_keys(fused: list[fusion.Fused]) -> list[int]:
    """The chunk keys of fused hits, keyed (collection id, chunk key) as search keys them."""
    keys = []
    for f in fused:
        assert isinstance(f.key, tuple)
        keys.append(f.key[1])
    return keys


@pytest.mark.parametrize("fusion_kind", ["zscore", "weighted", "rrf"])
def test_legs_side_by_side_give_exactly_the_hits_of_legs_in_turn(
    filled: Path, monkeypatch: pytest.MonkeyPatch, fusion_kind: str
) -> None:
    with hybridkb.connect(filled, model="fake", fusion=fusion_kind) as kb:
        side_by_side = _every_search(kb)
        _inline(monkeypatch)
        in_turn = _every_search(kb)
    assert side_by_side == in_turn
    assert any(len(hits) > 1 for hits in side_by_side)


def test_a_hybrid_search_runs_its_vector_legs_in_a_thread_that_ends_with_it(
    filled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with local(hybridkb.connect(filled, model="fake")) as kb:
        threads: dict[str, list[str]] = {"keyword": [], "vector": []}
        real: dict[str, Callable[..., Any]] = {
            "keyword": kb.storage.keyword_search,
            "vector": kb.storage.vector_search,
        }

        def spy(leg: str) -> Any:
            def call(*args: Any) -> Any:
                threads[leg].append(threading.current_thread().name)
                return real[leg](*args)

            return call

        monkeypatch.setattr(kb.storage, "keyword_search", spy("keyword"))
        monkeypatch.setattr(kb.storage, "vector_search", spy("vector"))
        kb.search("depreciation", collections=["Tax", "HR"])
        kb.search("depreciation", mode="vector", collections=["Tax"])
        # No leg's thread is left once its search answered (issue 33).
        assert not [t for t in threading.enumerate() if t.name == "hybridkb-search-leg"]
    here = threading.current_thread().name
    # The keyword legs stay on the caller's thread, with its analysers and buffers.
    assert threads == {"keyword": [here] * 2, "vector": ["hybridkb-search-leg"] * 2 + [here]}


def test_an_error_in_either_leg_reaches_the_caller(
    filled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with local(hybridkb.connect(filled, model="fake")) as kb:
        real_keyword, real_vector = kb.storage.keyword_search, kb.storage.vector_search
        finished: list[str] = []

        def keyword_fails(*args: Any) -> Any:
            raise BackendError("keyword leg failed")

        def slow_keyword(*args: Any) -> Any:
            threading.Event().wait(0.05)
            finished.append("keyword")
            return real_keyword(*args)

        def vector_fails(*args: Any) -> Any:
            raise BackendError("vector leg failed")

        monkeypatch.setattr(kb.storage, "keyword_search", keyword_fails)
        with pytest.raises(BackendError, match="keyword leg failed"):
            kb.search("depreciation", collections=["Tax"])
        monkeypatch.setattr(kb.storage, "keyword_search", slow_keyword)
        monkeypatch.setattr(kb.storage, "vector_search", vector_fails)
        with pytest.raises(BackendError, match="vector leg failed"):
            kb.search("depreciation", collections=["Tax"])
        assert finished == ["keyword"]  # waited for: no leg outlives its search
        monkeypatch.setattr(kb.storage, "vector_search", real_vector)
        assert kb.search("depreciation", collections=["Tax"])  # the helper serves on


def test_hybrid_hits_are_the_pure_fusion_of_the_legs(filled: Path) -> None:
    """The array path gives what fusion.zscore and feedback_leg give on the legs."""
    with local(hybridkb.connect(filled, model="fake")) as kb:
        record = kb.record("Tax")
        target = local_engine(kb).target(record)
        storage, settings = kb.storage, kb.settings
        for query in QUERIES[:4]:
            depth = settings.candidates
            terms = analyze_query(query, target.languages)
            qvec = target.embedder.embed_query(query)
            kw = [
                ((record.id, k), s) for k, s in storage.keyword_search(record, terms, depth, None)
            ]
            vec = [((record.id, k), s) for k, s in storage.vector_search(record, qvec, depth, None)]
            floors = [0.0 if len(kw) < depth else None, None]
            first = fusion.zscore([kw, vec], floors=floors)
            moved = feedback_leg(
                storage, [target], {record.model: qvec}, [*kw, *vec], first,
                settings.vector_feedback, depth,
            )  # fmt: skip
            want = fusion.zscore([kw, moved], floors=floors)[:10]
            hits = kb.search(query, k=10, collections=["Tax"])
            assert [h.score for h in hits] == pytest.approx([f.score for f in want], abs=1e-9)
            got_keys = [chunk_key(h.chunk_id) for h in hits]
            assert got_keys == _chunk_keys(want)
            vector_of = dict(moved)
            for hit in hits:
                key = (record.id, chunk_key(hit.chunk_id))
                assert hit.scores["vector"] == pytest.approx(vector_of[key], abs=1e-6)


def test_feedback_leg_takes_the_fused_list_as_before(filled: Path) -> None:
    with local(hybridkb.connect(filled, model="fake")) as kb:
        record = kb.record("Tax")
        target = Target(record, kb.embedder_for(record), ["en"])
        qvec = target.embedder.embed_query("depreciation")
        vec = [((record.id, k), s) for k, s in kb.storage.vector_search(record, qvec, 10, None)]
        best = [fusion.Fused(vec[1][0], 1.0)]  # any fused list: its first entry moves the query
        moved = feedback_leg(kb.storage, [target], {record.model: qvec}, vec, best, 0.4, 10)
        assert sorted(k for k, _ in moved) == sorted(k for k, _ in vec)
        assert [s for _, s in moved] == sorted((s for _, s in moved), reverse=True)
        assert moved[0][0] == vec[1][0]  # the chunk the query moved towards now leads


def test_feedback_leg_rescores_live_candidates_of_every_collection_from_its_best_rows(
    filled: Path,
) -> None:
    """Two collections, a candidate deleted after ranking (it leads the fused list, so
    the query must move towards the next ones instead) and two feedback chunks: the
    leg is every live candidate by cosine with the moved query, as written out here."""
    weight, chunks = 0.4, 2
    with local(hybridkb.connect(filled, model="fake")) as kb:
        engine, storage = local_engine(kb), kb.storage
        records = [kb.record(name) for name in ("Tax", "HR")]
        targets = [engine.target(r) for r in records]
        qvec = targets[0].embedder.embed_query("depreciation of equipment")
        found = {r.id: storage.vector_search(r, qvec, 10, None) for r in records}
        candidates = [((cid, key), score) for cid, leg in found.items() for key, score in leg]
        gone = (records[1].id, found[records[1].id][0][0])
        document = storage.fetch_chunks(records[1], [gone[1]])[gone[1]].document_id
        kb.collection("HR").delete(document)
        rows = {  # what the leg reads: a zero row for the deleted chunk
            (r.id, key): row
            for r in records
            for key, row in zip(
                [key for key, _ in found[r.id]],
                storage.vector_directions(r, [key for key, _ in found[r.id]]),
                strict=True,
            )
        }
        # Any fused order: the deleted chunk first, then the candidates backwards.
        best = [fusion.Fused(gone, 2.0)] + [fusion.Fused(key, 1.0) for key, _ in candidates[::-1]]
        qvecs = {cache_key(targets[0].embedder): qvec}
        moved = feedback_leg(storage, targets, qvecs, candidates, best, weight, 100, chunks=chunks)
    assert len(candidates) == 7 and not rows[gone].any()  # every chunk of both collections
    live = [key for key, _ in candidates if key != gone]
    tops = [rows[f.key] / np.linalg.norm(rows[f.key]) for f in best if f.key in live][:chunks]
    q = qvec / np.linalg.norm(qvec) + weight * np.mean(tops, axis=0)
    q /= np.linalg.norm(q)
    want = {key: float(rows[key] @ q / np.linalg.norm(rows[key])) for key in live}
    got = dict(moved)
    assert sorted(got) == sorted(want)
    assert [got[key] for key in sorted(want)] == pytest.approx(
        [want[key] for key in sorted(want)], abs=1e-6
    )
    assert moved == sorted(moved, key=lambda pair: (-pair[1], pair[0]))  # ties by key
