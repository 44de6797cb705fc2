"""Connecting to PostgreSQL, and psycopg's errors as ours."""

from __future__ import annotations

import os
from typing import Any

from ...errors import BackendError, KBError
from ..boundary import first_line
from ..shared import OPENED_READ_ONLY, check_schema_version
from ..urls import redact_url as redact
from .schema import MIGRATIONS, current_version, migrate

__all__ = [
    "check_pgvector",
    "connect",
    "pg_errors",
    "plain_url",
    "prepare",
    "psycopg",
    "reader_role",
    "redact",
    "translate",
    "version_tuple",
]

# Tuples a filtered HNSW scan may visit before it gives up (the exact scan follows).
MAX_SCAN_TUPLES = 50_000

try:
    import psycopg
    from psycopg import errors as pg_errors

    from .binary import register_dumpers
except ImportError:  # pragma: no cover - the extra is missing
    psycopg = None  # type: ignore[assignment]
    pg_errors = None  # type: ignore[assignment]


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


def plain_url(url: str) -> str:
    """SQLAlchemy-style ``postgresql+psycopg://`` and ``postgres://`` -> libpq's form."""
    for prefix in ("postgresql+psycopg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def translate(exc: BaseException) -> KBError | None:
    """A psycopg error as a BackendError saying what to do; None if not psycopg's."""
    if psycopg is None or not isinstance(exc, psycopg.Error):
        return None
    text = first_line(exc)
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return BackendError(OPENED_READ_ONLY)
    if isinstance(exc, psycopg.OperationalError):
        return BackendError(f"PostgreSQL connection failed ({text}); check the server")
    return BackendError(f"PostgreSQL: {text}")


def connect(url: str, timeout: float) -> Any:
    """A psycopg connection in autocommit mode (transactions are explicit), named
    ``hybridkb <pid>`` in ``pg_stat_activity`` unless the URL names it."""
    try:
        conninfo = url
        if "application_name" not in psycopg.conninfo.conninfo_to_dict(url):
            name = f"hybridkb {os.getpid()}"
            conninfo = psycopg.conninfo.make_conninfo(url, application_name=name)
        return psycopg.connect(conninfo, autocommit=True, connect_timeout=int(timeout))
    except psycopg.Error as exc:
        raise BackendError(
            f"{redact(url)}: cannot connect to PostgreSQL ({first_line(exc)})"
        ) from exc


# The oldest pgvector with what every search here uses: cosine HNSW indexes (0.5.0).
# 0.8.0 adds the iterative scans that let a filtered HNSW search return k (else the
# exact fallback does).
MIN_PGVECTOR = (0, 5, 0)


def check_pgvector(version: str, url: str) -> None:
    """Refuse a pgvector older than :data:`MIN_PGVECTOR`, in one line with the fix."""
    if version_tuple(version) < MIN_PGVECTOR:
        need = ".".join(map(str, MIN_PGVECTOR))
        raise BackendError(
            f"{redact(url)}: pgvector {version} is too old (hybridkb needs >= {need}, "
            "0.8 or later for filtered HNSW scans); upgrade it and run ALTER EXTENSION "
            "vector UPDATE as a superuser"
        )


def prepare(con: Any, url: str, *, read_only: bool) -> tuple[int, str, int]:
    """Ready a new connection: read-only mode or pgvector and migrations, search path,
    iterative HNSW scans, the binary COPY dumpers. Returns (schema version, pgvector
    version, the vector type's oid)."""
    try:
        if read_only:
            con.execute("SET default_transaction_read_only = on")
            with con.cursor() as cur:
                version = current_version(cur)
            if version == 0:
                raise BackendError(
                    f"{redact(url)}: no knowledge base here yet; open it once without "
                    "read_only to create the schema"
                )
            check_schema_version(version, len(MIGRATIONS))
        else:
            try:
                if not con.execute(
                    "SELECT 1 FROM pg_extension WHERE extname = 'vector'"
                ).fetchone():
                    con.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except (
                pg_errors.InsufficientPrivilege,
                pg_errors.FeatureNotSupported,
                pg_errors.UndefinedFile,
            ) as exc:
                raise BackendError(
                    f"{redact(url)}: the pgvector extension is not available ({exc}); "
                    "install pgvector >= 0.8 and run CREATE EXTENSION vector as a superuser"
                ) from exc
            except pg_errors.UniqueViolation:
                pass  # another process created it at the same moment
            version = migrate(con)
        row = con.execute(
            "SELECT n.nspname, e.extversion, t.oid FROM pg_extension e"
            " JOIN pg_namespace n ON n.oid = e.extnamespace"
            " JOIN pg_type t ON t.typnamespace = n.oid AND t.typname = 'vector'"
            " WHERE e.extname = 'vector'"
        ).fetchone()
        if row is None:
            raise BackendError(
                f"{redact(url)}: the pgvector extension is not installed in this database;"
                " install pgvector and run CREATE EXTENSION vector as a superuser"
            )
        pgvector_version = str(row[1])
        check_pgvector(pgvector_version, url)
        register_dumpers(con, int(row[2]))
        # Unqualified names (hooks, graph tables) land in the catalog schema.
        con.execute(f'SET search_path = hybridkb, "{row[0]}", public')
        # A statement psycopg has prepared (run 5 times) is planned once per connection,
        # not at every run: planning the hybrid statement cost a third of its time. Our
        # statements write their limits as literals, so a generic plan still knows them.
        con.execute("SET plan_cache_mode = force_generic_plan")
        if version_tuple(pgvector_version) >= (0, 8):
            # Filtered HNSW scans walk on until k rows pass; older pgvector has no
            # iterative scan and relies on the exact fallback below.
            con.execute("SET hnsw.iterative_scan = relaxed_order")
            con.execute(f"SET hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}")
    except pg_errors.InsufficientPrivilege as exc:
        raise BackendError(
            f"{redact(url)}: this role may not set up hybridkb's schema ({first_line(exc)});"
            " connect once as the database's owner (the writer role) first"
        ) from exc
    except psycopg.Error as exc:
        raise BackendError(f"{redact(url)}: cannot prepare the database ({exc})") from exc
    return version, pgvector_version, int(row[2])


def reader_role(con: Any) -> str | None:
    """The connection's role if it may only read hybridkb's tables (no UPDATE on the
    catalog, which every write moves), else None."""
    role, writes = con.execute(
        "SELECT current_user, has_table_privilege('hybridkb.hybridkb_collections', 'UPDATE')"
    ).fetchone()
    return None if writes else str(role)
