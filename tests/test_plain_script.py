"""A library call leaves the process as it found it (issue 33): a plain script that
connects, adds and searches opens no listening socket, leaves no thread running, keeps
the default SIGTERM handler and starts no child process (not even the int8 judge of a
model with no verdict yet). Serving is for the programs that ask (``serve=True``: the
CLI, ``hybridkb mcp``, ``watch``), which still serve other processes on the same file.

The script runs in a fresh interpreter and reads its own state from /proc (Linux).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import make_folder, tiny_config

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

SCRIPT = r"""
import json, os, signal, sys, threading
from pathlib import Path

import hybridkb


def listening_inodes():
    # Sockets of this process in LISTEN: a Unix socket with __SO_ACCEPTCON (0x10000),
    # a TCP socket in state 0A.
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    found = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[3], 16) & 0x10000 and fields[6] in mine:
            found.append("unix:" + fields[6])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in mine:
                    found.append("tcp:" + fields[9])
    return found


def children():
    me = str(os.getpid())
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me:
            found.append(int(pid))
    return found


db, folder, model = sys.argv[1:4]
threads = {t.ident for t in threading.enumerate()}
with hybridkb.connect(db, model=model) as kb:
    notes = kb.create_collection("Notes")
    notes.add([folder])
    notes.add_texts(["w1 w2 w3 w4", "w5 w6"], ids=["a", "b"])
    hits = kb.search("w1 w2", k=2)
    state = {
        "hits": [h.document_id for h in hits],
        "listening": listening_inodes(),
        "endpoint": Path(db + ".hkbowner").exists(),
        "threads": sorted(t.name for t in threading.enumerate() if t.ident not in threads),
        "sigterm_default": signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
        "children": children(),
    }
state["threads_after_close"] = sorted(
    t.name for t in threading.enumerate() if t.ident not in threads and t.is_alive()
)
print("STATE", json.dumps(state))
"""


@pytest.mark.skipif(not Path("/proc/net/unix").exists(), reason="reads /proc (Linux)")
def test_a_script_that_adds_and_searches_leaves_the_process_as_it_found_it(
    tmp_path: Path,
) -> None:
    # A model with no int8 verdict on this CPU: its first use used to start the judge.
    model, _ = make_folder(tmp_path / "tiny-model", tiny_config())
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "note.md").write_text("# Note\n\nw1 w2 w3 w7 w8")
    env = {**os.environ, "HYBRIDKB_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("HYBRIDKB_SERVE", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "kb.duckdb"), str(folder), str(model)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout.rpartition("STATE ")[2])
    assert state["hits"] and "a" in state["hits"]
    assert state["listening"] == [] and state["endpoint"] is False
    assert state["threads"] == [] and state["threads_after_close"] == []
    assert state["sigterm_default"] is True
    assert state["children"] == []  # no int8 judge, no other process


def test_a_script_asks_to_serve_and_serves(tmp_path: Path) -> None:
    import hybridkb
    from hybridkb.serve.endpoint import live_endpoint

    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as plain:
        assert live_endpoint(db) is None  # a library's connect serves nobody
        plain.create_collection("Notes")
    with hybridkb.connect(db, model="fake", serve=True) as owner:
        assert live_endpoint(db) is not None
        with hybridkb.connect(db, model="fake") as client:
            assert client.collection_names() == ["Notes"] == owner.collection_names()
    assert live_endpoint(db) is None


def test_hybridkb_serve_overrides_the_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hybridkb
    from hybridkb.serve.endpoint import live_endpoint

    db = tmp_path / "kb.duckdb"
    monkeypatch.setenv("HYBRIDKB_SERVE", "true")
    with hybridkb.connect(db, model="fake"):
        assert live_endpoint(db) is not None  # asked for by the environment
    monkeypatch.setenv("HYBRIDKB_SERVE", "false")
    with hybridkb.connect(db, model="fake", serve=True):
        assert live_endpoint(db) is None  # refused by the environment
