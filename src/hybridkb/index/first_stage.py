"""The vector graph's first stage: its copies of the rows rotated onto their principal axes
and cut to half the width, while the full rows re-score its candidates.

The graph only has to bring the true neighbours among the ``2 * k`` candidates it hands
to the re-score (``vector_layouts.rescored_count``), and for that the leading principal
axes of the rows carry almost all of what it needs. Measured with bench/first_stage.py on
the 100k bench collection (SciFact vectors plus noise, 384-d, the index's own int8 rows,
graph parameters and re-score; recall@10 of the 300 SciFact test queries against exact
float32; AMD EPYC, AVX-512, load 3):

=============  =================  ====================  =====================
graph width    build, CPU-s       beam 512: recall@10   search + re-score p50
=============  =================  ====================  =====================
384 (before)   28.8               0.9857                1.60 ms
192            15.6               0.9837                1.04 ms
128            12.1               0.9777                1.14 ms
=============  =================  ====================  =====================

So half the width keeps recall (-0.002), halves the graph's build and takes a third off
its search; a quarter loses recall. The axes are those of the rows' second moment, not of
their covariance: centred, the graph's inner products leave out each row's share of the
direction all embeddings share, and recall@10 fell to 0.982 (uncentred 0.985, full width
0.987, on a fit over the whole collection). Only int8 indexes of at least 256 dimensions
get a first stage (the bench measured 384-d models; a narrow model's rows are cheap
already), and the recall self-check (``vector_selfcheck.py``) still measures the graph as
served, so a collection where the rotation loses recall widens the beam or scans exactly.

The axes are fitted once, on the rows the index holds when its graph is first built
(the HNSW threshold: 20,000 by default), and saved with the graph: every later copy and
query goes through the same rotation, so the graph stays one space.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Only wide int8 indexes get a first stage (see the module docstring).
MIN_DIM = 256
# Rows the axes are fitted on, spread evenly over what the index holds.
FIT_ROWS = 20_000


def first_stage_width(dim: int, quantization: str) -> int | None:
    """The first stage's width for an index of ``dim`` and ``quantization``, or None when
    the graph keeps the full rows."""
    if quantization != "i8" or dim < MIN_DIM:
        return None
    return dim // 2


@dataclass(frozen=True)
class FirstStage:
    """A rotation onto ``axes`` (orthonormal columns, ``(dim, width)``): inner products of
    rotated rows are those of the rows, less what lies off the axes."""

    axes: np.ndarray  # float32 (dim, width)

    @property
    def width(self) -> int:
        """Dimensions of the rotated copies."""
        return int(self.axes.shape[1])

    @classmethod
    def fit(cls, unit_rows: np.ndarray, width: int) -> FirstStage:
        """The principal axes of ``unit_rows`` (float32, one row a vector; an even spread
        of at most :data:`FIT_ROWS` is used), the ``width`` strongest first."""
        n = len(unit_rows)
        sample = unit_rows[:: max(1, n // FIT_ROWS)][:FIT_ROWS].astype(np.float64)
        values, vectors = np.linalg.eigh(sample.T @ sample)
        strongest = np.argsort(values)[::-1][:width]
        return cls(np.ascontiguousarray(vectors[:, strongest], np.float32))

    def rotate(self, unit_rows: np.ndarray) -> np.ndarray:
        """``unit_rows`` (float32, ``(n, dim)``) on the first stage's axes."""
        rotated: np.ndarray = unit_rows @ self.axes
        return rotated

    def sections(self) -> dict[str, bytes]:
        """The rotation as snapshot sections (:meth:`from_sections` reads them back)."""
        return {"stage_axes": self.axes.tobytes()}

    @classmethod
    def from_sections(cls, blobs: dict[str, np.ndarray], dim: int, width: int) -> FirstStage | None:
        """The rotation a snapshot holds, or None when it has none (a graph of full rows,
        as every snapshot before the first stage).

        Raises:
            ValueError: The sections do not hold a ``(dim, width)`` rotation.
        """
        if "stage_axes" not in blobs:
            return None
        axes = np.array(blobs["stage_axes"].view(np.float32))
        if axes.size != dim * width or not np.isfinite(axes).all():
            raise ValueError("first stage sections do not match the header")
        return cls(axes.reshape(dim, width))


def restored_stage(
    graph_ndim: int | None, blobs: dict[str, np.ndarray], dim: int, full_ndim: int
) -> FirstStage | None:
    """The first stage of a saved graph of ``graph_ndim`` dimensions (None, or the rows'
    full width: a graph of full rows, as every snapshot before the first stage).

    Raises:
        ValueError: A narrower graph without its rotation, or a damaged one.
    """
    if graph_ndim is None or int(graph_ndim) == full_ndim:
        return None
    stage = FirstStage.from_sections(blobs, dim, int(graph_ndim))
    if stage is None:
        raise ValueError("the graph is narrower than the rows but has no first stage")
    return stage
