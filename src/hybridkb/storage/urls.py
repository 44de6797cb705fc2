"""Store URLs: their scheme, whether one is PostgreSQL's, and how to show one without its
password (which backend takes a URL: ``backends.py``)."""

from __future__ import annotations

import re

SUPPORTED = "a file path, duckdb:///path, :memory: or postgresql://user@host/db"
# A scheme before ':' (two letters or more: C:\ is a Windows drive). DuckDB itself reads
# "sqlite:", "md:", "s3://", "http://" ... as the name of an extension to install.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a Postgres database (``postgresql://``, ``postgres://``, or
    SQLAlchemy's ``postgresql+psycopg://``)."""
    return url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


def redact_url(url: str) -> str:
    """The store's URL for messages: a Postgres password becomes ***."""
    if not is_postgres_url(url):
        return url
    head, sep, tail = url.partition("://")
    if "@" not in tail:
        return url
    cred, _, rest = tail.rpartition("@")
    user = cred.split(":", 1)[0]
    return f"{head}{sep}{user}:***@{rest}" if ":" in cred else url


def url_scheme(url: str) -> str | None:
    """The scheme before ``:`` of a store URL, or None for a path (and ``:memory:``)."""
    found = _SCHEME.match(url)
    return None if found is None else found.group(1)
