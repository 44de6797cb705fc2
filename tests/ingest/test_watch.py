"""`hybridkb watch`: a real process following real files, searched by another process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from internals import through_owner

import hybridkb
from hybridkb.watch import still_changing

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

pytest.importorskip("watchfiles")

WAIT = 60.0  # hang guard for each change to become visible


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
    env.update(
        {
            "HYBRIDKB_DB": str(tmp_path / "kb.duckdb"),
            "HYBRIDKB_MODEL": "fake",
            "HYBRIDKB_CACHE_DIR": str(tmp_path / "cache"),
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(Path(hybridkb.__file__).parents[1]),
        }
    )
    return env


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {WAIT:.0f} s: {what}")


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\nAlpha notes about quokkas.", "utf-8")
    (docs / "sub" / "b.txt").write_text("Beta notes about wombats.", "utf-8")
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        kb.create_collection("Notes").add(docs)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hybridkb", "watch", "--quiet-ms", "200", "--max-wait-ms", "2000"],
        env=_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("watching 'Notes'")
        yield docs, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_watch_follows_edits_renames_deletes_and_stops_on_sigterm(
    watched: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    docs, proc = watched
    # Another process searches while the watcher holds the file: it is served by it.
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as client:
        assert through_owner(client)
        notes = client.collection("Notes")

        def files(query: str) -> set[str]:
            return {h.filename or "" for h in notes.search(query, mode="keyword", k=10)}

        (docs / "c.md").write_text("Gamma notes about narwhals.", "utf-8")
        eventually(lambda: files("narwhals") == {"c.md"}, "a new file is searchable")

        # An editor's save: write a temporary file, rename it over the original.
        (docs / ".a.md.swp").write_text("# A\n\nAlpha notes about axolotls now.", "utf-8")
        os.replace(docs / ".a.md.swp", docs / "a.md")
        eventually(
            lambda: files("axolotls") == {"a.md"} and not files("quokkas"), "a save-by-rename"
        )

        (docs / "sub" / "b.txt").rename(docs / "b-renamed.txt")
        eventually(lambda: files("wombats") == {"b-renamed.txt"}, "a rename")

        outside = tmp_path / "secret.txt"
        outside.write_text("The password is swordfish.", "utf-8")
        (docs / "link.txt").symlink_to(outside)
        (docs / "c.md").unlink()
        eventually(lambda: not files("narwhals"), "a delete")
        assert not files("swordfish")  # the link out of the folder was not followed

        (docs / "sub").rename(tmp_path / "moved-away")
        (docs / "d.md").write_text("Delta notes about pelicans.", "utf-8")
        eventually(lambda: files("pelicans") == {"d.md"}, "a file after a folder moved away")
        assert notes.count() == 3  # a.md, b-renamed.txt, d.md

    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, out
    assert "stopped watching" in out and "Traceback" not in out
    # Closed cleanly: the file opens for writing here and holds what the watcher applied.
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        assert not through_owner(kb)
        assert sorted(d.filename or "" for d in kb.collection("Notes").documents()) == [
            "a.md",
            "b-renamed.txt",
            "d.md",
        ]


def test_watch_keeps_the_documents_of_a_source_that_goes_missing(
    watched: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    # A drive unmounted under the watcher (issue 32 item 6): its documents stay.
    docs, proc = watched
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    docs.rename(tmp_path / "unmounted")
    eventually(lambda: any("missing" in line for line in lines), "the source said missing")
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as client:
        notes = client.collection("Notes")
        assert notes.count() == 2, lines
        (tmp_path / "unmounted").rename(docs)  # mounted again: followed again
        (docs / "e.md").write_text("Epsilon notes about ibises.", "utf-8")
        eventually(lambda: notes.count() == 3, "a new file once the source is back")
    assert not any("removed" in line for line in lines), lines


def test_a_file_still_being_written_is_seen_changing(tmp_path: Path) -> None:
    growing = tmp_path / "download.txt"
    growing.write_text("start", "utf-8")
    quiet = tmp_path / "quiet.txt"
    quiet.write_text("done", "utf-8")
    stop = threading.Event()

    def writer() -> None:
        with growing.open("a", encoding="utf-8") as f:
            while not stop.is_set():
                f.write("more ")
                f.flush()
                time.sleep(0.01)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        busy = still_changing([str(growing), str(quiet), str(tmp_path / "gone")], 200)
    finally:
        stop.set()
        thread.join()
    assert busy == {str(growing)}


def test_mcp_watch_keeps_two_clients_in_step(tmp_path: Path) -> None:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.types import TextContent

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Alpha notes about quokkas.", "utf-8")
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        kb.create_collection("Notes").add(docs)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "hybridkb", "mcp", "--watch"],
        env=_env(tmp_path),
        cwd=str(tmp_path),
    )

    async def scenario() -> None:
        async with Client(params) as assistant:

            async def answers(query: str) -> str:
                found = await assistant.call_tool(
                    "search_kb", {"query": query, "collection_name": "Notes"}
                )
                first = found.content[0]
                assert isinstance(first, TextContent), first  # search_kb answers in text
                return first.text

            assert "quokkas" in await answers("quokkas")
            (docs / "b.md").write_text("Beta notes about wombats.", "utf-8")
            (docs / "a.md").unlink()
            with anyio.fail_after(WAIT):
                while "b.md" not in await answers("wombats") or "a.md" in await answers("quokkas"):
                    await anyio.sleep(0.1)
            # A second client, another process's view: served by the watching server.
            with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as other:
                assert through_owner(other)
                names = {d.filename for d in other.collection("Notes").documents()}
                assert names == {"b.md"}

    anyio.run(scenario)
    # The server closed the file when its client went away: it opens for writing here.
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        assert not through_owner(kb) and kb.collection("Notes").count() == 1
