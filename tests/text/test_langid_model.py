"""The language model's uncompressed copy: written once, read after, rebuilt when damaged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridkb.text import langid_model

SAMPLES = [
    "Die Häuser stehen am See und die Straße ist leer",
    "The houses stand by the lake and the street is empty",
    "Les maisons sont au bord du lac et la rue est vide",
]


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    langid_model.set_cache_folder(tmp_path)
    yield tmp_path / "langid"
    langid_model.set_cache_folder(None)


def test_the_copy_is_written_once_and_answers_alike(folder: Path) -> None:
    first = langid_model.load_identifier()
    copies = list(folder.glob("model-*.npz"))
    assert len(copies) == 1 and not list(folder.glob("*.tmp"))
    stamp = copies[0].stat().st_mtime_ns
    second = langid_model.load_identifier()  # from the copy
    assert copies[0].stat().st_mtime_ns == stamp
    assert [second.classify(s) for s in SAMPLES] == [first.classify(s) for s in SAMPLES]
    assert [first.classify(s)[0] for s in SAMPLES] == ["de", "en", "fr"]


def test_a_damaged_copy_is_rebuilt(folder: Path) -> None:
    langid_model.load_identifier()
    (copy,) = folder.glob("model-*.npz")
    copy.write_bytes(b"not an npz file")
    assert langid_model.load_identifier().classify(SAMPLES[0])[0] == "de"
    assert copy.stat().st_size > 1_000_000  # written again


def test_without_a_cache_folder_nothing_is_written(tmp_path: Path) -> None:
    langid_model.set_cache_folder(None)
    assert langid_model.load_identifier().classify(SAMPLES[1])[0] == "en"
    assert not list(tmp_path.rglob("*.npz"))
