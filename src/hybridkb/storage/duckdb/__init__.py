"""Embedded DuckDB backend (the default): see :mod:`.storage` for the layout."""

from .storage import DuckDBStorage

__all__ = ["DuckDBStorage"]
