"""Settings: HYBRIDKB_* environment variables and ./.env, with explicit arguments on top.

The conftest fixture clears every HYBRIDKB_* variable (but sets HYBRIDKB_CACHE_DIR)
and runs each test in its own tmp_path, so a `.env` written here is the only one read.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pytest

import hybridkb
from hybridkb.errors import ConfigError
from hybridkb.locations import default_db
from hybridkb.settings import (
    DEFAULT_MODEL,
    Settings,
    environment_values,
    load_settings,
    with_overrides,
)


def write_env(folder: Path, text: str) -> None:
    (folder / ".env").write_text(text, encoding="utf-8")


def test_defaults_without_environment() -> None:
    s = load_settings()
    assert s.db == default_db()
    assert s.workspace == "default"
    assert s.model == DEFAULT_MODEL
    assert s.chunk_size == 1000 and s.chunk_overlap == 150
    assert s.reranker is None and s.pdf_password is None
    assert s.allowed_paths == [Path.cwd().resolve()]


def test_environment_variables_are_read_and_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_CHUNK_SIZE", "500")
    monkeypatch.setenv("HYBRIDKB_VECTOR_FEEDBACK", "0.25")
    monkeypatch.setenv("HYBRIDKB_SERVE", "false")
    monkeypatch.setenv("HYBRIDKB_OCR", "0")
    monkeypatch.setenv("HYBRIDKB_ENABLE_SQL_TOOL", "yes")
    monkeypatch.setenv("HYBRIDKB_FUSION", "rrf")
    s = load_settings()
    assert s.chunk_size == 500
    assert s.vector_feedback == 0.25
    assert s.serve is False and s.ocr is False and s.enable_sql_tool is True
    assert s.fusion == "rrf"


def test_environment_names_are_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("hybridkb_workspace", "lower")
    monkeypatch.setenv("HybridKB_Default_K", "7")
    s = load_settings()
    assert s.workspace == "lower"
    assert s.default_k == 7


def test_dotenv_in_the_working_directory_is_read(tmp_path: Path) -> None:
    write_env(tmp_path, "HYBRIDKB_WORKSPACE=from-dotenv\nhybridkb_chunk_overlap=10\n")
    s = load_settings()
    assert s.workspace == "from-dotenv"
    assert s.chunk_overlap == 10


def test_dotenv_is_read_from_the_current_directory_at_load_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_env(tmp_path, "HYBRIDKB_WORKSPACE=here\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_settings().workspace == "default"  # no .env here, and parents are not searched
    monkeypatch.chdir(tmp_path)
    assert load_settings().workspace == "here"


def test_environment_beats_dotenv_and_arguments_beat_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_env(tmp_path, "HYBRIDKB_WORKSPACE=dotenv\nHYBRIDKB_DEFAULT_K=3\nHYBRIDKB_CANDIDATES=50\n")
    monkeypatch.setenv("HYBRIDKB_WORKSPACE", "environment")
    monkeypatch.setenv("HYBRIDKB_DEFAULT_K", "4")
    s = load_settings(default_k=9)
    assert s.workspace == "environment"  # environment over .env
    assert s.default_k == 9  # argument over both
    assert s.candidates == 50  # .env over the default
    assert Settings(workspace="arg").workspace == "arg"
    assert Settings().workspace == "environment"  # Settings() reads them too


def test_none_arguments_leave_the_environment_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_DB", "env.duckdb")
    assert load_settings(db=None, workspace=None).db == "env.duckdb"


def test_unknown_names_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_NOT_A_SETTING", "1")
    monkeypatch.setenv("HYBRIDKB_TEST_POSTGRES_URL", "postgresql://x/y")
    write_env(tmp_path, "HYBRIDKB_ALSO_UNKNOWN=2\nDB=not-prefixed.duckdb\nOTHER=1\n")
    s = load_settings()
    assert s.db == default_db()
    assert "not_a_setting" not in s.as_dict()


def test_blank_optional_values_are_none_and_valueless_lines_are_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_env(tmp_path, "HYBRIDKB_RERANKER=\nHYBRIDKB_WORKSPACE\n")
    monkeypatch.setenv("HYBRIDKB_PDF_PASSWORD", "")
    s = load_settings()
    assert s.reranker is None and s.pdf_password is None
    assert s.workspace == "default"


def test_dotenv_syntax_quotes_comments_and_export(tmp_path: Path) -> None:
    write_env(
        tmp_path,
        "# a comment\n"
        'export HYBRIDKB_WORKSPACE="quoted name"\n'
        "HYBRIDKB_PDF_PASSWORD='s3cret'  # trailing comment\n",
    )
    s = load_settings()
    assert s.workspace == "quoted name"
    assert s.pdf_password == "s3cret"


def test_allowed_paths_split_on_the_path_separator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("HYBRIDKB_ALLOWED_PATHS", f"{a}{os.pathsep}{os.pathsep}{b}{os.pathsep} ")
    assert load_settings().allowed_paths == [a.resolve(), b.resolve()]


def test_allowed_paths_as_json_list_and_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRIDKB_ALLOWED_PATHS", '["docs", "~"]')
    assert load_settings().allowed_paths == [(tmp_path / "docs").resolve(), Path.home().resolve()]
    write_env(tmp_path, "HYBRIDKB_ALLOWED_PATHS=.\n")
    monkeypatch.delenv("HYBRIDKB_ALLOWED_PATHS")
    assert load_settings().allowed_paths == [tmp_path.resolve()]


def test_cache_dir_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_CACHE_DIR", "~/hkb-cache")
    assert load_settings().cache_dir == Path.home() / "hkb-cache"


def test_a_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_CHUNK_SIZE", "lots")
    with pytest.raises(ConfigError, match="HYBRIDKB_CHUNK_SIZE"):
        load_settings()


def test_a_bad_dotenv_value_names_the_variable(tmp_path: Path) -> None:
    write_env(tmp_path, "HYBRIDKB_FUSION=median\n")
    with pytest.raises(ConfigError, match="HYBRIDKB_FUSION"):
        load_settings()


def test_overlap_must_stay_below_size() -> None:
    with pytest.raises(ConfigError, match="HYBRIDKB_CHUNK_OVERLAP.*smaller than chunk_size"):
        load_settings(chunk_size=200, chunk_overlap=200)


def test_unknown_override_is_refused_with_the_closest_name() -> None:
    with pytest.raises(ConfigError, match="unknown option 'workspce'; did you mean 'workspace'"):
        load_settings(workspce="x")
    with pytest.raises(ConfigError, match="unknown option 'modle'"):
        with_overrides(load_settings(), modle="fake")


def test_with_overrides_keeps_the_rest_and_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    base = load_settings(model="fake", chunk_size=400, chunk_overlap=20)
    monkeypatch.setenv("HYBRIDKB_CHUNK_SIZE", "900")  # set after: must not leak into the copy
    copy = with_overrides(base, workspace="other", db=None)
    assert (copy.workspace, copy.model, copy.chunk_size, copy.db) == (
        "other",
        "fake",
        400,
        base.db,
    )
    assert base.workspace == "default"
    with pytest.raises(ConfigError, match="HYBRIDKB_DEFAULT_K"):
        with_overrides(base, default_k=0)


def test_public_shape() -> None:
    assert hybridkb.Settings is Settings
    assert Settings.options["db"].description
    assert Settings.options["chunk_size"].default == 1000
    s = Settings(model="fake")
    dumped = s.as_dict()
    assert dumped["model"] == "fake"
    assert set(dumped) == set(Settings.options)
    assert Settings.from_mapping(dumped) == s


# -- how values are read: every coercion rule and every refusal ------------------------
#
# These pin the rules pydantic's lax mode applied when Settings was a pydantic model,
# so the plain class that replaced it reads every value the same way.

ENV_FIX = r"; fix it in the environment or \.env$"
ARG_FIX = r"; fix the argument [a-z_]+$"


@pytest.mark.parametrize(
    ("field", "text", "expected"),
    [
        # whole numbers: surrounding space, a sign, single underscores, a zero fraction
        ("chunk_size", "500", 500),
        ("default_k", " 7 ", 7),
        ("chunk_overlap", " 10\t", 10),
        ("chunk_size", "+500", 500),
        ("chunk_size", "00500", 500),
        ("chunk_size", "5_00", 500),
        ("chunk_size", "500.0", 500),
        ("chunk_size", "500.00", 500),
        ("chunk_overlap", "-0", 0),
        ("embed_batch_size", "-3", -3),  # no bounds: any whole number
        ("rrf_k", "0", 0),
        ("rerank_depth", "1000", 1000),  # bounds are inclusive
        ("row_cache_mb", "0", 0),
        # numbers: what float() reads, in ASCII
        ("vector_feedback", "0.25", 0.25),
        ("vector_feedback", " .5 ", 0.5),
        ("vector_feedback", "1.", 1.0),
        ("vector_feedback", "2", 2.0),
        ("vector_feedback", "1e-1", 0.1),
        ("vector_feedback", "+1.5", 1.5),
        ("lock_timeout", "0", 0.0),
        ("lock_timeout", "inf", float("inf")),
        ("lock_timeout", "Infinity", float("inf")),
        ("lock_timeout", "1e400", float("inf")),
        # flags: these words in any case, and nothing else
        *[("ocr", word, True) for word in ("true", "True", "TRUE", "1", "yes", "on", "y", "t")],
        *[("serve", word, False) for word in ("false", "0", "no", "NO", "off", "Off", "n", "f")],
        # choices: exactly as written
        ("fusion", "rrf", "rrf"),
        ("embedding_backend", "onnx-int8", "onnx-int8"),
        ("default_mode", "keyword", "keyword"),
        ("chunk_strategy", "size", "size"),
        ("serve_transport", "tcp", "tcp"),
        # text: kept as it is, spaces and all; only the optional ones read "" as unset
        ("workspace", " x ", " x "),
        ("workspace", "", ""),
        ("reranker", " ", " "),
        ("pdf_password", "", None),
        # paths: the cache folder is expanded, not resolved
        ("cache_dir", "~/x", Path.home() / "x"),
        ("cache_dir", "", Path()),
        ("allowed_paths", "", []),
        ("allowed_paths", " ", []),
        ("allowed_paths", "[]", []),
        ("allowed_paths", '["~"]', [Path.home().resolve()]),
    ],
)
def test_environment_text_is_coerced(
    field: str, text: str, expected: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"HYBRIDKB_{field.upper()}", text)
    value = getattr(load_settings(), field)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("field", "text"),
    [
        *[
            ("chunk_size", text)
            for text in ("lots", "", "500.5", "500.", "5e2", "0x1F4", "1__000", "_1000", "500 0")
        ],
        ("chunk_size", "١٢٣٤"),  # digits of other scripts are not read
        ("chunk_size", "99"),  # below the bound
        ("chunk_overlap", "-1"),
        ("default_k", "0"),
        ("candidates", "0"),
        ("rerank_depth", "0"),
        ("rerank_depth", "1001"),
        ("row_cache_mb", "-1"),
        *[
            ("vector_feedback", text)
            for text in ("abc", "", "0x1", "0,5", "1.2.3", "２", "2.0001", "-0.1")
        ],
        *[("vector_feedback", text) for text in ("nan", "NaN", "inf", "-inf")],
        ("lock_timeout", "nan"),
        ("lock_timeout", "-1"),
        *[("ocr", text) for text in ("", "2", "maybe", "1.0", "00", " true ", "\ttrue", "True ")],
        ("fusion", "RRF"),
        ("fusion", " rrf"),
        ("fusion", "median"),
        ("embedding_backend", "ONNX"),
        ("default_mode", "Hybrid"),
        ("chunk_strategy", "SIZE"),
        ("serve_transport", "udp"),
        ("allowed_paths", "["),
        ("allowed_paths", "[1]"),
        ("allowed_paths", "[null]"),
        ("allowed_paths", '["a"] x'),
        ("allowed_paths", "[]]"),
    ],
)
def test_bad_environment_text_is_refused(
    field: str, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"HYBRIDKB_{field.upper()}", text)
    with pytest.raises(ConfigError, match=rf"^HYBRIDKB_{field.upper()}: .+{ENV_FIX}") as info:
        load_settings()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("embed_batch_size", 5.0, 5),
        ("embed_batch_size", True, 1),
        ("embed_batch_size", Decimal("5"), 5),
        ("chunk_size", b" 500 ", 500),
        ("chunk_size", 10**30, 10**30),
        ("vector_feedback", 1, 1.0),
        ("vector_feedback", True, 1.0),
        ("vector_feedback", Decimal("0.5"), 0.5),
        ("vector_feedback", b"0.5", 0.5),
        ("ocr", 1, True),
        ("ocr", 0, False),
        ("ocr", 1.0, True),
        ("ocr", 0.0, False),
        ("ocr", b"yes", True),
        ("workspace", b"caf\xc3\xa9", "café"),
        ("workspace", bytearray(b"ba"), "ba"),
        ("reranker", b"", ""),  # only the text "" reads as unset
        ("cache_dir", Path("~/y"), Path.home() / "y"),
        ("allowed_paths", ["a", Path("b")], lambda: [Path("a").resolve(), Path("b").resolve()]),
        ("allowed_paths", ("~",), [Path.home().resolve()]),
        ("allowed_paths", {"a"}, lambda: [Path("a").resolve()]),
        ("allowed_paths", frozenset({"a"}), lambda: [Path("a").resolve()]),
        ("allowed_paths", [""], lambda: [Path.cwd().resolve()]),
        (
            "allowed_paths",
            f"a{os.pathsep}[x]",
            lambda: [Path("a").resolve(), Path("[x]").resolve()],
        ),
    ],
)
def test_argument_values_are_coerced(field: str, value: object, expected: object) -> None:
    if callable(expected):  # relative paths resolve against the test's working folder
        expected = expected()
    got = getattr(with_overrides(Settings(model="fake"), **{field: value}), field)
    assert got == expected
    assert type(got) is type(expected)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("chunk_size", 500.5),
        ("chunk_size", float("nan")),
        ("chunk_size", float("inf")),
        ("chunk_size", Decimal("500.5")),
        ("chunk_size", True),  # 1, below the bound
        ("chunk_size", "5" * 5000),
        ("ocr", 2),
        ("ocr", 0.5),
        ("ocr", b"  yes"),
        ("workspace", 5),
        ("workspace", 5.0),
        ("workspace", True),
        ("db", Path("x")),
        ("workspace", b"\xff"),
        ("reranker", 5),
        ("pdf_password", 0),
        ("fusion", b"rrf"),
        ("fusion", 1),
        ("cache_dir", 5),
        ("cache_dir", b"/tmp"),
        ("allowed_paths", 5),
        ("allowed_paths", {"a": 1}),
        ("allowed_paths", [5]),
        ("allowed_paths", [b"a"]),
        ("allowed_paths", ["\x00"]),
        ("allowed_paths", "a\x00"),
    ],
)
def test_bad_argument_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"^HYBRIDKB_{field.upper()}: .+{ARG_FIX}") as info:
        with_overrides(Settings(model="fake"), **{field: value})
    assert "\n" not in str(info.value)


def test_defaults_go_through_the_rules_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYBRIDKB_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "~/xdg")
    s = load_settings()
    assert s.cache_dir == Path.home() / "xdg" / "hybridkb"  # expanded
    assert s.allowed_paths == [Path.cwd().resolve()]  # resolved


def test_overlap_is_checked_against_the_size_in_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(chunk_size=200, chunk_overlap=199).chunk_overlap == 199
    monkeypatch.setenv("HYBRIDKB_CHUNK_OVERLAP", "1000")  # the default size is 1000
    with pytest.raises(ConfigError, match=rf"^HYBRIDKB_CHUNK_OVERLAP: .*chunk_size.*{ENV_FIX}"):
        load_settings()
    assert load_settings(chunk_size=1001).chunk_overlap == 1000
    with pytest.raises(
        ConfigError,
        match=r"^HYBRIDKB_CHUNK_OVERLAP: .*chunk_size.*; fix the argument chunk_size or "
        r"HYBRIDKB_CHUNK_OVERLAP in the environment or \.env$",
    ):
        with_overrides(load_settings(chunk_size=1001), chunk_size=1000)
    with pytest.raises(ConfigError, match=r"; fix the arguments chunk_overlap, chunk_size$"):
        load_settings(chunk_size=200, chunk_overlap=300)


def test_the_first_bad_field_in_field_order_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_DEFAULT_K", "0")
    monkeypatch.setenv("HYBRIDKB_CHUNK_SIZE", "x")
    monkeypatch.setenv("HYBRIDKB_CHUNK_OVERLAP", "5000")
    with pytest.raises(ConfigError, match="^HYBRIDKB_CHUNK_SIZE: "):
        load_settings()


def test_settings_made_directly_raise_config_errors_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # (pydantic raised its ValidationError here, which no front end renders.)
    with pytest.raises(ConfigError, match=rf"^HYBRIDKB_CHUNK_SIZE: .+{ARG_FIX}"):
        Settings(chunk_size=5)
    monkeypatch.setenv("HYBRIDKB_DEFAULT_K", "0")
    with pytest.raises(ConfigError, match=rf"^HYBRIDKB_DEFAULT_K: .+{ENV_FIX}"):
        Settings()
    monkeypatch.delenv("HYBRIDKB_DEFAULT_K")
    assert with_overrides(Settings(), reranker=None).reranker is None  # None: no override
    assert Settings(reranker=None).reranker is None
    with pytest.raises(ConfigError, match=rf"^HYBRIDKB_WORKSPACE: .+{ARG_FIX}"):
        Settings.from_mapping({**Settings().as_dict(), "workspace": None})


def test_from_mapping_fills_the_rest_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HYBRIDKB_DB", "env.duckdb")
    s = Settings.from_mapping({"workspace": "w", "not_a_field": 1})
    assert (s.workspace, s.db) == ("w", "env.duckdb")


def test_environment_values_are_the_known_names_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_env(tmp_path, "HYBRIDKB_WORKSPACE=dotenv\nHYBRIDKB_DB=dotenv.duckdb\nHYBRIDKB_NOPE=1\n")
    monkeypatch.setenv("hybridkb_db", "env.duckdb")
    monkeypatch.setenv("HYBRIDKB_", "x")
    assert environment_values() == {
        "workspace": "dotenv",
        "db": "env.duckdb",
        "cache_dir": os.environ["HYBRIDKB_CACHE_DIR"],
    }


def test_dump_is_a_copy_and_equality_is_by_value() -> None:
    s = Settings(model="fake")
    dumped = s.as_dict()
    dumped["allowed_paths"].append(Path("/elsewhere"))
    assert s.allowed_paths == [Path.cwd().resolve()]
    assert s == Settings(model="fake") and s != Settings(model="other")
    as_object: object = dumped  # a dict is no Settings, however alike
    assert s != as_object
    assert with_overrides(s) == s and with_overrides(s) is not s
    with pytest.raises(TypeError):
        hash(s)


def test_every_field_is_described_with_its_default() -> None:
    plain = Settings()
    for name, info in Settings.options.items():
        assert info.description is None or isinstance(info.description, str)
        if name == "db":  # made per call: the per-user data folder
            assert plain.db == info.initial() == default_db()
        elif name not in ("allowed_paths", "cache_dir"):  # made per call
            assert getattr(plain, name) == info.default, name


@pytest.mark.parametrize(
    ("variable", "text", "problem"),
    [
        ("HYBRIDKB_CHUNK_SIZE", "50", "must be a whole number >= 100, got '50'"),
        ("HYBRIDKB_RERANK_DEPTH", "lots", "must be a whole number from 1 to 1000, got 'lots'"),
        ("HYBRIDKB_VECTOR_FEEDBACK", "nan", "must be a number from 0 to 2, got 'nan'"),
        ("HYBRIDKB_LOCK_TIMEOUT", "soon", "must be a number >= 0, got 'soon'"),
        ("HYBRIDKB_OCR", "maybe", "must be true or false (or 1/0, yes/no, on/off), got 'maybe'"),
        ("HYBRIDKB_FUSION", "median", "must be one of 'zscore', 'weighted', 'rrf', got 'median'"),
        ("HYBRIDKB_ALLOWED_PATHS", "[", "not a JSON list of folders (Expecting value: "),
        ("HYBRIDKB_ALLOWED_PATHS", "[1]", "each folder must be a path, got 1"),
        # A repository's .env: json.loads of it raised RecursionError (a traceback).
        ("HYBRIDKB_ALLOWED_PATHS", "[" * 5000, "a JSON list nested more than 20 levels deep"),
        ("HYBRIDKB_CHUNK_OVERLAP", "1000", "must be smaller than chunk_size (1000), got 1000"),
    ],
)
def test_messages_say_what_is_wrong_and_what_was_given(
    variable: str, text: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, text)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith(f"{variable}: {problem}")
    assert str(info.value).endswith("; fix it in the environment or .env")


def test_a_long_value_is_shortened_in_the_message() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(workspace=["x" * 500])
    assert len(str(info.value)) < 150


def test_a_home_folder_that_cannot_be_found_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (pydantic let the RuntimeError of expanduser() through.)
    monkeypatch.setenv("HYBRIDKB_CACHE_DIR", "~no-such-user-hybridkb/cache")
    with pytest.raises(ConfigError, match=r"^HYBRIDKB_CACHE_DIR: cannot expand '~no-such-user"):
        load_settings()
    with pytest.raises(ConfigError, match=r"^HYBRIDKB_ALLOWED_PATHS: cannot expand"):
        load_settings(allowed_paths=["~no-such-user-hybridkb"])


def test_the_pdf_password_is_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_PDF_PASSWORD", "hunter2")
    settings = Settings()
    assert settings.pdf_password == "hunter2"
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings)
