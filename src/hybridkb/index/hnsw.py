"""The vector index's HNSW graph: the one module that touches usearch.

usearch is loaded past its package, by :func:`load_usearch_extension`, and wrapped in
:class:`Graph` (the few calls the index makes); no other module imports usearch
(``tests/index/test_vector_index.py`` checks). Two rules live here and nowhere else:

- **Not through the package.** usearch's ``__init__`` imports urllib (with http and
  ssl) for a model downloader, and its wrapper module tqdm: ~50 ms of a cold search
  that uses neither. The compiled extension is loaded on its own, as the package
  would load it (NumKong's kernels made global first); with an older usearch, on
  Windows, or on anything unexpected, the package is imported as usual.
- **duckdb first.** usearch's extension carries its own copy of C++ runtime code,
  whose unique symbols bind process-wide when it is the first to load libstdc++; a
  later ``import onnxruntime`` then dies with SIGSEGV, and pyarrow segfaults
  converting time-zoned timestamps. duckdb loads the system libstdc++ first, and
  every hybridkb process imports it anyway, so this module imports it before usearch.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import duckdb  # noqa: F401  # before usearch: see "duckdb first" above
import numpy as np


def _load_alone() -> ModuleType:
    if sys.platform == "win32":
        raise ImportError("the package sets up the DLL search path on Windows")
    package = importlib.util.find_spec("usearch")
    # usearch >= 2.26 resolves its SIMD kernels from NumKong's library at load time.
    kernels = importlib.import_module("numkong._numkong")
    if package is None or kernels.__file__ is None:
        raise ImportError("usearch or numkong not found")
    ctypes.CDLL(kernels.__file__, mode=ctypes.RTLD_GLOBAL)
    for folder in package.submodule_search_locations or []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / f"compiled{suffix}"
            spec = importlib.util.spec_from_file_location("usearch.compiled", path)
            if not path.exists() or spec is None or spec.loader is None:
                continue
            module = importlib.util.module_from_spec(spec)
            sys.modules["usearch.compiled"] = module
            spec.loader.exec_module(module)
            return module
    raise ImportError("usearch's compiled extension not found")


def load_usearch_extension() -> ModuleType:
    """``usearch.compiled``, loaded without the usearch package where possible.

    Already loaded (by us, or by a program that imported usearch itself): that module.
    Else the extension alone (no downloader, no tqdm); should that fail, through the
    package as usual. The module docstring says why.
    """
    found = sys.modules.get("usearch.compiled")
    if found is not None:
        return found
    try:
        return _load_alone()
    except (ImportError, OSError):
        sys.modules.pop("usearch.compiled", None)
        return importlib.import_module("usearch.compiled")


if TYPE_CHECKING:
    from usearch.compiled import Index as _Index
    from usearch.compiled import MetricKind, ScalarKind
else:
    _module = load_usearch_extension()
    _Index, MetricKind, ScalarKind = _module.Index, _module.MetricKind, _module.ScalarKind

__all__ = ["Graph", "MetricKind", "ScalarKind", "load_usearch_extension"]


class Graph:
    """An HNSW graph over compact rows keyed by non-negative int64 keys.

    Args:
        ndim: Dimensions as usearch counts them (bits for ``ScalarKind.B1``).
        metric: Distance the graph is built and searched with.
        dtype: Scalar type of the stored rows.
        connectivity: Links per node (twice that on the base layer).
        expansion_add: Beam width while inserting.
        expansion_search: Beam width while searching (at least the count asked for).
    """

    def __init__(
        self,
        *,
        ndim: int,
        metric: MetricKind,
        dtype: ScalarKind,
        connectivity: int,
        expansion_add: int,
        expansion_search: int,
    ) -> None:
        self._index = _Index(
            ndim=ndim,
            dtype=dtype,
            metric_kind=metric,
            connectivity=connectivity,
            expansion_add=expansion_add,
            expansion_search=expansion_search,
        )

    def __len__(self) -> int:
        """Rows in the graph (deleted ones no longer count)."""
        return len(self._index)

    @property
    def ndim(self) -> int:
        """Dimensions as usearch counts them (bits for ``ScalarKind.B1``)."""
        return int(self._index.ndim)

    @property
    def memory_usage(self) -> int:
        """Bytes the graph holds (links and its copies of the rows)."""
        return int(self._index.memory_usage)

    @property
    def hardware_acceleration(self) -> str:
        """The SIMD kernel usearch picked on this CPU (e.g. ``haswell``)."""
        return str(self._index.hardware_acceleration)

    @property
    def expansion_search(self) -> int:
        """Beam width while searching; set it to trade speed for recall."""
        return int(self._index.expansion_search)

    @expansion_search.setter
    def expansion_search(self, beam: int) -> None:
        """Set the search beam width."""
        self._index.expansion_search = beam

    def add(self, keys: np.ndarray, rows: np.ndarray, *, threads: int = 0) -> None:
        """Insert rows (``threads`` 0: every core); keys must be absent."""
        # Unknown: the scalar type is read from the array (uint8 bits for B1).
        self._index.add_many(
            _ukeys(keys), np.ascontiguousarray(rows), threads=threads, dtype=ScalarKind.Unknown
        )

    def remove(self, keys: np.ndarray) -> None:
        """Mark keys deleted (usearch reuses their slots on later adds)."""
        self._index.remove_many(_ukeys(keys), compact=False, threads=0)  # type: ignore[arg-type]

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """Whether each key is in the graph (bool array, one per key)."""
        return np.asarray(self._index.contains_many(_ukeys(keys)), dtype=bool)

    def search(self, query: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys (int64) and distances of the ``count`` nearest rows found, nearest first."""
        found, distances, counts, _, _ = self._index.search_many(
            np.ascontiguousarray(query).reshape(1, -1),
            count=count,
            exact=False,
            threads=1,
            dtype=ScalarKind.Unknown,
        )
        n = int(counts[0])
        return found[0, :n].view(np.int64), distances[0, :n]

    def save(self) -> bytes:
        """The graph serialised, for :meth:`load` or :meth:`view`."""
        return bytes(self._index.save_index_to_buffer(None))

    def load(self, buffer: memoryview) -> None:
        """Copy a saved graph into this one."""
        self._index.load_index_from_buffer(buffer, None)

    def view(self, buffer: memoryview) -> None:
        """Serve a saved graph from ``buffer`` (kept alive by the caller) without copying."""
        self._index.view_index_from_buffer(buffer, None)


def _ukeys(keys: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(keys, dtype=np.int64).view(np.uint64)
