"""What lies beside a DuckDB knowledge base, and who may put it there.

DuckDB replays whatever ``<db>.wal`` it finds at an open (read-only too), and hybridkb
loads the index snapshots of ``<db>.hkbidx``, copies the staged parts of ``<db>.hkbstage``
into the tables and lets DuckDB spill pages into ``<db>.tmp``. In a folder other users may
write (``/tmp`` itself, sticky or not, or a group's), they make those names first, and so
decide what search returns (a planted snapshot), what the passages say (a log) or read
what is spilled. So:

- a knowledge base whose folder others may write is refused at every open, in one line
  naming the folder and the fix (``locations.ensure_db_folder``);
- the folders beside it are made with the rule of every folder hybridkb makes (0700, this
  user's, not a link) and checked at every open (``storage/duckdb/beside.py``): one left
  by another user from before the folder was closed to them is refused, not used;
- DuckDB spills into ``<db>.tmp`` made that way before it opens the file (``:memory:`` into
  a private folder of its own, not ``.tmp`` in the working folder).

"Another user" is uid 65534 (nobody), which root plays (``other_users``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from internals import duckdb_storage
from other_users import NOBODY, as_root

import hybridkb
from hybridkb.cli.commands import main
from hybridkb.errors import NotPrivate

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

STREAMED = """
import sys
from hybridkb.ingest import pipeline as ingest
from hybridkb.cli.commands import main
ingest.STREAM_BYTES = 4_000  # stream this small file, as a large one would be
sys.exit(main(sys.argv[1:]))
"""


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# -- the folder of the knowledge base --------------------------------------------------


@pytest.mark.parametrize(
    ("folder_mode", "group"),
    [(0o1777, None), (0o777, None), (0o770, 65534)],
    ids=["sticky-like-tmp", "open-to-all", "a-group-of-others"],
)
def test_a_knowledge_base_in_a_folder_others_may_write_is_refused_at_every_open(
    tmp_path: Path, folder_mode: int, group: int | None
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    db = folder / "team.duckdb"
    hybridkb.connect(db, model="fake").close()  # made while the folder was the user's alone
    if group is not None:
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another group needs root")
        os.chown(folder, -1, group)
    folder.chmod(folder_mode)
    for read_only in (False, True):
        with pytest.raises(NotPrivate) as refused:
            hybridkb.connect(db, model="fake", read_only=read_only)
        said = str(refused.value)
        assert f"its folder {folder} can be written by" in said
        assert "move it into a folder only you can write" in said and "\n" not in said
    assert sorted(p.name for p in folder.iterdir()) == ["team.duckdb"]  # nothing made there


def test_a_knowledge_base_in_tmp_itself_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lead's example: ``--db /tmp/kb.duckdb``."""
    tmp = Path("/tmp")
    if not tmp.is_dir() or not mode(tmp) & 0o002:
        pytest.skip("no /tmp open to every user here")
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    db = tmp / f"hkb-{secrets.token_hex(8)}.duckdb"
    try:
        assert main(["--db", str(db), "create", "Docs"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "its folder /tmp can be written by every user" in err
        assert not db.exists()
    finally:
        db.unlink(missing_ok=True)


def test_a_link_to_a_knowledge_base_in_a_folder_others_may_write_is_refused(
    tmp_path: Path,
) -> None:
    """The folders hybridkb keeps go beside the real file: its folder counts too."""
    shared = tmp_path / "shared"
    shared.mkdir()
    hybridkb.connect(shared / "team.duckdb", model="fake").close()
    shared.chmod(0o1777)
    (tmp_path / "mine").mkdir()
    link = tmp_path / "mine" / "kb.duckdb"
    link.symlink_to(shared / "team.duckdb")
    with pytest.raises(NotPrivate, match=f"its folder {shared} can be written by every user"):
        hybridkb.connect(link, model="fake", read_only=True)


def test_a_folder_only_its_owner_may_write_is_fine(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o755)  # others may read and enter: their files say who may read
    folder.chmod(0o755)
    with hybridkb.connect(folder / "kb.duckdb", model="fake") as kb:
        kb.create_collection("Docs")


# -- the folders beside it -------------------------------------------------------------


@as_root
@pytest.mark.parametrize("suffix", [".hkbidx", ".hkbstage", ".tmp"])
def test_a_folder_another_user_left_beside_the_knowledge_base_is_refused(
    tmp_path: Path, suffix: str
) -> None:
    """Made by nobody before the folder was closed to them (or by nobody's own process
    in a folder of theirs): the snapshot in it decided what search returned, the parts
    in it were copied into the tables."""
    db = tmp_path / "team.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Docs").add_texts(["The launch code is swordfish."])
    planted = Path(f"{db}{suffix}")
    planted.mkdir(exist_ok=True)
    os.chown(planted, NOBODY, NOBODY)
    planted.chmod(0o777)
    for read_only in (False, True):
        with pytest.raises(NotPrivate) as refused:
            hybridkb.connect(db, model="fake", read_only=read_only)
        said = str(refused.value)
        assert f"{planted} belongs to another user (uid {NOBODY}" in said, said
    assert planted.stat().st_uid == NOBODY  # left for its owner (or root) to remove


def test_a_link_beside_the_knowledge_base_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    hybridkb.connect(db, model="fake").close()
    (tmp_path / "elsewhere").mkdir()
    Path(f"{db}.hkbidx").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(NotPrivate, match=r"kb\.duckdb\.hkbidx is a symbolic link"):
        hybridkb.connect(db, model="fake", read_only=True)


def test_folders_beside_are_made_private_and_an_older_open_one_is_kept_if_only_readable(
    tmp_path: Path,
) -> None:
    db = tmp_path / "kb.duckdb"
    big = tmp_path / "log.txt"
    big.write_text("line of a long log about the boiler\n" * 1000)
    old = os.umask(0)  # as careless as it gets: the folders are 0700 all the same
    try:
        done = subprocess.run(
            [sys.executable, "-c", STREAMED, "--db", str(db), "add", "Docs", str(big),
             "--create"],
            capture_output=True, text=True, env={**os.environ, "HYBRIDKB_MODEL": "fake"},
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        with hybridkb.connect(db, model="fake") as kb:  # builds the indexes, saves them
            assert kb.collection("Docs").search("boiler", mode="keyword")
    finally:
        os.umask(old)
    for suffix in (".hkbidx", ".hkbstage"):
        assert mode(Path(f"{db}{suffix}")) == 0o700, suffix
    # An older version made them with the umask (0755): others may read, not write.
    Path(f"{db}.hkbidx").chmod(0o755)
    with hybridkb.connect(db, model="fake", read_only=True) as kb:
        assert kb.collection("Docs").search("boiler", mode="keyword")
    Path(f"{db}.hkbidx").chmod(0o777)  # anyone could have put a snapshot in it
    with pytest.raises(NotPrivate, match=r"hkbidx is writable by other users.*chmod go-w"):
        hybridkb.connect(db, model="fake", read_only=True)


@as_root
def test_a_knowledge_base_of_another_user_is_read_with_its_owners_folders(
    tmp_path: Path,
) -> None:
    """Reading a colleague's knowledge base: its folders are theirs, as the file is."""
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o755)
    db = folder / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Docs").add_texts(["The boiler is serviced in May."])
        kb.collection("Docs").search("boiler")
    for path in (folder, db, Path(f"{db}.hkbidx"), *Path(f"{db}.hkbidx").iterdir()):
        os.chown(path, NOBODY, NOBODY)
    with hybridkb.connect(db, model="fake", read_only=True) as kb:
        assert kb.collection("Docs").search("boiler", mode="keyword")


# -- where DuckDB spills ---------------------------------------------------------------


def test_duckdb_spills_into_a_private_folder_beside_the_file(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    spill = Path(f"{db}.tmp")
    old = os.umask(0)
    try:
        for read_only in (False, True):
            with hybridkb.connect(db, model="fake", read_only=read_only) as kb:
                con = duckdb_storage(kb).engine.con
                row = con.execute("SELECT current_setting('temp_directory')").fetchone()
                assert row is not None and row[0] == str(spill)
                # There, ours and 0700, before DuckDB spills a page into it.
                assert spill.is_dir() and not spill.is_symlink() and mode(spill) == 0o700
                assert spill.stat().st_uid == os.getuid()
            assert not spill.exists()  # removed at close (it was empty)
    finally:
        os.umask(old)


def test_an_in_memory_database_spills_into_a_private_folder_not_the_working_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # DuckDB spilled into ./.tmp (an MCP host's server: /)
    with hybridkb.connect(":memory:", model="fake") as kb:
        con = duckdb_storage(kb).engine.con
        row = con.execute("SELECT current_setting('temp_directory')").fetchone()
        assert row is not None
        spill = Path(row[0])
        assert spill.is_absolute() and spill.is_dir() and mode(spill) == 0o700
        assert tmp_path not in spill.parents
    assert not spill.exists()
    assert not (tmp_path / ".tmp").exists()


# -- an owner beside it, and full disks ------------------------------------------------


PUBLISH_FAILS = """
import subprocess, sys, threading
from pathlib import Path
import hybridkb
from hybridkb.errors import ConfigError
db = sys.argv[1]
Path(db + ".hkbowner").mkdir()  # where the endpoint goes: renaming a file over it fails
try:
    hybridkb.connect(db, model="fake", serve=True)
except ConfigError as exc:
    print(exc)
else:
    sys.exit("opened")
left = [t.name for t in threading.enumerate() if t.name.startswith("hybridkb-owner")]
assert not left, left
probe = "import duckdb, sys; duckdb.connect(sys.argv[1]).close()"  # the file is free
subprocess.run([sys.executable, "-c", probe, db], check=True, timeout=300)
"""


def test_an_owner_that_cannot_publish_leaves_nothing_running(tmp_path: Path) -> None:
    """The owner started its accept thread and bound its socket before it wrote its
    endpoint, and ``connect`` did not close the knowledge base when serving failed: an
    owner that could not publish left its listener running, its socket file behind and
    the file held by a knowledge base nobody could close."""
    db = tmp_path / "team.duckdb"
    hybridkb.connect(db, model="fake").close()
    # The runtime folder of the child alone, under the temporary folder itself: a socket
    # path has a 107-byte limit that a test's own folder (pytest-NNN/popen-gwN/...) can
    # pass, and the owner then fails to bind before it could fail to publish.
    run = Path(tempfile.mkdtemp(prefix="hkb-run-"))
    try:
        done = subprocess.run(
            [sys.executable, "-c", PUBLISH_FAILS, str(db)], capture_output=True, text=True,
            env={**os.environ, "XDG_RUNTIME_DIR": str(run)}, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr[-2000:]
        assert f"{db}.hkbowner" in done.stdout and "cannot publish" in done.stdout
        assert [p.name for p in run.rglob("*") if p.is_socket()] == []  # no socket left
    finally:
        shutil.rmtree(run, ignore_errors=True)


FULL_DISK_ADD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # as a full disk: no byte more written
from hybridkb.cli.commands import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_writer_on_a_full_disk_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    db = tmp_path / "kb.duckdb"
    hybridkb.connect(db).close()
    note = tmp_path / "note.txt"
    note.write_text("The boiler is serviced in May.")
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK_ADD, "--db", str(db), "add", "Docs", str(note),
         "--create"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode in (1, 2), done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-2000:]
