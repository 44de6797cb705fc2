"""What agents send: path detection, list splitting, and the allowed-folder check."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridkb.agents.inputs import (
    check_allowed,
    looks_like_path,
    parse_documents,
    parse_ids,
    split_items,
    unquote,
)
from hybridkb.errors import AccessDenied, ConfigError, KBError

# -- looks_like_path ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "report.pdf",
        "REPORT.PDF",
        "tax 2023.pdf",
        "notes.md",
        "a.docx",
        "data.xlsx",
        "~/docs/return.pdf",
        "~",
        "./x",
        "../x",
        "/abs/path",
        "/home/u/My Documents",
        "docs/tax",
        "C:\\Users\\me\\tax.docx",
        "C:/Users/me",
        '"~/docs/a b.pdf"',
        "'report.pdf'",
        "`notes.txt`",
        ".",
        "..",
        "My Documents/tax 2023.pdf",
        "\\\\server\\share\\f.txt",
    ],
)
def test_path_like_strings_are_paths(text: str) -> None:
    assert looks_like_path(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello",
        "hello world",
        "and/or",
        "24/7",
        "1/2/2024",
        "Q3 revenue up 5%",
        "Remember to call the accountant about the 2023 return.pdf next Monday please",
        "line one\nline two.pdf",
        "/ 3 of the staff",
        "meeting notes: budget is fine",
        "x" * 5000 + ".pdf",
        "Use TCP/IP and HTTP/2 for this",
    ],
)
def test_prose_is_not_a_path(text: str) -> None:
    assert not looks_like_path(text)


@given(st.text(max_size=300))
def test_looks_like_path_never_raises(text: str) -> None:
    assert looks_like_path(text) in (True, False)


# -- split_items / parse_ids -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a.pdf", ["a.pdf"]),
        ("a.pdf\nb.pdf\n\n", ["a.pdf", "b.pdf"]),
        ("a.pdf, b.pdf", ["a.pdf", "b.pdf"]),
        ('["a.pdf", "b.pdf"]', ["a.pdf", "b.pdf"]),
        ('"a, b.pdf", "c.pdf"', ["a, b.pdf", "c.pdf"]),
        ("'a.pdf' 'b c.pdf'", ["a.pdf", "b c.pdf"]),
        ("a.pdf;\nb.pdf;", ["a.pdf", "b.pdf"]),
        ("a.pdf, a.pdf", ["a.pdf"]),
        ("[1, 2]", ["1", "2"]),
        ("  ", []),
    ],
)
def test_split_items_accepts_the_list_forms_agents_send(text: str, expected: list[str]) -> None:
    assert split_items(text) == expected


def test_split_items_rejects_non_string_json_items() -> None:
    with pytest.raises(ConfigError, match="expected a string"):
        split_items('[{"a": 1}]')


@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20),
        max_size=10,
    )
)
def test_split_items_json_list_round_trips(items: list[str]) -> None:
    expected = [i for i in dict.fromkeys(unquote(i).strip() for i in items) if i]
    assert split_items(json.dumps(items)) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3f2a9c1b7d4e5f60", ["3f2a9c1b7d4e5f60"]),
        ("3f2a9c1b7d4e5f60, a1b2c3d4e5f60718", ["3f2a9c1b7d4e5f60", "a1b2c3d4e5f60718"]),
        ("3f2a9c1b7d4e5f60 a1b2c3d4e5f60718", ["3f2a9c1b7d4e5f60", "a1b2c3d4e5f60718"]),
        ('["x", "y"]', ["x", "y"]),
        ('"x"\n"y"', ["x", "y"]),
        ("my note id", ["my note id"]),
    ],
)
def test_parse_ids(text: str, expected: list[str]) -> None:
    assert parse_ids(text) == expected


@pytest.mark.parametrize("text", ["", "  ", "[]", ","])
def test_parse_ids_refuses_empty(text: str) -> None:
    with pytest.raises(ConfigError, match="ids: empty"):
        parse_ids(text)


# -- parse_documents ---------------------------------------------------------------------


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "allowed"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha")
    (root / "b c.md").write_text("# bravo")
    (root / "sub" / "d.txt").write_text("delta")
    (tmp_path / "secret.txt").write_text("secret")
    return root


def test_single_path_relative_to_base(docs: Path) -> None:
    got = parse_documents("a.txt", allowed=[docs], base=docs)
    assert got.paths == [docs / "a.txt"]


@pytest.mark.parametrize(
    "text",
    [
        "a.txt\nb c.md",
        "a.txt, b c.md",
        '["a.txt", "b c.md"]',
        '"a.txt", "b c.md"',
        "'a.txt'\n'b c.md'",
        "a.txt,\n b c.md",
    ],
)
def test_several_paths_in_any_list_form(docs: Path, text: str) -> None:
    got = parse_documents(text, allowed=[docs], base=docs)
    assert got.paths == [docs / "a.txt", docs / "b c.md"]
    assert got.note is None


def test_folder_and_absolute_paths(docs: Path) -> None:
    got = parse_documents(f"{docs / 'sub'}\n{docs / 'a.txt'}", allowed=[docs], base=Path("/"))
    assert got.paths == [docs / "sub", docs / "a.txt"]


def test_tilde_is_expanded(docs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(docs))
    got = parse_documents("~/sub/d.txt", allowed=[docs], base=Path("/"))
    assert got.paths == [docs / "sub" / "d.txt"]


def test_dot_is_the_current_folder(docs: Path) -> None:
    assert parse_documents(".", allowed=[docs], base=docs / "sub").paths == [docs / "sub"]
    with pytest.raises(AccessDenied):
        parse_documents("..", allowed=[docs / "sub"], base=docs / "sub")


def test_existing_file_without_extension_is_a_path(docs: Path) -> None:
    (docs / "README").write_text("read me")
    assert parse_documents("README", allowed=[docs], base=docs).paths == [docs / "README"]


def test_plain_text_is_a_note(docs: Path) -> None:
    text = "Call the accountant on Monday, then file the return."
    got = parse_documents(text, allowed=[docs], base=docs)
    assert got.note == text and not got.paths


def test_multiline_prose_mentioning_a_file_is_a_note(docs: Path) -> None:
    text = "Summary of the meeting\nreport.pdf\nWe agreed to revise the budget."
    assert parse_documents(text, allowed=[docs], base=docs).note == text


def test_missing_path_is_an_error_naming_it(docs: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.pdf: no such file or folder"):
        parse_documents("missing.pdf", allowed=[docs], base=docs)
    with pytest.raises(ConfigError, match="nope/x"):
        parse_documents("a.txt\nnope/x", allowed=[docs], base=docs)


def test_json_records(docs: Path) -> None:
    text = json.dumps(
        [
            {"content": "first", "metadata": {"year": 2023}},
            {"page_content": "second", "id": "n2"},
        ]
    )
    got = parse_documents(text, allowed=[docs], base=docs)
    assert got.records == [
        {"content": "first", "metadata": {"year": 2023}},
        {"content": "second", "metadata": {}, "id": "n2"},
    ]
    one = parse_documents('{"content": "solo"}', allowed=[docs], base=docs)
    assert one.records == [{"content": "solo", "metadata": {}}]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('[{"content": "x", "metadata": 3}]', "metadata"),
        ('[{"content": ""}]', "non-empty"),
        ('[{"content": "x", "colour": 1}]', "unknown keys"),
        ('[{"content": "x"}, 5]', r"documents\[1\]"),
        ('[{"content": "x",}]', "not valid JSON"),
        ("[]", "empty JSON list"),
    ],
)
def test_bad_json_records_are_explained(docs: Path, text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_documents(text, allowed=[docs], base=docs)


def test_bracketed_prose_is_a_note(docs: Path) -> None:
    text = "[Draft] notes from Tuesday"
    assert parse_documents(text, allowed=[docs], base=docs).note == text


def test_empty_documents(docs: Path) -> None:
    assert parse_documents("  \n", allowed=[docs], base=docs).empty


# -- the allowed-folder check ------------------------------------------------------------


def test_absolute_path_outside_is_refused_naming_allowed_folders(docs: Path) -> None:
    secret = docs.parent / "secret.txt"
    with pytest.raises(AccessDenied) as info:
        parse_documents(str(secret), allowed=[docs], base=docs)
    assert str(docs) in str(info.value) and "secret.txt" in str(info.value)


def test_dotdot_is_resolved_before_the_check(docs: Path) -> None:
    with pytest.raises(AccessDenied):
        parse_documents("../secret.txt", allowed=[docs], base=docs)
    with pytest.raises(AccessDenied):
        parse_documents("sub/../../secret.txt", allowed=[docs], base=docs)
    # ".." that stays inside is fine
    assert parse_documents("sub/../a.txt", allowed=[docs], base=docs).paths == [docs / "a.txt"]


def test_tilde_outside_is_refused(docs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(docs.parent))
    with pytest.raises(AccessDenied):
        parse_documents("~/secret.txt", allowed=[docs], base=docs)


def test_missing_path_outside_is_refused_not_probed(docs: Path) -> None:
    # Outside the allowed folders we say "not allowed", not whether it exists.
    with pytest.raises(AccessDenied):
        parse_documents("/nonexistent/dir/x.pdf", allowed=[docs], base=docs)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_symlinked_file_pointing_out_is_refused(docs: Path) -> None:
    (docs / "link.txt").symlink_to(docs.parent / "secret.txt")
    with pytest.raises(AccessDenied, match="secret.txt"):
        parse_documents("link.txt", allowed=[docs], base=docs)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_folder_containing_a_link_out_is_refused(docs: Path) -> None:
    (docs / "sub" / "escape.txt").symlink_to(docs.parent / "secret.txt")
    with pytest.raises(AccessDenied, match="escape.txt"):
        parse_documents("sub", allowed=[docs], base=docs)
    (docs / "sub" / "escape.txt").unlink()
    (docs / "sub" / "outdir").symlink_to(docs.parent, target_is_directory=True)
    with pytest.raises(AccessDenied, match="outdir"):
        parse_documents("sub", allowed=[docs], base=docs)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_links_inside_the_allowed_folders_are_fine(docs: Path) -> None:
    (docs / "sub" / "again.txt").symlink_to(docs / "a.txt")
    (docs / "sub" / "loop").symlink_to(docs, target_is_directory=True)
    (docs / "sub" / ".hidden").symlink_to(docs.parent / "secret.txt")  # loaders skip hidden
    assert parse_documents("sub", allowed=[docs], base=docs).paths == [docs / "sub"]


def test_check_allowed_with_several_folders(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert check_allowed(str(b / "x"), [a, b]) == b / "x"
    with pytest.raises(AccessDenied) as info:
        check_allowed(str(tmp_path / "c"), [a, b])
    assert str(a) in str(info.value) and str(b) in str(info.value)


def test_nul_in_a_path_is_a_clean_error(docs: Path) -> None:
    with pytest.raises(KBError):
        check_allowed("a\x00.txt", [docs], base=docs)


_ROOT = Path(tempfile.mkdtemp(prefix="hkb-agent-input-")).resolve()
(_ROOT / "exists.txt").write_text("x")


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_parse_documents_returns_or_raises_kberror_for_any_text(text: str) -> None:
    try:
        got = parse_documents(text, allowed=[_ROOT], base=_ROOT)
    except KBError:
        return
    forms = [bool(got.paths), bool(got.records), got.note is not None]
    assert sum(forms) <= 1
    assert all(p == _ROOT or p.is_relative_to(_ROOT) for p in got.paths)
    if got.note is not None:
        assert got.note == text
