"""A file still being written is read as it was when it was opened (issue 32, item 11).

A log that grows while it is added used to be read for as long as it grew: the
streamed read went on past the size the file had when it was opened (and hashed), with
no text or time budget, so ``add``, ``sync`` and ``watch`` never ended when it grew
faster than its blocks were embedded. Every reader of an opened file now stops at the
size ``fstat`` gave at open, and streamed text is charged like the rest.
"""

from __future__ import annotations

import hashlib
import io
import queue
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hybridkb
from hybridkb.embedders.cache import embed_with_cache
from hybridkb.ingest import pipeline as ingest
from hybridkb.loaders import FileLimits, check_streamed, file_sha256, load_file, stream_blocks
from hybridkb.loaders import budget as budget_module
from hybridkb.loaders.budget import BudgetExceeded, ReadingClock, timed_while_read
from hybridkb.text.files import OpenedFile, open_file

BODIES = {
    "log.txt": "".join(f"Line {n} of the log.\n\n" for n in range(200)),
    "notes.md": "# Notes\n\n" + "".join(f"Note {n} about lemurs.\n\n" for n in range(200)),
    "rows.csv": "n,animal\n" + "".join(f"{n},lemur {n}\n" for n in range(200)),
    "page.html": "<html><body>" + "".join(f"<p>Para {n}</p>" for n in range(200)),
}
APPENDED = {
    ".txt": "\n\nAPPENDED after the file was opened.\n",
    ".md": "\n\nAPPENDED after the file was opened.\n",
    ".csv": "999,APPENDED after the file was opened\n",
    ".html": "<p>APPENDED after the file was opened.</p></body></html>",
}


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.write(text)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_an_opened_file_is_read_as_it_was_when_opened(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(BODIES[name], encoding="utf-8")
    original = path.read_bytes()
    with open_file(path) as opened:
        _append(path, APPENDED[path.suffix])
        assert file_sha256(opened) == hashlib.sha256(original).hexdigest()
        loaded = " ".join(block.text for block in load_file(opened).blocks)
        assert "APPENDED" not in loaded and "199" in loaded
        if path.suffix != ".html":  # the formats ingest streams when large
            streamed = " ".join(block.text for block in stream_blocks(opened))
            assert "APPENDED" not in streamed and "199" in streamed


class _Writer(threading.Thread):
    """Appends a paragraph to a log each time it is asked, as a program writing it would."""

    def __init__(self, path: Path, times: int) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.left = times
        self.asked: queue.Queue[bool] = queue.Queue()
        self.done: queue.Queue[bool] = queue.Queue()

    def run(self) -> None:
        while self.asked.get():
            _append(self.path, "".join(f"Growing line {n}.\n" for n in range(200)) + "\n")
            self.done.put(True)

    def append(self) -> None:
        """One more paragraph, written before this returns; none after ``times`` of them."""
        if self.left > 0:
            self.left -= 1
            self.asked.put(True)
            self.done.get(timeout=60)

    def stop(self) -> None:
        self.asked.put(False)
        self.join(timeout=60)


def test_a_log_growing_while_it_is_added_stops_at_its_size_when_opened(
    tmp_path: Path, kb: hybridkb.KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Streamed in windows of ~2,000 characters; the writer adds ~3,800 for each window
    # embedded, so a read that follows the file would never catch up (it is capped at
    # 300 appends here, ~1 MB, so that the old behaviour ends too).
    monkeypatch.setattr(ingest, "STREAM_BYTES", 1_000)
    monkeypatch.setattr(ingest, "WINDOW_CHARS", 2_000)
    path = tmp_path / "app.log.txt"
    path.write_text(BODIES["log.txt"], encoding="utf-8")
    size = path.stat().st_size
    writer = _Writer(path, times=300)

    def embed_while_it_grows(*args: Any, **kwargs: Any) -> np.ndarray:
        writer.append()
        return embed_with_cache(*args, **kwargs)

    monkeypatch.setattr(ingest, "embed_with_cache", embed_while_it_grows)
    writer.start()
    try:
        report = kb.create_collection("Logs").add(path)
    finally:
        writer.stop()
    [added] = report.added
    assert writer.left < 300 and path.stat().st_size > size  # it did grow meanwhile
    text = " ".join(chunk.text for chunk in kb.collection("Logs").chunks(added.document_id))
    assert "Line 199 of the log." in text and "Growing" not in text


def test_a_streamed_file_is_charged_the_text_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest, "STREAM_BYTES", 1_000)
    # A streamed file holds one block at a time: it may have 20x the text budget.
    monkeypatch.setenv("HYBRIDKB_MAX_FILE_TEXT_CHARS", "100")
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "small.txt").write_text("x" * 1_500)  # streamed, within 2,000 characters
    (folder / "big.txt").write_text("Lemurs live on Madagascar.\n\n" * 200)  # 5,600
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as base:
        report = base.create_collection("C").add(folder)
    assert [f.filename for f in report.added] == ["small.txt"]
    [failed] = report.failed
    assert failed.code == "over_budget" and failed.error.startswith("big.txt: over the text")
    assert "raise HYBRIDKB_MAX_FILE_TEXT_CHARS to read it" in failed.error


class _FakeTime:
    """Stands for the time module in budget.py: the test moves the clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class _SlowStream(io.BytesIO):
    """A file whose every read takes ten (fake) seconds."""

    def __init__(self, data: bytes, clock: _FakeTime) -> None:
        super().__init__(data)
        self.clock = clock

    def read(self, size: int | None = -1, /) -> bytes:
        self.clock.now += 10
        return super().read(size)

    def readinto(self, buffer: Any, /) -> int:
        self.clock.now += 10
        return super().readinto(buffer)


def _opened(name: str, stream: io.BytesIO) -> OpenedFile:
    return OpenedFile(path=Path(name), name=name, stream=stream, size=len(stream.getvalue()))


def _blocks_with_pauses(blocks: Iterator[Any], clock: _FakeTime, pause: float) -> int:
    count = 0
    for _ in blocks:
        clock.now += pause  # embedding and writing the blocks read so far
        count += 1
    return count


@pytest.mark.parametrize("name", ["log.txt", "notes.md", "rows.csv"])
def test_a_streamed_file_is_charged_its_reading_time_not_its_embedding_time(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    clock = _FakeTime()
    monkeypatch.setattr(budget_module, "time", clock)
    data = (BODIES[name] * 250).encode()  # ~1 MB: reads of up to 1 MiB
    limits = FileLimits(seconds=25)
    # An hour of embedding between blocks is not the file's parsing time...
    fast = _opened(name, io.BytesIO(data))
    assert _blocks_with_pauses(stream_blocks(fast, limits=limits), clock, 3600.0) > 100
    # ...ten seconds per read is.
    slow = _opened(name, _SlowStream(data * 5, clock))
    with pytest.raises(BudgetExceeded, match="over the time budget.*HYBRIDKB_MAX_FILE_SECONDS"):
        check_streamed(slow, limits=limits)


def test_the_reading_clock_runs_only_while_the_next_item_is_made() -> None:
    now = [0.0]
    clock = ReadingClock(lambda: now[0])

    def made_slowly(items: Sequence[str]) -> Iterator[str]:
        for item in items:
            now[0] += 2  # reading
            yield item

    seen = []
    for item in timed_while_read(made_slowly(["a", "b", "c"]), clock):
        now[0] += 100  # the consumer's work
        seen.append((item, clock()))
    assert seen == [("a", 2.0), ("b", 4.0), ("c", 6.0)] and clock() == 6.0
