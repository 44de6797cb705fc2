"""One message and one progress bar while a model is prepared for ONNX Runtime.

Loading the default model on a new machine exports its graph, then judges int8 on this
CPU, which exports two int8 candidates: each export used to print its own "preparing"
line and bar, and transformers added a "Loading weights" bar (three lines, four bars on
a first run). ``preparation()`` spans one embedder load: the first ``preparing()``
inside it prints the line and starts the bar, and every later one adds its steps to
that bar. Nothing is printed when nothing needs preparing.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..bars import progress_bar

__all__ = ["preparation", "preparing"]

Step = Callable[[str], None]


@dataclass
class _Preparation:
    started: bool = False  # the message is out
    bar: Any = None  # a tqdm bar once started (None without tqdm); tests `is not None`:
    steps: int = 0  # a tqdm bar is falsy while its total is 0


_local = threading.local()  # an MCP server loads its model in a background thread


def _current() -> _Preparation | None:
    return getattr(_local, "preparation", None)


@contextlib.contextmanager
def preparation() -> Iterator[None]:
    """Share one message and one bar among the ``preparing()`` calls made inside."""
    if _current() is not None:
        yield
        return
    _local.preparation = made = _Preparation()
    try:
        yield
    finally:
        _local.preparation = None
        if made.bar is not None:
            made.bar.close()


@contextlib.contextmanager
def preparing(model_id: str, steps: int) -> Iterator[Step]:
    """``steps`` more steps of preparing ``model_id``; the first call in a preparation
    prints why this is slow once, later calls extend its bar. Yields ``step(name)``."""
    shared = _current()
    with contextlib.ExitStack() as stack:
        if shared is None:  # called on its own: a preparation of its own
            stack.enter_context(preparation())
            shared = _current()
        assert shared is not None
        stack.enter_context(_transformers_bars_off())
        if not shared.started:
            shared.started = True
            print(
                f"hybridkb: preparing {model_id} for ONNX Runtime (once per model and "
                "machine; later starts load it in well under a second)",
                file=sys.stderr,
                flush=True,
            )
            shared.steps = steps
            shared.bar = _new_bar(steps)
        elif steps:
            shared.steps += steps
            if shared.bar is not None:
                shared.bar.total = shared.steps
                shared.bar.refresh()
        bar = shared.bar

        def step(name: str) -> None:
            if bar is not None:
                bar.set_postfix_str(name)
                bar.update(1)

        yield step


def _new_bar(steps: int) -> Any:
    return progress_bar(steps, unit="step", desc="  prepare")


_HUB_BARS = "HF_HUB_DISABLE_PROGRESS_BARS"


@contextlib.contextmanager
def _transformers_bars_off() -> Iterator[None]:
    """No "Loading weights" bar from transformers beside ours (when the export uses it).

    transformers decides at import whether its bars show, from huggingface_hub's switch,
    which reads the variable at its own import; whichever is loaded already is switched
    off for the export and back on after.
    """
    # A module blocked or missing (None in sys.modules, as where torch is absent) is off.
    if sys.modules.get("transformers") is not None:
        # Untyped modules, loaded already: looked up rather than imported for mypy's sake.
        hf_logging: Any = importlib.import_module("transformers.utils.logging")
        was_on = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            yield
        finally:
            if was_on:
                hf_logging.enable_progress_bar()
        return
    if sys.modules.get("huggingface_hub") is not None:
        hub: Any = importlib.import_module("huggingface_hub.utils")
        was_on = not hub.are_progress_bars_disabled()
        hub.disable_progress_bars()
        try:
            yield
        finally:
            if was_on:
                hub.enable_progress_bars()
        return
    # Read by huggingface_hub when the export imports it, for the rest of the process.
    before = os.environ.get(_HUB_BARS)
    os.environ[_HUB_BARS] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_HUB_BARS, None)
        else:
            os.environ[_HUB_BARS] = before
