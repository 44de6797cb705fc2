"""The error boundary: every failure a user can cause arrives as a KBError with a code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from internals import duckdb_storage, local

import hybridkb
from hybridkb.errors import BackendError, ConfigError, KBError, ModelUnavailable


def test_unknown_option_is_refused_with_the_closest_name() -> None:
    with pytest.raises(ConfigError, match="unknown option 'modle'; did you mean 'model'"):
        hybridkb.connect(":memory:", modle="fake")


def test_overrides_given_with_settings_are_validated() -> None:
    settings = hybridkb.Settings(model="fake")
    with pytest.raises(ConfigError, match="HYBRIDKB_CHUNK_SIZE"):
        hybridkb.connect(":memory:", settings=settings, chunk_size=5)
    with pytest.raises(ConfigError, match="unknown option 'chunksize'"):
        hybridkb.connect(":memory:", settings=settings, chunksize=500)
    with hybridkb.connect(":memory:", settings=settings, chunk_size=500) as kb:
        assert kb.settings.chunk_size == 500


@pytest.mark.parametrize(
    "write",
    [
        lambda kb: kb.create_collection("X"),
        lambda kb: kb["Notes"].add_texts(["more"]),
        lambda kb: kb["Notes"].delete(["a"]),
        lambda kb: kb.drop_collection("Notes"),
    ],
)
def test_writes_to_a_read_only_duckdb_are_backend_errors(
    tmp_path: Path, write: Callable[[hybridkb.KnowledgeBaseAPI], object]
) -> None:
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        kb.create_collection("Notes").add_texts(["alpha"], ids=["a"])
    with hybridkb.connect(db, model="fake", read_only=True) as kb:
        with pytest.raises(BackendError, match="read-only") as caught:
            write(kb)
        assert caught.value.code == "backend_error"
        assert kb["Notes"].search("alpha", k=1)[0].document_id == "a"  # reads still work


def test_driver_errors_never_leave_the_storage_boundary(tmp_path: Path) -> None:
    import duckdb

    db = tmp_path / "kb.duckdb"
    with local(hybridkb.connect(db, model="fake")) as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(["alpha"], ids=["a"])
        record = coll.record
        duckdb_storage(kb).query(f"DROP TABLE kb_c{record.id}_vectors")  # damage behind its back
        with pytest.raises(KBError) as caught:
            kb.storage.fetch_vectors(record, [1])
        assert not isinstance(caught.value, duckdb.Error)
        assert isinstance(caught.value.__cause__, duckdb.Error)  # the cause is kept


def test_a_model_that_cannot_be_loaded_has_its_own_error(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable) as caught:
        with hybridkb.connect(tmp_path / "kb.duckdb", model=str(tmp_path / "no-model")) as kb:
            kb.create_collection("X")
    assert caught.value.code == "model_unavailable"
