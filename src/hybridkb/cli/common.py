"""What the commands of the ``hybridkb`` CLI share: exit codes, the lazily opened
knowledge base, option helpers and one-line error output."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..agents.frontend import to_json
from ..errors import ConfigError, InvalidFilter, KBError
from ..limits import MAX_DOCUMENTS_CHARS, parse_json
from ..normalize import printable
from ..storage.backends import named_file

if TYPE_CHECKING:
    from ..kb import KnowledgeBase
    from ..settings import Settings

EXIT_OK = 0
EXIT_ERROR = 1  # an operation failed, or partly failed (add: a file; delete: an id)
EXIT_USAGE = 2  # bad arguments, flags or settings; refused without confirmation
EXIT_INTERRUPTED = 130

EPILOG = """\b
Exit codes:
  0    success
  1    failure: unknown collection, locked database, a file that could
       not be added, a document id that was not found, ...
  2    usage or configuration error: bad option or argument, bad
       HYBRIDKB_* setting, malformed --where/--metadata JSON,
       `drop` refused without --yes
  130  interrupted (Ctrl-C); 143, 129: stopped by SIGTERM, SIGHUP
\b
Settings come from HYBRIDKB_* environment variables and ./.env
(HYBRIDKB_MODEL, HYBRIDKB_CACHE_DIR, HYBRIDKB_CHUNK_SIZE, ...).
--db takes a file path, duckdb:///path, :memory: or postgresql://...
"""


F = TypeVar("F", bound=Callable[..., Any])


class Refused(KBError):
    """A destructive command refused without confirmation (exit code 2)."""

    code = "refused"


def exit_code(exc: KBError) -> int:
    """The exit code for a KBError: ``EXIT_USAGE`` for what the caller typed wrong (bad
    argument, filter, or a refused confirmation), ``EXIT_ERROR`` for everything else."""
    return EXIT_USAGE if isinstance(exc, (ConfigError, InvalidFilter, Refused)) else EXIT_ERROR


def one_line(text: str) -> str:
    """``text`` on one line (newlines and the spaces around them become one space): every
    CLI message is one line."""
    return re.sub(r"\s*\n\s*", " ", text).strip()


def echo(message: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print ``message`` on stdout (stderr with ``err``): the one door every line of the CLI
    goes through, so every name in it is shown by the one rule (``normalize.printable``):
    control characters, ANSI escapes and bidi controls escaped, newlines and tabs kept."""
    click.echo(printable(message, lines=True), err=err, nl=nl)


def echo_failed_and_skipped(failed: Iterable[Any], skipped: Iterable[Any], width: int) -> None:
    """The failed and skipped lines of an add or sync report (each failure names its file)."""
    for item in failed:
        error = one_line(item.error)
        if not error.startswith(item.filename):
            error = f"{item.filename}: {error}"
        echo(f"{'failed':<{width}} {error}")
    for item in skipped:
        echo(f"{'skipped':<{width}} {item.filename}: {one_line(item.reason)}")


def fail(message: str) -> None:
    """The one line a failed command prints (stderr)."""
    echo(f"hybridkb: {one_line(message)}", err=True)


# -- state shared by the commands ------------------------------------------------------


class State:
    """Global options; the knowledge base is opened by the first command that needs it."""

    def __init__(self, db: str | None, workspace: str | None) -> None:
        self.db = db
        self.workspace = workspace
        self._kb: KnowledgeBase | None = None

    def settings(self) -> Settings:
        """Settings from the environment and `.env` with the global options (ConfigError
        if a value does not read)."""
        from ..settings import load_settings

        return load_settings(db=self.db, workspace=self.workspace)

    def kb(self, *, write: bool = True) -> KnowledgeBase:
        """The knowledge base, opened on first use; ``write=False`` opens an existing DuckDB
        file read-only, so several readers may run at once."""
        if self._kb is None:
            from ..opening import connect

            settings = self.settings()
            read_only = not write and existing_duckdb_file(settings.db)
            self._kb = connect(settings=settings, read_only=read_only, serve=True)
        return self._kb

    def server_kb(self, *, read_only: bool) -> KnowledgeBase:
        """The knowledge base of ``hybridkb mcp`` (see opening.connect_server)."""
        if self._kb is None:
            from ..opening import connect_server

            self._kb = connect_server(self.settings(), read_only=read_only)
        return self._kb

    def close(self) -> None:
        """Close the knowledge base if a command opened it (safe to call twice)."""
        if self._kb is not None:
            self._kb.close()
            self._kb = None


def existing_duckdb_file(db: str) -> bool:
    """Readers open an existing store file read-only, so several can run at once."""
    file = named_file(db)  # the backend's declaration: None for a server and :memory:
    return file is not None and Path(file).is_file()


pass_state = click.make_pass_decorator(State)


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON (records and dataclasses converted; see ``frontend.to_json``)."""
    echo(to_json(data))


def json_option(fn: F) -> F:
    """The ``--json`` flag of a command (passed as ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(fn)


def parse_json_object(value: str | None, what: str) -> dict[str, Any] | None:
    """A JSON object given on the command line as ``what``; None when not given.

    Raises:
        ConfigError: Not JSON, too long, or not an object.
    """
    if value is None:
        return None
    data = parse_json(value, what=what, max_chars=MAX_DOCUMENTS_CHARS)
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: expected a JSON object such as '{{\"year\": 2024}}'")
    return data
