"""Turning a sentence-transformers model into ONNX graphs, once, into the cache folder.

The first graph is built from the model's own files (:mod:`.onnx_build`, no torch) or, for
models the builder cannot read, exported by torch (:mod:`.onnx_torch`); the fused and
serving graphs and their int8 variants are made from it and verified against it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, KBError, NotExportable, attempt_import
from ..locations import CACHE_FIX
from ..private_files import private_folder
from . import onnx_files
from .onnx_build import INPUTS as BUILT_INPUTS
from .onnx_build import unbuildable, write_graph
from .onnx_files import export_lock
from .onnx_model import (
    FUSED_FILE,
    MIN_EXPORT_COSINE,
    PROBES,
    RAW_FILE,
    SERVE_FILE,
    ModelSpec,
    atomic_write,
    cosines,
    encode,
    export_dir,
    feed,
    load_tokenizer,
    model_folder,
    pool,
    read_json,
    read_spec,
    session,
    spec_text,
)
from .onnx_serving import serving_graph as serving_graph  # tests patch it here
from .onnx_torch import export_with_torch
from .progress import preparing


@dataclass(frozen=True)
class Int8Recipe:
    """How ``onnx-int8`` quantises: dynamic (activation scales per batch), int8 weights.

    Attributes:
        per_channel: one scale per output column instead of per tensor (per tensor drifts
            to cosine ~0.87 on SciFact; per channel stays above 0.988).
        weight_type: ``"s8"`` (QInt8) or ``"u8"`` (QUInt8). Activations are u8, and ORT's
            u8 x s8 GEMM runs on AMX / AVX-512 VNNI where u8 x u8 does not: u8 weights
            were 2.6x slower end to end on a Xeon with AMX.
        op_types: ONNX ops to quantise; ``EmbedLayerNormalization`` is the (fused)
            embedding tables: int8 there shrinks the file from 56 to 22 MB.
        exclude: regular expressions; matching node names stay fp32 (sensitive layers).
        reduce_range: 7-bit weights, so the u8 x s8 products of CPUs without VNNI (AVX2's
            VPMADDUBSW sums pairs into 16 bits) cannot saturate; costs a little accuracy.
    """

    per_channel: bool = True
    weight_type: str = "s8"
    op_types: tuple[str, ...] = ("MatMul", "Attention", "EmbedLayerNormalization")
    exclude: tuple[str, ...] = ()
    reduce_range: bool = False
    name: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        """Short stable id used in the cache file name and recorded in the catalog."""
        fields: list[Any] = [
            self.per_channel,
            self.weight_type,
            list(self.op_types),
            list(self.exclude),
        ]
        if self.reduce_range:  # appended only when set, so earlier keys stay the same
            fields.append("reduce_range")
        text = json.dumps(fields)
        return (self.name + "-" if self.name else "") + hashlib.sha1(text.encode()).hexdigest()[:8]

    def to_dict(self) -> dict[str, Any]:
        return {
            "per_channel": self.per_channel,
            "weight_type": self.weight_type,
            "op_types": list(self.op_types),
            "exclude": list(self.exclude),
            "reduce_range": self.reduce_range,
            "name": self.name,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Int8Recipe:
        return cls(
            per_channel=bool(data.get("per_channel", True)),
            weight_type=str(data.get("weight_type", "s8")),
            op_types=tuple(data.get("op_types", cls.op_types)),
            exclude=tuple(data.get("exclude", ())),
            reduce_range=bool(data.get("reduce_range", False)),
            name=str(data.get("name", "")),
        )


# Chosen by bench/embed.py (figures in bench/results/embed.json): on SciFact, per-channel
# int8 everywhere on the serving graph is within 0.005 nDCG@10 of torch fp32 (limit 0.01)
# at ~3.8x its throughput on 2 cores; keeping the embeddings or the FFN outputs fp32
# gained <0.002 nDCG and cost speed or size (measured on the v1 graph).
DEFAULT_INT8 = Int8Recipe(name="pc")
# The candidate for CPUs where DEFAULT_INT8 loses agreement (precision.py measures both).
REDUCED_INT8 = Int8Recipe(name="pcr", reduce_range=True)


@dataclass
class _Probes:
    """The probe texts as the graphs take them, and what the first graph made of them:
    the reference every later graph must reproduce."""

    inputs: list[str]
    ids: np.ndarray
    mask: np.ndarray
    reference: np.ndarray
    pooling: str


def export_fp32(
    spec: ModelSpec, folder: Path, model_id: str, step: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Write the transformer's graph, fuse it for ORT and make the serving graph, each
    verified against the first; ``step`` is told when each of the three graphs is written.

    The first graph comes from :mod:`.onnx_build` (no torch) when it reads the model, else
    from ``torch.onnx.export`` (:mod:`.onnx_torch`, the ``sentence-transformers`` extra),
    which is also checked against torch itself.
    """
    step = step or (lambda _name: None)
    tokenizer = load_tokenizer(spec)
    ids, mask = encode(tokenizer, [spec_text(t, spec) for t in PROBES], spec.max_seq_length)
    ort = attempt_import("onnxruntime", "onnx")
    raw = folder / RAW_FILE
    unreadable = unbuildable(spec.folder)
    if unreadable:
        names, reference = export_with_torch(spec, raw, model_id, ids, mask, unreadable)
    else:
        atomic_write(raw, lambda tmp: write_graph(spec.folder, tmp))
        names = list(BUILT_INPUTS)
        tokens = session(ort, raw, 1).run(None, feed(names, ids, mask))[0]
        reference = pool(tokens, mask, spec.pooling)
    step("exported")
    probes = _Probes(names, ids, mask, reference, spec.pooling)
    meta: dict[str, Any] = {
        "inputs": names,
        "fused": False,
        "graph_from": "torch.onnx.export" if unreadable else "onnx_build",
    }
    config = spec.folder / "config.json"
    atomic_write(folder / FUSED_FILE, lambda tmp: _write_fused(ort, raw, config, probes, meta, tmp))
    step("fused")
    hidden = int(read_json(config).get("hidden_size", 0) or 0)
    atomic_write(
        folder / SERVE_FILE,
        lambda tmp: _write_serving(ort, folder / FUSED_FILE, hidden, probes, meta, tmp, model_id),
    )
    step("verified")
    return meta


