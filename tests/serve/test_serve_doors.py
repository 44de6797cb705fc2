"""The serving layer keeps the guarantees of one process (issue 24, item 5): each test
here failed on main at fc95a36. Every owner test runs on both transports."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from owner_process import finish, start_owner_process

import hybridkb
from hybridkb.serve.endpoint import (
    Endpoint,
    endpoint_file,
    live_endpoint,
    write_endpoint,
)
from hybridkb.serve.link import OwnerLink

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)


@pytest.fixture(params=["unix", "tcp"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HYBRIDKB_SERVE_TRANSPORT", request.param)
    return str(request.param)


@pytest.fixture
def owner(tmp_path: Path, transport: str) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    db = tmp_path / "kb.duckdb"
    proc = start_owner_process(db, tmp_path)
    yield db, proc
    finish(proc)


def test_a_terminal_add_reads_a_file_outside_the_owners_folders(
    owner: tuple[Path, subprocess.Popen[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hybridkb.cli.commands import main

    db, _ = owner
    home = tmp_path.parent / f"{tmp_path.name}-home"
    home.mkdir()
    (home / "handbook.md").write_text("# Handbook\n\nLeave is booked a week ahead.")
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    monkeypatch.chdir(home)
    assert main(["--db", str(db), "add", "Tax", "handbook.md"]) == 0, capsys.readouterr()
    with hybridkb.connect(db, model="fake") as kb:
        assert [d.filename for d in kb.collection("Tax").documents()] == ["handbook.md"]


class _Impostor:
    """A listener that answers every line with forged hits (or ``answer``) and records
    what it got."""

    def __init__(self, transport: str, folder: Path, answer: bytes | None = None) -> None:
        self.answer = answer
        if transport == "tcp":
            self.sock = socket.create_server(("127.0.0.1", 0))
            self.address = f"tcp:127.0.0.1:{self.sock.getsockname()[1]}"
        else:
            path = folder / "impostor.sock"
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(str(path))
            self.sock.listen(8)
            self.address = f"unix:{path}"
        self.received = b""
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            for line in reader:
                self.received += line
                forged = {"ok": ["Forged"], "nonce": "0" * 32, "proof": "0" * 64}
                conn.sendall(self.answer or json.dumps(forged).encode() + b"\n")


def test_a_client_proves_the_owner_before_sending_it_anything(
    tmp_path: Path, transport: str
) -> None:
    # The owner was stopped; another user's process took its port (or a stale socket
    # path) while its pid was reused: its endpoint file still names that address.
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Tax")
    impostor = _Impostor(transport, tmp_path)
    token = "ab" * 32
    write_endpoint(db, Endpoint(os.getpid(), impostor.address, token))
    with hybridkb.connect(db, model="fake", lock_timeout=2) as kb:
        assert kb.collection_names() == ["Tax"]  # the file's own, not forged ones
    impostor.sock.close()
    assert token.encode() not in impostor.received
    assert b'"op"' not in impostor.received  # no request, no data


def test_a_squatter_answering_a_nested_line_is_refused_in_one_line(
    tmp_path: Path, transport: str
) -> None:
    # A squatter on the address of the endpoint file answers the hello with a line that
    # nests a thousand arrays (within the handshake's 1,024 bytes): json.loads raised
    # RecursionError, a traceback. The file is held meanwhile (a reader that serves
    # nobody), so the command waits out its lock timeout and says so in one line.
    import duckdb

    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Tax")
    (tmp_path / "note.txt").write_text("The boiler is serviced in May.")
    impostor = _Impostor(transport, tmp_path, answer=b"[" * 1000 + b"\n")
    write_endpoint(db, Endpoint(os.getpid(), impostor.address, "ab" * 32))
    holder = duckdb.connect(str(db), read_only=True)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hybridkb", "--db", str(db), "add", "Tax",
             str(tmp_path / "note.txt")],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "HYBRIDKB_MODEL": "fake", "HYBRIDKB_LOCK_TIMEOUT": "1"},
        )  # fmt: skip
    finally:
        holder.close()
        impostor.sock.close()
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert str(db) in done.stderr
    assert b'"op"' not in impostor.received  # nothing was sent to it but hellos


def test_an_owner_stopped_by_sigterm_removes_its_endpoint(
    owner: tuple[Path, subprocess.Popen[str]],
) -> None:
    db, proc = owner
    assert endpoint_file(db).exists()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # it still dies of the signal
    assert not endpoint_file(db).exists()


def test_a_stranger_is_cut_off_after_a_short_first_line(
    owner: tuple[Path, subprocess.Popen[str]],
) -> None:
    db, proc = owner
    endpoint = live_endpoint(db)
    assert endpoint is not None
    stranger = _raw_connection(endpoint)
    stranger.settimeout(60)  # a hang guard only
    line = b'{"token": "' + b"x" * (64 * 1024 * 1024) + b'"}\n'
    with pytest.raises(OSError):  # closed long before 64 MB were read
        stranger.sendall(line)
        assert stranger.recv(1) == b""
        raise ConnectionResetError("closed")
    stranger.close()
    assert _rss_mb(proc.pid) < 400  # it never held the 64 MB line (~1 GB parsed before)


def test_a_client_with_the_wrong_proof_is_refused_by_the_owner(
    owner: tuple[Path, subprocess.Popen[str]],
) -> None:
    from hybridkb.serve import handshake

    db, _ = owner
    endpoint = live_endpoint(db)
    assert endpoint is not None
    conn = _raw_connection(endpoint)
    conn.settimeout(60)
    try:
        conn.sendall(json.dumps({"hello": "hybridkb-serve-3", "nonce": "1" * 32}).encode() + b"\n")
        reader = conn.makefile("rb")
        challenge = json.loads(reader.readline(handshake.LINE_BYTES))
        assert set(challenge) == {"nonce", "proof"}  # its proof, never the token
        assert endpoint.token not in json.dumps(challenge)
        conn.sendall(json.dumps({"proof": "0" * 64}).encode() + b"\n")
        assert json.loads(reader.readline(handshake.LINE_BYTES))["error"]["type"] == "AccessDenied"
        assert reader.readline() == b""  # and closed
    finally:
        conn.close()


def _raw_connection(endpoint: Endpoint) -> socket.socket:
    if endpoint.transport == "tcp":
        host, _, port = endpoint.address.removeprefix("tcp:").rpartition(":")
        return socket.create_connection((host, int(port)))
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(endpoint.path)
    return conn


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):  # the peak, so a freed line still counts
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_idle_strangers_do_not_stop_the_owner_serving(tmp_path: Path, transport: str) -> None:
    db = tmp_path / "kb.duckdb"
    proc = start_owner_process(db, tmp_path, "--max-files", "256")  # ~1,100 idle ones at 1024
    idle: list[socket.socket] = []
    try:
        endpoint = live_endpoint(db)
        assert endpoint is not None
        for _ in range(400):  # more than the owner has descriptors for
            idle.append(_raw_connection(endpoint))
        answers: list[list[str]] = []

        def call() -> None:
            with hybridkb.connect(db, model="fake") as kb:
                answers.append(kb.collection_names())

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        caller.join(timeout=120)  # a hang guard: the accept loop used to end for good
        assert answers == [["Tax"]]
    finally:
        for conn in idle:
            conn.close()
        finish(proc)


def test_a_runtime_folder_made_by_someone_else_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hybridkb.cli.commands import main

    monkeypatch.setenv("HYBRIDKB_SERVE_TRANSPORT", "unix")
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    # A short temporary folder of our own (socket paths are limited to ~100 bytes).
    temp = Path(tempfile.mkdtemp(prefix="hkb-", dir="/tmp" if Path("/tmp").is_dir() else None))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    taken = temp / f"hybridkb-{os.getuid()}"
    taken.mkdir()
    taken.chmod(0o777)  # another user's (as root: really theirs), open to all
    if os.getuid() == 0:
        os.chown(taken, 65534, 65534)
    (tmp_path / "note.txt").write_text("The boiler is serviced in May.")
    db = tmp_path / "kb.duckdb"
    assert main(["--db", str(db), "add", "Notes", str(tmp_path / "note.txt"), "--create"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    with hybridkb.connect(db, model="fake", serve=True) as kb:
        endpoint = live_endpoint(db)
        assert endpoint is not None and Path(endpoint.path).parent != taken
        assert Path(endpoint.path).parent.stat().st_mode & 0o077 == 0
        assert kb.collection("Notes").count() == 1
    shutil.rmtree(temp, ignore_errors=True)


def test_a_symlinked_path_finds_the_owner(
    owner: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    db, proc = owner
    link = tmp_path / "elsewhere" / "linked.duckdb"
    link.parent.mkdir()
    link.symlink_to(db)
    with hybridkb.connect(link, model="fake", lock_timeout=1) as kb:
        assert kb.collection_names() == ["Tax"]
        assert live_endpoint(link) == live_endpoint(db)


@pytest.mark.parametrize("op", ["create_collection", "drop_collection", "delete"])
def test_a_write_rerun_after_its_owner_died_reports_what_it_did(
    tmp_path: Path, transport: str, op: str
) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Old").add_texts(["an old note"], ids=["n1"])
    proc = start_owner_process(db, tmp_path, "--die-after", op)  # commits, then dies unanswered
    try:
        with hybridkb.connect(db, model="fake") as kb:
            if op == "create_collection":
                assert kb.create_collection("New").name == "New"  # not CollectionExists
                assert "New" in kb.collection_names()
            elif op == "drop_collection":
                kb.drop_collection("Old")  # not CollectionNotFound
                assert "Old" not in kb.collection_names()
            else:  # "ghost" never existed: the re-run must not report it deleted
                report = kb.collection("Old").delete(["n1", "ghost"])
                assert report.deleted == ["n1"] and report.not_found == ["ghost"]
        assert proc.wait(timeout=30) == 9
    finally:
        finish(proc)


def test_a_write_sent_twice_to_a_live_owner_runs_once(
    owner: tuple[Path, subprocess.Popen[str]],
) -> None:
    db, _ = owner
    endpoint = live_endpoint(db)
    assert endpoint is not None
    link = OwnerLink(endpoint)
    try:
        first = link.call("default", "create_collection", {"name": "Once"}, "req-1")
        again = link.call("default", "create_collection", {"name": "Once"}, "req-1")
        assert first == again == "Once"  # the answer kept, not CollectionExists
    finally:
        link.close()
