"""Bulk adds: many documents per statement and per transaction, each still all or nothing.

A bulk load of short texts was bound by per-document work around the model (issue 36:
226 chunks/s with no model at all): a point lookup per text for the unchanged check,
a transaction per 64 documents, and a failing document made its whole batch embed
again one by one. These tests hold the batched forms to the per-document promises.
"""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from internals import duckdb_storage, local

import hybridkb
from hybridkb.embedders import FakeEmbedder
from hybridkb.errors import BackendError
from hybridkb.ingest import texts as ingest_texts
from hybridkb.lifecycle import Stopped, stop_on_signals
from hybridkb.storage import open_storage
from hybridkb.storage.base import (
    ChunkRecord,
    DocumentRecord,
    PutItem,
    WriteEvent,
    chunk_key,
    make_chunk_id,
)


class CountingEmbedder(FakeEmbedder):
    """The fake model, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__(64)
        self.texts = 0

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        return super().embed_documents(texts)


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[hybridkb.KnowledgeBase]:
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake", cache_dir=tmp_path / "c") as kb:
        yield local(kb)


def _texts(n: int, salt: str = "") -> list[str]:
    return [
        f"Note {i}{salt} about apples, pears and the Orchard Board of Tasmania." for i in range(n)
    ]


def test_unchanged_check_reads_a_window_of_documents_per_statement(
    kb: hybridkb.KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest_texts.TextWindows, "WINDOW", 8)
    coll = kb.create_collection("notes")
    storage = duckdb_storage(kb)
    calls: dict[str, int] = {"get_document": 0, "get_documents": 0}

    def counted(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return call

    for name in calls:
        monkeypatch.setattr(storage, name, counted(name, getattr(storage, name)))
    texts = _texts(20)
    ids = [f"n{i:02d}" for i in range(20)]
    first = coll.add_texts(texts, ids=ids)
    assert len(first.added) == 20 and not first.unchanged
    assert calls == {"get_document": 0, "get_documents": 3}  # windows of 8, 8 and 4

    changed = [t + (" Revised." if i % 3 == 0 else "") for i, t in enumerate(texts)]
    again = coll.add_texts(changed, ids=ids)
    assert sorted(r.document_id for r in again.added) == [ids[i] for i in range(0, 20, 3)]
    assert sorted(r.document_id for r in again.unchanged) == [ids[i] for i in range(20) if i % 3]
    assert all(r.chunks == 1 for r in again.unchanged)
    assert calls["get_document"] == 0
    for i in range(20):
        doc = coll.get(ids[i])
        assert doc is not None and doc.chunk_count == 1
        assert coll.chunks(ids[i])[0].text == changed[i]


def test_texts_prepared_a_group_at_a_time_are_each_reported_in_order(
    kb: hybridkb.KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prepare thread takes texts a group at a time (one hand-over per text cost
    about as much as normalising it): a text that fails in a group fails alone, and
    every text lands in the report in the order given, across groups of any size."""
    coll = kb.create_collection("notes")
    texts = _texts(10)
    texts[4] = " \n "  # nothing left once normalised: this one fails
    ids = [f"n{i}" for i in range(10)]
    for group in (1, 3, 64):
        monkeypatch.setattr(ingest_texts, "TEXTS_A_JOB", group)
        report = coll.add_texts([f"{t} ({group})" if t.strip() else t for t in texts], ids=ids)
        assert [r.document_id for r in report.added] == [i for i in ids if i != "n4"]
        assert [f.filename for f in report.failed] == ["n4"]
    assert coll.chunks("n9")[0].text.endswith("(64)")


def test_a_failing_document_costs_its_batch_no_second_embedding(
    kb: hybridkb.KnowledgeBase,
) -> None:
    counting = CountingEmbedder()
    with_counter = kb.with_embedder(counting)
    coll = with_counter.create_collection("notes")
    texts = _texts(40)
    metadatas: list[dict[str, Any] | None] = [None] * 40
    metadatas[17] = {"graph_links": [{"type": "AMENDS"}]}  # fails inside the write
    report = coll.add_texts(texts, ids=[f"n{i:02d}" for i in range(40)], metadatas=metadatas)
    assert [f.code for f in report.failed] == ["graph_error"]
    assert [r.document_id for r in report.added] == [f"n{i:02d}" for i in range(40) if i != 17]
    assert counting.texts == 40  # every text embedded once, the failing one included
    assert coll.get("n17") is None
    assert all(coll.get(f"n{i:02d}") is not None for i in range(40) if i != 17)
    assert kb.describe("notes").documents == 39
    hits = coll.search("Orchard Board", k=50, mode="keyword")
    assert {h.document_id for h in hits} == {f"n{i:02d}" for i in range(40) if i != 17}