def _write_fused(
    ort: Any, raw: Path, config_file: Path, probes: _Probes, meta: dict[str, Any], tmp: Path
) -> None:
    """ORT's python fusions of ``raw`` into ``tmp``, kept only if they reproduce the
    reference (else ``tmp`` is a copy of ``raw``); ``meta`` records what was fused."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    config = read_json(config_file)
    options = FusionOptions("bert")
    # Symbolic shape inference needs sympy (80 MB, not a dependency); the fused MiniLM
    # graph is the same without it (same ops, byte-identical weights).
    options.enable_shape_inference = False
    optimized = optimize_model(
        str(raw),
        model_type="bert",
        num_heads=int(config.get("num_attention_heads", 0)),
        hidden_size=int(config.get("hidden_size", 0)),
        opt_level=0,  # python fusions only: the file must stay hardware-neutral
        optimization_options=options,
    )
    optimized.save_model_to_file(str(tmp))
    out = session(ort, tmp, 1).run(None, feed(probes.inputs, probes.ids, probes.mask))[0]
    got = pool(out, probes.mask, probes.pooling)
    meta["fused_ops"] = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
    meta["fused_min_cosine"] = float(cosines(got, probes.reference).min())
    if meta["fused_min_cosine"] >= MIN_EXPORT_COSINE:
        meta["fused"] = True
    else:  # a fusion that changes the numbers is worse than none: keep the plain graph
        tmp.write_bytes(raw.read_bytes())


def _write_serving(
    ort: Any,
    fused: Path,
    hidden: int,
    probes: _Probes,
    meta: dict[str, Any],
    tmp: Path,
    model_id: str,
) -> None:
    """The serving graph of ``fused`` into ``tmp``: mask-free when the fusion gave the
    structure serving_graph edits and that reproduces the reference, else keeping the
    mask input (fed all ones).

    Raises:
        NotExportable: When neither reproduces the reference.
    """
    onnx = attempt_import("onnx", "onnx")
    errors: list[str] = []

    def attempt(strip: bool) -> float:
        try:
            graph = serving_graph(onnx, fused, strip, hidden, probes.pooling)
            onnx.save(graph, tmp)
            return _serving_min_cosine(ort, tmp, probes)
        except Exception as exc:  # noqa: BLE001 - ORT rejects a layout we did not expect
            errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            return -1.0

    # Mask-free only when the fusion gave the structure serving_graph edits.
    strip = bool(meta["fused"])
    cosine = attempt(strip)
    if cosine < MIN_EXPORT_COSINE and strip:
        strip = False  # keep the mask input (fed all ones)
        cosine = attempt(strip)
    meta["serving_min_cosine"] = cosine
    if cosine < MIN_EXPORT_COSINE:
        why = errors[-1] if cosine == -1.0 and errors else f"cosine {cosine:.4f}"
        raise NotExportable(
            f"{model_id}: the ONNX serving graph does not reproduce torch ({why}); "
            "use HYBRIDKB_EMBEDDING_BACKEND=torch"
        )
    meta["serving_mask_free"] = strip


def _serving_min_cosine(ort: Any, path: Path, probes: _Probes) -> float:
    """The worst cosine of the graph at ``path`` to the reference, each probe run alone:
    the serving graph only ever sees batches without padding."""
    probe = session(ort, path, 1)
    inputs = [i.name for i in probe.get_inputs()]
    got = np.concatenate(
        [
            probe.run(None, feed(inputs, probes.ids[i : i + 1, :n], probes.mask[i : i + 1, :n]))[0]
            for i, n in enumerate(probes.mask.sum(axis=1))
        ]
    )
    return float(cosines(got, probes.reference).min())


def _quantize(fp32: Path, target: Path, recipe: Int8Recipe) -> None:
    """Dynamic int8 quantisation of ``fp32`` into ``target`` (no torch needed)."""
    onnx = attempt_import("onnx", "onnx")
    quantization = attempt_import("onnxruntime.quantization", "onnx")
    graph_nodes = [n.name for n in onnx.load(str(fp32), load_external_data=False).graph.node]
    exclude = [n for n in graph_nodes if any(re.search(p, n) for p in recipe.exclude)]
    weight_type = (
        quantization.QuantType.QInt8
        if recipe.weight_type == "s8"
        else quantization.QuantType.QUInt8
    )

    def write(tmp: Path) -> None:
        # quantize_dynamic logs a pre-processing hint meant for static (calibrated) quantisation.
        logging.getLogger().addFilter(_drop_preprocess_hint)
        try:
            quantization.quantize_dynamic(
                str(fp32),
                str(tmp),
                weight_type=weight_type,
                per_channel=recipe.per_channel,
                reduce_range=recipe.reduce_range,
                op_types_to_quantize=list(recipe.op_types),
                nodes_to_exclude=exclude,
                # Fused contrib ops have no ONNX shape inference; their tensors are float.
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        finally:
            logging.getLogger().removeFilter(_drop_preprocess_hint)

    atomic_write(target, write)


def _drop_preprocess_hint(record: logging.LogRecord) -> bool:
    return "pre-processing before quantization" not in record.getMessage()


def ensure_exported(
    model_id: str,
    *,
    quantize: bool | Int8Recipe = False,
    graph: str = "serve",
    cache_dir: str | os.PathLike[str] | None = None,
    spec: ModelSpec | None = None,
) -> Path:
    """Return the cached .onnx file for ``model_id``, exporting it first if needed.

    Args:
        model_id: sentence-transformers model name or folder.
        quantize: ``True`` for the default int8 recipe, an :class:`Int8Recipe`, or ``False``.
        graph: which fp32 graph to run or quantise: ``"serve"`` (the backend's),
            ``"fused"`` (BERT fusions, with mask) or ``"raw"`` (the plain export); the
            last two are for comparison in bench/embed.py.
        cache_dir: cache root; default ``~/.cache/hybridkb``.
        spec: the model's spec if already read.
    """
    spec = spec or read_spec(model_id, model_folder(model_id))
    folder = export_dir(model_id, spec, cache_dir)
    recipe = DEFAULT_INT8 if quantize is True else quantize or None
    files = {"serve": SERVE_FILE, "fused": FUSED_FILE, "raw": RAW_FILE}
    if graph not in files:
        raise ConfigError(f"graph must be one of {sorted(files)}, not {graph!r}")
    fp32 = folder / files[graph]
    target = folder / f"{fp32.stem}-int8-{recipe.key}.onnx" if recipe else fp32
    tokenizer = spec.folder / "tokenizer.json"
    if target.exists() and onnx_files.check(folder, target) == "ok":
        onnx_files.check_tokenizer(folder, tokenizer, model_id)
        return target
    with export_lock(folder):
        if target.exists() and onnx_files.trusted(folder, target, "ONNX graph"):
            onnx_files.check_tokenizer(folder, tokenizer, model_id)
            return target  # another process finished it while we waited
        for stale in folder.glob(".*.tmp"):  # left by a killed exporter; we hold the lock
            stale.unlink(missing_ok=True)
        # The float32 graphs are made together; an int8 graph is made from one of them.
        sources = dict.fromkeys([fp32, folder / SERVE_FILE])
        fresh = not all(f.exists() and onnx_files.trusted(folder, f, "ONNX graph") for f in sources)
        if not fresh:
            onnx_files.check_tokenizer(folder, tokenizer, model_id)
        with export_progress(model_id, (3 if fresh else 0) + (1 if recipe else 0)) as step:
            if fresh:
                _export_fresh(spec, folder, model_id, step)
            if recipe:
                _quantize(fp32, target, recipe)
                onnx_files.record(folder, [target])
                step("quantised")
    return target


def _export_fresh(
    spec: ModelSpec, folder: Path, model_id: str, step: Callable[[str], None]
) -> None:
    """Make the float32 graphs and record them with the tokenizer they were built for."""
    try:
        meta = export_fp32(spec, folder, model_id, step)
    except KBError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch.onnx.export fails many ways
        raise NotExportable(
            f"{model_id}: the ONNX export failed ({type(exc).__name__}: {exc}); "
            "use HYBRIDKB_EMBEDDING_BACKEND=torch"
        ) from exc
    meta.update(model_id=model_id, max_seq_length=spec.max_seq_length)
    atomic_write(folder / "export.json", lambda t: t.write_text(json.dumps(meta)))
    onnx_files.record(folder, [folder / n for n in (RAW_FILE, FUSED_FILE, SERVE_FILE)])
    onnx_files.record_tokenizer(folder, spec.folder / "tokenizer.json")


MAPPED_FOLDER = "mapped"


def ensure_mapped(model: Path) -> Path:
    """A copy of ``model`` whose weights sit in a side file, made once; what serving loads.

    ONNX Runtime copies the weights of a self-contained model file into its own memory
    (twice: the file bytes, then the tensors), while it memory-maps a side file and uses
    the pages of the OS file cache. With the float32 MiniLM a session took 0.29-0.38 s
    and 53k page faults from the one file, 0.06-0.08 s and 11k from the pair (int8:
    0.09 -> 0.03 s), with the same vectors: a fifth of a cold ``hybridkb search``.

    The copy is named after the size and time of ``model``, so a model written again
    gets a new one (and the old is removed). Layout: ``mapped/<stem>-<size>-<mtime>.onnx``
    plus ``.onnx.data``; both are written in a temporary folder and moved into place, the
    data first. A cache that cannot take the copy raises OSError.
    """
    st = model.stat()
    folder = model.parent / MAPPED_FOLDER
    twin = folder / f"{model.stem}-{st.st_size:x}-{st.st_mtime_ns:x}.onnx"
    data = twin.with_name(twin.name + ".data")
    pair = (twin, data)
    if all(p.exists() and onnx_files.check(model.parent, p) == "ok" for p in pair):
        return twin
    onnx = attempt_import("onnx", "onnx")
    private_folder(folder, secret=False, fix=CACHE_FIX)
    with export_lock(folder):
        if all(p.exists() and onnx_files.trusted(model.parent, p, "ONNX graph") for p in pair):
            return twin  # another process made it while we waited
        for stale in folder.glob(".tmp-*"):  # left by a killed writer; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        proto = onnx.load(str(model))
        with tempfile.TemporaryDirectory(prefix=".tmp-", dir=folder) as tmp:
            onnx.save_model(
                proto,
                str(Path(tmp) / twin.name),
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=data.name,  # relative to the .onnx: the pair moves together
                size_threshold=1024,
            )
            (Path(tmp) / data.name).touch()  # a model with no large tensor writes none
            for written in pair:  # onnx writes as the umask allows: ours are 0600
                os.chmod(Path(tmp) / written.name, 0o600)
            os.replace(Path(tmp) / data.name, data)
            os.replace(Path(tmp) / twin.name, twin)
        onnx_files.record(model.parent, pair)
        earlier = re.compile(re.escape(model.stem) + r"-[0-9a-f]+-[0-9a-f]+\.onnx(\.data)?")
        gone = [old for old in folder.iterdir() if earlier.fullmatch(old.name) and old not in pair]
        for old in gone:
            old.unlink(missing_ok=True)  # the copy of an earlier file of that name
        if gone:
            onnx_files.forget(model.parent, gone)
    return twin


@contextlib.contextmanager
def export_progress(model_id: str, steps: int) -> Iterator[Callable[[str], None]]:
    """One line on stderr saying what happens and why it is slow once, then a bar (one of
    each for a whole embedder load, see embedders/progress.py)."""
    with preparing(model_id, steps) as step:
        yield step
