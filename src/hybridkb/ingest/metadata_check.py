"""Checks on the metadata a caller gives for added files and texts, in a module of its
own: front ends run them before they create a collection (so a refused add leaves
nothing), and a CLI process that hands the add to an owner need not import the ingest
pipeline for them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ..limits import MAX_METADATA_BYTES, check_value

__all__ = ["RESERVED_KEYS", "checked_file_metadata", "checked_metadata"]

# Chunk metadata fields the system owns; user metadata never overrides them.
RESERVED_KEYS = frozenset(
    {
        "filename",
        "path",
        "document_id",
        "chunk_id",
        "page",
        "section",
        "chunk_index",
        "char_start",
        "char_end",
        "content_hash",
        "added_at",
        "language",
        "collection",
    }
)


def checked_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """Metadata validated before anything is stored: a value no later search could read
    back (too deep, too large, NaN, non-JSON) is refused here, with the fix.

    Raises:
        ConfigError: such a value, or metadata that is not a mapping.
    """
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ConfigError("metadata: expected an object mapping keys to values")
    check_value(dict(metadata), what="metadata", max_bytes=MAX_METADATA_BYTES)
    return {str(k): v for k, v in metadata.items()}


def checked_file_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The metadata given for added files, validated before anything is stored (front
    ends call it before they create a collection, so a refused add leaves nothing).

    Raises:
        ConfigError: a value no later search could read back (too deep, too large,
            NaN, non-JSON), or a key that shadows a built-in field such as ``page``.
    """
    user_meta = checked_metadata(metadata)
    shadowing = sorted(RESERVED_KEYS & set(user_meta))
    if shadowing:
        # A file's built-in fields come from the file (its name, its pages), and filters
        # and citations read those: a user value under the same name would be stored but
        # never found, so it is refused rather than dropped.
        key = shadowing[0]
        raise ConfigError(
            f"metadata: {key!r} is a built-in field every passage of a file has (read from "
            f'the file), so it cannot be set; filter on it as it is (where={{"{key}": ...}}) '
            f"or store your value under another name, e.g. 'doc_{key}'"
        )
    return user_meta
