"""A full disk: the write fails with the disk's own error, leaves nothing behind, and the
same operation works once there is room (in a child process; see full_disk_child.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import SUPPORT

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(sys.platform != "linux", reason="a file-size limit as a full disk: Linux"),
]

CHILD = SUPPORT / "full_disk_child.py"
DISK_FULL = "File too large"  # EFBIG, the limit's ENOSPC


def _run(scenario: str, folder: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(CHILD), scenario, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_failed_compact_leaves_no_copy_and_the_next_one_works(tmp_path: Path) -> None:
    found = _run("compact", tmp_path)
    for error in found["errors"]:
        assert DISK_FULL in error and "already attached" not in error, error
    assert not [name for name in found["left"] if ".compact" in name], found["left"]
    assert found["then"] == ["ok", "ok"]
    assert found["count"] == 151


def test_a_failed_commit_reports_the_disk_not_the_rollback(tmp_path: Path) -> None:
    found = _run("write", tmp_path)
    assert found["failed"] > 0
    for error in found["errors"]:
        assert DISK_FULL in error and "cannot rollback" not in error, error
    assert found["then"] == ["ok"]
    assert found["problems"] == []
    assert found["count"] == 301


def test_a_failed_copy_to_a_new_file_leaves_no_file(tmp_path: Path) -> None:
    found = _run("copy", tmp_path)
    assert DISK_FULL in found["errors"][0], found["errors"]
    assert found["left"] == []
    assert found["then"] == ["ok"] and found["count"] == 300


def test_a_failed_copy_into_a_store_leaves_no_half_collection(tmp_path: Path) -> None:
    found = _run("copy_into_existing", tmp_path)
    assert DISK_FULL in found["errors"][0], found["errors"]
    assert found["names"] == ["Other"]
    assert found["then"] == ["ok"] and found["count"] == 300
    assert found["final"] == ["Docs", "Other"] and found["problems"] == []


def test_a_failed_graph_export_leaves_no_files(tmp_path: Path) -> None:
    found = _run("graph_export", tmp_path)
    assert DISK_FULL in found["errors"][0], found["errors"]
    assert (found["existed"], found["left"]) == (False, [])
    assert found["then"] == ["ok"] and found["count"] == 3 * 301
