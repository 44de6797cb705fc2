"""Names are shown safely (issue 32, item 12).

Collection names took bidi controls (U+202E, U+2066-2069) and ``list``, ``describe`` and the
``kb_list`` tool printed them raw, while file names were escaped. One rule now serves every
name and text that reaches a terminal or a tool answer (``normalize.printable``): control
characters, ANSI escapes and bidi controls are escaped; a new collection or workspace name
holding them is refused in one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from paths import ROOT
from tool_calls import by_name, call, reply_text

import hybridkb
from hybridkb.agents.graph_tools import make_graph_tools
from hybridkb.agents.tools import make_tools
from hybridkb.cli.commands import main
from hybridkb.errors import ConfigError
from hybridkb.normalize import printable

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

RLO = "\u202e"  # right-to-left override: "Tax\u202efdp.exe" reads "Taxexe.pdf"
# A collection name older versions took: bidi controls, isolates, a line separator.
HOSTILE = f"Tax{RLO}fdp.exe\u2066x\u2069\u2028end"
SHOWN = printable(HOSTILE)
# In metadata, folder names and graph labels anything goes: an ANSI sequence that clears
# the screen, a C1 CSI, one that sets the terminal's title.
ANSI = f"{RLO}\x1b[2J\x9b31m\x1b]0;owned\x07"
SOURCE = f"docs{ANSI}\nremoved 500 documents"  # a newline: a line of its own if shown raw


def shown_safely(text: str) -> bool:
    """Nothing a terminal would act on or reorder: every character printable, but for the
    newlines and tabs of the layout."""
    return all(ch.isprintable() or ch in "\n\t" for ch in text)


@pytest.fixture(autouse=True)
def fake_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")


# -- refused when new ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "char", [RLO, "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200b", "\u2028"]
)
def test_a_new_collection_name_with_bidi_or_invisible_characters_is_refused(
    tmp_path: Path, char: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"Tax{char}fdp.exe"
    code = f"U+{ord(char):04X}"
    with hybridkb.connect(tmp_path / "kb.duckdb") as kb:
        with pytest.raises(ConfigError, match=f"collection name .*{re.escape(code)}"):
            kb.create_collection(name)
        assert kb.collection_names() == []
    assert main(["--db", str(tmp_path / "kb.duckdb"), "create", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "collection name" in err and code in err
    assert shown_safely(err)


def test_a_new_workspace_name_with_bidi_controls_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "kb.duckdb")
    assert main(["--db", db, "--workspace", f"team{RLO}a", "create", "Notes"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "workspace" in err and "U+202E" in err
    assert shown_safely(err)
    with hybridkb.connect(db) as kb:
        assert kb.list_collections() == []


def test_the_tools_refuse_it_as_an_observation(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb") as kb:
        tools = by_name(make_tools(kb))
        msg = call(tools["create_kb_collection"], collection_name=HOSTILE.replace("\x1b", ""))
    assert msg.status == "error" and "Error (config_error): collection name" in reply_text(msg)
    assert shown_safely(reply_text(msg))


# -- shown escaped where it was stored ------------------------------------------------------


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[Path]:
    """A knowledge base whose collection has the hostile name (stored by an older version,
    or by anyone who could write the file), a document whose name and metadata are
    hostile, and a source folder with a hostile name."""
    db = tmp_path / "kb.duckdb"
    source = tmp_path / SOURCE
    source.mkdir()
    (source / f"read{RLO}me.txt").write_text("The boiler is serviced in May.")
    assert main(["--db", str(db), "add", "Plain", str(source), "--create"]) == 0
    with hybridkb.connect(db) as kb:
        kb.collection("Plain").add_texts(
            ["The roof was fixed in June."], ids=["roof"], metadatas=[{"by": ANSI}]
        )
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE hybridkb_collections SET name = ?", [HOSTILE])
    yield db


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main(list(args)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out
    return out


def test_the_cli_shows_stored_names_escaped(
    planted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", str(planted)]
    for args in (
        ["list"],
        ["describe", HOSTILE],
        ["search", HOSTILE, "boiler"],
        ["search", HOSTILE, "roof", "--full"],
        ["sources", HOSTILE],
    ):
        out = cli(capsys, *db, *args)
        assert shown_safely(out), (args, out)
        assert RLO not in out and "\\u202e" in out, (args, out)
        assert not any(line.startswith("removed") for line in out.splitlines()), out
    assert SHOWN in cli(capsys, *db, "list")


def test_the_cli_json_keeps_the_data_and_shows_it_safely(
    planted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", str(planted)]
    listed = cli(capsys, *db, "list", "--json")
    described = cli(capsys, *db, "describe", HOSTILE, "--json")
    found = cli(capsys, *db, "search", HOSTILE, "roof", "--json")
    for out in (listed, described, found):
        assert shown_safely(out), out
    # The same data once parsed.
    assert json.loads(listed)["collections"][0]["name"] == HOSTILE
    assert json.loads(described)["sources"][0]["path"].endswith(SOURCE)
    hits = json.loads(found)
    hits = hits["results"] if isinstance(hits, dict) else hits
    assert hits[0]["collection"] == HOSTILE and hits[0]["metadata"]["by"] == ANSI


def test_the_tools_show_stored_names_escaped(planted: Path) -> None:
    with hybridkb.connect(planted) as kb:
        tools = by_name(make_tools(kb))
        answers = {
            "kb_list": call(tools["kb_list"]),
            "describe": call(tools["describe_kb_collection"], collection_name=HOSTILE),
            "search": call(tools["search_kb"], query="roof", collection_name=HOSTILE),
            "missing": call(tools["describe_kb_collection"], collection_name=HOSTILE + "x"),
        }
    for what, msg in answers.items():
        text = reply_text(msg)
        assert shown_safely(text), (what, text)
        assert RLO not in text and "\\u202e" in text, (what, text)
    # On one line: the line separator folded like other whitespace.
    assert SHOWN.replace("\\u2028", " ") in reply_text(answers["kb_list"])


def test_graph_node_labels_are_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "kb.duckdb"
    node = f"ent:{RLO}x\n[9] injected"  # ids are anyone's text too (an import, a user node)
    with hybridkb.connect(db) as kb:
        kb.create_collection("Notes").add_texts(["The boiler is serviced in May."], ids=["a"])
        kb.graph.add_node(node, "concept", {"name": ANSI})
        doc = f"doc:{kb.collection('Notes').record.id}:a"
        kb.graph.relate(doc, node, f"MENTIONS\n{RLO}")
        tools = by_name(make_graph_tools(kb))
        answers = [
            reply_text(call(tools["graph_neighbors"], node_id=doc)),
            reply_text(call(tools["graph_find_paths"], source_id=doc, target_id=node)),
            reply_text(call(tools["graph_relate"], source_id=node, target_id=doc)),
        ]
    answers.append(cli(capsys, "--db", str(db), "graph", "neighbors", doc))
    answers.append(cli(capsys, "--db", str(db), "graph", "path", doc, node))
    for text in answers:
        assert shown_safely(text) and "\\u202e" in text, text
        assert not any(line.startswith("[9]") for line in text.splitlines()), text


def test_every_cli_line_goes_through_one_door() -> None:
    """The CLI prints only through ``cli.common.echo`` (which applies the rule), so a new
    command cannot print a name raw."""
    src = ROOT / "src" / "hybridkb"
    raw = [
        f"{path.relative_to(src)}:{n}"
        for path in sorted(src.rglob("*.py"))
        if path.relative_to(src) != Path("cli/common.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bclick\.echo\(", line)
    ]
    assert raw == []


# -- errors: the rule where the message is made ---------------------------------------


def test_the_mcp_servers_startup_lines_show_what_they_quote_escaped(tmp_path: Path) -> None:
    """A repository's hostile ``.env`` names the model; the stdio server's warm-up line
    quoted the hub's own error, which repeats the name raw (ESC and all), to stderr."""
    import os
    import subprocess
    import sys
    import threading

    (tmp_path / ".env").write_text(f"HYBRIDKB_MODEL=fa{ANSI}ke\n")
    server = subprocess.Popen(
        [sys.executable, "-m", "hybridkb", "--db", str(tmp_path / "kb.duckdb"), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "HYBRIDKB_MODEL"},  # .env's, then
    )
    assert server.stdin is not None and server.stderr is not None
    lines: list[str] = []
    warmed = threading.Event()

    def read() -> None:
        assert server.stderr is not None
        for raw in server.stderr:
            lines.append(raw.decode("utf-8", "replace"))
            if "embedding model" in lines[-1]:
                warmed.set()
        warmed.set()

    reader = threading.Thread(target=read)
    reader.start()
    warmed.wait(120)  # a hang guard: the warm-up follows the tools' loading
    server.stdin.close()
    assert server.wait(120) == 0
    reader.join()
    server.stderr.close()
    said = "".join(lines)
    assert "embedding model" in said, said
    assert shown_safely(said) and "\\x1b" in said, said


def test_every_error_message_is_printable_wherever_it_is_shown() -> None:
    """KBError applies the rule to its message, so a line that prints one (a server's
    startup line, a library user's ``print(exc)``, a log) shows names escaped."""
    from hybridkb import errors

    for cls in (errors.KBError, errors.ConfigError, errors.ModelUnavailable, errors.IngestError):
        exc = cls(f"cannot find {SOURCE!r} ({SOURCE})")
        assert shown_safely(str(exc)) and shown_safely(exc.message), str(exc)
        assert str(exc) == printable(str(exc), lines=True)  # shown again, it stays the same
        assert "\n" in str(exc)  # newlines stay: the CLI makes one line, a tool shows several
