"""Stop signals inside ``stop_on_signals``: a stop that something swallowed on its way
still stops the next step of a long loop, and one a native layer turned into its own
error still ends the block as the stop."""

from __future__ import annotations

import os
import signal

import pytest

from hybridkb.lifecycle import Stopped, raise_if_stopped, stop_on_signals


def test_a_swallowed_stop_is_raised_again_at_the_next_step() -> None:
    with pytest.raises(Stopped) as stopped, stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a call: the handler runs by now
        except Stopped:
            pass  # what a driver that checks signals itself and clears the error does
        raise_if_stopped()
    assert stopped.value.signum == signal.SIGTERM
    raise_if_stopped()  # the block is over: nothing is pending any more


def test_no_stop_no_raise() -> None:
    with stop_on_signals():
        raise_if_stopped()


def test_an_error_a_native_layer_made_of_the_stop_leaves_the_block_as_the_stop() -> None:
    """DuckDB's driver checks signals during a query and raises its own error instead of
    the handler's: ``hybridkb copy`` stopped while opening its destination exited 1 with
    a traceback ending in ``RuntimeError: Query interrupted``."""
    interrupted = RuntimeError("Query interrupted")
    with pytest.raises(Stopped) as stopped, stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a call: the handler runs by now
        except Stopped:
            raise interrupted from None  # what the driver does with it
    assert stopped.value.signum == signal.SIGTERM
    assert stopped.value.__cause__ is interrupted


def test_an_error_without_a_stop_leaves_the_block_as_it_is() -> None:
    with pytest.raises(RuntimeError, match="Query interrupted"), stop_on_signals():
        raise RuntimeError("Query interrupted")
