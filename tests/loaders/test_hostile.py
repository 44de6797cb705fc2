"""Hostile input through ``coll.add``: every bad file fails alone, with one clear line.

Each case adds bad files together with a good one to a collection that already
holds documents (a real DuckDB file, the fake embedder) and checks three promises:
each bad file is in ``report.failed`` with a one-line error that names it and says
what to do; the good files of the same call are added; the documents stored before
are untouched (same ids, hashes and chunk counts, the same keyword hits).

The real files in ``../shared/data/docs`` are used when that folder exists (it is
absent on a fresh machine, so that test skips); everything else is generated here.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import sys
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from paths import ROOT
from pdfgen import Page, encrypt_pdf, make_pdf

import hybridkb
from hybridkb.kb import Collection
from hybridkb.loaders import SUPPORTED_EXTENSIONS, load_file
from hybridkb.results import AddReport, FailedFile

POSIX = os.name == "posix"
SHARED_DOCS = ROOT.parent / "shared/data/docs"

STORED = {
    "alpha.txt": "Alpha notes about the xylophone quartz.\n\nA second paragraph on tides.",
    "beta.md": "# Beta\n\nThe xylophone quartz returns in beta.\n\n## More\n\nQuiet meadows and rivers.",
}
QUERY = "xylophone quartz"


# --- fixtures and checks -------------------------------------------------------------


Snapshot = tuple[list[tuple[str, str, int]], list[tuple[str, str, str]]]


def _snapshot(coll: Collection) -> Snapshot:
    docs = sorted(
        (d.document_id, d.content_hash, d.chunk_count)
        for d in coll.documents(limit=10_000)
        if d.filename in STORED
    )
    hits = [(h.document_id, h.chunk_id, h.text) for h in coll.search(QUERY, k=50, mode="keyword")]
    return docs, hits


@pytest.fixture
def stored(kb: hybridkb.KnowledgeBase, tmp_path: Path) -> Iterator[Collection]:
    """A collection that already holds two documents the hostile adds must not touch."""
    folder = tmp_path / "stored"
    folder.mkdir()
    for name, text in STORED.items():
        (folder / name).write_text(text, encoding="utf-8")
    coll = kb.create_collection("Hostile")
    assert len(coll.add(folder).added) == 2
    yield coll


def _good(folder: Path, name: str = "good.txt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"The good file {name} talks about harbour lanterns.\n", encoding="utf-8")
    return path


def assert_clean_failure(failed: FailedFile) -> None:
    """One line, starting with the file's name, saying what is wrong and what to do."""
    message = failed.error
    assert "\n" not in message and "\r" not in message, message
    assert message.startswith(f"{failed.filename}: "), message
    assert "; " in message, f"no fix given: {message}"
    message.encode("utf-8")  # printable and storable (no lone surrogates)
    failed.filename.encode("utf-8")
    assert failed.code in {"ingest_error", "extraction_error", "unsupported_file_type"}


def check_isolated(
    coll: Collection,
    before: Snapshot,
    count_before: int,
    report: AddReport,
    *,
    bad: Iterable[str],
    good: Iterable[str],
    maybe: Iterable[str] = (),
) -> None:
    """Bad files failed cleanly, good ones were added, stored documents are as they were."""
    bad, good, maybe = set(bad), set(good), set(maybe)
    failed = {f.filename: f for f in report.failed}
    added = {f.filename for f in report.added}
    for f in report.failed:
        assert_clean_failure(f)
    assert bad <= set(failed), report.to_dict()
    assert set(failed) <= bad | maybe, report.to_dict()
    assert good <= added, report.to_dict()
    assert added <= good | maybe, report.to_dict()
    assert _snapshot(coll) == before
    assert coll.count() == count_before + len(added)


def _add(coll: Collection, paths: Path | list[Path]) -> tuple[AddReport, Snapshot, int]:
    before, count = _snapshot(coll), coll.count()
    return coll.add(paths), before, count


# --- generated hostile files ---------------------------------------------------------------


def _text_pdf() -> bytes:
    return make_pdf(
        [
            Page("Income statement\n\nSalary and wages were reported on line one."),
            Page("Depreciation of equipment over five years."),
            Page("Closing remarks on the harbour lanterns."),
        ]
    )


def _docx_bytes(text: str = "A document about harbour lanterns.") -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Report", level=1)
    document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


