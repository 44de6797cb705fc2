"""Errors raised by hybridkb.

Every error a user can cause is a :class:`KBError` with a stable ``code``; any
other exception is a bug and propagates. Front ends render ``KBError`` their own
way (CLI: one line + exit code; LangChain: ToolException; MCP: error result)::

    KBError (code)
    ├── ConfigError ............ bad setting or argument
    │   └── NotPrivate ......... a private folder or file others could read or change
    ├── MissingDependency ...... optional extra not installed
    ├── CollectionNotFound
    ├── CollectionExists
    ├── DocumentNotFound
    ├── IngestError ............ one file could not be ingested
    │   ├── UnsupportedFileType
    │   └── ExtractionError .... encrypted, corrupt, empty, no text layer
    ├── EmbeddingMismatch ...... collection model/dimension differs, or bad vectors
    ├── ModelUnavailable ....... an embedding model cannot be loaded or run here
    ├── InvalidFilter .......... malformed `where` JSON
    ├── AccessDenied ........... path outside the allowed folders, workspace escape
    ├── GraphError ............. unknown node, bad graph import
    └── BackendError ........... database failure (locked file, driver error)
        └── DatabaseLocked ..... another process holds the DuckDB file
"""

from __future__ import annotations

import importlib

from .normalize import printable


class KBError(Exception):
    """Root of every error hybridkb raises on purpose.

    Its message is made printable where it is made (``normalize.printable``: control
    characters, ANSI escapes and bidi controls escaped, newlines kept): it quotes names
    and other errors' text (a model id from a repository's ``.env``, the hub's error
    repeating it), and lines that print it raw (a server's startup line, a library
    user's ``print(exc)``, a log) would hand a terminal whatever those held.
    """

    code = "kb_error"

    def __init__(self, message: str) -> None:
        message = printable(str(message), lines=True)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(KBError):
    """A bad setting or argument: wrong type, out of range, unknown option, empty text."""

    code = "config_error"


class NotPrivate(ConfigError):
    """A folder hybridkb keeps private files in (the knowledge base's, the cache's, the
    sockets') is a link, another user's, or open to other users; the message names the
    folder and the fix."""

    code = "not_private"


class MissingDependency(KBError):
    """An optional extra is not installed; the message names the ``pip install`` to run."""

    code = "missing_dependency"


class CollectionNotFound(KBError):
    """No collection of that name in the workspace; the message lists the existing ones."""

    code = "collection_not_found"


class CollectionExists(KBError):
    """A collection of that name exists already (create it with ``exist_ok=True`` to reuse it)."""

    code = "collection_exists"


class DocumentNotFound(KBError):
    """No document of that id in the collection (where a missing one is an error, not None)."""

    code = "document_not_found"


class IngestError(KBError):
    """One file could not be ingested; an add reports it in ``failed`` and goes on with the rest."""

    code = "ingest_error"


class UnsupportedFileType(IngestError):
    """The file's type has no loader; the message lists the supported extensions."""

    code = "unsupported_file_type"


class ExtractionError(IngestError):
    """The file could not be read: encrypted, corrupt, empty, or without a text layer."""

    code = "extraction_error"


class EmbeddingMismatch(KBError):
    """The collection was embedded with another model or dimension, or vectors are malformed."""

    code = "embedding_mismatch"


class ModelUnavailable(KBError):
    """An embedding (or reranking) model cannot be loaded or run here."""

    code = "model_unavailable"


class NotExportable(ModelUnavailable):
    """The model cannot run on ONNX Runtime (its layers, or the export does not match
    torch): hybridkb falls back to sentence-transformers for it."""

    code = "model_not_exportable"


class InvalidFilter(KBError):
    """A malformed ``where`` filter: bad JSON, unknown operator, a value of the wrong type."""

    code = "invalid_filter"


class AccessDenied(KBError):
    """A path outside the allowed folders (or a link leading out of them), or a workspace escape."""

    code = "access_denied"


class GraphError(KBError):
    """A graph call failed: unknown node, bad edge or bound, malformed import."""

    code = "graph_error"


class BackendError(KBError):
    """The database failed (driver error, read-only store, a file it cannot open)."""

    code = "backend_error"


class DatabaseLocked(BackendError):
    """Another process holds the DuckDB file and serves no calls for it (or this call needs
    the file itself); the message says who holds it and what to do."""

    code = "database_locked"
    path: str | None = None  # set by held_by: the file, and who held it
    holder: str | None = None

    @classmethod
    def held_by(cls, path: str, holder: str, waited: float) -> DatabaseLocked:
        """The file at ``path`` stayed locked by ``holder`` for ``waited`` seconds."""
        locked = cls(
            f"{path}: the knowledge base is in use by {holder}; wait for it to finish, "
            "send requests through the process that holds it (e.g. the MCP server), "
            f"or raise HYBRIDKB_LOCK_TIMEOUT (waited {waited:g}s)"
        )
        locked.path, locked.holder = path, holder
        return locked

    def after(self, waited: float) -> DatabaseLocked:
        """The same error for a caller that polled: it says how long the caller waited
        in all, not one poll's wait."""
        if self.path is None or self.holder is None:
            return self
        return DatabaseLocked.held_by(self.path, self.holder, waited)


def attempt_import(module: str, extra: str):  # type: ignore[no-untyped-def]
    """Import an optional module or raise MissingDependency naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(
            f"{module} is not installed; run: pip install 'hybridkb[{extra}]'"
        ) from exc
