"""Settings: HYBRIDKB_* environment variables and ./.env, with explicit arguments on top.

The conftest fixture clears every HYBRIDKB_* variable (but sets HYBRIDKB_CACHE_DIR)
and runs each test in its own tmp_path, so a `.env` written here is the only one read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import hybridkb
from hybridkb.errors import ConfigError
from hybridkb.settings import DEFAULT_MODEL, Settings, load_settings, with_overrides


def write_env(folder: Path, text: str) -> None:
    (folder / ".env").write_text(text, encoding="utf-8")


def test_defaults_without_environment() -> None:
    s = load_settings()
    assert s.db == "hybridkb.duckdb"
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
    assert s.db == "hybridkb.duckdb"
    assert "not_a_setting" not in s.model_dump()


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
    assert Settings.model_fields["db"].description
    assert Settings.model_fields["chunk_size"].default == 1000
    s = Settings(model="fake")
    dumped = s.model_dump()
    assert dumped["model"] == "fake"
    assert set(dumped) == set(Settings.model_fields)
    assert Settings.model_validate(dumped) == s
