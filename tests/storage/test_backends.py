"""Who serves a store is the backend's declaration (``concurrent_writers``), not its URL.

A third backend is registered here over a real DuckDB file, once declaring that many
processes may write at once and once that one process holds the file: opening follows
the declaration, whatever the URL looks like.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from internals import through_owner

import hybridkb
import hybridkb.storage
from hybridkb.errors import ConfigError, GraphError
from hybridkb.serve.endpoint import live_endpoint
from hybridkb.storage import backends, open_storage, register_backend
from hybridkb.storage.backends import DUCKDB, POSTGRES, Backend, backend_for
from hybridkb.storage.base import Storage

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

PREFIX = "shelf:"  # the third backend's URLs: shelf:/path/to/file


@pytest.fixture(autouse=True)
def known_backends(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test registers on its own copies of the lists: nothing leaks to other tests."""
    monkeypatch.setattr(backends, "BACKENDS", list(backends.BACKENDS))
    monkeypatch.setattr(hybridkb.storage, "OPENERS", dict(hybridkb.storage.OPENERS))
    yield


def register_shelf(*, concurrent_writers: bool, parts: bool = True) -> None:
    """Register a backend of its own name and URLs, storing in a DuckDB file; without its
    optional parts (graph, maintenance) unless ``parts``."""

    def open_shelf(
        url: str,
        *,
        read_only: bool,
        lock_timeout: float,
        row_cache_mb: int | None,
        pool_size: int | None,
    ) -> Storage:
        storage = open_storage(
            url.removeprefix(PREFIX),
            read_only=read_only,
            lock_timeout=lock_timeout,
            row_cache_mb=row_cache_mb,
            pool_size=pool_size,
        )
        storage.capabilities = dataclasses.replace(storage.capabilities, name="shelf")
        if not parts:
            storage.graph_sql = None
            storage.maintenance = None
            storage.reembedding = None
        return storage

    shelf = Backend(
        name="shelf",
        accepts=lambda url: url.startswith(PREFIX),
        concurrent_writers=concurrent_writers,
        held_file=lambda url: url.removeprefix(PREFIX),
    )
    register_backend(shelf, open_shelf)


def test_a_backend_with_concurrent_writers_is_opened_directly_and_serves_nobody(
    tmp_path: Path,
) -> None:
    register_shelf(concurrent_writers=True)
    path = tmp_path / "shelf.db"
    with hybridkb.connect(f"{PREFIX}{path}", model="fake", serve=True) as kb:
        assert not through_owner(kb)
        assert kb.storage.capabilities.name == "shelf"
        assert live_endpoint(str(path)) is None  # no owner: every process opens it itself
        kb.create_collection("Notes").add_texts(["the harbour lease"], ids=["a"])
        assert kb.collection("Notes").search("harbour", k=1)[0].document_id == "a"
    assert path.is_file()


def test_a_backend_with_one_writer_is_served_by_the_process_that_holds_its_file(
    tmp_path: Path,
) -> None:
    register_shelf(concurrent_writers=False)
    path = tmp_path / "shelf.db"
    url = f"{PREFIX}{path}"
    with hybridkb.connect(url, model="fake", serve=True) as owner:
        assert not through_owner(owner)
        assert live_endpoint(str(path)) is not None  # the holder serves the file
        owner.create_collection("Notes").add_texts(["the harbour lease"], ids=["a"])
        with hybridkb.connect(url, model="fake") as client:
            assert through_owner(client)
            assert client.collection("Notes").count() == 1
    assert live_endpoint(str(path)) is None


def test_the_built_in_backends_declare_what_their_stores_report(tmp_path: Path) -> None:
    assert backend_for(str(tmp_path / "kb.duckdb")) is DUCKDB
    assert backend_for("duckdb:///x/kb.duckdb") is DUCKDB
    assert backend_for(":memory:") is DUCKDB
    assert backend_for("postgresql://me@host/db") is POSTGRES
    storage = open_storage(str(tmp_path / "kb.duckdb"))
    try:
        assert storage.capabilities.name == DUCKDB.name and DUCKDB.concurrent_writers is False
    finally:
        storage.close()
    assert POSTGRES.concurrent_writers is True  # its store reports it: test_storage_contract
    assert DUCKDB.held_file(":memory:") is None  # nothing to share: opened directly


def test_a_url_no_backend_takes_is_refused_naming_the_supported_forms() -> None:
    with pytest.raises(ConfigError, match=r"'shelf:' is not a store hybridkb opens; give --db"):
        hybridkb.connect(f"{PREFIX}/x/shelf.db", model="fake")


def test_a_backend_without_an_optional_part_says_so_by_name(tmp_path: Path) -> None:
    register_shelf(concurrent_writers=True, parts=False)
    with hybridkb.connect(f"{PREFIX}{tmp_path / 'shelf.db'}", model="fake") as kb:
        notes = kb.create_collection("Notes")
        notes.add_texts(["the harbour lease"], ids=["a"])  # no graph hook to run
        assert notes.count() == 1
        with pytest.raises(GraphError, match="not available on the shelf backend"):
            kb.graph  # noqa: B018
        with pytest.raises(ConfigError, match="doctor: the shelf backend does not offer it"):
            kb.doctor()
        with pytest.raises(ConfigError, match="compact: the shelf backend does not offer it"):
            kb.compact()
        with pytest.raises(ConfigError, match="reembed: the shelf backend does not offer it"):
            kb.reembed("Notes", progress=False)
