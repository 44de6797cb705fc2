"""Typed access for tests that check what lies below the public API.

``hybridkb.connect`` returns the public ``KnowledgeBase``, whose ``door`` is typed as the
``Door`` protocol and ``storage`` as the ``Storage`` protocol: that is all a user may
rely on.
Some tests check behaviour underneath (the rows in a table, the row cache, the staging
folder of a streamed add, the raw DuckDB connection), so they need the concrete objects.
A test opens its own store (a file in tmp_path, ``:memory:`` or a test database) with
nobody serving it, so its knowledge base runs on the in-process ``LocalEngine`` over the
backend it named.

These helpers narrow the types once, with an ``isinstance`` check, instead of silencing
the type checker at every call: a wrong assumption (say, a client of an owner process)
fails the test with a message naming what it got, and mypy checks every use.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from hybridkb.kb import KnowledgeBase
from hybridkb.local import LocalEngine
from hybridkb.storage import Storage
from hybridkb.storage.base import SourceRecord
from hybridkb.storage.duckdb import DuckDBStorage

if TYPE_CHECKING:
    import duckdb

    from hybridkb.graph.api import LocalGraph
    from hybridkb.storage.postgres import PostgresStorage

__all__ = [
    "die_in_migration",
    "duckdb_storage",
    "local",
    "local_engine",
    "local_graph",
    "plant_after_removal",
    "postgres_storage",
    "put_source",
    "sources_of",
    "signal_after_commit",
    "sql_rows",
    "through_owner",
]


def local(kb: KnowledgeBase) -> KnowledgeBase:
    """``kb``, checked to run on the in-process engine (a test's own ``connect``), whose
    ``storage`` is the store itself."""
    assert isinstance(kb.door, LocalEngine), f"expected an in-process engine, got {kb.door!r}"
    return kb


def local_engine(kb: KnowledgeBase) -> LocalEngine:
    """The in-process engine under ``kb`` (what a search runs with, below the handles)."""
    door = local(kb).door
    assert isinstance(door, LocalEngine)
    return door


def local_graph(kb: KnowledgeBase) -> LocalGraph:
    """The in-process graph under ``kb.graph`` (its in-memory graph and store)."""
    return local_engine(kb).graph


def through_owner(kb: KnowledgeBase) -> bool:
    """Whether ``kb``'s calls go to the process that holds its file (an owner)."""
    from hybridkb.serve.owner import OwnerEngine  # the wire client: only where asked

    return isinstance(kb.door, OwnerEngine)


def _storage(of: KnowledgeBase | Storage) -> KnowledgeBase | Storage:
    """The storage of a local knowledge base; anything else as it is, for the caller's
    isinstance check to name."""
    return local(of).storage if isinstance(of, KnowledgeBase) else of


def duckdb_storage(of: KnowledgeBase | Storage) -> DuckDBStorage:
    """The DuckDB backend of a knowledge base (or a storage) a test opened on a DuckDB file."""
    storage = _storage(of)
    assert isinstance(storage, DuckDBStorage), f"expected DuckDB storage, got {storage!r}"
    return storage


def postgres_storage(of: KnowledgeBase | Storage) -> PostgresStorage:
    """The Postgres backend of a knowledge base (or a storage) a test opened on a database."""
    # Imported here: psycopg is an extra that only the Postgres tests need.
    from hybridkb.storage.postgres import PostgresStorage

    storage = _storage(of)
    assert isinstance(storage, PostgresStorage), f"expected Postgres storage, got {storage!r}"
    return storage


def sql_rows(
    of: KnowledgeBase | Storage, sql: str, params: Sequence[Any] | None = None
) -> list[tuple[Any, ...]]:
    """The rows of one SQL statement run on the store itself, whichever backend it is.

    Both backends have the same ``query``; the ``Storage`` protocol leaves it out because
    nothing above the storage layer runs raw SQL on a store (only inside ``transaction``).
    """
    storage = _storage(of)
    if isinstance(storage, DuckDBStorage):
        return storage.query(sql, params)
    return postgres_storage(storage).query(sql, params)


def sources_of(kb: KnowledgeBase, collection: str) -> list[SourceRecord]:
    """The sources of ``collection`` as stored (with what a sync reads of them)."""
    engine = local_engine(kb)
    return engine.storage.list_sources(engine.record(collection))


def put_source(kb: KnowledgeBase, collection: str, source: SourceRecord) -> None:
    """Store ``source`` for ``collection`` as an add would (replacing one of its path)."""
    engine = local_engine(kb)
    engine.storage.put_source(engine.record(collection), source)


def die_in_migration(number: int) -> None:
    """Make migration ``number`` kill this process (SIGKILL) as it starts, after the ones
    before it ran: a process killed part-way through moving a file to the current schema."""
    from hybridkb.storage.duckdb import schema

    def die(con: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    schema.MIGRATIONS[number - 1] = die


T = TypeVar("T")


def signal_after_commit(
    db: Path, signum: int, monkeypatch: pytest.MonkeyPatch, *, nth: int = 1
) -> None:
    """Send ``signum`` to this process as the ``nth`` write transaction on the DuckDB file
    ``db`` (any connection of this process to it, from now on) returns from its COMMIT:
    where a stop lands when DuckDB finished the COMMIT before the signal's handler ran
    (the write is in the file; the caller sees the stop)."""
    from hybridkb.storage.duckdb.engine import Engine

    real = Engine.transaction
    commits = 0

    def transaction(engine: Engine, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        nonlocal commits
        result = real(engine, fn)
        if Path(engine.path).resolve() == db.resolve():
            commits += 1
            if commits == nth:
                os.kill(os.getpid(), signum)
        return result

    monkeypatch.setattr(Engine, "transaction", transaction)


def plant_after_removal(suffix: str, target: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Act as another local user who wins a race: whenever hybridkb clears a name beside
    a DuckDB file that ends with ``suffix`` (a leftover of a killed process, cleared before
    a side file or folder takes the name), a symbolic link to ``target`` is planted there
    at once."""
    from hybridkb.storage.duckdb import connection, maintenance, upgrade

    def planting(clear: Callable[[Path], None]) -> Callable[[Path], None]:
        def clear_then_plant(path: Path) -> None:
            clear(path)
            if path.name.endswith(suffix):
                path.symlink_to(target)

        return clear_then_plant

    for module in (connection, maintenance, upgrade):
        for name in ("remove_database", "clear_side_folder"):  # before and after 32b
            if hasattr(module, name):
                monkeypatch.setattr(module, name, planting(getattr(module, name)))
