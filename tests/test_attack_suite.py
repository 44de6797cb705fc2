"""A standing attack suite: adversarial arguments to every tool, the MCP wrapper and the CLI.

Each call must either succeed or answer with the documented error (a tool message
starting ``Error (<code>)``, an MCP error result with the same text, or a CLI exit 1/2
with one line on stderr and no traceback). Afterwards the workspace still searches,
another workspace is unchanged, and no file outside the allowed folders was read.
Hypothesis runs derandomised, so CI sees the same inputs every time (150 per tool and 80
CLI calls under the ``ci`` profile, 40 and 20 in the fast inner loop:
tests/support/long_runs.py); the counts are printed with ``-s``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from internals import duckdb_storage
from langchain_core.messages import ToolMessage
from long_runs import budget

import hybridkb
from hybridkb.agents.tools import make_tools
from hybridkb.cli.commands import main
from hybridkb.errors import InvalidFilter

SECRET = "ATTACK-OUTSIDE-SECRET-c41d"
COUNTS: Counter[str] = Counter()
SETTINGS = settings(
    derandomize=True,
    deadline=None,
    max_examples=budget(ci=150, fast=40),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def deep(n: int, inner: str = '"x"', kind: str = "list") -> str:
    if kind == "list":
        return "[" * n + inner + "]" * n
    return '{"a":' * n + inner + "}" * n


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("attack")
    inside, outside = root / "allowed", root / "outside"
    inside.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET} private")
    (inside / "ok.txt").write_text("a harmless inside note about depreciation")
    (inside / "out.txt").symlink_to(outside / "secret.txt")
    (inside / "loop.txt").symlink_to(inside / "loop.txt")
    (inside / "dirlink").symlink_to(outside)
    os.mkfifo(inside / "pipe.txt")
    db = root / "kb.duckdb"
    with hybridkb.connect(db, model="fake", cache_dir=root / "cache") as kb:
        kb.in_workspace("bystander").create_collection("Theirs").add_texts(
            ["bystander text"], ids=["b"]
        )
        mine = kb.in_workspace("attacker")
        mine.create_collection("Target").add_texts(["depreciation schedule"], ids=["t"])
        tools = {t.name: t for t in make_tools(mine, allowed_paths=[inside])}
        yield {"kb": kb, "mine": mine, "tools": tools, "inside": inside, "db": db, "root": root}


PATHS = [
    "..", "../outside/secret.txt", "~", "~/.bashrc", "~root/x", "/etc/passwd", "/proc/self/environ",
    "/dev/zero", "/dev/null", "out.txt", "loop.txt", "pipe.txt", "dirlink", "dirlink/secret.txt",
    "ok.txt", ".", "./ok.txt", "ok.txt\x00.pdf", "a" * 5000, "\n".join(["ok.txt"] * 3),
    "C:\\Windows\\system.ini", "\\\\server\\share\\x.pdf", "file:///etc/passwd", "%2e%2e/secret",
]  # fmt: skip
HOSTILE_TEXT = st.one_of(
    st.text(max_size=300),
    st.sampled_from(PATHS),
    st.integers(1, 3000).map(lambda n: deep(n)),
    st.integers(1, 3000).map(lambda n: deep(n, kind="object")),
    st.integers(1, 2000).map(lambda n: '[{"content": "x", "metadata": ' + deep(n, "1", "object") + "}]"),
    st.just("@HUGE"),
    st.just("@MANY"),
    st.text(alphabet=st.characters(max_codepoint=0x1F), max_size=50),
    st.just('{"content": "\\u0000 nul inside", "metadata": {"n": NaN}}'),
    st.just('[{"content": "note", "metadata": {"k": 1e999}}]'),
)  # fmt: skip
FILTER_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=5)),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.sampled_from(["$and", "$or", "$in", "$nin", "$gt", "$ne", "page", "x", "$bogus"]),
            children,
            max_size=3,
        ),
    ),
    max_leaves=30,
)  # fmt: skip


def expand(text: Any) -> Any:
    """Big inputs are drawn as markers (Hypothesis would print them) and expanded here."""
    if text == "@HUGE":
        return "x" * 9_000_000
    if text == "@MANY":
        return '["' + '", "'.join(["ok.txt"] * 2000) + '"]'
    return text


def _check_tool_answer(msg: Any) -> None:
    assert isinstance(msg, ToolMessage)
    content = str(msg.content)
    if msg.status == "error":
        assert content.startswith("Error ("), content[:200]
        COUNTS["tool refused"] += 1
    else:
        COUNTS["tool answered"] += 1
    assert SECRET not in content


def _call(tool: Any, args: dict[str, Any]) -> None:
    msg = tool.invoke({"type": "tool_call", "id": "1", "name": tool.name, "args": args})
    _check_tool_answer(msg)


@SETTINGS
@given(
    documents=HOSTILE_TEXT,
    name=st.sampled_from(["Target", "target", "  Target  ", "Nope", "x" * 300, "\x00"]),
)
def test_add_and_create_take_any_documents(
    world: dict[str, Any], documents: str, name: str
) -> None:
    os.chdir(world["inside"])
    _call(
        world["tools"]["add_kb_documents"],
        {"collection_name": name, "documents": expand(documents)},
    )
    COUNTS["inputs"] += 1


@SETTINGS
@given(ids=HOSTILE_TEXT)
def test_delete_takes_any_ids(world: dict[str, Any], ids: str) -> None:
    _call(world["tools"]["delete_kb_documents"], {"collection_name": "Nope", "ids": expand(ids)})
    COUNTS["inputs"] += 1


@SETTINGS
@given(
    query=HOSTILE_TEXT,
    limit=st.one_of(st.integers(-5, 100), st.just(10**12)),
    name=st.text(max_size=20),
)
def test_search_takes_any_query(world: dict[str, Any], query: str, limit: int, name: str) -> None:
    _call(
        world["tools"]["search_kb"],
        {"query": expand(query)[:200_000], "collection_name": name, "limit": limit},
    )
    COUNTS["inputs"] += 1


@SETTINGS
@given(where=FILTER_VALUES)
def test_filters_are_refused_or_applied(world: dict[str, Any], where: Any) -> None:
    coll = world["mine"].collection("Target")
    try:
        coll.search("depreciation", k=3, where=where)
        COUNTS["filter applied"] += 1
    except InvalidFilter:
        COUNTS["filter refused"] += 1
    COUNTS["inputs"] += 1


@SETTINGS
@given(args=st.dictionaries(st.sampled_from(["collection_name", "documents", "ids", "query", "limit", "sql", "bogus"]),
                            st.one_of(HOSTILE_TEXT, st.integers(), st.lists(st.integers(), max_size=3), st.none()),
                            max_size=4))  # fmt: skip
def test_mcp_wrapper_answers_every_call(world: dict[str, Any], args: dict[str, Any]) -> None:
    from hybridkb.mcp.server import mcp_function

    args = {k: expand(v) for k, v in args.items()}
    for lc_tool in world["tools"].values():
        result = mcp_function(lc_tool)(**args)
        text = result.content[0].text
        if result.is_error:
            assert text.startswith("Error ("), text[:200]
            COUNTS["mcp refused"] += 1
        else:
            COUNTS["mcp answered"] += 1
        assert SECRET not in text
    COUNTS["inputs"] += 1


def run_cli(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """The real entry point (``hybridkb`` runs ``main``), output captured."""
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, out.getvalue(), err.getvalue()


@settings(derandomize=True, deadline=None, max_examples=budget(ci=80, fast=20),
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(arg=HOSTILE_TEXT, command=st.sampled_from(["search", "add", "delete", "describe", "create"]))
def test_cli_never_prints_a_traceback(world: dict[str, Any], arg: str, command: str) -> None:
    arg = expand(arg)[:100_000].replace("\x00", "")  # the OS refuses NUL in argv
    argv = {
        "search": ["search", "Target", "depreciation", "--where", arg],
        "add": ["add", "Target", arg],
        "delete": ["delete", "Target", arg or "x"],
        "describe": ["describe", arg or "x"],
        "create": ["create", arg or "x"],
    }[command]
    code, out, err = run_cli(
        ["--db", str(world["root"] / "cli.duckdb"), "--workspace", "attacker", *argv],
        {"HYBRIDKB_MODEL": "fake", "HYBRIDKB_ALLOWED_PATHS": str(world["inside"])},
    )
    assert code in (0, 1, 2), (argv, err[-500:])
    assert "Traceback" not in out + err
    if code:
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines and all(line.startswith("hybridkb: ") for line in lines), err[-500:]
        COUNTS["cli refused"] += 1
    else:
        COUNTS["cli answered"] += 1
    assert SECRET not in out + err
    COUNTS["inputs"] += 1


def test_zz_afterwards_the_workspace_is_whole_and_nothing_leaked(world: dict[str, Any]) -> None:
    kb, mine = world["kb"], world["mine"]
    assert mine.collection("Target").search("depreciation", k=3)
    bystander = kb.in_workspace("bystander")
    assert bystander.collection_names() == ["Theirs"]
    assert [h.document_id for h in bystander.collection("Theirs").search("bystander", k=5)] == ["b"]
    for name in mine.collection_names():
        coll = mine.collection(name)
        for doc in coll.documents(limit=10_000):
            assert all(SECRET not in c.text for c in coll.chunks(doc.document_id))
    print(f"\nattack suite: {dict(COUNTS)}")


# -- regressions for the breaks of issue 11 ------------------------------------------------


def test_break4_deep_json_in_documents_and_ids_is_an_answer_not_a_crash(
    world: dict[str, Any],
) -> None:
    tools = world["tools"]
    for args, tool in (
        ({"collection_name": "Target", "documents": deep(1000)}, "add_kb_documents"),
        ({"collection_name": "Target", "documents": deep(1000, kind="object")}, "add_kb_documents"),
        ({"collection_name": "Target", "ids": deep(1000)}, "delete_kb_documents"),
    ):
        msg = tools[tool].invoke({"type": "tool_call", "id": "1", "name": tool, "args": args})
        assert msg.status == "error" and "nested more than 20 levels" in msg.content, msg.content


def test_break4_deep_where_is_refused_everywhere(world: dict[str, Any]) -> None:
    coll = world["mine"].collection("Target")
    nested: Any = {"page": 1}
    for _ in range(1200):
        nested = {"$and": [nested]}
    with pytest.raises(InvalidFilter, match="nested more than 20 levels"):
        coll.search("x", where=nested)
    with pytest.raises(InvalidFilter, match="nested more than 20 levels"):
        coll.search("x", where=json.dumps(nested) if False else deep(1200, '{"page": 1}', "object"))
    text = '{"$and": [' * 600 + '{"page": 1}' + "]}" * 600
    code, out, err = run_cli(
        ["--db", str(world["root"] / "w.duckdb"), "search", "*", "x", "--where", text],
        {"HYBRIDKB_MODEL": "fake"},
    )
    assert code == 2 and "Traceback" not in out + err
    assert err.strip().startswith("hybridkb: where: nested more than 20 levels")


def test_break4_a_symlink_loop_is_one_line(world: dict[str, Any]) -> None:
    os.chdir(world["inside"])
    tool = world["tools"]["add_kb_documents"]
    msg = tool.invoke({"type": "tool_call", "id": "1", "name": tool.name,
                       "args": {"collection_name": "Target", "documents": "loop.txt"}})  # fmt: skip
    assert msg.status == "error" and "symlink loop" in msg.content


def test_break4_mcp_errors_carry_the_tool_message(world: dict[str, Any]) -> None:
    from hybridkb.mcp.server import mcp_function

    tool = world["tools"]["add_kb_documents"]
    result = mcp_function(tool)(collection_name="Target", documents=json.loads(deep(30)))
    assert result.is_error and result.content[0].text.startswith("Error (invalid_arguments)")
    assert "nested more than 20 levels" in result.content[0].text
    result = mcp_function(tool)(collection_name="Target", documents=deep(1000))
    assert result.is_error and "nested more than 20 levels" in result.content[0].text


def test_break5_deep_metadata_is_refused_at_ingest(world: dict[str, Any]) -> None:
    tool = world["tools"]["add_kb_documents"]
    record = '[{"content": "poison", "metadata": ' + deep(900, "1", "object") + "}]"
    msg = tool.invoke({"type": "tool_call", "id": "1", "name": tool.name,
                       "args": {"collection_name": "Target", "documents": record}})  # fmt: skip
    assert msg.status == "error" and "nested more than 20 levels" in msg.content
    with pytest.raises(hybridkb.ConfigError, match="metadata: nested more than 20 levels"):
        world["mine"].collection("Target").add_texts(
            ["poison"], metadatas=[json.loads(deep(100, "1", "object"))]
        )
    assert world["mine"].search("depreciation", k=2)  # search still works


def test_break5_metadata_stored_before_the_bound_cannot_break_search(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "old.duckdb", model="fake") as kb:
        coll = kb.create_collection("Old")
        coll.add_texts(["depreciation of vans"], ids=["v"])
        poison = deep(900, "1", "object")
        table = f"kb_c{coll.record.id}_chunks"
        storage = duckdb_storage(kb)
        storage.query(
            f"UPDATE {table} SET metadata = ?::JSON", [poison]
        )  # as an old version stored it
        storage.query(f"UPDATE kb_c{coll.record.id}_documents SET metadata = ?::JSON", [poison])
        storage.derived.forget(coll.record.id)
    with hybridkb.connect(tmp_path / "old.duckdb", model="fake") as kb:
        for _ in range(3):  # the row cache path too
            hits = kb.search("depreciation", k=1)
            assert (
                hits[0].document_id == "v" and hits[0].to_dict()["metadata"]["document_id"] == "v"
            )
        tools = {t.name: t for t in make_tools(kb)}
        msg = tools["search_kb"].invoke({"type": "tool_call", "id": "1", "name": "search_kb",
                                         "args": {"query": "depreciation"}})  # fmt: skip
        assert msg.status != "error" and "vans" in msg.content
