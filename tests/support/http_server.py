"""A real ``hybridkb mcp --http`` server in a subprocess, and plain HTTP requests to it
(used by test_mcp_http*.py)."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "t", "version": "0"}},
}  # fmt: skip
START_SECONDS = 120  # a hang guard only: the server imports the SDK first


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(**extra: str) -> dict[str, str]:
    """The test's environment without any HYBRIDKB_ setting, the fake model, offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
    return {**env, "HYBRIDKB_MODEL": "fake", "HF_HUB_OFFLINE": "1", **extra}


def mcp_command(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "hybridkb", "--db", str(db), "mcp", *args]


def post(port: int, headers: dict[str, str], *, host: str = "127.0.0.1") -> int:
    """The status of an MCP ``initialize`` POSTed to the server with ``headers``."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
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


class HttpServer:
    """``hybridkb mcp --http PORT ARGS`` running; its stderr collected as it comes."""

    def __init__(
        self,
        db: Path,
        *args: str,
        env: dict[str, str],
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            mcp_command(db, "--http", str(self.port), *args),
            env=env, cwd=db.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=preexec_fn,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.lines.append(raw.decode("utf-8", "replace"))

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_serving(self) -> str:
        """The ``serving ...`` line, once the port accepts connections."""
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert self.proc.poll() is None, self.stderr
            serving = [line for line in self.lines if "serving http" in line]
            if serving:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
                    return serving[0]
                except OSError:
                    pass
            assert time.monotonic() < deadline, f"the server did not start: {self.stderr}"
            time.sleep(0.1)

    def token_file(self) -> Path:
        """The file the ``serving`` line names as holding this start's token."""
        found = re.search(r"the token in (\S+) ", self.wait_serving())
        assert found, self.stderr
        return Path(found.group(1))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            code = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(timeout=30)
        return code
