"""Promises of the top-k selection both indexes end their searches with."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hybridkb.index import selection

# Few distinct values (many ties) as well as arbitrary ones, ordered or not.
VALUES = st.one_of(
    arrays(np.float64, st.integers(0, 400), elements=st.sampled_from([0.0, 1.0, 2.5, -3.0])),
    arrays(np.float64, st.integers(0, 400), elements=st.floats(-1e6, 1e6)),
)
LAYOUT = st.sampled_from(["as drawn", "ascending", "descending"])


def laid_out(values: np.ndarray, layout: str) -> np.ndarray:
    if layout == "ascending":
        return np.sort(values)
    if layout == "descending":
        return np.sort(values)[::-1].copy()
    return values


@pytest.fixture(autouse=True)
def small_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample of 8, so arrays of a few dozen values take the sampled threshold, and
    arrays of 9-24 the strided cut of small arrays when few values are wanted."""
    monkeypatch.setattr(selection, "SAMPLE", 8)
    monkeypatch.setattr(selection, "SMALL_SAMPLE", 2)


@settings(max_examples=300, deadline=None)
@given(values=VALUES, count=st.integers(0, 60), layout=LAYOUT)
def test_at_least_keeps_the_top_count_and_every_tie(
    values: np.ndarray, count: int, layout: str
) -> None:
    values = laid_out(values, layout)
    got = selection.at_least(values, count)
    assert len(set(got.tolist())) == len(got)
    if count >= len(values):
        assert sorted(got.tolist()) == list(range(len(values)))
        return
    if count == 0:
        return
    kth = np.sort(values)[len(values) - count]
    assert set(np.flatnonzero(values >= kth).tolist()) <= set(got.tolist())


@settings(max_examples=300, deadline=None)
@given(values=VALUES, count=st.integers(0, 60), layout=LAYOUT)
def test_at_least_above_a_floor_keeps_only_values_over_it(
    values: np.ndarray, count: int, layout: str
) -> None:
    values = laid_out(values, layout)
    got = selection.at_least(values, count, above=0.0)
    qualify = np.flatnonzero(values > 0.0)
    assert set(got.tolist()) <= set(qualify.tolist())
    if count == 0:
        return
    if len(qualify) <= count:
        assert sorted(got.tolist()) == qualify.tolist()
    else:
        kth = np.sort(values)[len(values) - count]
        assert set(np.flatnonzero(values >= kth).tolist()) <= set(got.tolist())


@settings(max_examples=200, deadline=None)
@given(values=VALUES, count=st.integers(0, 60), layout=LAYOUT)
def test_top_returns_exactly_the_largest_values(
    values: np.ndarray, count: int, layout: str
) -> None:
    values = laid_out(values, layout)
    got = selection.top(values, count)
    want = np.sort(values)[::-1][: min(count, len(values))]
    assert len(got) == len(want)
    assert np.array_equal(np.sort(values[got])[::-1], want)


def test_a_long_array_is_never_partitioned_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the module: only the sample and the values above its threshold go
    through np.partition, never the whole array."""
    monkeypatch.setattr(selection, "SAMPLE", 2_048)
    values = np.random.default_rng(0).random(200_000)
    sizes: list[int] = []
    real = np.partition

    def spy(a: np.ndarray, kth: int) -> np.ndarray:
        sizes.append(len(a))
        return real(a, kth)

    monkeypatch.setattr(np, "partition", spy)
    got = selection.top(values, 100)
    assert np.array_equal(np.sort(values[got]), np.sort(values)[-100:])
    assert sizes and max(sizes) < 10_000


@pytest.mark.parametrize("layout", ["as drawn", "ascending", "descending", "ties"])
@pytest.mark.parametrize("above", [None, 0.0])
def test_a_few_thousand_values_cut_on_a_strided_sample_give_the_exact_answer(
    monkeypatch: pytest.MonkeyPatch, layout: str, above: float | None
) -> None:
    monkeypatch.setattr(selection, "SAMPLE", 2_048)
    monkeypatch.setattr(selection, "SMALL_SAMPLE", 256)
    rng = np.random.default_rng(3)
    if layout == "ties":
        values = rng.choice([-1.0, 0.0, 1.0, 2.0], 5_183)
    else:
        values = laid_out(rng.normal(size=5_183), layout)
    got = selection.at_least(values, 100, above=above)
    kth = np.sort(values)[len(values) - 100]
    floor = kth if above is None or kth > above else np.nextafter(above, np.inf)
    assert got.tolist() == np.flatnonzero(values >= floor).tolist()
