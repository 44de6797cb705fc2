"""Lazy public names for a package (PEP 562), and the rule for imports inside functions.

:func:`lazy_names` gives a package ``__init__`` its module ``__getattr__`` and
``__dir__`` (the way ``lazy_loader.attach`` does, without the dependency): a public
name is imported from its submodule on first use, then kept in the package. The
package still imports the same names under ``if TYPE_CHECKING:``, so type checkers
and editors see them, and lists them in ``__all__``. This module imports only the
standard library, so using it costs a package nothing.

When an import goes inside a function
-------------------------------------
hybridkb imports at the top of a module, except for these reasons, which is why an
import inside a function carries no comment of its own:

1. **Cold paths.** A one-shot ``hybridkb search`` and ``hybridkb mcp`` (up to its
   ``tools/list`` answer) start a fresh process each time, so every module they
   import costs every call. What they must not import is pinned by
   ``tests/test_cold_path.py`` and ``tests/mcp/test_mcp_stdio.py`` (torch, LangChain,
   pydantic, pyarrow, the graph, ingest and the loaders, the wire client, ...); a
   module on those paths imports such a module in the function that needs it, and
   the command line imports a subcommand's module when that command runs.
   ``bench/mcp_start.py`` and ``bench/search.py --only cold`` measure these paths.
2. **Before numpy and pydantic.** ``import hybridkb.cli.commands`` loads neither:
   ``cli.tune_process`` sets their environment up first (``cli.py`` says why).
3. **Optional extras and platforms.** A module from an extra (``[mcp]``, ``[ocr]``,
   ``[torch]``, ...) is imported where it is used, through
   :func:`hybridkb.errors.attempt_import` where a missing one should name the extra;
   ``fcntl``/``msvcrt``/``resource`` only on the platform that has them.

An import that serves none of these (its module is imported anyway by then, or it is
on no cold path) belongs at the top of the module. An import cycle is never a reason:
a late or type-only import still draws the circle, and ``tests/test_architecture.py``
fails on one (a lower layer that needs an upper one takes a small protocol instead, as
``graph/host.py`` and ``sql_rows.OpenWorkspace`` do).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of a package whose public names load lazily.

    Usage, in a package's ``__init__.py``::

        __getattr__, __dir__ = lazy_names(__name__, {"Graph": "api", "connect": "opening"})

    Args:
        package: The package's ``__name__``.
        where: Each lazy public name -> the submodule (relative to ``package``, no
            leading dot) that defines it.

    Returns:
        ``__getattr__``, which imports a name's submodule on first use and keeps the
        value in the package (later lookups do not call it), raising AttributeError for
        any other name; and ``__dir__``, the package's names plus the lazy ones.
    """

    def __getattr__(name: str) -> Any:
        submodule = where.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
