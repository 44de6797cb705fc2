"""py3langid's language model, loaded from an uncompressed copy kept in the cache.

The model ships LZMA-compressed: decompressing it took 0.65-1.7 s on a 2-core AMD
EPYC, the largest single cost of a cold ``hybridkb search`` (the query's language is
detected to pick its stop words). The first load writes the arrays to
``<cache>/langid/`` as a plain ``.npz`` (no pickle, members stored uncompressed).
Later processes map that file instead of reading it: the arrays are views of the
mapping where ``np.savez`` laid them out, so a load takes a few milliseconds and a
detection reads only the pages it touches (reading and converting the 68 MB took
~0.25 s). A copy that is missing, stale or unreadable is simply rebuilt.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import tempfile
import threading
import zipfile
from array import array
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..locations import CACHE_FIX
from ..private_files import private_folder

__all__ = ["BatchClassifier", "load_identifier", "set_cache_folder"]

_cache_folder: Path | None = None
# array/memoryview type codes by numpy kind and item size.
_TYPECODES: dict[tuple[str, int], Literal["H", "I", "Q", "h", "i", "q"]] = {
    ("u", 2): "H",
    ("u", 4): "I",
    ("u", 8): "Q",
    ("i", 2): "h",
    ("i", 4): "i",
    ("i", 8): "q",
}


def set_cache_folder(folder: Path | None) -> None:
    """Where the uncompressed copy lives (``Settings.cache_dir``); None: no copy."""
    global _cache_folder
    _cache_folder = None if folder is None else Path(folder).expanduser() / "langid"


def _as_array(values: np.ndarray) -> array[int]:
    out = array(_TYPECODES[values.dtype.kind, values.dtype.itemsize])
    out.frombytes(np.ascontiguousarray(values).tobytes())
    return out


def _copy_path(source: Path) -> Path | None:
    """Where the copy of ``source`` is kept, its folder made or checked (the rule of every
    folder in the cache: a copy another user could write would be mapped and trusted).

    Raises:
        NotPrivate: the cache folder or its ``langid`` folder does not pass.
    """
    if _cache_folder is None:
        return None
    private_folder(_cache_folder, secret=False, fix=CACHE_FIX, within=_cache_folder.parent)
    stat = source.stat()
    return _cache_folder / f"model-{stat.st_size}-{stat.st_mtime_ns}.npz"


def _lookup(values: np.ndarray) -> memoryview | array[int]:
    """An integer table py3langid indexes one item at a time: a view of the mapped array
    when its layout allows (indexing a memoryview is as fast as an array's), else a copy.

    Also the state -> feature table, whose 104,583 entries were a list: 6 ms to build at
    a cold search's first detection, and a list every GC pass of the process walked."""
    code = _TYPECODES.get((values.dtype.kind, values.dtype.itemsize))
    if (
        code is not None
        and values.ndim == 1
        and values.dtype.isnative
        and values.flags.c_contiguous
    ):
        # Through bytes: a mapped array's own view says "=H", which cannot be indexed.
        return values.view(np.uint8).data.cast(code)
    return _as_array(values)


def _mapped_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an uncompressed ``.npz``, as read-only views of the mapped file.

    Raises:
        ValueError, OSError, KeyError, zipfile.BadZipFile, struct.error: not such a file.
    """
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
    arrays: dict[str, np.ndarray] = {}
    with path.open("rb") as fh:
        mapping = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        for info in members:
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"{path}: {info.filename} is not a stored .npy member")
            # The local file header: 30 bytes, then the name and the extra field.
            name_len, extra_len = struct.unpack_from("<HH", mapping, info.header_offset + 26)
            fh.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            if dtype.hasobject:
                raise ValueError(f"{path}: {info.filename} holds Python objects")
            arrays[info.filename.removesuffix(".npy")] = np.ndarray(
                shape, dtype, buffer=mapping, offset=fh.tell(), order="F" if fortran else "C"
            )
    return arrays


def _read_copy(path: Path) -> tuple[Any, ...]:
    data = _mapped_npz(path)
    return (
        data["ptc"],
        data["pc"],
        data["classes"].tolist(),
        _lookup(data["nextmove"]),
        _lookup(data["row"]),
        _lookup(data["output"]),
    )


def _write_copy(path: Path, model: tuple[Any, ...]) -> None:
    ptc, pc, classes, nextmove, row, output = model
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            # savez, not savez_compressed: _mapped_npz maps the stored members in place.
            np.savez(
                fh,
                ptc=np.asarray(ptc),
                pc=np.asarray(pc),
                classes=np.asarray(classes),
                nextmove=np.frombuffer(nextmove, dtype=f"u{nextmove.itemsize}"),
                row=np.frombuffer(row, dtype=f"u{row.itemsize}"),
                output=np.asarray(output, dtype=np.int64),
            )
        os.replace(tmp, path)  # whole or absent: a reader never sees half a copy
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_identifier() -> Any:
    """py3langid's ``LanguageIdentifier`` over its bundled model, probabilities normalised."""
    from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier
    from py3langid.modelio import load_model

    source = Path(MODEL_DIR) / MODEL_FILE
    copy = _copy_path(source)
    model: tuple[Any, ...] | None = None
    if copy is not None and copy.is_file():
        try:
            model = _read_copy(copy)
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, struct.error):
            model = None  # damaged or foreign: rebuilt below
    if model is None:
        model = tuple(load_model(source))
        if copy is not None:
            try:
                _write_copy(copy, model)
            except OSError:
                pass  # a read-only cache only costs the next process the slow load
    ptc, pc, classes, nextmove, row, output = model
    return LanguageIdentifier(
        np.asarray(ptc), np.asarray(pc), classes, nextmove, output, norm_probs=True, tk_row=row
    )


