"""Store URLs: which backend a URL names, and how to show it without its password."""

from __future__ import annotations


def is_postgres_url(url: str) -> bool:
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
