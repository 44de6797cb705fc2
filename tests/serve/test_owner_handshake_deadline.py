"""The owner's handshake has one deadline in all, not one per ``recv`` (issue 32, item 1).

A stranger on the owner's loopback port (any local user can connect to one) sent one
byte every 4.9 s, under the 5 s timeout of each ``recv``, and held a handshake slot for
as long as the 1,024-byte line allowed (~80 minutes). Here it sends one byte a second:
the owner must hang up long before the line could end.
"""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path

import pytest
from owner_process import start_owner_process, stop

from hybridkb.serve.endpoint import live_endpoint

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

DRIP_BYTES = 60  # a minute of dripping: far past the owner's 5 s for a whole handshake


def _closed(conn: socket.socket) -> bool:
    """Whether the owner hung up (looked at without waiting: it sends nothing before
    the client's first line ends, so anything to read is the end or a reset)."""
    readable, _, _ = select.select([conn], [], [], 0)
    return bool(readable)


def test_a_stranger_dripping_bytes_is_cut_off_at_the_handshake_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRIDKB_SERVE_TRANSPORT", "tcp")  # the port other users can reach
    db = tmp_path / "kb.duckdb"
    proc = start_owner_process(db, tmp_path)
    try:
        endpoint = live_endpoint(db)
        assert endpoint is not None and endpoint.transport == "tcp"
        host, _, port = endpoint.address.removeprefix("tcp:").rpartition(":")
        with socket.create_connection((host, int(port)), timeout=60) as conn:
            sent = 0
            while sent < DRIP_BYTES and not _closed(conn):
                try:
                    conn.sendall(b"{" if sent == 0 else b" ")  # a line that never ends
                except OSError:
                    break  # reset by the owner
                sent += 1
                time.sleep(1.0)  # under the 5 s each recv had
            assert sent < DRIP_BYTES, "the owner kept listening to a handshake that never ends"
        assert live_endpoint(db) is not None  # and still serves
    finally:
        stop(proc)