# -- many texts at once ---------------------------------------------------------------

# Texts walked side by side through the tokenizer's automaton: as many as fit WALK_CELLS
# (a group holds its count x its longest text's bytes, 9 bytes each: ~4.5 MB), at most
# WALK_GROUP. Each byte column is a few numpy calls whatever the group's size, so short
# texts walk in bigger groups: 60-word texts ~54 us a text in groups of 1024, ~66 in 256.
WALK_GROUP = 1024
# Pieces a BatchClassifier remembers walking (see _walk_one) before starting afresh: a
# piece of at most MAX_WALK_BYTES costs ~300 bytes, so at most ~20 MB.
MAX_WALKS = 1 << 16
MAX_WALK_BYTES = 64
WALK_CELLS = 256 * 2048
# float16 bit pattern -> float32 value: numpy's own float16 cast cost ~75 us per text
# (255 features x 142 languages), this lookup ~15 us; the values are the same (exact).
_HALF_TO_FLOAT = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


class BatchClassifier:
    """``identifier.classify`` for many texts, the same answers at a sixth of the CPU.

    py3langid walks each text's bytes through its tokenizer's automaton in a Python loop
    and scores the features it met with a float16 table. Here the automaton advances
    every text of a group one byte per numpy step, and the scores are computed with the
    same float32 operations in the same order, so every label and confidence is
    bit-identical (tests/text/test_analysis.py holds it to ``classify``).
    """

    def __init__(self, identifier: Any) -> None:
        self.identifier = identifier
        self.nextmove = np.asarray(identifier.tk_nextmove)  # a view (~40 MB): no copy
        self.rowbase = np.asarray(identifier._rowbase, dtype=np.int64)
        self.output = np.asarray(identifier.tk_output, dtype=np.int64)
        table = identifier.nb_ptc
        # float32 rows of the feature table, converted when first met (see _rows).
        self.converted = np.zeros(table.shape, dtype=np.float32)
        self.done = np.zeros(len(table), dtype=bool)
        self.lock = threading.Lock()  # one classify at a time fills the rows
        # (state, piece) -> (state after it, features met): see _walk_one.
        self.walks: dict[tuple[int, bytes], tuple[int, list[int]]] = {}

    @staticmethod
    def usable(identifier: Any) -> bool:
        """Whether ``identifier`` has the layout this class reads (py3langid 0.4)."""
        needed = ("tk_nextmove", "tk_output", "_rowbase", "_encode", "_norm_probs")
        return all(hasattr(identifier, name) for name in needed) and (
            getattr(identifier, "min_confidence", None) is None
        )

    def classify_one(self, text: str) -> tuple[str, float]:
        """``identifier.classify(text)`` for one text (a query): its bytes walked in Python,
        as py3langid does, but one space-ended piece at a time, each remembered by its
        start state (:meth:`_walk_one`), and the scores from the float32 rows
        (:meth:`_decide`): ~90 -> ~30 us a 90-byte query."""
        encoded = self.identifier._encode(text)
        met = self._walk_one(encoded)
        if not met:
            return self._decide(np.empty(0, np.intp), np.empty(0, np.int64), len(encoded))
        counted = Counter(met)  # features in order of first appearance, as py3langid's
        features = np.fromiter(counted.keys(), np.intp, len(counted))
        counts = np.fromiter(counted.values(), np.int64, len(counted))
        # The float32 rows are filled in under the lock (see classify). A bulk classify
        # holds it for a whole group (tens of milliseconds): a query does not wait for
        # it but converts its own rows apart, to the same values.
        if self.lock.acquire(blocking=False):
            try:
                return self._decide(features, counts, len(encoded))
            finally:
                self.lock.release()
        return self._decide(features, counts, len(encoded), apart=True)

    def _walk_one(self, encoded: bytes) -> list[int]:
        """The features one text meets, in order (py3langid's ``visit_counts`` walk).

        The automaton's state at a piece's end follows from its state at the piece's
        start and the piece's bytes, so each (start state, piece) is walked once per
        process and remembered: queries repeat their words, and a remembered piece costs
        one dict lookup instead of three table reads a byte."""
        ident = self.identifier
        nextmove, rowbase, output = ident.tk_nextmove, ident._rowbase, ident.tk_output
        walks = self.walks
        if len(walks) > MAX_WALKS:
            walks.clear()
        state = 0
        met: list[int] = []
        pieces = encoded.split(b" ")
        for n, piece in enumerate(pieces, start=1):
            if n < len(pieces):
                piece += b" "
            found = walks.get((state, piece))
            if found is None:
                start, features = state, []
                for byte in piece:
                    state = nextmove[rowbase[state] + byte]
                    feature = output[state]
                    if feature >= 0:
                        features.append(feature)
                found = (state, features)
                if len(piece) <= MAX_WALK_BYTES:  # a word, not a run of unspaced text
                    walks[start, piece] = found
            state = found[0]
            met += found[1]
        return met

    def classify(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        """``(label, confidence)`` of each text, as ``identifier.classify`` gives it."""
        encoded = [self.identifier._encode(t) for t in texts]
        out: list[tuple[str, float]] = [("", 0.0)] * len(encoded)
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        with self.lock:
            start = 0
            while start < len(order):
                longest = max(len(encoded[order[start]]), 1)
                group = order[start : start + max(1, min(WALK_GROUP, WALK_CELLS // longest))]
                start += len(group)
                counted = self._counts(self._walk([encoded[i] for i in group]))
                decided = self._decide_all(counted, [len(encoded[i]) for i in group])
                for i, found in zip(group, decided, strict=True):
                    out[i] = found
        return out

    def _walk(self, texts: list[bytes]) -> np.ndarray:
        """The feature each text meets at each byte (-1: none), one row a text; the
        texts come longest first."""
        lengths = np.array([len(t) for t in texts], dtype=np.int64)
        width = int(lengths[0]) if len(texts) else 0
        data = np.zeros((len(texts), width), dtype=np.uint8)
        for row, text in enumerate(texts):
            data[row, : len(text)] = np.frombuffer(text, dtype=np.uint8)
        met = np.full((len(texts), width), -1, dtype=np.int64)
        states = np.zeros(len(texts), dtype=np.int64)
        active = len(texts)
        for column in range(width):
            while lengths[active - 1] <= column:  # the shortest texts have ended
                active -= 1
            now = self.nextmove[self.rowbase[states[:active]] + data[:active, column]]
            states[:active] = now
            met[:active, column] = self.output[now]
        return met

    def _counts(self, met: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per row of ``met``: its distinct features in order of first appearance and how
        often each appears (py3langid's Counter), for all rows in a few array calls."""
        rows, width = met.shape
        position = np.flatnonzero(met.ravel() >= 0)  # row by row, left to right
        feature = met.ravel()[position]
        key = (position // max(width, 1)) * len(self.output) + feature
        order = np.argsort(key, kind="stable")  # equal keys keep their positions' order
        ordered = key[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(key) else key
        counts = np.diff(np.r_[starts, len(ordered)])
        first = position[order[starts]]
        by_first = np.argsort(first, kind="stable")  # row by row, by first appearance
        distinct = feature[order[starts]][by_first]
        counts = counts[by_first]
        bounds = np.searchsorted(first[by_first], np.arange(rows + 1) * width)
        return [
            (distinct[bounds[r] : bounds[r + 1]], counts[bounds[r] : bounds[r + 1]])
            for r in range(rows)
        ]

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        """Rows ``idx`` of the feature table as float32 (the values numpy's cast gives).

        Rows are converted once, when first needed, into a table whose untouched pages
        stay unallocated (calloc): a corpus in a few languages meets a fraction of the
        100k features, and a row converted again for every text cost ~60 us a text."""
        table = self.identifier.nb_ptc
        if table.dtype != np.float16:
            return np.asarray(table[idx], dtype=np.float32)
        self._convert(idx)
        rows: np.ndarray = self.converted[idx]
        return rows

    def _rows_apart(self, idx: np.ndarray) -> np.ndarray:
        """:meth:`_rows` without writing the shared table (the same values)."""
        table = self.identifier.nb_ptc
        if table.dtype != np.float16:
            return np.asarray(table[idx], dtype=np.float32)
        rows: np.ndarray = _HALF_TO_FLOAT[table[idx].view(np.uint16)]
        return rows

    def _convert(self, idx: np.ndarray) -> None:
        """Convert the float16 rows ``idx`` of the feature table not converted yet."""
        table = self.identifier.nb_ptc
        fresh = idx[~self.done[idx]]
        if len(fresh):
            self.converted[fresh] = _HALF_TO_FLOAT[table[fresh].view(np.uint16)]
            self.done[fresh] = True

    def _decide_all(
        self, counted: list[tuple[np.ndarray, np.ndarray]], lengths: list[int]
    ) -> list[tuple[str, float]]:
        """:meth:`_decide` of a group's texts: each text's scores from its own product
        (the same float32 sums as py3langid's), then the scaling, softmax, aliases and
        best label for the group's rows at once, elementwise and row by row as
        :meth:`_decide` does them one text at a time (its numpy calls were ~35 us a text)."""
        ident = self.identifier
        if not counted or not ident._norm_probs or ident.nb_ptc.dtype != np.float16:
            return [self._decide(f, c, n) for (f, c), n in zip(counted, lengths, strict=True)]
        self._convert(np.concatenate([f for f, _ in counted]).astype(np.intp))
        scores = np.empty((len(counted), len(ident.nb_classes)), dtype=np.float32)
        for r, (features, counts) in enumerate(counted):
            if len(features):
                weights = np.log1p(counts.astype(np.float32))
                scores[r] = weights @ self.converted[features.astype(np.intp)] + ident.nb_pc
            else:
                scores[r] = 0.0
        # float32 factors: what multiplying by the Python float did (NEP 50: weak scalar).
        scale = np.array([1.0 / math.sqrt(n or 1) for n in lengths], dtype=np.float32)
        scores *= scale[:, None]
        np.exp(scores - scores.max(axis=1, keepdims=True), out=scores)
        scores /= scores.sum(axis=1, keepdims=True)
        for i, j in ident._alias_pairs:
            scores[:, i] += scores[:, j]
            scores[:, j] = 0.0
        best = scores.argmax(axis=1)
        top = scores[np.arange(len(best)), best].tolist()
        classes = ident.nb_classes
        return [(str(classes[b]), c) for b, c in zip(best.tolist(), top, strict=True)]

    def _decide(
        self, features: np.ndarray, counts: np.ndarray, length: int, apart: bool = False
    ) -> tuple[str, float]:
        """py3langid's ``_decide`` and ``classify`` on the feature counts of one text
        (``apart``: without the lock, the rows converted here and not kept)."""
        ident = self.identifier
        if len(features):
            weights = np.log1p(counts.astype(np.float32))
            idx = features.astype(np.intp)
            rows = self._rows_apart(idx) if apart else self._rows(idx)
            scores = weights @ rows + ident.nb_pc
        else:
            fill = 0.0 if ident._norm_probs else float(np.finfo(np.float32).min)
            scores = np.full(len(ident.nb_classes), fill, dtype=np.float32)
        if ident._norm_probs:
            scores *= 1.0 / math.sqrt(length or 1)
            np.exp(scores - scores.max(), out=scores)
            scores /= scores.sum()
        for i, j in ident._alias_pairs:
            if ident._norm_probs:
                scores[i] += scores[j]
                scores[j] = 0.0
            else:
                scores[i] = max(scores[i], scores[j])
                scores[j] = np.finfo(np.float32).min
        best = int(scores.argmax())
        return str(ident.nb_classes[best]), float(scores[best])
