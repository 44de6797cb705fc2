"""``hybridkb ui``: serve the web page on the knowledge base (see :mod:`hybridkb.ui`).

Imported only when the command is named (``cli.LazyGroup``); the web stack (the ``ui``
extra) only once the command runs.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import attempt_import
from ..lifecycle import stop_on_signals
from ..storage.backends import check_db_folder, shown_db
from .common import EPILOG, EXIT_OK, State, echo, pass_state

__all__ = ["ui"]

DEFAULT_PORT = 8765


@click.command(
    epilog=EPILOG, short_help="Serve a local web page to see and steer the knowledge base."
)
@click.option(
    "--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True,
    help="Port to serve on.",
)  # fmt: skip
@click.option(
    "--host", default="127.0.0.1", show_default=True,
    help="Bind address; anything but loopback needs a token you give.",
)  # fmt: skip
@click.option("--read-only", is_flag=True, help="Serve the pages that read; no change at all.")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the browser.")
@click.option(
    "--token-file", type=click.Path(path_type=Path, dir_okay=False), metavar="PATH",
    help="File of yours (mode 0600) with the token (else HYBRIDKB_UI_TOKEN; with neither, "
    "on loopback, a new token each start).",
)  # fmt: skip
@click.option(
    "--allow-host", "allow_hosts", multiple=True, metavar="NAME",
    help="Off loopback: a Host name browsers may use (repeatable).",
)  # fmt: skip
@click.option(
    "--max-upload-mb", type=click.IntRange(1, 100_000), default=100, show_default=True,
    help="The largest file the page accepts.",
)  # fmt: skip
@pass_state
def ui(
    state: State,
    port: int,
    host: str,
    read_only: bool,
    open_browser: bool,
    token_file: Path | None,
    allow_hosts: tuple[str, ...],
    max_upload_mb: int,
) -> int:
    """Serve a web page on the knowledge base until stopped, and print its address.

    The page shows the collections, their documents and folders, search with each
    hit explained, documents with their PDF pages, the graph and health; it adds
    files (upload or drag-and-drop), follows folders inside HYBRIDKB_ALLOWED_PATHS,
    syncs and deletes (not with --read-only). The printed address carries a token
    once (the browser then keeps a cookie); nothing is fetched from the internet.
    Beside `hybridkb mcp` or another process on the same file it goes through that
    process, like every other command.
    """
    settings = state.settings()
    check_db_folder(settings.db)
    for module in ("starlette", "uvicorn", "jinja2", "multipart"):
        attempt_import(module, "ui")
    from ..mcp.http_server import read_token
    from ..ui.common import UIConfig
    from ..ui.server import door, serve_ui

    token = read_token(host, token_file, door(host, port))  # refuse before the KB opens
    echo(f"hybridkb ui: knowledge base {shown_db(settings.db)}", err=True)
    allowed = list(settings.allowed_paths)
    if not allowed and not read_only:
        echo(
            "hybridkb ui: uploads and followed folders are off (no HYBRIDKB_ALLOWED_PATHS: "
            "started in / or the home folder); set it to the folders of your documents",
            err=True,
        )
    with stop_on_signals():
        try:
            config = UIConfig(
                kb=state.server_kb(read_only=read_only),
                read_only=read_only,
                allowed_paths=allowed,
                max_upload_bytes=max_upload_mb << 20,
                cache_dir=Path(settings.cache_dir),
            )
            serve_ui(
                config, host=host, port=port, token=token, allow_hosts=allow_hosts,
                open_browser=open_browser,
            )  # fmt: skip
        finally:
            state.close()
    return EXIT_OK
