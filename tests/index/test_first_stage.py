"""The vector graph's first stage (index/first_stage.py): a wide int8 index builds its graph
over copies rotated onto half the width, finds what the full-width graph finds, keeps the
rotation in its snapshot, and still reads snapshots of full-width graphs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from hybridkb.index import first_stage as first_stage_module
from hybridkb.index.fileheader import read_sections, write_sections
from hybridkb.index.first_stage import first_stage_width
from hybridkb.index.vector import VectorIndex

DIM = 384


def structured_rows(n: int, seed: int = 0) -> np.ndarray:
    """Unit rows with the shape of embeddings: most of the variance in a few dozen
    directions (topics), the rest noise."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((DIM, 48)))[0].T  # 48 orthonormal topics
    weights = rng.standard_normal((n, 48)) * np.linspace(3.0, 0.5, 48)
    rows = weights @ basis + 0.35 * rng.standard_normal((n, DIM))
    rows = rows.astype(np.float32)
    unit: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


def exact_top(rows: np.ndarray, keys: np.ndarray, query: np.ndarray, k: int) -> set[int]:
    return {int(keys[i]) for i in np.argsort(-(rows @ query))[:k]}


def built(rows: np.ndarray, *, defer: bool = False) -> tuple[VectorIndex, np.ndarray]:
    index = VectorIndex(DIM, quantization="i8", hnsw_threshold=1_000, defer_graph=defer)
    keys = np.arange(10, 10 + len(rows), dtype=np.int64)
    index.add(keys, rows)
    if defer:
        index.wait_for_graph()
    return index, keys


def recall_at_10(index: VectorIndex, rows: np.ndarray, keys: np.ndarray, seed: int) -> float:
    queries = rows[:: len(rows) // 40][:40] + 0.2 * structured_rows(40, seed=seed)
    found = 0
    for q in queries / np.linalg.norm(queries, axis=1, keepdims=True):
        found += len(exact_top(rows, keys, q, 10) & {k for k, _ in index.search(q, 10)})
    return found / (10 * len(queries))


def test_only_wide_int8_indexes_get_a_half_width_first_stage() -> None:
    assert first_stage_width(384, "i8") == 192
    assert first_stage_width(768, "i8") == 384
    assert first_stage_width(128, "i8") is None  # narrow rows are cheap already
    assert first_stage_width(384, "f32") is None
    assert first_stage_width(384, "b1") is None


@pytest.mark.parametrize("defer", [False, True], ids=["built at once", "deferred"])
def test_the_graph_holds_half_width_copies_and_finds_the_exact_neighbours(defer: bool) -> None:
    rows = structured_rows(4_000)
    index, keys = built(rows, defer=defer)
    report = index.recall_report()
    assert (report["layout"], report["graph_ndim"], report["exact_only"]) == ("hnsw", 192, False)
    assert recall_at_10(index, rows, keys, seed=1) >= 0.97
    # Rows added after the graph are rotated onto the same axes and found.
    more = structured_rows(300, seed=5)
    more_keys = np.arange(100_000, 100_300, dtype=np.int64)
    index.add(more_keys, more)
    index.wait_for_graph()
    for i in range(0, 300, 30):
        assert index.search(more[i], 1)[0][0] == int(more_keys[i])


def test_the_full_width_graph_would_find_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half the width loses next to nothing against the full rows (bench/first_stage.py
    measures it at 100k; here the same comparison at 4k rows)."""
    rows = structured_rows(4_000)
    half, keys = built(rows)
    monkeypatch.setattr(first_stage_module, "MIN_DIM", 10_000)  # no first stage
    full, _ = built(rows)
    assert full.recall_report()["graph_ndim"] == DIM
    assert recall_at_10(half, rows, keys, seed=2) >= recall_at_10(full, rows, keys, seed=2) - 0.02


@pytest.mark.parametrize("mmap", [True, False])
def test_the_rotation_is_saved_with_the_graph(tmp_path: Path, mmap: bool) -> None:
    rows = structured_rows(3_000)
    index, keys = built(rows)
    path = tmp_path / "vectors.idx"
    index.save(path)
    loaded = VectorIndex.load(path, mmap=mmap)
    assert loaded.recall_report()["graph_ndim"] == 192
    queries = structured_rows(8, seed=3)
    for q in queries:
        assert loaded.search(q, 10) == index.search(q, 10)
    loaded.add(np.array([7], np.int64), queries[:1])  # a write copies the mapped graph
    assert loaded.search(queries[0], 1)[0][0] == 7


def test_a_snapshot_of_a_full_width_graph_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshots written before the first stage hold graphs of full rows: they load and
    keep serving (no rebuild), and their new rows go in at full width."""
    rows = structured_rows(3_000)
    with monkeypatch.context() as before:
        before.setattr(first_stage_module, "MIN_DIM", 10_000)
        old, keys = built(rows)
        old.save(tmp_path / "old.idx")
    loaded = VectorIndex.load(tmp_path / "old.idx")
    assert loaded.recall_report()["graph_ndim"] == DIM
    q = structured_rows(1, seed=4)[0]
    assert loaded.search(q, 10) == old.search(q, 10)
    loaded.add(np.array([7], np.int64), q[None, :])
    assert loaded.search(q, 1)[0][0] == 7


def _rewritten(path: Path, change: Callable[[dict[str, bytes]], None]) -> None:
    """The snapshot at ``path`` written again (valid checksums) with its sections changed."""
    header, blobs = read_sections(path, b"HKBVIDX\x01", "vector index", mmap=False)
    sections = {k: bytes(v) for k, v in blobs.items()}
    change(sections)
    write_sections(
        path, b"HKBVIDX\x01", {k: v for k, v in header.items() if k != "sections"}, sections
    )


@pytest.mark.parametrize("damage", ["rotation gone", "rotation not finite", "rotation short"])
def test_a_narrow_graph_without_a_sound_rotation_is_refused(tmp_path: Path, damage: str) -> None:
    """A damaged or crafted snapshot (checksums right, the rotation gone, NaN or cut short)
    is unreadable, not served through the wrong space: the caller rebuilds from the
    tables."""
    index, _ = built(structured_rows(2_000))
    path = tmp_path / "vectors.idx"
    index.save(path)

    def change(sections: dict[str, bytes]) -> None:
        if damage == "rotation gone":
            del sections["stage_axes"]
        elif damage == "rotation not finite":
            sections["stage_axes"] = np.full(DIM * 192, np.nan, np.float32).tobytes()
        else:
            sections["stage_axes"] = sections["stage_axes"][:-4]

    _rewritten(path, change)
    with pytest.raises(ValueError, match="first stage"):
        VectorIndex.load(path)
