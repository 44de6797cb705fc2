"""The command line: ``hybridkb COMMAND`` (commands.py) and the commands that live beside their feature.

``main`` and ``cli`` are imported on first use, so ``from hybridkb.cli import main`` (the
entry point before the package layout) still works without loading every command when a
submodule is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:
    from .commands import cli, main

__getattr__, __dir__ = lazy_names(__name__, {"cli": "commands", "main": "commands"})
del lazy_names  # the helper is no public name of the package

__all__ = ["cli", "main"]
