"""Connecting to PostgreSQL, and psycopg's errors as ours."""

from __future__ import annotations

from typing import Any

from ...errors import BackendError, KBError
from ..urls import redact_url as redact

__all__ = ["connect", "pg_errors", "plain_url", "psycopg", "redact", "translate", "version_tuple"]
from ..boundary import first_line

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
