"""A Postgres store's connections: a bounded pool shared by its threads (issue 37).

One connection behind a lock made every search of a process wait for the statement
before it; a pool lets them run side by side, and never holds more than the setting
``HYBRIDKB_PG_POOL_SIZE``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from internals import postgres_storage

import hybridkb
from hybridkb import KnowledgeBaseAPI
from hybridkb.errors import BackendError
from hybridkb.storage.postgres import pool as pool_module

pytestmark = pytest.mark.postgres

HANG = 60.0  # guard for a thread that should have finished (no timing is asserted)
LOCK = 4242  # an advisory lock the test holds to keep one statement waiting


@pytest.fixture
def kb(pg_url: str) -> Iterator[KnowledgeBaseAPI]:
    with hybridkb.connect(pg_url, model="fake", pg_pool_size=2) as kb:
        kb.create_collection("Notes").add_texts([f"annual leave is {n} weeks" for n in (3, 4, 5)])
        yield kb


def connections_to(url: str) -> int:
    """Sessions open on the database of ``url``, the asking one excluded."""
    with psycopg.connect(url, autocommit=True) as con:
        row = con.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def blocked_statement(kb: KnowledgeBaseAPI, admin: psycopg.Connection[Any]) -> threading.Thread:
    """A thread whose statement waits on an advisory lock ``admin`` holds."""
    admin.execute("SELECT pg_advisory_lock(%s)", [LOCK])
    storage = postgres_storage(kb)
    waiting = threading.Thread(
        target=storage.query,
        args=("SELECT pg_advisory_lock(%s), pg_advisory_unlock(%s)", [LOCK, LOCK]),
    )
    waiting.start()
    while not admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    ).fetchone() == (1,):
        threading.Event().wait(0.05)
    return waiting


def test_a_search_runs_while_another_statement_waits(kb: KnowledgeBaseAPI, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        waiting = blocked_statement(kb, admin)
        try:
            done = threading.Thread(target=kb.search, args=("annual leave",), kwargs={"k": 1})
            done.start()
            done.join(HANG)
            assert not done.is_alive()  # one connection behind a lock waited for the lock
        finally:
            admin.execute("SELECT pg_advisory_unlock(%s)", [LOCK])
        waiting.join(HANG)


def test_connections_stay_within_the_setting(kb: KnowledgeBaseAPI, pg_url: str) -> None:
    searches = [
        threading.Thread(target=lambda: [kb.search("annual leave", k=2) for _ in range(20)])
        for _ in range(8)
    ]
    for thread in searches:
        thread.start()
    for thread in searches:
        thread.join(HANG)
    assert 1 <= connections_to(pg_url) <= 2


def test_a_pool_kept_busy_says_which_setting_to_raise(
    kb: KnowledgeBaseAPI, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_module, "WAIT_S", 0.2)
    with hybridkb.connect(pg_url, model="fake", pg_pool_size=1) as single:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            waiting = blocked_statement(single, admin)
            try:
                with pytest.raises(BackendError) as caught:
                    single.search("annual leave", k=1)
            finally:
                admin.execute("SELECT pg_advisory_unlock(%s)", [LOCK])
            waiting.join(HANG)
    message = str(caught.value)
    assert "\n" not in message and "HYBRIDKB_PG_POOL_SIZE" in message
