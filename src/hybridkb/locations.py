"""Where hybridkb keeps the knowledge base when nobody says, and the check that a named
DuckDB file's folder exists.

MCP hosts spawn ``hybridkb mcp`` with no environment and the working folder ``/``, so
a default relative to the working folder (``./hybridkb.duckdb``, the old one) landed
at the filesystem root, or failed where the root is read-only (macOS). The default is
the platform's per-user data folder instead, the same for the CLI and the MCP server so
that a terminal and an assistant share one knowledge base:

- Linux: ``$XDG_DATA_HOME/hybridkb`` (``~/.local/share/hybridkb``)
- macOS: ``~/Library/Application Support/hybridkb``
- Windows: ``%LOCALAPPDATA%\\hybridkb``

Only that folder is created for the user (mode 0700: the knowledge base holds their
documents). A ``--db`` or ``HYBRIDKB_DB`` in a folder that does not exist is most
likely a typo in a client's config, which used to create that folder and an empty
database in silence; it is refused instead.
"""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError

APP_NAME = "hybridkb"
DEFAULT_DB_NAME = "hybridkb.duckdb"

__all__ = [
    "APP_NAME",
    "DEFAULT_DB_NAME",
    "check_db_folder",
    "default_db",
    "ensure_db_folder",
    "shown_db",
    "user_data_folder",
]


def user_data_folder() -> Path:
    """The per-user data folder of hybridkb on this platform (not created here)."""
    from platformdirs import user_data_dir  # only when the default is needed

    return Path(user_data_dir(APP_NAME, appauthor=False))


def default_db() -> str:
    """The knowledge base file used when no ``--db``, ``HYBRIDKB_DB`` or `.env` names one."""
    return str(user_data_folder() / DEFAULT_DB_NAME)


def ensure_db_folder(path: str, named_by: str = "--db or HYBRIDKB_DB") -> None:
    """Make sure the folder of the DuckDB file ``path`` exists before DuckDB opens it.

    The per-user data folder is created (0700); any other missing folder is refused.

    Raises:
        ConfigError: the folder of ``path`` does not exist (or is not a folder).
    """
    folder = Path(path).expanduser().absolute().parent
    if folder.is_dir():
        return
    if folder == user_data_folder().absolute():
        # mkdir's mode is masked by the umask, which cannot widen 0700 for the last part.
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return
    what = "is not a folder" if folder.exists() else "does not exist"
    raise ConfigError(
        f"{path}: the folder {folder} {what}; fix the path in {named_by}, "
        f"or create the folder first"
    )


def _file_of(db: str) -> Path | None:
    """The DuckDB file ``db`` names, or None for ``:memory:`` and Postgres URLs."""
    if db.startswith("postgres"):
        return None
    path = db.removeprefix("duckdb://")
    return None if not path or path == ":memory:" else Path(path).expanduser().absolute()


def check_db_folder(db: str, named_by: str = "--db or HYBRIDKB_DB") -> None:
    """``ensure_db_folder`` for a file ``db`` names, before anything else starts (a server
    that cannot open its file should say so at once, not at its first tool call);
    ``named_by`` is where the user typed ``db``, for the fix in the message.

    Raises:
        ConfigError: a DuckDB file in a folder that does not exist.
    """
    if (file := _file_of(db)) is not None:
        ensure_db_folder(str(file), named_by)


def shown_db(db: str) -> str:
    """The knowledge base ``db`` names, for people: a DuckDB file's absolute path, a
    Postgres URL without its password."""
    if db.startswith("postgres"):
        from .storage.urls import redact_url  # Postgres brings numpy and the driver anyway

        return redact_url(db)
    file = _file_of(db)
    return (
        ":memory: (kept in memory only, gone when the process ends)" if file is None else str(file)
    )