_W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def zip_bomb(path: Path, megabytes: int = 120) -> Path:
    """A DOCX whose document.xml (one long run of "a") inflates ~1000x; the file stays small."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w") as part:
            part.write(f'<w:document xmlns:w="{_W_NS}"><w:body><w:p><w:r><w:t>'.encode())
            block = b"a" * (1 << 20)
            for _ in range(megabytes):
                part.write(block)
            part.write(b"</w:t></w:r></w:p></w:body></w:document>")
    return path


def lying_zip_bomb(path: Path, megabytes: int = 40) -> Path:
    """A bomb whose central directory claims document.xml is only 10 KB."""
    zip_bomb(path, megabytes)
    data = bytearray(path.read_bytes())
    offset = data.find(b"PK\x01\x02")
    while offset != -1:
        name_length = int.from_bytes(data[offset + 28 : offset + 30], "little")
        if data[offset + 46 : offset + 46 + name_length] == b"word/document.xml":
            data[offset + 24 : offset + 28] = (10_240).to_bytes(4, "little")
        offset = data.find(b"PK\x01\x02", offset + 4)
    path.write_bytes(bytes(data))
    return path


# --- cases -------------------------------------------------------------------------------------


def test_truncated_pdfs_fail_alone_or_keep_what_survives(
    stored: Collection, tmp_path: Path
) -> None:
    data = _text_pdf()
    rng = random.Random(11)
    folder = tmp_path / "cut"
    folder.mkdir()
    names = []
    for offset in [0, 9, *sorted(rng.sample(range(10, len(data) - 1), 8))]:
        (folder / f"cut-{offset:05d}.pdf").write_bytes(data[:offset])
        names.append(f"cut-{offset:05d}.pdf")
    _good(folder)
    report, before, count = _add(stored, folder)
    # pypdf repairs some truncations (text before the cut survives): added or failed, never a crash.
    check_isolated(
        stored,
        before,
        count,
        report,
        bad=["cut-00000.pdf", "cut-00009.pdf"],
        good=["good.txt"],
        maybe=names,
    )
    assert len(report.failed) >= 3


def test_truncated_docx_files_fail_alone(stored: Collection, tmp_path: Path) -> None:
    data = _docx_bytes()
    rng = random.Random(12)
    folder = tmp_path / "cut"
    folder.mkdir()
    names = []
    for offset in [0, 1, *sorted(rng.sample(range(2, len(data) - 1), 6))]:
        (folder / f"cut-{offset:05d}.docx").write_bytes(data[:offset])
        names.append(f"cut-{offset:05d}.docx")
    _good(folder)
    report, before, count = _add(stored, folder)
    check_isolated(stored, before, count, report, bad=names, good=["good.txt"])


def test_docx_zip_bombs_are_refused_without_inflating(stored: Collection, tmp_path: Path) -> None:
    bomb = zip_bomb(tmp_path / "bomb.docx")
    liar = lying_zip_bomb(tmp_path / "liar.docx")
    assert bomb.stat().st_size < 1_000_000  # the test file stays small
    report, before, count = _add(stored, [bomb, liar, _good(tmp_path / "ok")])
    check_isolated(stored, before, count, report, bad=["bomb.docx", "liar.docx"], good=["good.txt"])
    errors = {f.filename: f.error for f in report.failed}
    # Refused from the declared sizes, before python-docx sees the XML.
    assert "word/document.xml would expand to 120 MB" in errors["bomb.docx"]
    assert "zip bomb" in errors["bomb.docx"]
    # The liar passes the size check, but zipfile stops at the declared size (bad CRC).
    assert "not a valid .docx" in errors["liar.docx"]


def test_pdf_with_10000_empty_pages_fails_cleanly(stored: Collection, tmp_path: Path) -> None:
    blank = tmp_path / "blank.pdf"
    blank.write_bytes(make_pdf([Page()] * 10_000))
    report, before, count = _add(stored, [blank, _good(tmp_path / "ok")])
    check_isolated(stored, before, count, report, bad=["blank.pdf"], good=["good.txt"])
    assert "every page is blank" in report.failed[0].error


def test_junk_and_mislabelled_files_fail_alone(stored: Collection, tmp_path: Path) -> None:
    rng = random.Random(13)
    folder = tmp_path / "junk"
    folder.mkdir()
    files = {
        "noise.txt": rng.randbytes(8192),
        "noise.md": rng.randbytes(3000),
        "elf.md": b"\x7fELF\x02\x01\x01\x00" + bytes(200) + rng.randbytes(500),
        "controls.txt": bytes(range(1, 32)) * 40,
        "pdf-renamed.docx": _text_pdf(),
        "docx-renamed.pdf": _docx_bytes(),
        "zip-not-docx.docx": _plain_zip(),
        "old-word.docx": b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504),
        "empty.pdf": b"",
        "empty.docx": b"",
        "empty.txt": b"",
        "blank.md": b" \n\t\r\n  \n",
        "bom-only.txt": b"\xef\xbb\xbf",
        "locked.pdf": encrypt_pdf(_text_pdf(), "s3cret"),
        "scan.pdf": make_pdf([Page(image=True), Page(rectangle=True)]),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "folder.pdf").mkdir()  # a folder with a supported extension is walked
    _good(folder / "folder.pdf", "inside.txt")
    unsupported = tmp_path / "setup.exe"
    unsupported.write_bytes(b"MZ" + bytes(100))
    report, before, count = _add(stored, [folder, unsupported, _good(tmp_path / "ok")])
    check_isolated(
        stored, before, count, report, bad=[*files, "setup.exe"], good=["good.txt", "inside.txt"]
    )
    errors = {f.filename: f.error for f in report.failed}
    assert "binary content" in errors["noise.txt"]
    assert "not a ZIP" in errors["pdf-renamed.docx"]
    assert "not a PDF" in errors["docx-renamed.pdf"]
    assert "HYBRIDKB_PDF_PASSWORD" in errors["locked.pdf"]
    assert "OCR" in errors["scan.pdf"]
    assert "supported:" in errors["setup.exe"]


def _plain_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("readme.txt", "not a word document")
    return out.getvalue()


def test_deeply_nested_folders_are_walked(stored: Collection, tmp_path: Path) -> None:
    deep = tmp_path / "nest"
    for level in range(60):
        deep = deep / f"level{level:02d}"
        if level == 30:
            deep.mkdir(parents=True)
            (deep / "junk.txt").write_bytes(bytes(range(256)) * 4)
    _good(deep, "bottom.txt")
    report, before, count = _add(stored, tmp_path / "nest")
    check_isolated(stored, before, count, report, bad=["junk.txt"], good=["bottom.txt"])
    assert stored.search("harbour lanterns", k=5, mode="keyword")[0].filename == "bottom.txt"


def _nest_with_fds(root: Path, levels: int, name: str) -> None:
    """Create ``levels`` nested folders through directory fds (paths may exceed PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        out = os.open("deepest.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
        os.write(out, b"The deepest file, about harbour lanterns.\n")
        os.close(out)
    finally:
        os.close(fd)


def _unnest(root: Path, name: str) -> None:
    """Delete a deep nest level by level: shutil.rmtree recurses and would hit the limit."""
    current, step = root / name, 0
    while (current / name).is_dir():
        step += 1
        flat = root / f"flat{step}"
        os.rename(current / name, flat)
        shutil.rmtree(current)
        current = flat
    shutil.rmtree(current)


@pytest.mark.skipif(not POSIX, reason="dir_fd needs POSIX")
def test_folders_nested_1100_deep_do_not_hit_the_recursion_limit(
    stored: Collection, tmp_path: Path
) -> None:
    root = tmp_path / "deep"
    root.mkdir()
    _nest_with_fds(root, 1100, "d")  # ~2,200 characters, within PATH_MAX
    try:
        report, before, count = _add(stored, root)
    finally:
        _unnest(root, "d")  # else pytest's own clean-up of old tmp folders crashes
    check_isolated(stored, before, count, report, bad=[], good=["deepest.txt"])


@pytest.mark.skipif(not POSIX, reason="dir_fd needs POSIX")
def test_paths_longer_than_path_max_fail_cleanly(stored: Collection, tmp_path: Path) -> None:
    root = tmp_path / "long"
    root.mkdir()
    _nest_with_fds(root, 40, "x" * 120)  # ~4,800 characters: the OS refuses to list it
    _good(root)
    try:
        report, before, count = _add(stored, root)
    finally:
        _unnest(root, "x" * 120)
    check_isolated(
        stored, before, count, report, bad=[], good=["good.txt"], maybe=["x" * 120, "deepest.txt"]
    )
    assert report.failed or [f.filename for f in report.added] == ["good.txt", "deepest.txt"]


def _symlink(target: str | Path, link: Path) -> None:
    try:
        link.symlink_to(target)
    except (OSError, NotImplementedError) as exc:  # Windows without developer mode
        pytest.skip(f"symlinks not available: {exc}")


def test_symlink_loops_end_and_fail_alone(stored: Collection, tmp_path: Path) -> None:
    root = tmp_path / "loops"
    sub = root / "sub"
    sub.mkdir(parents=True)
    _good(sub)
    _symlink(root, sub / "back-to-root")  # a folder loop
    _symlink(sub, root / "sub-again")  # the same folder twice
    _symlink(root / "self.txt", root / "self.txt")  # a file pointing at itself
    _symlink(root / "b.md", root / "a.md")  # a two-link cycle
    _symlink(root / "a.md", root / "b.md")
    _symlink(root / "gone.txt", root / "dangling.txt")
    _symlink(sub / "good.txt", root / "alias.txt")  # a second name for the good file
    report, before, count = _add(stored, root)
    check_isolated(
        stored,
        before,
        count,
        report,
        bad=["self.txt", "a.md", "b.md", "dangling.txt"],
        good=["good.txt"],
    )
    assert len(report.added) == 1  # the alias and the looped folder add nothing twice


@pytest.mark.skipif(not POSIX or not hasattr(os, "mkfifo"), reason="pipes and devices are POSIX")
def test_pipes_and_devices_are_refused_not_read(stored: Collection, tmp_path: Path) -> None:
    # Reading a pipe blocks forever and /dev/zero never ends: neither may be opened.
    folder = tmp_path / "special"
    folder.mkdir()
    os.mkfifo(folder / "pipe.txt")
    _symlink("/dev/zero", folder / "zero.md")
    _good(folder)
    report, before, count = _add(stored, [folder, folder / "pipe.txt", folder / "zero.md"])
    check_isolated(stored, before, count, report, bad=["pipe.txt", "zero.md"], good=["good.txt"])
    assert all("not a regular file" in f.error for f in report.failed)


@pytest.mark.skipif(
    not POSIX or (hasattr(os, "geteuid") and os.geteuid() == 0), reason="root reads anything"
)
def test_unreadable_file_fails_alone(stored: Collection, tmp_path: Path) -> None:
    secret = _good(tmp_path / "locked", "secret.txt")
    secret.chmod(0)
    try:
        report, before, count = _add(stored, [secret, _good(tmp_path / "ok")])
    finally:
        secret.chmod(0o644)
    check_isolated(stored, before, count, report, bad=["secret.txt"], good=["good.txt"])
    assert "permission" in report.failed[0].error


# --- hostile file names ------------------------------------------------------------------------
# POSIX names are bytes: a newline, or bytes that are not UTF-8 (kept by Python as lone
# surrogates that neither DuckDB nor a UTF-8 terminal accepts).

_HOSTILE_NAMES = [b"line\nbreak.txt", b"caf\xe9-latin1.md", b"tab\tand\x1bescape.txt"]


def _write_bytes_name(folder: Path, name: bytes, data: bytes) -> None:
    with open(os.path.join(os.fsencode(folder), name), "wb") as handle:
        handle.write(data)


@pytest.mark.skipif(sys.platform != "linux", reason="needs a file system that takes any bytes")
def test_files_with_newlines_and_non_utf8_bytes_in_their_names_are_added(
    stored: Collection, tmp_path: Path
) -> None:
    folder = tmp_path / "names"
    folder.mkdir()
    for number, name in enumerate(_HOSTILE_NAMES):
        _write_bytes_name(
            folder, name, f"Hostile name number {number} about harbour lanterns.\n".encode()
        )
    _good(folder)
    report, before, _ = _add(stored, folder)
    assert not report.failed, report.to_dict()
    assert len(report.added) == 4
    for result in report.added:
        assert "\n" not in result.filename
        result.filename.encode("utf-8")
    hits = stored.search("hostile name number", k=10, mode="keyword")
    assert len(hits) == 3 and all(h.filename and "\n" not in h.filename for h in hits)
    # Adding again finds the same documents (ids come from the real path).
    again = stored.add(folder)
    assert len(again.unchanged) == 4 and not again.added
    assert _snapshot(stored) == before


@pytest.mark.skipif(sys.platform != "linux", reason="needs a file system that takes any bytes")
def test_bad_files_with_hostile_names_fail_on_one_line(stored: Collection, tmp_path: Path) -> None:
    folder = tmp_path / "names"
    folder.mkdir()
    for name in _HOSTILE_NAMES:
        _write_bytes_name(folder, name, bytes(range(256)) * 8)  # binary junk
    _good(folder)
    report, before, _ = _add(stored, folder)
    assert len(report.failed) == 3 and [f.filename for f in report.added] == ["good.txt"]
    for failed in report.failed:
        assert_clean_failure(failed)
    assert {f.filename for f in report.failed} == {
        r"line\nbreak.txt",
        r"caf\xe9-latin1.md",
        r"tab\tand\x1bescape.txt",
    }
    assert _snapshot(stored) == before


# --- amplification ---------------------------------------------------------------------------


def test_a_huge_heading_is_not_copied_into_every_chunk(stored: Collection, tmp_path: Path) -> None:
    # The heading path is every chunk's section: a 100 KB heading over 300 paragraphs
    # used to store 30 MB of section text (a 1.7 MB file made a 500 MB database).
    path = tmp_path / "amp.md"
    body = "\n\n".join(f"Paragraph {i} " + "word " * 150 for i in range(300))
    path.write_text("# " + "title " * 17_000 + "\n\n" + body, encoding="utf-8")
    loaded = load_file(path)
    assert len(loaded.blocks[0].text) > 100_000  # the heading block keeps its full text
    assert max(len(b.section or "") for b in loaded.blocks) <= 200
    report, before, count = _add(stored, [path, _good(tmp_path / "ok")])
    check_isolated(stored, before, count, report, bad=[], good=["amp.md", "good.txt"])
    hits = stored.search("paragraph word", k=50, mode="keyword")
    assert hits and max(len(h.section or "") for h in hits) <= 200


# --- real model (short) ------------------------------------------------------------------------


@pytest.mark.model
def test_hostile_files_fail_alone_with_the_real_model(tmp_path: Path, real_model_name: str) -> None:
    with hybridkb.connect(tmp_path / "real.duckdb", model=real_model_name) as kb:
        coll = kb.create_collection("Hostile")
        folder = tmp_path / "stored"
        folder.mkdir()
        (folder / "alpha.txt").write_text(STORED["alpha.txt"], encoding="utf-8")
        assert len(coll.add(folder).added) == 1
        before = [(h.document_id, h.chunk_id) for h in coll.search(QUERY, k=5, mode="hybrid")]
        cut = tmp_path / "cut.docx"
        cut.write_bytes(_docx_bytes()[:700])
        junk = tmp_path / "junk.md"
        junk.write_bytes(random.Random(3).randbytes(2048))
        report = coll.add([zip_bomb(tmp_path / "bomb.docx", 60), cut, junk, _good(tmp_path / "ok")])
        assert {f.filename for f in report.failed} == {"bomb.docx", "cut.docx", "junk.md"}
        for failed in report.failed:
            assert_clean_failure(failed)
        assert [f.filename for f in report.added] == ["good.txt"]
        assert coll.count() == 2
        assert coll.search("harbour lanterns", k=1, mode="vector")[0].filename == "good.txt"
        after = [(h.document_id, h.chunk_id) for h in coll.search(QUERY, k=5, mode="hybrid")]
        assert after[0] == before[0]


# --- the real oddities in ../shared/data/docs --------------------------------------------------

# Files in that folder that cannot be added, and the words their error must contain.
EXPECTED_FAILURES = {
    "password.pdf": "HYBRIDKB_PDF_PASSWORD",
    "libreoffice-writer-password.pdf": "HYBRIDKB_PDF_PASSWORD",
    "empty.txt": "empty file",
    "fake-text-all-whitespace.txt": "empty file",
    "tbl-having-tables.docx": "no text",
}


@pytest.mark.skipif(not SHARED_DOCS.exists(), reason=f"{SHARED_DOCS} is absent")
def test_every_real_document_is_added_or_fails_with_one_clean_line(
    stored: Collection,
) -> None:
    files = sorted(
        p
        for p in SHARED_DOCS.rglob("*")
        if p.is_file() and p.suffix.lower() in SUPPORTED_EXTENSIONS
    )
    report, before, count = _add(stored, SHARED_DOCS)
    added = {f.filename for f in report.added}
    failed = {f.filename: f for f in report.failed}
    assert sorted(added | set(failed)) == sorted({p.name for p in files})
    assert not added & set(failed)
    for name, words in EXPECTED_FAILURES.items():
        if any(p.name == name for p in files):
            assert name in failed and words in failed[name].error, (name, report.to_dict())
    check_isolated(stored, before, count, report, bad=[], good=[], maybe=[p.name for p in files])
    assert len(added) >= len(files) - len(EXPECTED_FAILURES)
    # A second pass changes nothing: every added file is unchanged, the failures repeat.
    again = stored.add(SHARED_DOCS)
    assert {f.filename for f in again.unchanged} == added and not again.added
    assert {f.filename for f in again.failed} == set(failed)
