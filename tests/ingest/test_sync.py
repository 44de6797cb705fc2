"""Collections that follow their folders: sources, sync (real files in tmp_path)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from internals import put_source, sources_of

import hybridkb
from hybridkb.cli.commands import main
from hybridkb.embedders.base import FakeEmbedder
from hybridkb.errors import ConfigError
from hybridkb.ingest import pipeline as ingest
from hybridkb.ingest import sync
from hybridkb.storage.base import document_node_id
from hybridkb.text import files

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)


class CountingEmbedder(FakeEmbedder):
    """The fake embedder, counting the texts it embeds (or refusing to embed at all)."""

    def __init__(self, *, refuse: bool = False) -> None:
        super().__init__()
        self.texts = 0
        self.refuse = refuse

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if self.refuse:
            raise AssertionError("the model was used")
        self.texts += len(texts)
        return super().embed_documents(texts)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def touch_later(path: Path) -> None:
    """Move the file's mtime on (a rewrite within the clock's tick may keep it)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "Tax"
    write(docs / "invoice.md", "# Invoice\n\nThe plumber charged forty euros for the sink.")
    write(docs / "notes.txt", "Depreciation of the orchard tractor over seven years.")
    write(docs / "sub" / "draft.md", "# Draft\n\nLast year's draft about the pelican permit.")
    return docs


def files_of(coll: hybridkb.Collection) -> set[str]:
    return {d.filename or "" for d in coll.documents(limit=1000)}


def found(coll: hybridkb.Collection, query: str) -> set[str]:
    return {h.filename or "" for h in coll.search(query, mode="keyword", k=10)}


def test_add_remembers_sources_and_describe_lists_them(
    kb: hybridkb.KnowledgeBase, folder: Path
) -> None:
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    single = write(folder.parent / "loose.txt", "A loose receipt for the pelican feed.")
    coll.add(single)
    sources = coll.describe().sources
    assert [s["path"] for s in sources] == sorted([str(folder.resolve()), str(single.resolve())])
    assert all(s["recursive"] for s in sources)


