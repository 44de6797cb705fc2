"""Store URLs: which backend a URL names, and how to show it without its password."""

from __future__ import annotations

import re

from ..errors import ConfigError

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


def check_store_url(url: str) -> None:
    """Refuse a URL of a store we do not support, before anything is opened or created.

    Raises:
        ConfigError: naming the scheme and the forms that are supported.
    """
    found = _SCHEME.match(url)
    if found is None or url == ":memory:" or url.startswith("duckdb:") or is_postgres_url(url):
        return
    raise ConfigError(
        f"{redact_url(url)[:200]}: '{found.group(1)}:' is not a store hybridkb opens; "
        f"give --db (or HYBRIDKB_DB) {SUPPORTED}"
    )
