"""A real ``hybridkb ui`` in a subprocess, plain HTTP to it, and Debian's Chromium driven
by Playwright (used by test_ui*.py and bench/ui.py).

Playwright never downloads a browser here: it launches ``/usr/bin/chromium`` (or
``HYBRIDKB_TEST_CHROMIUM``) with the flags that keep it off the network.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from http_server import free_port, server_env

START_SECONDS = 120  # a hang guard only
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def ui_env(**extra: str) -> dict[str, str]:
    """The test's environment without HYBRIDKB_ settings (but its cache), the fake model."""
    cache = os.environ.get("HYBRIDKB_CACHE_DIR")
    return server_env(**{**({"HYBRIDKB_CACHE_DIR": cache} if cache else {}), **extra})


def ui_command(db: Path | str, *args: str) -> list[str]:
    return [sys.executable, "-m", "hybridkb", "--db", str(db), "ui", *args]


def chromium_path() -> str | None:
    """Debian's Chromium, or the one HYBRIDKB_TEST_CHROMIUM names; None when absent."""
    given = os.environ.get("HYBRIDKB_TEST_CHROMIUM")
    if given:
        return given
    return shutil.which("chromium") or (
        "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
    )


class UIServer:
    """``hybridkb ui --port PORT ARGS`` running; stdout and stderr collected as they come."""

    def __init__(self, db: Path | str, *args: str, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:  # fmt: skip
        self.port = free_port()
        self.proc = subprocess.Popen(
            ui_command(db, "--port", str(self.port), *args),
            env=env or ui_env(), cwd=cwd or (Path(db).parent if str(db)[0] == "/" else None),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for raw in stream:
            into.append(raw.decode("utf-8", "replace"))

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait_url(self) -> str:
        """The printed link (with its token), once the port accepts connections."""
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert self.proc.poll() is None, self.stderr
            found = [m for line in self.out if (m := re.search(r"open (http://\S+)", line))]
            if found:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
                    return found[0].group(1)
                except OSError:
                    pass
            assert time.monotonic() < deadline, f"the server did not start: {self.stderr}"
            time.sleep(0.1)

    def token(self) -> str:
        return self.wait_url().split("token=", 1)[1]

    def token_file(self) -> Path:
        self.wait_url()
        found = re.search(r"the token is in (\S+),", "".join(self.out))
        assert found, self.out
        return Path(found.group(1))

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        """Status and Location of a GET (no redirect followed)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            response.read()
            return response.status, response.getheader("location") or ""
        finally:
            conn.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            code = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=30)
        return code


def launch_browser(playwright: Any) -> Any:
    """Chromium through Playwright, never a download, off the network."""
    path = chromium_path()
    assert path, "no chromium: apt-get install chromium (or set HYBRIDKB_TEST_CHROMIUM)"
    return playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)


def serious_violations(page: Any) -> list[str]:
    """axe-core's serious and critical findings on the page, one line each."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    found = []
    for violation in results.response.get("violations", []):
        if violation.get("impact") in ("serious", "critical"):
            targets = [n.get("target") for n in violation.get("nodes", [])][:3]
            found.append(
                f"{violation['id']} ({violation['impact']}): {violation['help']} {targets}"
            )
    return found
