"""Property-based: random create/add/re-add/delete/drop/search sequences keep the invariants.

25 sequences of 20 steps under the ``ci`` profile (what CI runs), 5 in the fast inner
loop (tests/support/long_runs.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from long_runs import budget

import hybridkb

WORDS = ["apple", "banana", "cherry", "delta", "echo", "fox", "golf", "hotel", "india", "juliet"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
doc_ids = st.sampled_from([f"d{i}" for i in range(8)])
names = st.sampled_from(["Alpha", "Beta", "税务"])


class KBMachine(RuleBasedStateMachine):
    collections = Bundle("collections")

    @initialize()
    def open_kb(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.kb = hybridkb.connect(Path(self.tmp.name) / "kb.duckdb", model="fake")
        # model: collection -> {doc_id: (text, tag)}
        self.model: dict[str, dict[str, tuple[str, str]]] = {}

    def teardown(self) -> None:
        self.kb.close()
        self.tmp.cleanup()

    @rule(target=collections, name=names)
    def create(self, name: str) -> str:
        self.kb.create_collection(name, exist_ok=True)
        self.model.setdefault(name, {})
        return name

    @rule(name=collections, doc_id=doc_ids, text=texts, tag=st.sampled_from(["x", "y"]))
    def add(self, name: str, doc_id: str, text: str, tag: str) -> None:
        if name not in self.model:
            return
        report = self.kb.collection(name).add_texts([text], metadatas=[{"tag": tag}], ids=[doc_id])
        unchanged = self.model[name].get(doc_id) == (text, tag)
        assert [f.document_id for f in (report.unchanged if unchanged else report.added)] == [
            doc_id
        ]
        self.model[name][doc_id] = (text, tag)

    @rule(name=collections, doc_id=doc_ids)
    def delete(self, name: str, doc_id: str) -> None:
        if name not in self.model:
            return
        report = self.kb.collection(name).delete([doc_id])
        assert (doc_id in report.deleted) == (doc_id in self.model[name])
        self.model[name].pop(doc_id, None)

    @precondition(lambda self: bool(self.model))
    @rule(name=collections)
    def drop(self, name: str) -> None:
        if name in self.model:
            self.kb.drop_collection(name)
            del self.model[name]

    @rule(
        name=collections,
        word=st.sampled_from(WORDS),
        mode=st.sampled_from(["hybrid", "keyword", "vector", "filter"]),
        tag=st.sampled_from([None, "x", "y"]),
    )
    def search(self, name: str, word: str, mode: str, tag: str | None) -> None:
        if name not in self.model:
            return
        where = {"tag": tag} if tag else None
        hits = self.kb.collection(name).search(word, k=50, mode=mode, where=where)
        docs = self.model[name]
        assert len({h.chunk_id for h in hits}) == len(hits)
        for h in hits:
            assert h.document_id in docs  # deleted text is never returned
            text, doc_tag = docs[h.document_id]
            assert h.text == text
            if tag:
                assert doc_tag == tag
            if mode in ("keyword", "filter"):
                assert word in text.split()
        expected = {d for d, (text, doc_tag) in docs.items() if (tag is None or doc_tag == tag)}
        if mode == "vector":
            assert {h.document_id for h in hits} == expected
        if mode in ("keyword", "filter"):
            assert {h.document_id for h in hits} == {
                d for d in expected if word in docs[d][0].split()
            }

    @invariant()
    def counts_match(self) -> None:
        if not hasattr(self, "kb"):
            return
        listed = {c.name: c for c in self.kb.list_collections()}
        assert set(listed) == set(self.model)
        for name, docs in self.model.items():
            assert listed[name].documents == len(docs)


TestKB = KBMachine.TestCase
TestKB.settings = settings(
    max_examples=budget(ci=25, fast=5),
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
