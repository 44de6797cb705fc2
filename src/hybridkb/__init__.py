"""hybridkb: a local-first hybrid (BM25 + vector) knowledge base for LLM agents and people.

The public names below are imported on first use (PEP 562, through
:func:`hybridkb.lazy.lazy_names`), not by ``import hybridkb``: a submodule
(``hybridkb.cli.commands``, ``hybridkb.errors``, ...) then loads only what it needs, and the
command line can set up its process before numpy starts (``cli.py`` says why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_names
from .renamed import install

install()  # old import paths of moved modules keep working, with a DeprecationWarning
del install

if TYPE_CHECKING:
    from .agents.filter_check import filter_warnings
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
        GraphError,
        IngestError,
        InvalidFilter,
        KBError,
        MissingDependency,
        ModelUnavailable,
        NotExportable,
        UnsupportedFileType,
    )
    from .graph_handle import GraphAPI
    from .kb import Collection, CollectionAPI, KnowledgeBase, KnowledgeBaseAPI
    from .opening import connect
    from .results import AddReport, CollectionInfo, DeleteReport, Hit
    from .settings import Settings

__version__ = "0.1.0"

# Where each public name is defined.
EXPORTS = {
    "AccessDenied": "errors",
    "AddReport": "results",
    "BackendError": "errors",
    "Collection": "kb",
    "CollectionAPI": "kb",
    "CollectionExists": "errors",
    "CollectionInfo": "results",
    "CollectionNotFound": "errors",
    "ConfigError": "errors",
    "DatabaseLocked": "errors",
    "DeleteReport": "results",
    "DocumentNotFound": "errors",
    "Embedder": "embedders",
    "EmbeddingMismatch": "errors",
    "ExtractionError": "errors",
    "FakeEmbedder": "embedders",
    "GraphAPI": "graph_handle",
    "GraphError": "errors",
    "Hit": "results",
    "IngestError": "errors",
    "InvalidFilter": "errors",
    "KBError": "errors",
    "KnowledgeBase": "kb",
    "KnowledgeBaseAPI": "kb",
    "MissingDependency": "errors",
    "ModelUnavailable": "errors",
    "NotExportable": "errors",
    "Settings": "settings",
    "UnsupportedFileType": "errors",
    "connect": "opening",
    "filter_warnings": "agents.filter_check",
}

# A literal list, so type checkers see what is exported (EXPORTS has the same names).
__all__ = [
    "AccessDenied",
    "AddReport",
    "BackendError",
    "Collection",
    "CollectionAPI",
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
    "GraphAPI",
    "GraphError",
    "Hit",
    "IngestError",
    "InvalidFilter",
    "KBError",
    "KnowledgeBase",
    "KnowledgeBaseAPI",
    "MissingDependency",
    "ModelUnavailable",
    "NotExportable",
    "Settings",
    "UnsupportedFileType",
    "connect",
    "filter_warnings",
]


__getattr__, __dir__ = lazy_names(__name__, EXPORTS)
del lazy_names  # the helper is no public name of the package
