"""A spawned ``hybridkb --db DB mcp`` (through mcp_harness.py) spoken to line by line."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from paths import SUPPORT

HARNESS = SUPPORT / "mcp_harness.py"


INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}  # fmt: skip


class Session:
    """A spawned ``hybridkb --db DB mcp`` spoken to line by line."""

    def __init__(self, tmp_path: Path, db: Path, *args: str, **hooks: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
        env.update(
            HYBRIDKB_MODEL="fake",
            HYBRIDKB_CACHE_DIR=str(tmp_path / "cache"),
            HYBRIDKB_LOCK_TIMEOUT="0.5",
            HF_HUB_OFFLINE="1",
            **hooks,
        )
        self.stderr_path = tmp_path / "server.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(HARNESS), "--db", str(db), "mcp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=str(tmp_path),
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        raw = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def request(self, ident: Any, method: str, params: Any = None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.answer(ident)

    def answer(self, ident: Any, timeout: float = 120) -> dict[str, Any]:
        """The answer to ``ident``; the answers read on the way are kept in ``seen``."""
        for got in self.seen:
            if got.get("id") == ident:
                self.seen.remove(got)
                return got
        while True:
            line = self.lines.get(timeout=timeout)
            assert line, f"the server exited: {self.stderr_path.read_text()[-2000:]}"
            message: dict[str, Any] = json.loads(line)  # every line on stdout is one JSON message
            if message.get("id") == ident:
                return message
            self.seen.append(message)

    def call(self, ident: Any, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        result = self.request(ident, "tools/call", {"name": name, "arguments": arguments})
        content = result["result"]["content"]
        assert len(content) == 1 and content[0]["type"] == "text"
        return content[0]["text"], result["result"]["isError"]

    def close(self) -> list[dict[str, Any]]:
        """Close stdin, wait for the server to exit; every answer not yet taken."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=120) == 0, self.stderr_path.read_text()[-2000:]
        self._stderr.close()
        rest = list(self.seen)
        while line := self.lines.get(timeout=30):
            rest.append(json.loads(line))
        return rest
