"""An owner in another process: started, stopped, and a client's last call."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from paths import SUPPORT

WORKER = SUPPORT / "owner_worker.py"


def start_owner_process(db: Path, cwd: Path, *flags: str) -> subprocess.Popen[str]:
    """An owner_worker.py process holding ``db`` (ready when this returns)."""
    env = {**os.environ, "HYBRIDKB_ALLOWED_PATHS": str(cwd), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(db), *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def finish(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)
