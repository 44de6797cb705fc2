"""The PostgreSQL backend's plumbing: the connection pool, driver errors, reads and writes.

:class:`PostgresAccess` opens pooled connections (prepared as ``connection.py`` says),
translates driver errors at the boundary, runs a read (retried once on a connection
that died under it) or a write transaction, and names a collection's tables. The
storage's other parts (``reading.py``, ``export.py``, ``storage.py``) run their SQL
through it; it is its own module because none of that SQL is here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from ...errors import BackendError, CollectionNotFound
from ..base import CollectionRecord
from ..boundary import driver_errors
from ..shared import OPENED_READ_ONLY
from .connection import connect, pg_errors, prepare, psycopg, reader_role, translate
from .pool import ConnectionPool
from .schema import table_names, workspace_schema

T = TypeVar("T")


@driver_errors(translate)
class PostgresAccess:
    """Pooled connections to one PostgreSQL database and the ways SQL runs on them.

    Args:
        url: The server's URL, without hybridkb's own parameters (``plain_url``).
        read_only: Open for reading only.
        connect_timeout: Seconds to wait for a connection.
        pool_size: Connections kept open at most.
    """

    def __init__(
        self, url: str, *, read_only: bool, connect_timeout: float, pool_size: int
    ) -> None:
        self.url = url
        self.read_only = read_only
        self._connect_timeout = connect_timeout
        self._ef: dict[int, int] = {}  # id(connection) -> its hnsw.ef_search
        self._schemas: dict[int, str] = {}  # collection id -> workspace schema
        self.schema_version = 0
        self._vector_oid = 0
        self.reader: str | None = None  # the role, when it may only read (reader_role)
        self._pool = ConnectionPool(self._open_connection, pool_size)

    def _open_connection(self) -> Any:
        """A new connection, ready (see connection.prepare); the pool calls it."""
        con = connect(self.url, self._connect_timeout)
        try:
            version, self.pgvector_version, self._vector_oid = prepare(
                con, self.url, read_only=self.read_only
            )
        except BaseException:
            con.close()
            raise
        self.schema_version = version
        self._ef[id(con)] = 0
        if not self.read_only:
            self.reader = reader_role(con)
            if self.reader is not None:  # a role that may only read: a read-only store
                self.read_only = True
                con.execute("SET default_transaction_read_only = on")
        return con

    def _has_recipes(self) -> bool:
        return bool(
            self._query(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = 'hybridkb'"
                " AND table_name = 'hybridkb_collections' AND column_name = 'embedding'"
            )
        )

    def close(self) -> None:
        """See :meth:`hybridkb.storage.base.Storage.close`."""
        self._pool.close()

    def write_refusal(self) -> str:
        """See :meth:`hybridkb.storage.base.Storage.write_refusal`: a role that may only
        read is named, with the way to write."""
        if self.reader is None:
            return OPENED_READ_ONLY
        return (
            f"role {self.reader!r} may only read this knowledge base; connect with a writer "
            "role to change it (README: A team server)"
        )

    @contextlib.contextmanager
    def _errors(self, coll: CollectionRecord | None = None) -> Iterator[None]:
        """Translate driver errors at the boundary, keeping the cause."""
        try:
            yield
        except pg_errors.UndefinedTable as exc:
            if coll is not None:
                raise CollectionNotFound(
                    f"collection {coll.name!r} was dropped by another process; create it again"
                ) from exc
            raise BackendError(f"PostgreSQL: {exc}") from exc
        except (pg_errors.ReadOnlySqlTransaction, pg_errors.InsufficientPrivilege) as exc:
            if self.reader is None:
                raise translate(exc) or BackendError(str(exc)) from exc
            raise BackendError(self.write_refusal()) from exc
        except psycopg.Error as exc:
            mapped = translate(exc)
            assert mapped is not None
            raise mapped from exc

    def _read(self, fn: Callable[[Any], T], coll: CollectionRecord | None = None) -> T:
        """Run a read on a pooled connection; one retry on a fresh connection when the
        old one died under it (a server restart), unless inside a transaction."""
        retry = not self._pool.held()
        for attempt in (1, 2):
            with self._pool.connection() as con:
                try:
                    with self._errors(coll):
                        return fn(con)
                except BackendError as exc:
                    lost = isinstance(exc.__cause__, psycopg.OperationalError) and con.broken
                    if attempt == 2 or not (lost and retry):
                        raise
        raise AssertionError("unreachable")

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement (``%s`` placeholders) and return its rows (for modules beside the core)."""

        def run(con: Any) -> list[tuple[Any, ...]]:
            cur = con.execute(sql, params)
            return cur.fetchall() if cur.description is not None else []

        return self._read(run)

    def transaction(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(connection)`` in one transaction; ``connection.execute`` takes ``%s`` params."""
        return self._write(fn)

    def _query(
        self, sql: str, params: Sequence[Any] | None = None, coll: CollectionRecord | None = None
    ) -> list[tuple[Any, ...]]:
        return self._read(lambda con: con.execute(sql, params).fetchall(), coll)

    def _write(self, fn: Callable[[Any], T], coll: CollectionRecord | None = None) -> T:
        with self._pool.connection() as con, self._errors(coll), con.transaction():
            return fn(con)

    def tables(self, coll: CollectionRecord) -> dict[str, str]:
        schema = self._schemas.get(coll.id)
        if schema is None:
            rows = self._query(
                "SELECT workspace_id FROM hybridkb.hybridkb_collections WHERE id = %s", [coll.id]
            )
            if not rows:
                raise CollectionNotFound(
                    f"collection {coll.name!r} was dropped by another process; create it again"
                )
            schema = self._schemas[coll.id] = workspace_schema(int(rows[0][0]))
        return table_names(schema, coll.id)
