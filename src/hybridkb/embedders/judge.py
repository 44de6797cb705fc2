"""Judge int8 against float32 in a detached child, so a first use does not wait for it.

From an empty cache a first use needs the float32 graph (about 4 s of CPU for MiniLM on
2 cores), while judging int8 needs two quantised graphs and timed trials (about 25 s of
CPU more; 60-150 s of wall time on a busy machine): longer than an MCP client waits
for a tool call. So the embedder of a new collection is served in float32 at once and
a child process (``python -m hybridkb.embedders.judge MODEL CACHE``) judges int8 with
:func:`~.precision.choose_int8`; the next embedder loaded for a new collection (in a
later process, or in this one once the verdict is in) uses what was judged.

Why a detached child and not a thread: a ``hybridkb add`` ends in seconds and an MCP
client may stop its server at any time; a child in its own session outlives both and
runs at low priority, so the first calls keep the CPU. It writes nothing to the
caller's terminal or MCP pipe (its output goes to ``precision-<cpu>.log`` beside the
verdict). Stopped mid-way (SIGTERM, SIGKILL, a crash), it leaves no half-written file:
every graph and the verdict are written to a temporary name and renamed, the OS drops
its lock, and the next first use starts another judge, which reuses the graphs already
quantised.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from .onnx_files import lock_is_held
from .onnx_model import default_cache_dir
from .precision import JUDGE_LOCK, choose_int8, verdict_path

__all__ = ["background_judges", "judge_later", "judging", "main", "run"]

NICENESS = 10  # the judge yields the CPU to whatever the user is waiting for

_STARTED: list[subprocess.Popen[bytes]] = []
_STARTED_LOCK = threading.Lock()


def judging(model_id: str, cache_dir: str | os.PathLike[str] | None) -> bool:
    """Whether a process is judging int8 for ``model_id`` on this CPU right now (a
    background judge, or ``hybridkb setup``)."""
    return lock_is_held(verdict_path(model_id, cache_dir).parent, JUDGE_LOCK)


def background_judges() -> list[subprocess.Popen[bytes]]:
    """The judges this process started (each is reaped when the next one starts)."""
    return _STARTED


def judge_later(
    model_id: str, cache_dir: str | os.PathLike[str] | None
) -> subprocess.Popen[bytes] | None:
    """Start a detached judge for ``model_id`` unless one is at work already; returns
    it, or None when none was started."""
    if judging(model_id, cache_dir):
        return None
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    log_path = verdict_path(model_id, cache).with_suffix(".log")
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        flags, new_session = (
            subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP,
            False,
        )
    else:
        flags, new_session = 0, True  # its own session: a Ctrl-C or a group kill spares it
    # verdict_path made the folder (a private one); the log is the user's alone too.
    flags_w = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    with _STARTED_LOCK:
        _STARTED[:] = [child for child in _STARTED if child.poll() is None]  # reap
        with os.fdopen(os.open(log_path, flags_w, 0o600), "wb") as log:
            # Never the caller's stdin/stdout: an MCP server's are the client's pipe.
            child = subprocess.Popen(  # noqa: S603 - our own module, our own interpreter
                [sys.executable, "-m", "hybridkb.embedders.judge", model_id, str(cache)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                close_fds=True,
                creationflags=flags,
                start_new_session=new_session,
            )
        _STARTED.append(child)
    return child


def run(model_id: str, cache_dir: str | os.PathLike[str] | None) -> int:
    """Judge int8 for ``model_id`` now (what the child does); 0 when a verdict was
    written or found, 1 when measuring failed (recorded as float32 with the error)."""
    try:
        chosen = choose_int8(model_id, cache_dir)
    except Exception:  # noqa: BLE001 - recorded in the verdict; the trace goes to the log
        traceback.print_exc()
        return 1
    print(f"hybridkb: int8 judged for {model_id}: {chosen.key if chosen else 'float32'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m hybridkb.embedders.judge MODEL CACHE_DIR``: judge at low priority."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m hybridkb.embedders.judge MODEL CACHE_DIR", file=sys.stderr)
        return 2
    if hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(NICENESS)
    return run(args[0], args[1])


if __name__ == "__main__":
    sys.exit(main())
