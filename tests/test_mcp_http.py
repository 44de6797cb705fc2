"""``hybridkb mcp --http`` off loopback is never open: a bearer token, Host/Origin allow-lists.

Real servers (``python -m hybridkb mcp --http``) and real HTTP requests.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridkb.serve.endpoint import endpoint_file

TOKEN = "s3cret-token-for-the-test-0123456789"
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "t", "version": "0"}},
}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
    return {**env, "HYBRIDKB_MODEL": "fake", "HF_HUB_OFFLINE": "1", **extra}


def _mcp(db: Path, *args: str, env: dict[str, str]) -> list[str]:
    return [sys.executable, "-m", "hybridkb", "--db", str(db), "mcp", *args]


def _post(port: int, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST", "/mcp", body=json.dumps(INITIALIZE),
            headers={"Content-Type": "application/json",
                     "Accept": "application/json, text/event-stream", **headers},
        )  # fmt: skip
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@pytest.fixture
def open_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = _free_port()
    proc = subprocess.Popen(
        _mcp(tmp_path / "kb.duckdb", "--http", str(port), "--host", "0.0.0.0", env={}),
        env=_env(HYBRIDKB_MCP_TOKEN=TOKEN), stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
    yield proc, port
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_off_loopback_without_a_token_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        _mcp(tmp_path / "kb.duckdb", "--http", str(_free_port()), "--host", "0.0.0.0", env={}),
        env=_env(), capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "HYBRIDKB_MCP_TOKEN" in done.stderr
    assert not (tmp_path / "kb.duckdb").exists()  # refused before anything opened


def test_a_token_file_others_may_read_is_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)
    args = ["--http", str(_free_port()), "--host", "0.0.0.0", "--token-file", str(token_file)]
    done = subprocess.run(
        _mcp(tmp_path / "kb.duckdb", *args, env={}),
        env=_env(), capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and "chmod 600" in done.stderr
    assert done.stderr.count("\n") == 1


def test_every_request_needs_the_token_and_an_allowed_host(
    open_server: tuple[subprocess.Popen[bytes], int],
) -> None:
    _, port = open_server
    here = f"127.0.0.1:{port}"
    assert _post(port, {"Host": here}) == 401
    assert _post(port, {"Host": here, "Authorization": "Bearer wrong"}) == 401
    assert _post(port, {"Host": here, "Authorization": f"Bearer {TOKEN}"}) == 200
    forged = {"Host": "attacker.example:80", "Authorization": f"Bearer {TOKEN}"}
    assert _post(port, forged) in (400, 403, 421)
    origin = {"Host": here, "Origin": "http://attacker.example", "Authorization": f"Bearer {TOKEN}"}
    assert _post(port, origin) in (400, 403)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_stops_the_http_server_cleanly(
    open_server: tuple[subprocess.Popen[bytes], int], tmp_path: Path, signum: int
) -> None:
    proc, port = open_server
    assert _post(port, {"Host": f"127.0.0.1:{port}", "Authorization": f"Bearer {TOKEN}"}) == 200
    db = tmp_path / "kb.duckdb"
    assert endpoint_file(db).exists()
    proc.send_signal(signum)
    assert proc.wait(timeout=120) in (0, 128 + signum)
    assert not endpoint_file(db).exists()
    assert not Path(f"{db}.wal").exists()
