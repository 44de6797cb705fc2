"""Typed access for tests that check what lies below the public API.

``hybridkb.connect`` is typed as the public ``KnowledgeBaseAPI`` and
``KnowledgeBase.storage`` as the ``Storage`` protocol: that is all a user may rely on.
Some tests check behaviour underneath (the rows in a table, the row cache, the staging
folder of a streamed add, the raw DuckDB connection), so they need the concrete objects.
A test opens its own store (a file in tmp_path, ``:memory:`` or a test database) with
nobody serving it, so it gets the in-process ``KnowledgeBase`` over the backend it named.

These helpers narrow the types once, with an ``isinstance`` check, instead of silencing
the type checker at every call: a wrong assumption (say, a client of an owner process)
fails the test with a message naming what it got, and mypy checks every use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hybridkb.api import KnowledgeBaseAPI
from hybridkb.kb import KnowledgeBase
from hybridkb.storage import Storage
from hybridkb.storage.duckdb import DuckDBStorage

if TYPE_CHECKING:
    from hybridkb.storage.postgres import PostgresStorage

__all__ = ["duckdb_storage", "local", "postgres_storage", "sql_rows"]


def local(kb: KnowledgeBaseAPI) -> KnowledgeBase:
    """``kb`` as the in-process KnowledgeBase that a test's own ``connect`` returns."""
    assert isinstance(kb, KnowledgeBase), f"expected an in-process KnowledgeBase, got {kb!r}"
    return kb


def _storage(of: KnowledgeBaseAPI | Storage) -> KnowledgeBaseAPI | Storage:
    """The storage of a local knowledge base; anything else as it is, for the caller's
    isinstance check to name."""
    return of.storage if isinstance(of, KnowledgeBase) else of


def duckdb_storage(of: KnowledgeBaseAPI | Storage) -> DuckDBStorage:
    """The DuckDB backend of a knowledge base (or a storage) a test opened on a DuckDB file."""
    storage = _storage(of)
    assert isinstance(storage, DuckDBStorage), f"expected DuckDB storage, got {storage!r}"
    return storage


def postgres_storage(of: KnowledgeBaseAPI | Storage) -> PostgresStorage:
    """The Postgres backend of a knowledge base (or a storage) a test opened on a database."""
    # Imported here: psycopg is an extra that only the Postgres tests need.
    from hybridkb.storage.postgres import PostgresStorage

    storage = _storage(of)
    assert isinstance(storage, PostgresStorage), f"expected Postgres storage, got {storage!r}"
    return storage


def sql_rows(
    of: KnowledgeBaseAPI | Storage, sql: str, params: Sequence[Any] | None = None
) -> list[tuple[Any, ...]]:
    """The rows of one SQL statement run on the store itself, whichever backend it is.

    Both backends have the same ``query``; the ``Storage`` protocol leaves it out because
    nothing above the storage layer runs raw SQL on a store (only inside ``transaction``).
    """
    storage = _storage(of)
    if isinstance(storage, DuckDBStorage):
        return storage.query(sql, params)
    return postgres_storage(storage).query(sql, params)