def test_documents_of_one_batch_are_each_whole_after_a_failed_write(
    kb: hybridkb.KnowledgeBase,
) -> None:
    """A write that fails for one document rolls back its whole transaction; the halves
    tried again leave every other document stored with all its chunks, and nothing of it."""
    coll = kb.create_collection("notes", chunk_size=120, chunk_overlap=0)
    storage = duckdb_storage(kb)
    writes: list[list[str]] = []

    def refuse_d5(con: Any, event: WriteEvent) -> None:
        if event.kind in ("put", "put_batch"):
            writes.append(list(event.document_ids))
            if "d5" in event.document_ids:
                raise BackendError("d5: disk full; free some space")

    storage.hooks.append(refuse_d5)
    paragraph = " ".join(["Paragraph line of the Orchard report."] * 3)
    texts = [f"Report {i}.\n\n" + "\n\n".join([paragraph] * 4) for i in range(8)]
    report = coll.add_texts(texts, ids=[f"d{i}" for i in range(8)])
    assert [f.code for f in report.failed] == ["backend_error"]
    assert writes[0] == [f"d{i}" for i in range(8)]
    assert len(writes) <= 1 + 2 * 3  # halves down to d5 alone: not one write per document
    assert sorted(r.document_id for r in report.added) == [f"d{i}" for i in range(8) if i != 5]
    assert storage.get_document(coll.record, "d5") is None
    assert not [c for c in coll.chunks("d5")]
    for i in range(8):
        if i != 5:
            doc = storage.get_document(coll.record, f"d{i}")
            assert doc is not None and doc.chunk_count == len(coll.chunks(f"d{i}")) > 1


def _one_chunk_items(cid: int, first: int, n: int, dim: int) -> list[PutItem]:
    items = []
    vectors = np.random.default_rng(first).standard_normal((n, dim), dtype=np.float32)
    for i in range(first, first + n):
        doc_id, text = f"d{i}", f"Note {i} about the Orchard Board."
        chunk_id = make_chunk_id(cid, doc_id, "h", 0)
        chunk = ChunkRecord(
            chunk_key(chunk_id), chunk_id, doc_id, 0, text, None, None, 0, len(text), "h",
            "en", ["note", str(i), "orchard", "board"], {}, None, None,
        )  # fmt: skip
        doc = DocumentRecord(doc_id, None, None, "text", "h", "sig")
        items.append(PutItem(doc, [chunk], vectors[i - first : i - first + 1]))
    return items


def test_a_bulk_write_is_not_checkpointed_every_few_thousand_chunks(tmp_path: Path) -> None:
    """A checkpoint rewrites the last row group (up to 122,880 rows) of each table with a
    key index that the write appended to; at DuckDB's default WAL threshold (16 MB, ~6k
    chunks of 384-d vectors) a bulk load paid that rewrite again and again (issue 36: the
    storage layer at 443 chunks/s at 1M). The WAL now grows over many batches."""
    path = tmp_path / "kb.duckdb"
    storage = open_storage(str(path))
    try:
        coll = storage.create_collection("default", "notes", model="precomputed", dim=384,
                                         chunking={}, language="en")  # fmt: skip
        wal = Path(f"{path}.wal")
        sizes = []
        for start in range(0, 12_000, 1_000):  # ~21 MB of WAL in all
            storage.put_documents(coll, _one_chunk_items(coll.id, start, 1_000, 384))
            sizes.append(wal.stat().st_size if wal.exists() else 0)  # gone: checkpointed
        assert sizes == sorted(sizes), f"the WAL was checkpointed mid-load: {sizes}"
        assert sizes[-1] > 16 << 20  # past DuckDB's default threshold
        assert storage.stats(coll).chunks == 12_000
    finally:
        storage.close()
    reopened = open_storage(str(path))
    try:
        again = reopened.get_collection("default", "notes")
        assert again is not None and reopened.stats(again).chunks == 12_000
    finally:
        reopened.close()


def test_a_batch_is_written_with_the_cyclic_gc_paused_then_restored(
    kb: hybridkb.KnowledgeBase,
) -> None:
    """A batch allocates rows by the hundred thousand and makes no cycles; with a model
    loaded (~400k objects a full collection walks) the GC cost ~15 % of a bulk add."""
    coll = kb.create_collection("notes")
    during: list[bool] = []

    def note(con: Any, event: WriteEvent) -> None:
        during.append(gc.isenabled())

    duckdb_storage(kb).hooks.append(note)
    assert gc.isenabled()
    report = coll.add_texts(_texts(30), ids=[f"n{i:02d}" for i in range(30)])
    assert len(report.added) == 30
    assert during and not any(during)
    assert gc.isenabled()
    gc.disable()  # a caller's choice is left as it was
    try:
        coll.add_texts(_texts(3, " again"))
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="needs POSIX signals")
def test_a_stop_a_driver_swallowed_ends_the_add_instead_of_a_retry(
    kb: hybridkb.KnowledgeBase,
) -> None:
    """A SIGTERM that lands inside a write which a native layer turns into its own error
    (DuckDB's driver checks signals between tasks and reports "interrupted") must end
    the add: before, the failed batch was written again in halves and the next files
    went on, so a stopped ``hybridkb add`` of a big folder ran to its end."""
    coll = kb.create_collection("notes", chunk_size=120, chunk_overlap=0)
    storage = duckdb_storage(kb)
    writes: list[list[str]] = []

    def interrupted(con: Any, event: WriteEvent) -> None:
        if event.kind in ("put", "put_batch"):
            writes.append(list(event.document_ids))
            if len(writes) == 1:
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                    signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the handler has run
                except Stopped:
                    pass  # swallowed, as the driver does
                raise BackendError("INTERRUPT Error: Interrupted!")

    storage.hooks.append(interrupted)
    texts = _texts(8)
    with pytest.raises(Stopped), stop_on_signals():
        coll.add_texts(texts, ids=[f"d{i}" for i in range(8)])
    assert len(writes) == 1  # no halves tried again after the stop
    assert kb.describe("notes").documents == 0  # the interrupted transaction left nothing
