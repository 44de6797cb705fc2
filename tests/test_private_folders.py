"""Private folders are checked, not assumed (issue 32, item 2).

With ``XDG_DATA_HOME`` or ``XDG_CACHE_HOME`` on a folder other users can write, another
user could make ``.../hybridkb`` first and then read or replace what hybridkb keeps there.
Every folder hybridkb makes or trusts passes one rule (owned by this user, not a link, no
write for others, no read either for the data folder), or is refused in one line naming
the folder and the fix; the files hybridkb makes there are 0600.

"Another user" is simulated by ownership: tests run as root in CI, so a folder is given to
uid 65534 (nobody), or made by a child process running as nobody.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from other_users import NOBODY, as_root, made_by_nobody, shared_folder

import hybridkb
from hybridkb.cli.commands import main
from hybridkb.embedders.cache import CACHE_FILE, EmbeddingCache
from hybridkb.errors import NotPrivate
from hybridkb.locations import user_data_folder
from hybridkb.private_files import folder_problem


@pytest.fixture(autouse=True)
def fake_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, whatever the test runner's is; restored after."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user may write to (mode 1777, like /tmp): where a container or a CI
    runner may point XDG_DATA_HOME or XDG_CACHE_HOME."""
    with shared_folder() as folder:
        yield folder


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# -- the data folder ---------------------------------------------------------------------


@as_root
@pytest.mark.process  # the other user is a forked child (made_by_nobody)
def test_a_data_folder_another_user_made_first_is_refused(
    shared: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(shared / "data"))
    folder = user_data_folder()
    made_by_nobody(folder)
    assert main(["create", "Notes"]) == 2
    err = one_line_error(capsys)
    assert str(folder) in err and "belongs to another user" in err and "--db" in err
    with pytest.raises(NotPrivate, match="belongs to another user"):
        hybridkb.connect()
    assert list(folder.iterdir()) == []  # nothing of ours was put in it


@pytest.mark.parametrize(
    ("folder_mode", "group", "problem"),
    [
        (0o755, None, "readable by other users (mode 0755)"),
        (0o770, NOBODY, "writable by other users (mode 0770)"),  # a group others are in
        (0o701, None, "can be entered by other users (mode 0701)"),
    ],
)
def test_a_data_folder_others_may_read_is_refused_with_the_chmod(
    capsys: pytest.CaptureFixture[str], folder_mode: int, group: int | None, problem: str
) -> None:
    if group is not None and os.geteuid() != 0:
        pytest.skip("gives the folder to another group")
    folder = user_data_folder()
    folder.mkdir(parents=True)
    folder.chmod(folder_mode)
    if group is not None:
        os.chown(folder, -1, group)
    assert main(["create", "Notes"]) == 2
    err = one_line_error(capsys)
    assert (
        f"{folder} {'' if problem.startswith('can') else 'is '}{problem}; run: chmod 700 {folder}"
        in err
    )
    folder.chmod(0o700)
    assert main(["create", "Notes"]) == 0  # the fix it names works


def test_a_data_folder_that_is_a_link_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    folder = user_data_folder()
    folder.parent.mkdir(parents=True)
    folder.symlink_to(elsewhere, target_is_directory=True)
    assert main(["create", "Notes"]) == 2
    assert f"{folder} is a symbolic link" in one_line_error(capsys)
    assert list(elsewhere.iterdir()) == []


def test_the_default_knowledge_base_and_its_wal_are_0600(umask_022: None) -> None:
    with hybridkb.connect() as kb:
        kb.create_collection("Notes").add_texts(["The boiler is serviced in May."])
        db = Path(str(kb.settings.db))
        wal = db.with_name(db.name + ".wal")
        assert wal.exists()  # written since the last checkpoint
        assert mode(db) == 0o600 and mode(wal) == 0o600
    assert os.umask(0o022) == 0o022  # the process's umask is back as it was


def test_an_older_open_default_file_is_made_0600(umask_022: None) -> None:
    folder = user_data_folder()
    folder.mkdir(parents=True, mode=0o700)
    db = folder / "hybridkb.duckdb"
    with hybridkb.connect(db) as kb:  # as named: the rule for a user's own file
        kb.create_collection("Notes")
    db.chmod(0o644)  # what DuckDB made before
    with hybridkb.connect() as kb:
        assert kb.collection_names() == ["Notes"]
    assert mode(db) == 0o600


