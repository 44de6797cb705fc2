"""A stop signal's exception, raised at any chosen point of Python code.

A stop signal's handler (``lifecycle.stop_on_signals``) raises :class:`Stopped` wherever
the main thread next runs Python: also inside ``threading.Condition.__enter__``, just
after its lock was taken and before the ``with`` block holds it, which leaves that lock
held for ever (a stress test leaked ``queue.Queue``'s lock in 2 of 2,000 stops). A test
cannot aim a real signal at such a point, but a trace function can raise there: an
exception raised by ``sys.settrace``'s function replaces what the traced code was doing
(also its ``return``), and the trace is then removed, as a second stop is ignored.

The points are where a handler can run: any line of hybridkb's code, and the return of
any function (the caller's next step), in the standard library too. A trace also stops
where the interpreter never runs a handler, and those are left out: the line event it
gives a ``with`` statement's exit before ``__exit__`` runs (raising there leaks the lock
a real signal cannot), lines inside the standard library (one just after
``threading.Thread.start`` took a module lock of its own, whose loss hangs every later
thread start), and weakref callbacks, which swallow it.
:func:`stop_at` runs a scenario with the exception at its ``step``-th such point; a test
walks ``step`` over every point the scenario has.
"""

from __future__ import annotations

import dis
import functools
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import hybridkb
from hybridkb.lifecycle import Stopped

OURS = str(Path(hybridkb.__file__).parent)
SWALLOWED = ("_weakrefset.py", "weakref.py")  # callbacks: an error there is only printed


def _a_stop_can_land(frame: FrameType, event: str) -> bool:
    name = frame.f_code.co_filename
    if name.startswith(OURS):
        return not (event == "line" and frame.f_lasti in _with_exits(frame.f_code))
    return event == "return" and not name.endswith(SWALLOWED)


@functools.cache
def _with_exits(code: CodeType) -> frozenset[int]:
    """Where ``code`` calls a ``with`` block's ``__exit__(None, None, None)`` on the way
    out: three ``LOAD_CONST None`` and a call of two arguments (3.11's PRECALL, CALL)."""
    ops = list(dis.get_instructions(code))
    return frozenset(
        ops[i].offset
        for i in range(len(ops) - 3)
        if all(op.opname == "LOAD_CONST" and op.argval is None for op in ops[i : i + 3])
        and ops[i + 3].opname in ("PRECALL", "CALL")
        and ops[i + 3].arg == 2
    )


@dataclass
class Outcome:
    ended: bool  # the scenario's thread ended within the time allowed
    reached: bool  # the step was reached (False: the scenario ran out of events first)
    error: BaseException | None


def stop_at(step: int, scenario: Callable[[], object], timeout: float = 5.0) -> Outcome:
    """Run ``scenario`` in a thread of its own whose ``step``-th point where a stop can
    land raises ``Stopped(SIGTERM)``."""
    seen = 0
    reached = False
    error: list[BaseException] = []

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal seen, reached
        if not _a_stop_can_land(frame, event):
            return trace
        seen += 1
        if seen == step:
            reached = True
            raise Stopped(signal.SIGTERM)
        return trace

    def run() -> None:
        sys.settrace(trace)
        try:
            scenario()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            error.append(exc)
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=run, name="stop-anywhere", daemon=True)
    thread.start()
    thread.join(timeout)
    return Outcome(not thread.is_alive(), reached, error[0] if error else None)


def every_step(
    scenario: Callable[[], object], timeout: float = 5.0, limit: int = 20_000
) -> list[tuple[int, Outcome]]:
    """:func:`stop_at` at each step until the scenario runs out of points (or ``limit``);
    the runs whose thread did not end, with their step."""
    stuck = []
    for step in range(1, limit):
        outcome = stop_at(step, scenario, timeout)
        if not outcome.ended:
            stuck.append((step, outcome))
            if len(stuck) >= 3:
                return stuck  # enough to show it; every stuck run leaves a thread behind
        elif not outcome.reached:
            return stuck
    raise AssertionError(f"the scenario has more than {limit} points; shorten it")
