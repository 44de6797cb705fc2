"""Old import paths of the modules that moved into packages: each still imports, for one
release, as the module it became, with a DeprecationWarning naming the new path.

The package used to hold every module at its root; they now live in packages
that show the layers (``cli``, ``mcp``, ``agents``, ``ingest``, ``search``, ``text``,
...). Code that imported ``hybridkb.types`` or ``hybridkb.tools`` keeps working: a finder
at the end of ``sys.meta_path`` (so a real module always wins) answers only for the old
names below and hands back the new module itself, so both names are one module and
``isinstance`` checks hold. No file remains at an old path: ``types.py`` and ``copy.py``
shadowed the standard library for scripts run from inside the package folder.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["RENAMED", "RenamedModules", "install"]

# old import path -> the module it is now
RENAMED = {
    "hybridkb.agent_input": "hybridkb.agents.inputs",
    "hybridkb.analysis": "hybridkb.text.analysis",
    "hybridkb.cache_folder": "hybridkb.embedders.cache_folder",
    "hybridkb.chunking": "hybridkb.text.chunking",
    "hybridkb.cli_common": "hybridkb.cli.common",
    "hybridkb.cli_maintenance": "hybridkb.cli.maintenance",
    "hybridkb.cli_postgres": "hybridkb.cli.postgres",
    "hybridkb.cli_sync": "hybridkb.cli.sync",
    "hybridkb.cli_synopsis": "hybridkb.cli.synopsis",
    "hybridkb.cli_ui": "hybridkb.cli.ui",
    "hybridkb.copy": "hybridkb.storage.transfer",
    "hybridkb.demo": "hybridkb.devtools.demo",
    "hybridkb.embed_cache": "hybridkb.embedders.cache",
    "hybridkb.evaluate": "hybridkb.devtools.evaluate",
    "hybridkb.files": "hybridkb.text.files",
    "hybridkb.filter_check": "hybridkb.agents.filter_check",
    "hybridkb.filters": "hybridkb.text.filters",
    "hybridkb.frontend": "hybridkb.agents.frontend",
    "hybridkb.fusion": "hybridkb.search.fusion",
    "hybridkb.graph.cli": "hybridkb.cli.graph",
    "hybridkb.graph.handle": "hybridkb.graph_handle",
    "hybridkb.graph.io": "hybridkb.graph.importer",
    "hybridkb.graph.tools": "hybridkb.agents.graph_tools",
    "hybridkb.index.keyword": "hybridkb.index.keywords",
    "hybridkb.langchain_store": "hybridkb.agents.langchain_store",
    "hybridkb.langid_model": "hybridkb.text.langid_model",
    "hybridkb.legs": "hybridkb.search.legs",
    "hybridkb.loaders.html": "hybridkb.loaders.webpage",
    "hybridkb.mcp_http": "hybridkb.mcp.http_server",
    "hybridkb.mcp_http_guard": "hybridkb.mcp.http_guard",
    "hybridkb.mcp_server": "hybridkb.mcp.server",
    "hybridkb.mcp_stdio": "hybridkb.mcp.stdio",
    "hybridkb.mcp_tools": "hybridkb.mcp.tools",
    "hybridkb.metadata_check": "hybridkb.ingest.metadata_check",
    "hybridkb.pdfwriter": "hybridkb.devtools.pdfwriter",
    "hybridkb.pgcluster": "hybridkb.pgserver.cluster",
    "hybridkb.pgfolder": "hybridkb.pgserver.folder",
    "hybridkb.render": "hybridkb.agents.render",
    "hybridkb.rerank": "hybridkb.search.rerank",
    "hybridkb.sql_rows": "hybridkb.sql.rows",
    "hybridkb.sql_tool": "hybridkb.sql.tool",
    "hybridkb.sql_worker": "hybridkb.sql.worker",
    "hybridkb.statwalk": "hybridkb.ingest.statwalk",
    "hybridkb.sync": "hybridkb.ingest.sync",
    "hybridkb.toolbox": "hybridkb.agents.toolbox",
    "hybridkb.tools": "hybridkb.agents.tools",
    "hybridkb.types": "hybridkb.results",
}


class RenamedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`RENAMED` and loads each as the module it became."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for an old path; None for every other name."""
        if fullname not in RENAMED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        """The default module object (replaced in :meth:`exec_module`)."""
        return None

    def exec_module(self, module: ModuleType) -> None:
        """Warn, then put the new module in ``sys.modules`` under the old name: the import
        system returns what ``sys.modules`` holds once the loader is done."""
        new = RENAMED[module.__name__]
        warnings.warn(
            f"{module.__name__} moved to {new}; import it from there "
            "(the old path goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, RenamedModules) for finder in sys.meta_path):
        sys.meta_path.append(RenamedModules())
