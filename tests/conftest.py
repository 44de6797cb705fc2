"""Shared fixtures: an isolated environment and real DuckDB files in tmp_path."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import hybridkb


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No HYBRIDKB_* setting leaks in from the machine; caches and .env live in tmp_path."""
    for name in list(os.environ):
        if name.startswith("HYBRIDKB_") and name != "HYBRIDKB_TEST_POSTGRES_URL":
            monkeypatch.delenv(name, raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv("HYBRIDKB_CACHE_DIR", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[hybridkb.KnowledgeBase]:
    """A fresh knowledge base in a real DuckDB file, with the deterministic fake embedder."""
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as base:
        yield base


@pytest.fixture(scope="session")
def real_model_name() -> str:
    return "all-MiniLM-L6-v2"
