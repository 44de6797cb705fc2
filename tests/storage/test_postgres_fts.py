"""The full-text index kept for ad-hoc SQL takes a 64 MB GIN pending list (issue 37: the
writer merged PostgreSQL's default 4 MB list into the index every few batches): new
collections get it, migration 6 gives it to existing ones and leaves a dropped index dropped,
and ad-hoc full-text SQL finds the same rows."""

from __future__ import annotations

from typing import Any

import pytest
from internals import postgres_storage

import hybridkb
from hybridkb.storage.postgres.schema import MIGRATIONS

pytestmark = [pytest.mark.process, pytest.mark.postgres]

BIGGER = ["gin_pending_list_limit=65536"]


def fts_index(kb: hybridkb.KnowledgeBase, name: str) -> tuple[Any, str]:
    """The store and the schema-qualified name of collection ``name``'s full-text index."""
    storage = postgres_storage(kb)
    record = kb[name].record
    schema = storage.tables(record)["chunks"].split(".")[0]
    return storage, f"{schema}.c{record.id}_chunks_fts"


def options(kb: hybridkb.KnowledgeBase, name: str) -> list[Any]:
    storage, index = fts_index(kb, name)
    return storage.query("SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)", [index])


def matches(kb: hybridkb.KnowledgeBase, name: str, word: str) -> int:
    storage, _ = fts_index(kb, name)
    chunks = storage.tables(kb[name].record)["chunks"]
    rows = storage.query(
        f"SELECT count(*) FROM {chunks}"
        " WHERE to_tsvector('english'::regconfig, text) @@ to_tsquery('english', %s)",
        [word],
    )
    return int(rows[0][0])


def test_a_new_collection_s_full_text_index_has_the_bigger_pending_list(pg_url: str) -> None:
    with hybridkb.connect(pg_url, model="fake") as kb:
        kb.create_collection("F", language="en").add_texts(["The houses were built"], ids=["h"])
        assert options(kb, "F") == [(BIGGER,)]
        assert matches(kb, "F", "house") == 1


def test_migration_6_sets_existing_indexes_and_leaves_a_dropped_one_dropped(pg_url: str) -> None:
    with hybridkb.connect(pg_url, model="fake") as kb:
        kb.create_collection("Old", language="en").add_texts(["Old houses"], ids=["o"])
        kb.create_collection("Dropped", language="en").add_texts(["New houses"], ids=["n"])
        storage, old = fts_index(kb, "Old")
        _, dropped = fts_index(kb, "Dropped")
        # As a store of schema version 5 left them.
        storage.query(f"ALTER INDEX {old} RESET (gin_pending_list_limit)")
        storage.query(f"DROP INDEX {dropped}")
        storage.query("UPDATE hybridkb_meta SET value = '5' WHERE key = 'schema_version'")
        assert options(kb, "Old") == [(None,)]
    with hybridkb.connect(pg_url, model="fake") as kb:
        storage = postgres_storage(kb)
        assert storage.schema_version == len(MIGRATIONS) == 6
        assert options(kb, "Old") == [(BIGGER,)]
        assert options(kb, "Dropped") == []
        assert matches(kb, "Old", "house") == 1 and matches(kb, "Dropped", "house") == 1
        kb["Dropped"].add_texts(["More houses"], ids=["m"])  # writes need no such index
        assert [h.document_id for h in kb["Dropped"].search("houses", k=5, mode="keyword")]
