"""Connecting to PostgreSQL, and psycopg's errors as ours."""

from __future__ import annotations

from typing import Any

from ...errors import BackendError, KBError
from ..boundary import first_line
from ..shared import check_schema_version
from ..urls import redact_url as redact
from .schema import MIGRATIONS, current_version, migrate

__all__ = [
    "connect",
    "pg_errors",
    "plain_url",
    "prepare",
    "psycopg",
    "redact",
    "translate",
    "version_tuple",
]

# Tuples a filtered HNSW scan may visit before it gives up (the exact scan follows).
MAX_SCAN_TUPLES = 50_000

try:
    import psycopg
    from psycopg import errors as pg_errors
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
        return BackendError(
            "the knowledge base is open read-only; reconnect without read_only to change it"
        )
    if isinstance(exc, psycopg.OperationalError):
        return BackendError(f"PostgreSQL connection failed ({text}); check the server")
    return BackendError(f"PostgreSQL: {text}")


def connect(url: str, timeout: float) -> Any:
    """A psycopg connection in autocommit mode (transactions are explicit)."""
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=int(timeout))
    except psycopg.Error as exc:
        raise BackendError(
            f"{redact(url)}: cannot connect to PostgreSQL ({first_line(exc)})"
        ) from exc


def prepare(con: Any, url: str, *, read_only: bool) -> tuple[int, str]:
    """Ready a new connection: read-only mode or pgvector and migrations, search path,
    iterative HNSW scans. Returns (schema version, pgvector version)."""
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
            "SELECT n.nspname, e.extversion FROM pg_extension e"
            " JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
        ).fetchone()
        if row is None:
            raise BackendError(f"{redact(url)}: the pgvector extension is not installed")
        pgvector_version = str(row[1])
        # Unqualified names (hooks, graph tables) land in the catalog schema.
        con.execute(f'SET search_path = hybridkb, "{row[0]}", public')
        if version_tuple(pgvector_version) >= (0, 8):
            # Filtered HNSW scans walk on until k rows pass; older pgvector has no
            # iterative scan and relies on the exact fallback below.
            con.execute("SET hnsw.iterative_scan = relaxed_order")
            con.execute(f"SET hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}")
    except psycopg.Error as exc:
        raise BackendError(f"{redact(url)}: cannot prepare the database ({exc})") from exc
    return version, pgvector_version
