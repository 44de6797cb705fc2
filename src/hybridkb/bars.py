"""Progress bars for a person at a terminal, that leave no thread behind.

tqdm starts a monitor thread with its first bar and keeps it for the rest of the
process (as of tqdm 4.70 it is never stopped). The monitor only rescues a bar that is
not refreshed for a long time; ours are updated at every step, so it is off for them,
and a library call that showed a bar leaves no thread running.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

__all__ = ["progress_bar"]


@functools.cache
def _bar_class() -> Any:
    from tqdm import tqdm  # imported where a bar is shown: cold paths never need it

    return type("Bar", (tqdm,), {"monitor_interval": 0})


def progress_bar(total: int, *, unit: str, desc: str | None = None) -> Any:
    """A tqdm bar on stderr that disappears when closed (no monitor thread)."""
    return _bar_class()(total=total, unit=unit, desc=desc, file=sys.stderr, leave=False)
