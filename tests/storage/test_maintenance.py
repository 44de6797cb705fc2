"""doctor / reembed / compact: the knowledge base tells the truth about its state."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from internals import duckdb_storage, local

import hybridkb
from hybridkb.storage.duckdb.schema import table_names

TEXTS = [f"document {i} talks about subject {i % 5} with words" for i in range(30)]


def _kb(tmp_path: Path, model: str = "fake") -> hybridkb.KnowledgeBase:
    return local(hybridkb.connect(tmp_path / "kb.duckdb", model=model))


def _problems(kb: hybridkb.KnowledgeBase) -> dict[str, int]:
    return {f.check: f.count for h in kb.doctor() for f in h.findings if f.count}


def test_doctor_finds_nothing_on_a_clean_kb(tmp_path: Path) -> None:
    with _kb(tmp_path) as kb:
        kb.create_collection("Notes").add_texts(TEXTS)
        kb.collection("Notes").search("subject", k=3)
        assert _problems(kb) == {}


def test_doctor_finds_and_repairs_orphans_and_bad_vectors(tmp_path: Path) -> None:
    with _kb(tmp_path) as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(TEXTS, ids=[f"d{i}" for i in range(30)])
        t = table_names(coll.record.id)
        con = duckdb_storage(kb).engine.con
        # Damage the tables the way a buggy writer or a disk fault might.
        con.execute(f"DELETE FROM {t['documents']} WHERE document_id = 'd1'")
        con.execute(
            f"DELETE FROM {t['vectors']} WHERE key IN (SELECT key FROM {t['chunks']} WHERE document_id = 'd2')"
        )
        bad = [float("nan")] + [0.1] * 63
        con.execute(
            f"UPDATE {t['vectors']} SET embedding = ?::FLOAT[64] WHERE key IN (SELECT key FROM {t['chunks']} WHERE document_id = 'd3')",
            [bad],
        )
        found = _problems(kb)
        assert found["orphan_chunks"] >= 1 and found["incomplete_documents"] == 2
        kb.doctor(repair=True)
        assert _problems(kb) == {}
        assert coll.count() == 27
        hits = coll.search("subject", k=50, mode="vector")
        assert {h.document_id for h in hits}.isdisjoint({"d1", "d2", "d3"})
        assert all(np.isfinite(h.score) for h in hits)


def test_reembed_switches_model_atomically(tmp_path: Path) -> None:
    with _kb(tmp_path) as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(TEXTS)
        before = coll.search("subject 3", k=3, mode="keyword")
        out = kb.reembed("Notes", model="fake:32", progress=False)
        assert out["chunks"] == 30 and out["dim"] == 32
        info = coll.describe()
        assert (info.embedding_model, info.dim) == ("fake:32", 32)
        assert [h.chunk_id for h in coll.search("subject 3", k=3, mode="keyword")] == [
            h.chunk_id for h in before
        ]
        assert len(coll.search("subject 3", k=5, mode="vector")) == 5
        # Unchanged texts stay unchanged after the switch (signature follows the model).
        assert len(coll.add_texts(TEXTS).unchanged) == 30
        assert _problems(kb) == {}


def test_compact_keeps_data_and_does_not_grow(tmp_path: Path) -> None:
    with _kb(tmp_path) as kb:
        coll = kb.create_collection("Notes")
        for round_ in range(5):
            coll.add_texts(
                [t + f" round {round_}" for t in TEXTS], ids=[f"d{i}" for i in range(30)]
            )
        out = kb.compact()
        assert out["bytes_after"] <= out["bytes_before"]
        assert coll.count() == 30
        assert coll.search("round 4", k=1, mode="keyword")[0].text.endswith("round 4")
        kb.create_collection("After")  # sequences survived the copy
    assert not os.path.exists(tmp_path / "kb.duckdb.compact")
