"""``hybridkb mcp``: serve the knowledge base to agents over MCP (stdio or HTTP).

Its own module: the command checks the settings, the token and the folders before
anything opens, says on stderr what it serves, and hands the process to a server
(:mod:`hybridkb.mcp.stdio`, or the SDK's over HTTP in :mod:`hybridkb.mcp.server`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import attempt_import
from ..lifecycle import stop_on_signals
from ..storage.backends import check_db_folder, shown_db
from .common import EPILOG, EXIT_OK, State, echo, pass_state
from .sync import watch_in_background

if TYPE_CHECKING:
    from ..kb import KnowledgeBase


@click.command(epilog=EPILOG, short_help="Serve the knowledge base to agents over MCP.")
@click.option(
    "--http", "http_port", type=click.IntRange(1, 65535), metavar="PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.",
)  # fmt: skip
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP bind address.")
@click.option(
    "--token-file", type=click.Path(path_type=Path, dir_okay=False), metavar="PATH",
    help="HTTP: file of yours (mode 0600) with the bearer token clients must send (else "
    "HYBRIDKB_MCP_TOKEN; with neither, on loopback, a new token each start, in a file named "
    "on stderr).",
)  # fmt: skip
@click.option(
    "--allow-host", "allow_hosts", multiple=True, metavar="NAME",
    help="HTTP off loopback: a Host name clients may use (repeatable).",
)  # fmt: skip
@click.option(
    "--read-only",
    is_flag=True,
    help="Offer only the tools that read (so does a database role that may only read).",
)
@click.option(
    "--watch", "watch_files", is_flag=True,
    help="Keep every collection in step with its folders while serving (see `hybridkb watch`).",
)  # fmt: skip
@pass_state
def mcp(
    state: State,
    http_port: int | None,
    host: str,
    token_file: Path | None,
    allow_hosts: tuple[str, ...],
    read_only: bool,
    watch_files: bool,
) -> int:
    """Serve the knowledge-base tools over MCP (stdio by default) until stopped.

    The server holds the database and the model while it runs; with DuckDB other
    processes (a terminal, a second assistant, a script) reach the knowledge base
    through it, also when it offers only the tools that read. With --watch it also
    follows the collections' folders, so every client searches what is on disk now.
    """
    settings = state.settings()  # ConfigError now if a value is bad
    check_db_folder(settings.db)  # a typo in the host's config: one line, before serving
    if http_port is not None:
        attempt_import("mcp", "mcp")
        from ..mcp.http_server import read_token

        read_token(host, token_file)  # refuse before the knowledge base opens
    # stderr is the log an MCP host shows: which knowledge base, which files the tools read.
    echo(f"hybridkb mcp: knowledge base {shown_db(settings.db)}", err=True)
    say_allowed(settings.allowed_paths)

    def server_kb() -> KnowledgeBase:
        return state.server_kb(read_only=read_only)

    open_kb: Callable[[], KnowledgeBase] = server_kb
    if watch_files:
        open_kb = watch_in_background(server_kb)
    # SIGTERM (how MCP hosts stop servers) and SIGHUP unwind like Ctrl-C: calls in
    # progress finish, the knowledge base closes (DuckDB checkpoints, the owner's
    # endpoint file goes, a watcher stops), and main() exits with 128 + the signal.
    with stop_on_signals():
        try:
            if http_port is None:  # our own stdio server: answers before the tools and model load
                from ..mcp.stdio import serve_stdio
                from ..storage.backends import backend_for

                serve_stdio(
                    open_kb,
                    sql_tool=settings.enable_sql_tool,
                    read_only=read_only,
                    list_after_open=backend_for(settings.db).access_by_role,
                    close=False,
                )  # the State closes it
            else:
                from ..mcp.server import serve

                serve(
                    open_kb(), http_port=http_port, host=host, read_only=read_only,
                    token_file=token_file, allow_hosts=allow_hosts,
                )  # fmt: skip
        finally:
            state.close()  # here, while a second signal is still ignored
    return EXIT_OK


def say_allowed(allowed: Sequence[Path]) -> None:
    """The one stderr line at MCP start saying which files the tools may read."""
    if allowed:
        folders = ", ".join(str(p) for p in allowed)
        echo(f"hybridkb mcp: the tools may read files under {folders}", err=True)
    else:
        echo(
            "hybridkb mcp: the tools may read no files (started in / or the home folder, "
            "which are never allowed by default); set HYBRIDKB_ALLOWED_PATHS to the folders",
            err=True,
        )
