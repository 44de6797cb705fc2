"""PostgreSQL + pgvector backend: see :mod:`.storage`."""

from .connection import plain_url, redact
from .storage import PostgresStorage

__all__ = ["PostgresStorage", "plain_url", "redact"]
