"""Serving the pages: the token scheme of ``hybridkb mcp --http`` (:mod:`hybridkb.mcp.http_server`)
with the browser's way of proving it (:mod:`hybridkb.ui.gate`)."""

from __future__ import annotations

import sys
import threading
import webbrowser
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from ..mcp.http_guard import ConnectionGuard
from ..mcp.http_server import App, Door, allowed_hosts, serve_app
from .app import create_app
from .common import UIConfig
from .gate import BrowserGate

__all__ = ["TOKEN_ENV", "door", "serve_ui", "ui_url"]

TOKEN_ENV = "HYBRIDKB_UI_TOKEN"


def ui_url(host: str, port: int, token: str) -> str:
    """The address ``hybridkb ui`` prints: it carries the token once."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/?token={token}"


def _announce(open_browser: bool, host: str, port: int, token: str, made: Path | None) -> None:
    url = ui_url(host, port, token)
    kept = f" (the token is in {made}, new each start)" if made is not None else ""
    print(f"hybridkb ui: open {url}{kept}", flush=True)
    print("hybridkb ui: stop it with Ctrl-C", file=sys.stderr, flush=True)
    if open_browser:
        # In a thread: a browser that starts slowly must not hold up serving.
        threading.Thread(target=_open, args=(url,), daemon=True).start()


def _open(url: str) -> None:
    if not webbrowser.open(url):
        print(
            "hybridkb ui: no browser could be started here (--open); open the link above "
            "in a browser on this machine",
            file=sys.stderr,
            flush=True,
        )


def _gate(port: int, hosts: list[str], app: App, token: str, guard: ConnectionGuard) -> App:
    return BrowserGate(app, token, guard, port=port, hosts=hosts)


def door(
    host: str, port: int, *, allow_hosts: Iterable[str] = (), open_browser: bool = False
) -> Door:
    """The UI's door: its token variable and file, the browser gate, what it prints."""
    hosts = allowed_hosts(host, allow_hosts)
    return Door(
        program="hybridkb ui",
        token_env=TOKEN_ENV,
        token_name="ui",
        port_option="--port",
        how_clients_prove="browsers must open the printed link",
        gate=partial(_gate, port, hosts),
        announce=partial(_announce, open_browser),
    )


def serve_ui(
    config: UIConfig,
    *,
    host: str,
    port: int,
    token: str | None,
    allow_hosts: Iterable[str] = (),
    open_browser: bool = False,
) -> None:
    """Serve the pages until stopped (SIGINT, SIGTERM, SIGHUP).

    Raises:
        ConfigError: The port is taken, or the address cannot be bound.
    """
    app = create_app(config)
    serve_app(
        app, host=host, port=port, token=token,
        door=door(host, port, allow_hosts=allow_hosts, open_browser=open_browser),
    )  # fmt: skip
