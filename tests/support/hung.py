"""What a child process that did not end was doing: its threads' stacks.

A child started with ``python -X faulthandler`` prints every thread's stack when it
receives SIGABRT. A test that waits for a child to end (a copy stopped by SIGTERM)
sends it that on a timeout and fails with the stacks, so a hang seen once in CI says
where it was, instead of only that it timed out.
"""

from __future__ import annotations

import signal
import subprocess

FAULTHANDLER = ["-X", "faulthandler"]  # before ``-m``: the child prints its stacks on SIGABRT


def communicate_or_show_stacks(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout)``; on a timeout, the child's stacks in the failure."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        raise AssertionError(
            f"{proc.args!r} did not end in {timeout:.0f} s; its stacks:\n" + err[-12000:]
        ) from None
