"""The retrieval levers kept by the SciFact train sweep: a title line as the section
embedded and indexed before each chunk, and Rocchio feedback in the vector leg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from internals import local

import hybridkb
from hybridkb.storage.base import chunk_key, make_chunk_id
from hybridkb.text.chunking import contextual_text

TITLE = "Zebra migration across the Serengeti"
BODY = [
    "Herds move north in the dry season following rainfall and fresh grass. " * 9,
    "Predators shadow the herds; river crossings are the most dangerous moments. " * 9,
    "Researchers count animals from light aircraft twice every year. " * 9,
]
OTHER = "Tax notes\n\n" + "Depreciation spreads the cost of equipment over its useful life. " * 3


def _add(kb: hybridkb.KnowledgeBaseAPI) -> hybridkb.CollectionAPI:
    coll = kb.collection("Field notes", create=True)
    coll.add_texts(["\n\n".join([TITLE, *BODY]), OTHER], ids=["zebra", "tax"])
    return coll


def test_a_title_line_makes_every_chunk_of_its_document_findable_by_its_words(
    kb: hybridkb.KnowledgeBase,
) -> None:
    coll = _add(kb)
    chunks = coll.chunks("zebra")
    assert len(chunks) == 3 and chunks[0].text.startswith(TITLE)
    assert all(c.section == TITLE for c in chunks)
    assert all(TITLE not in c.text for c in chunks[1:])  # shown as written
    hits = coll.search("zebra", k=10, mode="keyword")
    assert {h.chunk_id for h in hits} == {c.chunk_id for c in chunks}  # indexed with the title


def test_reembed_embeds_each_chunk_as_ingest_did(kb: hybridkb.KnowledgeBase) -> None:
    coll = _add(kb)
    record = coll.record
    chunks = coll.chunks("zebra")
    keys = [chunk_key(c.chunk_id) for c in chunks]
    before = kb.storage.fetch_vectors(record, keys)
    embedder = kb.embedder_for(record)
    expected = embedder.embed_documents([contextual_text(c.section, c.text) for c in chunks])
    assert np.allclose(before, expected, atol=1e-6)
    kb.reembed("Field notes", progress=False)
    after = kb.storage.fetch_vectors(kb.record("Field notes"), keys)
    assert np.allclose(after, before, atol=1e-6)


def _vector_calls(kb: hybridkb.KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real = kb.storage.vector_search

    def spy(coll: Any, vector: np.ndarray, k: int, flt: Any) -> Any:
        calls.append(np.asarray(vector, dtype=np.float32).copy())
        return real(coll, vector, k, flt)

    monkeypatch.setattr(kb.storage, "vector_search", spy)
    return calls


def test_vector_feedback_rescores_the_candidates_from_the_best_first_pass_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "kb.duckdb"
    query = "animals crossing rivers"
    with local(hybridkb.connect(db, model="fake", vector_feedback=0)) as kb:
        coll = _add(kb)
        calls = _vector_calls(kb, monkeypatch)
        first_pass = coll.search(query, k=10)
        q = calls[0]
        keys = {h.chunk_id: chunk_key(h.chunk_id) for h in first_pass}
        stored = kb.storage.fetch_vectors(coll.record, list(keys.values()))
        vectors = {cid: stored[i] for i, cid in enumerate(keys)}
    with local(hybridkb.connect(db, model="fake", vector_feedback=0.4)) as kb:
        calls = _vector_calls(kb, monkeypatch)
        hits = kb.collection("Field notes").search(query, k=10)
        assert len(calls) == 1  # no second search: the candidates are re-scored
    best = vectors[first_pass[0].chunk_id]
    moved = q / np.linalg.norm(q) + 0.4 * best / np.linalg.norm(best)
    moved /= np.linalg.norm(moved)
    for hit in hits:  # every candidate's vector score is its cosine with the moved query
        v = vectors[hit.chunk_id]
        assert hit.scores["vector"] == pytest.approx(float(v @ moved / np.linalg.norm(v)), abs=0.01)
    assert {h.chunk_id for h in hits} == set(vectors)


def test_feedback_changes_nothing_outside_hybrid_mode(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    ranked: dict[float, list[Any]] = {}
    for weight in (0.4, 0.0):
        with hybridkb.connect(db, model="fake", vector_feedback=weight) as kb:
            coll = _add(kb)
            ranked[weight] = [
                [(h.chunk_id, h.score) for h in coll.search("animals crossing", k=5, mode=mode)]
                for mode in ("vector", "keyword", "filter")
            ]
    assert ranked[0.4] == ranked[0.0] and all(ranked[0.0])


def test_chunk_ids_do_not_depend_on_the_context_prefix(kb: hybridkb.KnowledgeBase) -> None:
    # Citations and ids stay those of the chunk's own text.
    coll = _add(kb)
    doc = coll.get("zebra")
    assert doc is not None
    first = make_chunk_id(coll.record.id, "zebra", doc.content_hash, 0)
    assert coll.chunks("zebra")[0].chunk_id == first