def test_a_named_file_follows_the_umask_and_never_opens_up(tmp_path: Path, umask_022: None) -> None:
    """A --db the user names: a new file gets what their umask gives; the files DuckDB adds
    beside an existing one (the WAL, a compacted copy) are never more open than it is."""
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db) as kb:
        kb.create_collection("Notes")
    assert mode(db) == 0o644
    db.chmod(0o600)
    with hybridkb.connect(db) as kb:
        kb.collection("Notes").add_texts(["The boiler is serviced in May."])
        assert mode(db.with_name(db.name + ".wal")) == 0o600
        kb.compact()  # a new file, renamed over the old one
        assert mode(db) == 0o600
        kb.collection("Notes").add_texts(["The roof was fixed in June."])
        assert mode(db.with_name(db.name + ".wal")) == 0o600


# -- the cache folder ----------------------------------------------------------------------


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of the test's own (conftest's is shared with other tests)."""
    cache = tmp_path / "xdg-cache" / "hybridkb"
    monkeypatch.setenv("HYBRIDKB_CACHE_DIR", str(cache))
    return cache


@as_root
@pytest.mark.process  # the other user is a forked child (made_by_nobody)
def test_a_cache_folder_another_user_made_first_is_refused(
    shared: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    own_cache = shared / "cache" / "hybridkb"
    monkeypatch.setenv("HYBRIDKB_CACHE_DIR", str(own_cache))
    made_by_nobody(own_cache)
    (tmp_path / "note.txt").write_text("The boiler is serviced in May.")
    db = tmp_path / "kb.duckdb"
    assert main(["--db", str(db), "add", "Notes", str(tmp_path / "note.txt"), "--create"]) == 2
    err = one_line_error(capsys)
    assert f"{own_cache} belongs to another user" in err and "HYBRIDKB_CACHE_DIR" in err
    assert not (own_cache / CACHE_FILE).exists()
    assert main(["cache"]) == 2
    assert f"{own_cache} belongs to another user" in one_line_error(capsys)
    assert main(["cache", "clear"]) == 2  # nothing removed in someone else's folder
    assert f"{own_cache} belongs to another user" in one_line_error(capsys)


def test_a_cache_folder_others_may_write_is_refused(own_cache: Path, tmp_path: Path) -> None:
    own_cache.mkdir(parents=True)
    own_cache.chmod(0o777)
    with pytest.raises(NotPrivate, match=f"writable by other users.*chmod go-w {own_cache}"):
        EmbeddingCache(own_cache)
    own_cache.chmod(0o755)  # others may read a cache (its files are 0600): accepted
    EmbeddingCache(own_cache)


def test_the_embedding_cache_files_are_0600(own_cache: Path, umask_022: None) -> None:
    from hybridkb.embedders import get_embedder
    from hybridkb.embedders.cache import embed_with_cache

    cache = EmbeddingCache(own_cache)
    embed_with_cache(get_embedder("fake"), ["alpha", "beta"], cache)
    files = [p for p in own_cache.iterdir() if p.name.startswith(CACHE_FILE)]
    assert {p.name for p in files} >= {CACHE_FILE, f"{CACHE_FILE}-wal"}
    assert {p.name: mode(p) for p in files} == dict.fromkeys((p.name for p in files), 0o600)
    assert mode(own_cache) == 0o700


def test_a_linked_embedding_cache_file_is_refused(own_cache: Path, tmp_path: Path) -> None:
    own_cache.mkdir(parents=True, mode=0o700)
    (tmp_path / "planted").write_bytes(b"")
    (own_cache / CACHE_FILE).symlink_to(tmp_path / "planted")
    with pytest.raises(NotPrivate, match=f"{CACHE_FILE}: not a file of this user's"):
        EmbeddingCache(own_cache)


def test_the_rule_judges_each_folder_the_same_way(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    assert folder_problem(folder, secret=True) == "does not exist"
    folder.mkdir(mode=0o700)
    assert folder_problem(folder, secret=True) is None
    folder.chmod(0o711)  # others may pass through: a data folder's files could be opened
    assert folder_problem(folder, secret=True) == "can be entered by other users (mode 0711)"
    assert folder_problem(folder, secret=False) is None
    link = tmp_path / "link"
    link.symlink_to(folder)
    assert folder_problem(link, secret=False) == "is a symbolic link"
    assert folder_problem(link, secret=False, follow=True) is None
