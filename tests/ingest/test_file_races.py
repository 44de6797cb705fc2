"""Race-free file access: the file read is the file checked, whatever flips under it.

A thread flips a file (and a folder) inside the allowed folder between a regular
entry and a symlink to a secret outside, thousands of times, while adds run. The
secret must never be stored: every add either stores the inside file or fails with
a KBError. Regression for break 3 of issue 11 (3-4 of 20 adds stored the outside file).
The file races 300 adds (and 1,000 flips), the folder 200 (and 400) under the ``ci``
profile, a third of that in the fast inner loop (tests/support/long_runs.py).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.tools import ToolException
from long_runs import budget

import hybridkb
from hybridkb.agents.tools import make_tools
from hybridkb.errors import AccessDenied, KBError
from hybridkb.text.files import open_file

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges there")

SECRET = "OUTSIDE-SECRET-5e2c"
FILE_ADDS = budget(ci=300, fast=100)
FILE_FLIPS = budget(ci=1_000, fast=330)  # at least, while the adds run: the race is real
FOLDER_ADDS = budget(ci=200, fast=70)
FOLDER_FLIPS = budget(ci=400, fast=140)


def _flipper(link: Path, regular_text: str, target: Path, stop: threading.Event) -> Iterator[int]:
    """Flip ``link`` between a regular file and a symlink to ``target`` until stopped."""
    flips = 0
    tmp_file = link.with_name(link.name + ".file")
    tmp_link = link.with_name(link.name + ".link")
    while not stop.is_set():
        tmp_file.write_text(regular_text)
        os.replace(tmp_file, link)
        with_link = tmp_link
        with_link.unlink(missing_ok=True)
        with_link.symlink_to(target)
        os.replace(with_link, link)
        flips += 2
    yield flips


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    inside = tmp_path / "allowed"
    outside = tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET} bank details")
    (outside / "folder").mkdir()
    (outside / "folder" / "note.txt").write_text(f"{SECRET} in a folder")
    return inside, outside


def _stored_texts(kb: hybridkb.KnowledgeBaseAPI) -> str:
    out: list[str] = []
    for name in kb.collection_names():
        coll = kb.collection(name)
        for doc in coll.documents(limit=10_000):
            out.extend(c.text for c in coll.chunks(doc.document_id))
    return "\n".join(out)


def test_a_file_flipping_to_a_link_outside_is_never_read(
    tmp_path: Path, places: tuple[Path, Path]
) -> None:
    inside, outside = places
    victim = inside / "report.txt"
    victim.write_text("inside report")
    stop = threading.Event()
    counted: list[int] = []
    thread = threading.Thread(
        target=lambda: counted.extend(
            _flipper(victim, "inside report", outside / "secret.txt", stop)
        )
    )
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        coll = kb.create_collection("Reports")
        tools = {t.name: t for t in make_tools(kb, allowed_paths=[inside])}
        stored = refused = 0
        thread.start()
        try:
            for i in range(FILE_ADDS):
                if i % 3 == 0:  # through the agent tool, which checks the path first
                    try:
                        tools["add_kb_documents"].invoke(
                            {"collection_name": "Reports", "documents": str(victim)}
                        )
                        stored += 1
                    except ToolException:
                        refused += 1
                    continue
                report = coll.add([victim], allowed_paths=[inside])
                stored += len(report.added) + len(report.unchanged)
                refused += len(report.failed)
                assert all(f.code in ("access_denied", "ingest_error", "extraction_error")
                           for f in report.failed), report.failed  # fmt: skip
                coll.delete([d.document_id for d in coll.documents()])  # read it again next time
        finally:
            stop.set()
            thread.join()
        assert SECRET not in _stored_texts(kb)
        # Every add was one or the other, and the flipping really raced them.
        assert stored + refused >= FILE_ADDS and counted and counted[0] >= FILE_FLIPS
        print(f"\nfile flips: {counted[0]}, adds stored {stored}, refused {refused}")


def test_a_folder_flipping_to_a_link_outside_is_never_read(
    tmp_path: Path, places: tuple[Path, Path]
) -> None:
    inside, outside = places
    folder = inside / "docs"
    stop = threading.Event()
    flips = [0]

    def flip() -> None:
        real = inside / "docs.real"
        real.mkdir()
        (real / "note.txt").write_text("inside note")
        tmp_link = inside / "docs.link"
        while not stop.is_set():
            # A regular folder, then a link to the outside folder, swapped in by rename.
            if folder.is_symlink():
                folder.unlink()
            os.rename(real, folder)
            tmp_link.unlink(missing_ok=True)
            tmp_link.symlink_to(outside / "folder")
            os.rename(folder, real)
            os.replace(tmp_link, folder)
            flips[0] += 2

    thread = threading.Thread(target=flip)
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        coll = kb.create_collection("Docs")
        thread.start()
        try:
            for _ in range(FOLDER_ADDS):
                try:
                    report = coll.add([folder], allowed_paths=[inside])
                except KBError:
                    continue
                coll.delete([d.document_id for d in coll.documents()])
                assert all(f.code != "ok" for f in report.failed)
        finally:
            stop.set()
            thread.join()
        assert SECRET not in _stored_texts(kb)
        assert flips[0] >= FOLDER_FLIPS


def test_open_file_refuses_a_link_swapped_in_after_resolving(
    tmp_path: Path, places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deterministic form of the race: the path is resolved, then becomes a link."""
    inside, outside = places
    sub = inside / "sub"
    sub.mkdir()
    victim = sub / "a.txt"
    victim.write_text("inside")
    import hybridkb.text.files as files

    real_resolve = files.resolve

    def resolve_then_swap(path: str | Path) -> Path:
        resolved = real_resolve(path)
        victim.unlink()
        victim.symlink_to(outside / "secret.txt")  # swapped in after the check
        return resolved

    monkeypatch.setattr(files, "resolve", resolve_then_swap)
    with pytest.raises(AccessDenied, match="changed"):
        open_file(victim, within=[inside])


def test_open_file_refuses_a_folder_swapped_for_a_link(
    tmp_path: Path, places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    inside, outside = places
    sub = inside / "sub"
    sub.mkdir()
    (sub / "note.txt").write_text("inside")
    (outside / "note.txt").write_text(SECRET)
    import hybridkb.text.files as files

    real_resolve = files.resolve

    def resolve_then_swap(path: str | Path) -> Path:
        resolved = real_resolve(path)
        os.rename(sub, inside / "moved")
        sub.symlink_to(outside)  # a folder component becomes a link
        return resolved

    monkeypatch.setattr(files, "resolve", resolve_then_swap)
    with pytest.raises(AccessDenied, match="changed"):
        open_file(sub / "note.txt", within=[inside])


def test_outside_files_and_loops_are_refused_with_one_line(
    tmp_path: Path, places: tuple[Path, Path]
) -> None:
    inside, outside = places
    (inside / "out.txt").symlink_to(outside / "secret.txt")
    (inside / "loop.txt").symlink_to(inside / "loop.txt")
    with pytest.raises(AccessDenied, match="outside the folders"):
        open_file(inside / "out.txt", within=[inside])
    with pytest.raises(KBError, match="loop.txt: not a usable path"):
        open_file(inside / "loop.txt", within=[inside])
    os.mkfifo(inside / "pipe.txt")
    with pytest.raises(KBError, match="not a regular file"):
        open_file(inside / "pipe.txt", within=[inside])  # and no hang
