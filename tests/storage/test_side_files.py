"""Files hybridkb makes beside a DuckDB file from it (a compacted copy, a migrated copy,
the probe of a file killed while it was created) are never written through a link or
into a file another local user left under their name.

The attack: another user who may write in the folder of ``--db`` plants a symbolic link
at the name the side file will take, between hybridkb clearing a leftover there and
creating it (``plant_after_removal`` wins that race every time). Followed, the link
would put a copy of the knowledge base into the attacker's file, overwrite a file of
the victim's, or (a compacted copy renamed over the file) leave the knowledge base
itself a link into the attacker's folder. Holding the name can still make the operation
fail (one line; the file unchanged): nothing can stop a user who may write in the folder
from taking a name in it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from internals import plant_after_removal
from schemagen import old_schema_file, stored_version

import hybridkb
from hybridkb.errors import BackendError
from hybridkb.storage.duckdb.schema import MIGRATIONS

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

TEXTS = ["lemurs live on Madagascar", "otters hold hands while sleeping"]
MINE = b"a file of the victim's that nothing may overwrite"


def _kb(db: Path) -> Path:
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add_texts(TEXTS, ids=["a", "b"])
    return db


def _trap(tmp_path: Path) -> tuple[Path, Path]:
    """A file of the victim's, and a name in a folder of the attacker's."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(MINE)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    return victim, theirs / "loot.duckdb"


def _untouched(db: Path, victim: Path, loot: Path) -> None:
    assert victim.read_bytes() == MINE
    assert not loot.exists() and not Path(f"{loot}.wal").exists()
    assert db.is_file() and not db.is_symlink()
    with hybridkb.connect(db, model="fake", read_only=True) as kb:
        assert kb["Notes"].count() == 2


@pytest.mark.parametrize("target", ["victim", "loot"])
def test_compact_writes_no_copy_through_a_planted_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    db = _kb(tmp_path / "kb.duckdb")
    victim, loot = _trap(tmp_path)
    plant_after_removal(".compact", victim if target == "victim" else loot, monkeypatch)
    with hybridkb.connect(db, model="fake") as kb:
        kb["Notes"].delete(["a"])
        kb["Notes"].add_texts([TEXTS[0]], ids=["a"])
        with pytest.raises(BackendError, match=r"compaction failed .*kb\.duckdb\.compact"):
            kb.compact()  # the name is held: refused, the file unchanged
        monkeypatch.undo()
        kb.compact()  # the attacker gone, a compact removes their link and works
    _untouched(db, victim, loot)


def test_a_migration_writes_no_copy_through_a_planted_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _kb(tmp_path / "kb.duckdb")
    old_schema_file(db, 3)
    victim, loot = _trap(tmp_path)
    plant_after_removal(".migrating", loot, monkeypatch)
    with pytest.raises(BackendError, match=r"cannot bring .* schema 3 to .*kb\.duckdb\.migrating"):
        hybridkb.connect(db, model="fake")
    monkeypatch.undo()
    assert stored_version(db) == 3
    _untouched(db, victim, loot)
    with hybridkb.connect(db, model="fake") as kb:
        assert kb["Notes"].count() == 2
    assert stored_version(db) == len(MIGRATIONS)
    assert not Path(f"{db}.migrating").exists()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_the_probe_of_a_file_killed_while_created_writes_through_no_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "kb.duckdb"
    killed = (
        "import sys; from internals import die_in_migration; die_in_migration(5);"
        " import hybridkb; hybridkb.connect(sys.argv[1], model='fake').close()"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "HYBRIDKB_SERVE": "false"}
    done = subprocess.run([sys.executable, "-c", killed, str(db)], env=env, check=False)
    assert done.returncode == -signal.SIGKILL
    assert Path(f"{db}.wal").exists()  # a log the next writer cannot replay: it probes
    victim, loot = _trap(tmp_path)
    plant_after_removal(".probe", victim, monkeypatch)
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add_texts(TEXTS, ids=["a", "b"])
    monkeypatch.undo()
    _untouched(db, victim, loot)
    assert not [p.name for p in tmp_path.iterdir() if ".probe" in p.name]


@pytest.mark.parametrize("left", ["link to a folder", "older copy", "folder"])
def test_compact_clears_what_is_left_at_its_name_without_following_links(
    tmp_path: Path, left: str
) -> None:
    db = _kb(tmp_path / "kb.duckdb")
    victim, loot = _trap(tmp_path)
    side = tmp_path / "kb.duckdb.compact"
    if left == "link to a folder":
        side.symlink_to(loot.parent, target_is_directory=True)
    elif left == "older copy":  # what an older hybridkb's killed compact left
        side.write_bytes(b"half a copy")
        Path(f"{side}.wal").write_bytes(b"its log")
    else:  # this version's, killed
        side.mkdir()
        (side / "copy.duckdb").write_bytes(b"half a copy")
    with hybridkb.connect(db, model="fake") as kb:
        kb.compact()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("kb")) == [
        "kb.duckdb",
        "kb.duckdb.hkbidx",
    ]
    assert sorted(p.name for p in loot.parent.iterdir()) == []
    _untouched(db, victim, loot)
