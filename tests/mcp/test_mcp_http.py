"""``hybridkb mcp --http`` is never open: a bearer token on loopback too (made for each
start when none is given), Host/Origin allow-lists off loopback, token files that only
their owner controls, and a gate on every kind of request.

Real servers (``python -m hybridkb mcp --http``) and real HTTP requests; "another local
user" is a request without the token.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import stat
import subprocess
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from http_server import HttpServer, free_port, mcp_command, post, server_env
from paths import ROOT

from hybridkb.mcp.http_server import TokenGate
from hybridkb.serve.endpoint import endpoint_file

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

TOKEN = "s3cret-token-for-the-test-0123456789"
MCP_PAGE = ROOT / "docs" / "guide" / "mcp.md"


@pytest.fixture
def open_server(tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(
        tmp_path / "kb.duckdb", "--host", "0.0.0.0", env=server_env(HYBRIDKB_MCP_TOKEN=TOKEN)
    )
    server.wait_serving()
    yield server
    server.stop()


def test_off_loopback_without_a_token_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        mcp_command(tmp_path / "kb.duckdb", "--http", str(free_port()), "--host", "0.0.0.0"),
        env=server_env(), capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "HYBRIDKB_MCP_TOKEN" in done.stderr
    assert not (tmp_path / "kb.duckdb").exists()  # refused before anything opened


def test_on_loopback_a_token_is_made_for_each_start_and_only_its_file_is_named(
    tmp_path: Path,
) -> None:
    made: list[str] = []
    for _ in range(2):
        server = HttpServer(tmp_path / "kb.duckdb", env=server_env())
        try:
            token_file = server.token_file()
            info = token_file.lstat()
            assert stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()
            assert stat.S_IMODE(info.st_mode) == 0o600
            assert token_file.parent.stat().st_mode & 0o077 == 0  # the private runtime folder
            token = token_file.read_text().strip()
            assert len(token) >= 32 and token not in server.stderr
            here = {"Host": f"127.0.0.1:{server.port}"}
            assert post(server.port, here) == 401  # another local user, without the token
            assert post(server.port, {**here, "Authorization": "Bearer " + "x" * 43}) == 401
            assert post(server.port, {**here, "Authorization": f"Bearer {token}"}) == 200
            made.append(token)
        finally:
            assert server.stop() in (0, 128 + signal.SIGTERM)
        assert not token_file.exists()  # a stopped server leaves no token behind
    assert made[0] != made[1]


def _symlink(path: Path) -> None:
    real = path.with_name("real-token")
    real.write_text(TOKEN)
    real.chmod(0o600)
    path.symlink_to(real)


def _fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)  # opening it for reading blocked the start forever


def _another_users(path: Path) -> None:
    path.write_text(TOKEN)
    path.chmod(0o600)
    os.chown(path, 65534, 65534)  # nobody's: a token someone else chose and knows


def _group_readable(path: Path) -> None:
    path.write_text(TOKEN)
    path.chmod(0o640)


def _huge(path: Path) -> None:
    path.write_text("t" * 1_000_000)
    path.chmod(0o600)


UNTRUSTED: dict[str, tuple[Callable[[Path], None], str]] = {
    "symlink": (_symlink, "symbolic link"),
    "fifo": (_fifo, "not a regular file"),
    "another-users": (_another_users, "not by you"),
    "group-readable": (_group_readable, "chmod 600"),
    "huge": (_huge, "bytes"),
}


@pytest.mark.parametrize("kind", list(UNTRUSTED))
def test_an_untrustworthy_token_file_is_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    make, reason = UNTRUSTED[kind]
    if kind == "another-users" and os.getuid() != 0:
        pytest.skip("only root can give a file to another user")
    token_file = tmp_path / "token"
    make(token_file)
    args = ["--http", str(free_port()), "--token-file", str(token_file)]
    done = subprocess.run(
        mcp_command(tmp_path / "kb.duckdb", *args),
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )  # fmt: skip  (the timeout is a hang guard: a FIFO used to block forever)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and f"--token-file {token_file}" in done.stderr
    assert reason in done.stderr and "Traceback" not in done.stderr


def test_every_request_needs_the_token_and_an_allowed_host(open_server: HttpServer) -> None:
    port = open_server.port
    here = f"127.0.0.1:{port}"
    assert post(port, {"Host": here}) == 401
    assert post(port, {"Host": here, "Authorization": "Bearer wrong"}) == 401
    assert post(port, {"Host": here, "Authorization": f"Bearer {TOKEN}"}) == 200
    forged = {"Host": "attacker.example:80", "Authorization": f"Bearer {TOKEN}"}
    assert post(port, forged) in (400, 403, 421)
    origin = {"Host": here, "Origin": "http://attacker.example", "Authorization": f"Bearer {TOKEN}"}
    assert post(port, origin) in (400, 403)
    assert TOKEN not in open_server.stderr


def test_a_websocket_upgrade_without_the_token_is_refused(open_server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", open_server.port), timeout=60) as conn:
        conn.sendall(
            f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{open_server.port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        status = conn.recv(4096).split(b"\r\n", 1)[0]
    assert status.split()[1] == b"401", status  # the gate's answer, before any route


def test_the_gate_checks_every_kind_of_request() -> None:
    reached: list[str] = []
    sent: list[MutableMapping[str, Any]] = []

    async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        reached.append(scope["type"])

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    gate = TokenGate(app, TOKEN)
    bearer = [(b"authorization", f"Bearer {TOKEN}".encode())]
    for scope in (
        {"type": "websocket", "headers": []},
        {"type": "websocket", "headers": [(b"authorization", b"Bearer wrong")]},
        {"type": "http.future-kind", "headers": bearer},  # unknown: refused even with it
    ):
        asyncio.run(gate(scope, receive, send))
    assert reached == []
    assert [m["type"] for m in sent] == ["websocket.close", "websocket.close"]
    asyncio.run(gate({"type": "websocket", "headers": bearer}, receive, send))
    asyncio.run(gate({"type": "lifespan"}, receive, send))
    assert reached == ["websocket", "lifespan"]


def _http_section() -> str:
    text = MCP_PAGE.read_text(encoding="utf-8")
    start = text.index("## Over HTTP")
    return text[start : text.index("\n## ", start + 1)]


# Each client's way to name the token (its environment, a prompt, the file itself).
_PLACEHOLDERS = (
    "${HYBRIDKB_MCP_TOKEN}", "${env:HYBRIDKB_MCP_TOKEN}", "${input:hybridkb-token}", "YOUR-TOKEN",
)  # fmt: skip


def _header_sent(entry: dict[str, Any]) -> tuple[str, str]:
    """(URL, Authorization value) as the client of ``entry`` sends them, its token
    variable set to TOKEN."""
    if "url" in entry:  # Claude Code, Cursor, VS Code: the header as configured
        url, value = entry["url"], entry["headers"]["Authorization"]
    else:  # Claude Desktop: a stdio bridge (mcp-remote) given the header in its env
        args = entry["args"]
        url = next(a for a in args if a.startswith("http://"))
        name, _, value = args[args.index("--header") + 1].partition(":")
        assert name == "Authorization"
        for var, text in entry["env"].items():
            value = value.replace(f"${{{var}}}", text)
    for placeholder in _PLACEHOLDERS:
        value = value.replace(placeholder, TOKEN)
    return url, value


def test_the_readme_http_configs_send_the_token(tmp_path: Path) -> None:
    section = _http_section()
    entries: dict[str, dict[str, Any]] = {}
    for block in re.findall(r"```json\n(.*?)```", section, re.S):
        data = json.loads(block)
        servers = data.get("servers") or data["mcpServers"]
        entries.update({f"{len(entries)}-{name}": entry for name, entry in servers.items()})
        if "servers" in data:  # VS Code asks for the token, and keeps it as a secret
            assert data["inputs"] == [
                {"type": "promptString", "id": "hybridkb-token", "password": True,
                 "description": data["inputs"][0]["description"]},
            ]  # fmt: skip
    assert len(entries) == 4  # Claude Code, Cursor, VS Code, Claude Desktop
    server = HttpServer(tmp_path / "kb.duckdb", env=server_env(HYBRIDKB_MCP_TOKEN=TOKEN))
    try:
        server.wait_serving()
        for entry in entries.values():
            url, value = _header_sent(entry)
            assert url == "http://127.0.0.1:8765/mcp" and value == f"Bearer {TOKEN}", entry
            assert post(server.port, {"Authorization": value}) == 200
        assert post(server.port, {}) == 401
    finally:
        server.stop()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_stops_the_http_server_cleanly(
    open_server: HttpServer, tmp_path: Path, signum: int
) -> None:
    port = open_server.port
    assert post(port, {"Host": f"127.0.0.1:{port}", "Authorization": f"Bearer {TOKEN}"}) == 200
    db = tmp_path / "kb.duckdb"
    assert endpoint_file(db).exists()
    open_server.proc.send_signal(signum)
    assert open_server.proc.wait(timeout=120) in (0, 128 + signum)
    assert not endpoint_file(db).exists()
    assert not Path(f"{db}.wal").exists()


def test_the_server_parses_http_with_h11_even_where_httptools_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvicorn's default ("auto") parses with httptools wherever that optional extra is
    installed, and httptools reads requests differently (what the gate and the guard were
    tested with is h11): the server pins h11."""
    import uvicorn.protocols.http.auto as auto
    from uvicorn.protocols.http.h11_impl import H11Protocol

    import hybridkb.mcp.http_server as mcp_http

    class HttpToolsStandIn(asyncio.Protocol):
        """What "auto" picks where httptools is installed."""

    monkeypatch.setattr(auto, "AutoHTTPProtocol", HttpToolsStandIn)
    wrapped: list[object] = []

    def guarded(protocol: object, guard: object) -> type[asyncio.Protocol]:
        wrapped.append(protocol)
        return HttpToolsStandIn

    monkeypatch.setattr(mcp_http, "guarded_protocol", guarded)
    monkeypatch.setattr(mcp_http, "_run", lambda server, listener, guard: None)  # no serving

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("never called")

    mcp_http.serve_app(app, host="127.0.0.1", port=free_port(), token=TOKEN)
    assert wrapped == [H11Protocol]
