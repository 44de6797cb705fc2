"""hybridkb: a local-first hybrid (BM25 + vector) knowledge base for LLM agents and people."""

from .embedders import Embedder, FakeEmbedder
from .errors import (
    AccessDenied,
    BackendError,
    CollectionExists,
    CollectionNotFound,
    ConfigError,
    DatabaseLocked,
    DocumentNotFound,
    EmbeddingMismatch,
    ExtractionError,
    IngestError,
    InvalidFilter,
    KBError,
    MissingDependency,
    ModelUnavailable,
    UnsupportedFileType,
)
from .kb import Collection, KnowledgeBase
from .opening import connect
from .settings import Settings
from .types import AddReport, CollectionInfo, DeleteReport, Hit

__version__ = "0.1.0"

__all__ = [
    "AccessDenied",
    "AddReport",
    "BackendError",
    "Collection",
    "CollectionExists",
    "CollectionInfo",
    "CollectionNotFound",
    "ConfigError",
    "DatabaseLocked",
    "DeleteReport",
    "DocumentNotFound",
    "Embedder",
    "EmbeddingMismatch",
    "ExtractionError",
    "FakeEmbedder",
    "Hit",
    "IngestError",
    "InvalidFilter",
    "KBError",
    "KnowledgeBase",
    "MissingDependency",
    "ModelUnavailable",
    "Settings",
    "UnsupportedFileType",
    "connect",
]