def test_unchanged_folder_is_a_stat_walk(
    kb: hybridkb.KnowledgeBase, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb.create_collection("Tax Documents").add(folder)
    refusing = CountingEmbedder(refuse=True)
    opened: list[Path] = []
    real_open = files.open_file

    def counting_open(path: str | Path, **kw: Any) -> files.OpenedFile:
        opened.append(Path(path))
        return real_open(path, **kw)

    for module in (files, ingest, sync):
        monkeypatch.setattr(module, "open_file", counting_open)
    report = kb.with_embedder(refusing).collection("Tax Documents").sync()
    assert report.counts()["unchanged"] == 3 and not report.changed and report.ok
    assert opened == []


def test_sync_adds_updates_removes_and_moves(kb: hybridkb.KnowledgeBase, folder: Path) -> None:
    counting = CountingEmbedder()
    kb = kb.with_embedder(counting)
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    cid = coll.record.id
    assert all(kb.graph.has_node(document_node_id(cid, d.document_id)) for d in coll.documents())
    write(folder / "new.md", "# New\n\nA fresh invoice for the walrus sanctuary.")
    write(folder / "notes.txt", "Depreciation of the orchard tractor over nine years, revised.")
    touch_later(folder / "notes.txt")
    (folder / "sub" / "draft.md").unlink()
    (folder / "invoice.md").rename(folder / "sub" / "invoice-2025.md")
    before = counting.texts

    report = coll.sync()

    assert [f.filename for f in report.added] == ["new.md"]
    assert [f.filename for f in report.updated] == ["notes.txt"]
    assert [f.filename for f in report.removed] == ["draft.md"]
    assert [(m.filename, os.path.basename(m.previous_path or "")) for m in report.moved] == [
        ("invoice-2025.md", "invoice.md")
    ]
    assert files_of(coll) == {"new.md", "notes.txt", "invoice-2025.md"}
    assert found(coll, "pelican") == set()  # the deleted draft no longer answers
    assert found(coll, "plumber") == {"invoice-2025.md"}  # under its new name
    assert found(coll, "nine") == {"notes.txt"}
    # Only the new and the changed file were embedded; the renamed one reused its vectors.
    new_chunks = sum(f.chunks for f in report.added + report.updated)
    assert counting.texts - before == new_chunks
    # The graph follows: the removed file's document node is gone, the renamed one's is there.
    assert not kb.graph.has_node(document_node_id(cid, report.removed[0].document_id))
    assert not kb.graph.has_node(document_node_id(cid, report.moved[0].previous_id))
    assert kb.graph.has_node(document_node_id(cid, report.moved[0].document_id))
    moved = coll.get(report.moved[0].document_id)
    assert moved is not None and moved.path == str((folder / "sub" / "invoice-2025.md").resolve())
    assert coll.document_text(moved.document_id) is not None
    # And now it is all unchanged.
    again = coll.sync()
    assert not again.changed and again.counts()["unchanged"] == 3


def test_same_content_new_mtime_only_records_the_time(
    kb: hybridkb.KnowledgeBase, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    touch_later(folder / "notes.txt")
    report = kb.with_embedder(CountingEmbedder(refuse=True)).collection("Tax Documents").sync()
    assert [f.filename for f in report.unchanged if f.filename == "notes.txt"] == ["notes.txt"]
    assert not report.changed
    # The new time was recorded: the next sync opens nothing.
    opened: list[Path] = []
    real_open = files.open_file  # what ingest.py calls

    def counted(p: Path, **kw: Any) -> files.OpenedFile:
        opened.append(p)
        return real_open(p, **kw)

    monkeypatch.setattr(ingest, "open_file", counted)
    coll.sync()
    assert opened == []


def test_dry_run_reports_and_changes_nothing(kb: hybridkb.KnowledgeBase, folder: Path) -> None:
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    (folder / "notes.txt").unlink()
    write(folder / "new.md", "Something new about otters.")
    report = coll.sync(dry_run=True)
    assert report.dry_run
    assert [f.filename for f in report.removed] == ["notes.txt"]
    assert [f.filename for f in report.added] == ["new.md"]
    assert files_of(coll) == {"invoice.md", "notes.txt", "draft.md"}


def test_a_file_that_fails_keeps_its_previous_version(
    kb: hybridkb.KnowledgeBase, folder: Path
) -> None:
    coll = kb.create_collection("Tax Documents")
    write(folder / "sheet.csv", "name,amount\nplumber,40\n")
    coll.add(folder)
    (folder / "sheet.csv").write_bytes(b"\xff\xfe\x00bad\x00" * 10 + b"\x00" * 100)
    (folder / "notes.txt").write_bytes(b"")  # empty: nothing to add
    touch_later(folder / "notes.txt")
    report = coll.sync()
    assert "notes.txt" in {f.filename for f in report.failed}
    assert found(coll, "tractor") == {"notes.txt"}  # the old version still answers
    assert coll.sync().failed  # and it is tried again until a good version arrives
    write(folder / "notes.txt", "A good version about the combine harvester.")
    touch_later(folder / "notes.txt")
    assert [f.filename for f in coll.sync().updated] == ["notes.txt"]
    assert found(coll, "harvester") == {"notes.txt"}


def test_unreadable_folder_keeps_its_documents(
    kb: hybridkb.KnowledgeBase, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    (folder / "sub").chmod(0)
    if os.access(folder / "sub", os.R_OK):  # root reads any folder: refuse it the listing
        real_scandir = os.scandir
        locked = str((folder / "sub").resolve())

        def scandir(path: Any) -> Any:
            # The walk lists folders through descriptors: name the one it was given.
            named = os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else str(path)
            if named == locked:
                raise PermissionError(13, "Permission denied", named)
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
    try:
        report = coll.sync()
    finally:
        (folder / "sub").chmod(0o755)
    assert not report.removed and [f.filename for f in report.failed] == ["sub"]
    assert "draft.md" in files_of(coll)


def test_a_missing_source_keeps_its_documents_until_it_is_removed(
    kb: hybridkb.KnowledgeBase, folder: Path, tmp_path: Path
) -> None:
    # A drive unmounted, a share gone: the source's folder is not there (issue 32 item 6).
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    away = folder.rename(tmp_path / "unmounted")
    report = coll.sync()
    assert not report.removed and coll.count() == 3
    assert [f.filename for f in report.failed] == ["Tax"]
    assert "missing" in report.failed[0].error and "--remove" in report.failed[0].error
    assert [s["state"] for s in coll.sources()] == ["missing"]
    assert coll.describe().sources[0]["state"] == "missing"
    away.rename(folder)  # mounted again: in step, nothing to read
    assert coll.sync().counts()["unchanged"] == 3
    assert [s["state"] for s in coll.sources()] == ["ok"]
    away = folder.rename(tmp_path / "unmounted")
    assert len(coll.remove_source(folder).deleted) == 3  # only this removes them
    assert coll.count() == 0


def test_a_mount_point_that_shows_an_empty_folder_keeps_its_documents(
    kb: hybridkb.KnowledgeBase, folder: Path, tmp_path: Path
) -> None:
    """A followed folder that was a mount point (a drive, a share) shows the empty folder
    below it once unmounted: not a folder whose files were all deleted. The devices are
    recorded at add time; a root on its parent's device now that was not then is missing."""
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    (source,) = sources_of(kb, "Tax Documents")
    assert (source.device, source.parent_device) == (folder.stat().st_dev, tmp_path.stat().st_dev)
    assert not source.mount_point  # a plain folder here: as recorded for a mount point, below
    put_source(kb, "Tax Documents", replace(source, device=tmp_path.stat().st_dev + 1))
    for file in [p for p in folder.rglob("*") if p.is_file()]:
        file.unlink()  # what shows below a mount point: here, nothing
    report = coll.sync()
    assert not report.removed and coll.count() == 3
    assert [f.filename for f in report.failed] == ["Tax"]
    assert "no longer mounted" in report.failed[0].error and "--remove" in report.failed[0].error
    assert [s["state"] for s in coll.sources()] == ["missing"]
    put_source(kb, "Tax Documents", source)  # as added: a plain folder, emptied
    assert len(coll.sync().removed) == 3


def test_a_real_mount_point_unmounted_keeps_its_documents(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    drive = tmp_path / "Drive"
    drive.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(drive)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root (and a kernel that lets this process)")
    try:
        write(drive / "invoice.md", "# Invoice\n\nThe plumber charged forty euros for the sink.")
        coll = kb.create_collection("Drive")
        coll.add(drive)
        assert sources_of(kb, "Drive")[0].mount_point
    finally:
        subprocess.run(["umount", str(drive)], check=True)
    report = coll.sync()
    assert not report.removed and coll.count() == 1
    assert [s["state"] for s in coll.sources()] == ["missing"]


CLI = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    """``hybridkb --db tmp_path/kb.duckdb ARGS...`` in this process: (exit code, out, err)."""
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    db = str(tmp_path / "kb.duckdb")

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--db", db, *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_cli_says_a_source_is_missing_and_keeps_its_documents(
    kb: hybridkb.KnowledgeBase, folder: Path, tmp_path: Path, cli: CLI
) -> None:
    kb.create_collection("Tax Documents").add(folder)
    kb.close()
    folder.rename(tmp_path / "unmounted")
    code, out, _ = cli("sync")
    assert code == 1 and "missing" in out and "removed" not in out, out  # not synced
    for command in ("sources", "describe"):
        code, out, _ = cli(command, "Tax Documents")
        assert code == 0 and "missing; its documents stay" in out, out
    described = json.loads(cli("describe", "Tax Documents", "--json")[1])
    assert described["documents"] == 3 and described["sources"][0]["state"] == "missing"


def test_a_source_swapped_for_a_link_is_not_walked_through(
    kb: hybridkb.KnowledgeBase, folder: Path, tmp_path: Path
) -> None:
    from hybridkb.agents.tools import make_tools

    outside = write(tmp_path / "outside" / "secret.md", "The password is swordfish.")
    write(outside.parent / "private.txt", "Another user's diary.")
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    folder.rename(tmp_path / "moved-away")
    folder.symlink_to(outside.parent, target_is_directory=True)
    tools = {t.name: t for t in make_tools(kb, allowed_paths=[tmp_path])}
    text = tools["sync_kb_collection"].invoke({"collection_name": "Tax Documents"})
    assert "secret.md" not in text and "private.txt" not in text, text
    assert "removed" not in text and "failed 1" in text, text
    report = coll.sync()
    assert not report.removed and not report.added and coll.count() == 3
    assert [(f.filename, f.code) for f in report.failed] == [("Tax", "access_denied")]
    assert found(coll, "swordfish") == set()
    assert [s["state"] for s in coll.sources()] == ["replaced"]
    # A folder above the source replaced by a link: the same.
    folder.unlink()
    (tmp_path / "moved-away").rename(folder)
    parent = tmp_path / "deep"
    (parent / "inner").mkdir(parents=True)
    inner = write(parent / "inner" / "a.md", "Herons at the inner pond.").parent
    coll.add(inner)
    parent.rename(tmp_path / "deep-away")
    parent.symlink_to(outside.parent.parent, target_is_directory=True)
    (outside.parent.parent / "inner").mkdir()
    write(outside.parent.parent / "inner" / "b.md", "Someone else's notes.")
    report = coll.sync()
    assert not report.removed and not report.added, report.to_dict()
    assert [f.code for f in report.failed] == ["access_denied"]
    # Removing it still works by the path it was added by (it resolves elsewhere now).
    assert len(coll.remove_source(inner).deleted) == 1 and coll.count() == 3


def test_a_folder_swapped_for_a_link_while_being_walked_is_not_followed(
    kb: hybridkb.KnowledgeBase, folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk lists the source and finds the folder "sub"; as it comes to list "sub",
    # another user swaps it for a link to elsewhere. Opened beneath the source without
    # following links, it is never listed through the link.
    outside = write(tmp_path / "outside" / "secret.md", "The password is swordfish.").parent
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    real_scandir = os.scandir
    calls: list[Any] = []

    def scandir(path: Any) -> Any:
        calls.append(path)
        if len(calls) == 2:  # the source was listed; "sub" is next
            (folder / "sub").rename(tmp_path / "sub-away")
            (folder / "sub").symlink_to(outside, target_is_directory=True)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    report = coll.sync()
    assert len(calls) >= 2
    assert "secret.md" not in json.dumps(report.to_dict()), report.to_dict()
    assert found(coll, "swordfish") == set()
    assert "draft.md" in files_of(coll)  # not taken as gone either


def test_symlink_out_of_the_folder_is_not_followed(
    kb: hybridkb.KnowledgeBase, folder: Path, tmp_path: Path
) -> None:
    outside = write(tmp_path / "secret" / "key.txt", "The password is swordfish.")
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    (folder / "link.txt").symlink_to(outside)
    (folder / "linkdir").symlink_to(outside.parent, target_is_directory=True)
    report = coll.sync()
    assert not report.added
    assert {f.code for f in report.failed} == {"access_denied"}
    assert found(coll, "swordfish") == set()


def test_sync_stays_inside_allowed_folders(
    kb: hybridkb.KnowledgeBase, folder: Path, tmp_path: Path
) -> None:
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    write(folder / "new.md", "Otters in the new file.")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = coll.sync(allowed_paths=[elsewhere])
    assert not report.added and [f.code for f in report.failed] == ["access_denied"]
    assert coll.count() == 3  # nothing removed either


def test_remove_source_removes_its_documents(
    kb: hybridkb.KnowledgeBase, folder: Path, tmp_path: Path
) -> None:
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    other = write(tmp_path / "other" / "x.md", "Kept: the llama invoice.")
    coll.add(other.parent)
    report = coll.remove_source(folder)
    assert len(report.deleted) == 3
    assert files_of(coll) == {"x.md"}
    assert [s["path"] for s in coll.describe().sources] == [str(other.parent.resolve())]
    with pytest.raises(ConfigError, match="not a source"):
        coll.remove_source(folder)
    assert not coll.sync().changed  # the removed folder is not walked again


def test_cli_sync_and_sources(
    kb: hybridkb.KnowledgeBase, folder: Path, tmp_path: Path, cli: CLI
) -> None:
    kb.create_collection("Tax Documents").add(folder)
    kb.close()
    (folder / "notes.txt").unlink()
    run = cli

    code, out, _ = run("sync", "Tax Documents", "--dry-run", "--json")
    assert code == 0 and json.loads(out)[0]["counts"]["removed"] == 1
    code, out, _ = run("sync", "--json")
    assert code == 0 and json.loads(out)[0]["counts"]["removed"] == 1
    code, out, _ = run("sync")
    assert code == 0 and "2 unchanged" in out
    code, out, _ = run("sources", "Tax Documents")
    assert code == 0 and str(folder.resolve()) in out
    code, out, _ = run("describe", "Tax Documents", "--json")
    assert json.loads(out)["sources"][0]["path"] == str(folder.resolve())
    code, out, _ = run("sources", "Tax Documents", "--remove", str(folder))
    assert code == 0 and "2 documents" in out
    code, out, err = run("sources", "Tax Documents", "--remove", str(folder))
    assert code == 2 and "not a source" in err and "Traceback" not in err
    for command in ("sync", "sources"):
        assert run(command, "--help")[0] == 0


def test_agent_tool_syncs_inside_the_allowed_folders(
    kb: hybridkb.KnowledgeBase, folder: Path, tmp_path: Path
) -> None:
    from hybridkb.agents.tools import make_tools

    tools = {t.name: t for t in make_tools(kb, allowed_paths=[tmp_path])}
    kb.create_collection("Tax Documents").add(folder)
    (folder / "notes.txt").unlink()
    (folder / "new.md").write_text("Otters file their taxes late.", "utf-8")
    text = tools["sync_kb_collection"].invoke({"collection_name": "tax documents"})
    assert "'Tax Documents' in step with its folders: added 1, removed 1, unchanged 2" in text
    assert "- removed notes.txt" in text
    again = tools["sync_kb_collection"].invoke({"collection_name": ""})
    assert "unchanged 3" in again
    narrow = {t.name: t for t in make_tools(kb, allowed_paths=[tmp_path / "elsewhere"])}
    refused = narrow["sync_kb_collection"].invoke({"collection_name": "Tax Documents"})
    assert "failed 1" in refused and "outside the folders" in refused
    assert kb.collection("Tax Documents").count() == 3


def test_sync_of_some_paths_looks_only_there(kb: hybridkb.KnowledgeBase, folder: Path) -> None:
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    (folder / "notes.txt").unlink()  # outside the paths given: not looked at
    write(folder / "new.md", "Otters in the new file.")
    (folder / "sub" / "draft.md").rename(folder / "draft-moved.md")
    write(folder / ".hidden" / "x.md", "Hidden otters.")
    scope = [str(folder.resolve() / n) for n in ("new.md", "sub", "draft-moved.md", ".hidden")]
    report = coll.sync(paths=scope)
    c = report.counts()
    assert (c["added"], c["moved"], c["removed"]) == (1, 1, 0), c
    assert "notes.txt" in files_of(coll)
    # A path holding the whole source (its parent: the folder was deleted) walks it all.
    assert [f.filename for f in coll.sync(paths=[str(folder.parent.resolve())]).removed] == [
        "notes.txt"
    ]


class Killed(BaseException):
    """Stands for the process dying mid-sync (not an error anything would catch)."""


@pytest.mark.parametrize("step", ["put_documents", "delete_documents", "put_file_states"])
def test_a_sync_killed_midway_converges_on_the_next(
    kb: hybridkb.KnowledgeBase, folder: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    coll = kb.create_collection("Tax Documents")
    coll.add(folder)
    (folder / "invoice.md").rename(folder / "invoice-renamed.md")
    (folder / "notes.txt").unlink()
    write(folder / "new.md", "Otters in the new file.")
    real = getattr(kb.storage, step)

    def die(*args: Any, **kw: Any) -> Any:
        raise Killed

    monkeypatch.setattr(kb.storage, step, die)
    with pytest.raises(Killed):
        coll.sync()
    monkeypatch.setattr(kb.storage, step, real)
    coll.sync()
    assert files_of(coll) == {"invoice-renamed.md", "draft.md", "new.md"}
    assert coll.count() == 3 and found(coll, "plumber") == {"invoice-renamed.md"}
    assert not coll.sync().changed


def test_a_file_of_the_previous_schema_describes_read_only(tmp_path: Path, folder: Path) -> None:
    import duckdb

    from hybridkb.storage.duckdb.schema import FILE_STATES, SOURCES

    before_sources = 5  # migration 6 made the sources' tables

    db = tmp_path / "old.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Old").add(folder)
    con = duckdb.connect(str(db))  # back to the schema before the sources' migration
    con.execute(f"DROP TABLE {SOURCES}")
    con.execute(f"DROP TABLE {FILE_STATES}")
    con.execute(
        "UPDATE hybridkb_meta SET value = ? WHERE key = 'schema_version'",
        [str(before_sources)],
    )
    con.close()
    with hybridkb.connect(db, model="fake", read_only=True) as ro:
        assert ro.describe("Old").sources == [] and ro.describe("Old").documents == 3
        assert not ro.collection("Old").sync(dry_run=True).changed
    with hybridkb.connect(db, model="fake") as kb:  # migrated when opened for writing
        coll = kb.collection("Old")
        assert coll.sources() == [] and not coll.sync().changed
        coll.add(folder)
        assert [s["path"] for s in coll.sources()] == [str(folder.resolve())]


def test_sources_of_a_file_from_before_sync_times_read_and_then_record_them(
    tmp_path: Path, folder: Path
) -> None:
    import duckdb

    from hybridkb.storage.duckdb.schema import MIGRATIONS, SOURCES

    db = tmp_path / "old.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Old").add(folder)
    con = duckdb.connect(str(db))  # back to the schema before sync times were kept
    con.execute(f"ALTER TABLE {SOURCES} DROP COLUMN synced_at")
    con.execute(
        "UPDATE hybridkb_meta SET value = ? WHERE key = 'schema_version'",
        [str(len(MIGRATIONS) - 1)],
    )
    con.close()
    path = str(folder.resolve())
    with hybridkb.connect(db, model="fake", read_only=True) as ro:
        [source] = ro.collection("Old").sources()
        assert (source["path"], source["state"], source["synced_at"]) == (path, "ok", None)
    with hybridkb.connect(db, model="fake") as kb:  # migrated when opened for writing
        coll = kb.collection("Old")
        assert [s["synced_at"] for s in coll.sources()] == [None]  # not synced since
        coll.sync()
        assert [s["synced_at"] is not None for s in coll.sources()] == [True]
