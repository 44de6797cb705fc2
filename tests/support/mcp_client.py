"""Start ``hybridkb mcp`` the way MCP clients do, from the client configs of docs/guide/mcp.md.

Claude Desktop, Claude Code, Cursor and VS Code spawn a stdio server with the command,
arguments and ``"env"`` of their config, a few basics of their own (``PATH``, ``HOME``),
a working folder that is not the project (often ``/``), and no ``.env``. Used by
tests/mcp/test_mcp_clients.py and bench/mcp_start.py.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paths import ROOT

import hybridkb

MCP_PAGE = ROOT / "docs" / "guide" / "mcp.md"
README_HOME = "/home/me"  # the home folder the README's examples write
CONFIG_FILES = {
    "claude_desktop_config.json": "Claude Desktop",
    ".mcp.json": "Claude Code",
    ".cursor/mcp.json": "Cursor",
    ".vscode/mcp.json": "VS Code",
}
_BLOCK = re.compile(r"```json\n(.*?)```", re.S)
_INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "readme-client", "version": "0"},
}


@dataclass
class ClientConfig:
    """One server entry of a README config block."""

    client: str  # "Claude Desktop", ...
    file: str  # the config file the README names before the block
    entry: dict[str, Any]  # command, args, env (and type)

    @property
    def form(self) -> str:
        return "uvx" if self.entry["command"] == "uvx" else "venv"


def readme_configs(page: Path = MCP_PAGE) -> list[ClientConfig]:
    """Every server entry of the JSON blocks in the MCP guide's client section, with the
    config file named in the paragraph before its block."""
    text = page.read_text(encoding="utf-8")
    start = text.index("## Configure your client")
    end = text.index("\n## ", start + 1)
    section = text[start:end]
    found = []
    previous = 0
    for block in _BLOCK.finditer(section):
        before = section[previous : block.start()]
        previous = block.end()
        data = json.loads(block.group(1))
        servers = data.get("servers") if "servers" in data else data.get("mcpServers")
        assert isinstance(servers, dict), block.group(1)
        named = [f for f in CONFIG_FILES if f"`{f}`" in before]
        assert named, f"no config file named before {block.group(1)[:60]!r}"
        file = named[-1]  # the closest mention is the last one in the paragraph
        for entry in servers.values():
            found.append(ClientConfig(CONFIG_FILES[file], file, entry))
    return found


def venv_program() -> Path:
    """The ``hybridkb`` program of the virtual environment running the tests."""
    return Path(sys.executable).parent / "hybridkb"


def uvx_program() -> Path | None:
    """uvx on PATH, else the one the dev extra (package ``uv``) installs beside this Python."""
    found = shutil.which("uvx")
    if found is not None:
        return Path(found)
    beside = Path(sys.executable).parent / "uvx"
    return beside if beside.exists() else None


def spawn_env(
    config: ClientConfig, home: Path, *, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment a client gives the server: the config's ``"env"`` (README paths
    moved to ``home``), PATH and HOME; ``extra`` are the test's own settings."""
    env = {
        k: str(v).replace(README_HOME, str(home)) for k, v in config.entry.get("env", {}).items()
    }
    programs = [str(venv_program().parent)]
    if (uvx := uvx_program()) is not None:  # where the user's uvx is, as in their PATH
        programs.append(str(uvx.parent))
    env["PATH"] = os.pathsep.join([*programs, "/usr/local/bin", "/usr/bin", "/bin"])
    env["HOME"] = str(home)
    env.update(extra or {})
    # Tests run the sources they check out; the venv's editable install may point at
    # another checkout (a worktree), whose code the server would otherwise run.
    sources = Path(hybridkb.__file__).resolve().parents[1]
    env["PYTHONPATH"] = str(sources)
    return env


def spawn_command(config: ClientConfig, home: Path, *, source: Path | None = None) -> list[str]:
    """The command line of ``config`` with the README's paths made real: the venv form
    runs this venv's program; the uvx form installs from ``source`` (a wheel or folder)."""
    command = str(config.entry["command"])
    args = [str(a) for a in config.entry.get("args", [])]
    if command != "uvx":
        return [str(venv_program()), *args]
    assert source is not None, "uvx needs a wheel or folder to install from"
    at = args.index("--from") + 1
    args[at] = str(source)
    return [command, *args]


@dataclass
class StdioClient:
    """A spawned server spoken to as an MCP client speaks: one JSON-RPC message a line."""

    command: list[str]
    env: dict[str, str]
    cwd: str = "/"
    stderr_path: Path | None = None
    proc: subprocess.Popen[bytes] = field(init=False)
    _lines: queue.Queue[bytes] = field(init=False, default_factory=queue.Queue)
    _next_id: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        stderr = self.stderr_path.open("wb") if self.stderr_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=self.env,
            cwd=self.cwd,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def request(self, method: str, params: Any = None, *, timeout: float = 120) -> Any:
        """The result of ``method``; AssertionError with stderr's tail on an error or exit."""
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            line = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line, f"the server exited: {self.stderr_tail()}"
            answer = json.loads(line)
            if answer.get("id") == self._next_id:
                assert "error" not in answer, answer
                return answer["result"]

    def handshake(self) -> None:
        self.request("initialize", _INIT)
        assert self.proc.stdin is not None
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        self.proc.stdin.write(json.dumps(note).encode() + b"\n")
        self.proc.stdin.flush()

    def call(self, tool: str, timeout: float = 120, **arguments: Any) -> tuple[bool, str]:
        """(is_error, text) of a tools/call."""
        result = self.request("tools/call", {"name": tool, "arguments": arguments}, timeout=timeout)
        text = "\n".join(c.get("text", "") for c in result["content"])
        return bool(result.get("isError")), text

    def stderr_tail(self) -> str:
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        return self.stderr_path.read_text(errors="replace")[-2000:]

    def close(self, timeout: float = 60) -> int:
        """Close stdin as a client does when it quits; the server's exit code."""
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
