"""Nothing is downloaded at run time, and an unknown store URL creates nothing (issue 23
item 9): DuckDB read ``sqlite:///x.db`` as an extension to download, made ``sqlite:``
folders and ``~/.duckdb/extensions``, and ended in a confusing IO error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from internals import sql_rows

import hybridkb
from hybridkb.errors import ConfigError

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

UNKNOWN = ["sqlite:///x.db", "mysql://x", "http://example.com/kb.duckdb", "md:kb", "s3://b/kb"]


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("url", UNKNOWN)
def test_an_unknown_store_url_is_refused_in_one_line_and_creates_nothing(
    tmp_path: Path, url: str
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {**os.environ, "HOME": str(home), "HYBRIDKB_MODEL": "fake"}
    for args in (["list"], ["create", "c"], ["search", "c", "q"]):
        done = subprocess.run(
            [sys.executable, "-m", "hybridkb", "--db", url, *args],
            capture_output=True, text=True, timeout=120, env=env, cwd=work,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "duckdb:///path" in done.stderr
    assert _tree(work) == [] and _tree(home) == []
    with pytest.raises(ConfigError, match="is not a store"):
        hybridkb.connect(url, model="fake")


def test_every_duckdb_connection_refuses_to_install_or_load_extensions(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        rows = sql_rows(
            kb,
            "SELECT current_setting('autoinstall_known_extensions'), "
            "current_setting('autoload_known_extensions')",
        )
    assert [tuple(r) for r in rows] == [(False, False)]
