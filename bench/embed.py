"""Embedding throughput and retrieval quality: torch fp32 vs ONNX Runtime variants.

    .venv/bin/python bench/embed.py                 # 512 docs + SciFact nDCG@10 (slow)
    .venv/bin/python bench/embed.py --skip-ndcg     # throughput only (a few minutes)

Throughput: the first N SciFact abstracts (title + " " + text), every variant timed in
the same process, interleaved every --group docs with the order rotating (torch, onnx,
int8, ...; then onnx, int8, ..., torch) so a noisy machine slows all of them alike; the
speed-up is the median over rounds of (torch time in that round / variant time in that
round), with the rounds' min and max, and the same ratio of process CPU time (the work
done, which a busy machine inflates far less than wall time).

Quality: nDCG@10 on the SciFact test split (300 queries) by exact cosine search over the
whole corpus (5,183 docs) with each variant's vectors, against torch fp32. This embeds the
corpus once per variant -- minutes each on 2 cores; vectors are cached under --cache so a
rerun only embeds what changed.

Issue target: >= 2.5x torch fp32 throughput with nDCG@10 within 0.01 of torch.
"""

from __future__ import annotations

import os
import sys

# bench/ goes last on sys.path: bench/keyword.py must not shadow the stdlib module.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

import argparse
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    DEFAULT_MODEL,
    SCIFACT,
    machine,
    print_rows,
    print_targets,
    target,
    write_json,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from hybridkb.embedders.onnx import OnnxEmbedder, physical_cores
from hybridkb.embedders.onnx_export import DEFAULT_INT8, REDUCED_INT8, Int8Recipe

# name -> (OnnxEmbedder keyword arguments, what it is, measure nDCG). "torch" is the baseline.
INT8 = {"quantize": DEFAULT_INT8}
ONE_CALL = {"workers": 1, "threads": physical_cores()}  # one ONNX call at a time, all cores
BATCH32 = {"max_batch_tokens": 1 << 20}  # equal-length batches of up to --batch-size texts
VARIANTS: dict[str, tuple[dict[str, Any], str, bool]] = {
    "onnx-fp32-plain": ({"graph": "raw"}, "torch.onnx.export graph, fp32", False),
    "onnx-fp32": ({}, "serving graph, fp32 = backend onnx", True),
    "onnx-int8": (INT8, "serving graph, int8 per-channel = backend onnx-int8", True),
    "int8-v1": (
        {**INT8, "graph": "fused", **ONE_CALL, **BATCH32},
        "the v1 recipe: fused graph with mask, one call on all cores, batches of 32",
        False,
    ),
    "int8-fused-graph": (
        {**INT8, "graph": "fused"},
        "onnx-int8 on the v1 graph (mask, SkipLayerNorm, numpy pooling)",
        False,
    ),
    "onnx-int8-reduced": (
        {"quantize": REDUCED_INT8},
        "int8 per-channel, 7-bit weights (no u8 x s8 saturation on AVX2)",
        True,
    ),
    "int8-one-call": ({**INT8, **ONE_CALL}, "onnx-int8, one call at a time on all cores", False),
    "int8-batch32": ({**INT8, **BATCH32}, "onnx-int8, batches of up to 32 texts", False),
    "int8-per-tensor": (
        {"quantize": Int8Recipe(per_channel=False, name="pt")},
        "onnx-int8 with per-tensor weight scales (quantize_dynamic's default)",
        True,
    ),
    "int8-u8": (
        {"quantize": Int8Recipe(weight_type="u8", name="u8")},
        "onnx-int8 with QUInt8 weights (u8 x u8 GEMM)",
        False,
    ),
}
DEFAULT_VARIANTS = [
    "onnx-fp32",
    "onnx-int8",
    "onnx-int8-reduced",
    "int8-v1",
    "int8-fused-graph",
    "int8-one-call",
    "int8-batch32",
]


def load_corpus(
    folder: Path,
) -> tuple[list[str], list[str], dict[str, str], dict[str, dict[str, int]]]:
    ids, texts = [], []
    with (folder / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            ids.append(str(row["_id"]))
            texts.append(f"{row.get('title') or ''} {row.get('text') or ''}")
    queries = {}
    with (folder / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            queries[str(row["_id"])] = str(row["text"])
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    return ids, texts, queries, qrels


def ndcg10(
    doc_ids: list[str], docs: np.ndarray, queries: np.ndarray, qrels: list[dict[str, int]]
) -> float:
    """Mean nDCG@10 of exact cosine search (vectors are unit length)."""
    scores = queries @ docs.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    total = 0.0
    for row, rel in zip(top, qrels, strict=True):
        dcg = sum(rel.get(doc_ids[j], 0) / np.log2(r + 2) for r, j in enumerate(row))
        ideal = sorted(rel.values(), reverse=True)[:10]
        total += dcg / sum(g / np.log2(r + 2) for r, g in enumerate(ideal))
    return total / len(qrels)


def int8_gemm_kernel() -> str:
    """Which int8 GEMM ONNX Runtime (MLAS) picked, as far as Linux lets us see.

    MLAS uses its AMX u8 x s8 kernel only after asking the kernel for the AMX tile state
    (arch_prctl ARCH_REQ_XCOMP_PERM) when it loads; importing onnxruntime flips that bit.
    """
    if not sys.platform.startswith("linux") or "amx_int8" not in Path("/proc/cpuinfo").read_text():
        return "no AMX on this CPU: AVX-512 VNNI / AVX2 kernels"
    import ctypes

    import onnxruntime

    libc = ctypes.CDLL(None, use_errno=True)
    perm = ctypes.c_ulong(0)
    # syscall 158 = arch_prctl on x86-64; 0x1022 = ARCH_GET_XCOMP_PERM; bit 18 = XTILEDATA
    if libc.syscall(158, 0x1022, ctypes.byref(perm)) != 0:
        return "unknown"
    granted = bool(perm.value >> 18 & 1)
    return f"onnxruntime {onnxruntime.__version__}: " + (
        "AMX tiles requested (u8 x s8 GEMM on AMX)" if granted else "AMX not requested"
    )


def torch_embedder(batch_size: int) -> Any:
    from hybridkb.embedders.sentence import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(DEFAULT_MODEL, device="cpu", batch_size=batch_size)


def throughput(
    embedders: dict[str, Any], texts: list[str], rounds: int, group: int
) -> dict[str, dict[str, Any]]:
    """chunks/s per variant; speed-up vs torch measured round by round.

    Each round walks the texts in groups of ``group`` and times every variant on each
    group, rotating the order: load that comes and goes within a round hits all variants
    alike. Wall time is what a user waits; process CPU time (all threads) is the work done,
    which a busy machine inflates far less.
    """
    for e in embedders.values():
        e.embed_documents(texts[:8])  # warm up: first-run allocations, lazy inits
    names = list(embedders)
    secs: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    groups = [texts[i : i + group] for i in range(0, len(texts), group)]
    for r in range(rounds):
        wall = dict.fromkeys(names, 0.0)
        work = dict.fromkeys(names, 0.0)
        for g, chunk in enumerate(groups):
            k = (g + r) % len(names)
            for name in names[k:] + names[:k]:
                c, start = time.process_time(), time.perf_counter()
                embedders[name].embed_documents(chunk)
                wall[name] += time.perf_counter() - start
                work[name] += time.process_time() - c
        for name in names:
            secs[name].append(wall[name])
            cpu[name].append(work[name])
        print(
            f"  round {r + 1}/{rounds} (load {os.getloadavg()[0]:.1f}): "
            + ", ".join(f"{n} {len(texts) / s[-1]:.1f}/s" for n, s in secs.items()),
            flush=True,
        )
    base, base_cpu = np.asarray(secs["torch"]), np.asarray(cpu["torch"])
    out = {}
    for name in names:
        ratios = base / np.asarray(secs[name])
        cpu_ratios = base_cpu / np.asarray(cpu[name])
        out[name] = {
            "chunks_per_s": round(len(texts) / float(np.median(secs[name])), 2),
            "speedup": round(float(np.median(ratios)), 3),
            "speedup_min": round(float(ratios.min()), 3),
            "speedup_max": round(float(ratios.max()), 3),
            "cpu_speedup": round(float(np.median(cpu_ratios)), 3),
            "speedup_rounds": [round(float(x), 3) for x in ratios],
        }
    return out


def query_latency(embedders: dict[str, Any], queries: list[str], rounds: int = 3) -> dict[str, Any]:
    """Warm ``embed_query`` of short queries, one at a time: p50/p95 ms per variant,
    interleaved like ``throughput`` so load hits every variant alike."""
    times: dict[str, list[float]] = {name: [] for name in embedders}
    for e in embedders.values():
        e.embed_query("warm up")
    for _ in range(rounds):
        for q in queries:
            for name, e in embedders.items():
                t0 = time.perf_counter()
                e.embed_query(q)
                times[name].append(time.perf_counter() - t0)
    return {
        name: {
            "query_p50_ms": round(float(np.percentile(t, 50)) * 1000, 2),
            "query_p95_ms": round(float(np.percentile(t, 95)) * 1000, 2),
        }
        for name, t in times.items()
    }


def cached_vectors(cache: Path, key: str, make: Callable[[], np.ndarray]) -> np.ndarray:
    path = cache / f"{key}.npy"
    if path.exists():
        return np.load(path)
    vectors = np.asarray(make(), dtype=np.float32)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    os.replace(tmp, path)
    return vectors


def cold_start(backend: str, cache_dir: Path) -> float | None:
    """Seconds for a fresh interpreter to import, load the model and embed one query."""
    code = (
        "import time; t = time.perf_counter()\n"
        "from hybridkb.embedders import get_embedder\n"
        f"get_embedder({DEFAULT_MODEL!r}, device='cpu', backend={backend!r}, "
        f"cache_dir={str(cache_dir)!r}).embed_query('how do assets lose value?')\n"
        "print(time.perf_counter() - t)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    return round(float(done.stdout.strip().splitlines()[-1]), 3) if done.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=512, help="SciFact docs timed per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--group", type=int, default=64, help="docs per interleaving step within a round"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated, of: {', '.join(VARIANTS)}",
    )
    parser.add_argument("--skip-ndcg", action="store_true", help="throughput only")
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hybridkb-bench-embed"))
    args = parser.parse_args()
    names = [n for n in args.variants.split(",") if n]
    unknown = set(names) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")

    info = machine()
    info["physical_cores"] = physical_cores()
    info["onnxruntime_int8_gemm"] = int8_gemm_kernel()
    print(
        f"machine: {info['cpu']}, {info['physical_cores']} physical cores "
        f"({info['nproc']} usable CPUs), flags {info['cpu_flags']}, load {info['loadavg']}"
    )
    doc_ids, texts, queries, qrels = load_corpus(args.scifact)
    sample = texts[: args.docs]

    export_s: dict[str, float] = {}
    embedders: dict[str, Any] = {"torch": torch_embedder(args.batch_size)}
    for name in names:
        start = time.perf_counter()
        embedders[name] = OnnxEmbedder(
            DEFAULT_MODEL,
            batch_size=args.batch_size,
            cache_dir=str(args.cache / "models"),
            **VARIANTS[name][0],
        )
        export_s[name] = round(
            time.perf_counter() - start, 1
        )  # export + load; load alone on reruns
    print(
        f"\nthroughput: {len(sample)} docs, batch {args.batch_size}, {args.rounds} rounds "
        f"interleaved every {args.group} docs, {physical_cores()} cores, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    speed = throughput(embedders, sample, args.rounds, args.group)

    short = [q for q in queries.values() if len(q.split()) <= 12][:50]
    latency = query_latency(embedders, short)
    print(
        f"\nwarm query embedding ({len(short)} short SciFact queries x 3, one at a time): "
        + ", ".join(f"{n} p50 {v['query_p50_ms']} ms" for n, v in latency.items()),
        flush=True,
    )

    rows = []
    for name in ["torch", *names]:
        row = {
            "variant": name,
            "what": "sentence-transformers fp32 (baseline)"
            if name == "torch"
            else VARIANTS[name][1],
        }
        row.update({k: v for k, v in speed[name].items() if k != "speedup_rounds"})
        row.update(latency[name])
        row["file_mb"] = (
            round(embedders[name].onnx_path.stat().st_size / 2**20, 1) if name != "torch" else None
        )
        rows.append(row)

    if not args.skip_ndcg:
        print(
            "\nnDCG@10: embedding all 5,183 SciFact docs per variant (cached under "
            f"{args.cache}); this takes minutes per variant on 2 cores",
            flush=True,
        )
        qids = [q for q in qrels if q in queries]
        qtexts = [queries[q] for q in qids]
        judged = [qrels[q] for q in qids]
        vectors = {}
        queries_by: dict[str, np.ndarray] = {}
        for row in rows:
            name = row["variant"]
            if name != "torch" and not VARIANTS[name][2]:
                continue  # same graph as a measured variant, only batched differently
            e = embedders[name]
            # Dynamic int8 scales are per batch, so the batching is part of the key.
            key = (
                name
                if name == "torch"
                else f"{name}-{e.onnx_path.parent.parent.name}-{e.onnx_path.parent.name}-"
                f"{e.onnx_path.stem}-b{e.batch_size}x{e.max_batch_tokens}"
            )
            start = time.perf_counter()
            docs = cached_vectors(args.cache, f"{key}-corpus", lambda e=e: e.embed_documents(texts))
            qv = cached_vectors(args.cache, f"{key}-queries", lambda e=e: e.embed_documents(qtexts))
            vectors[name] = docs
            queries_by[name] = qv
            row["ndcg10"] = round(ndcg10(doc_ids, docs, qv, judged), 5)
            print(
                f"  {name}: nDCG@10 {row['ndcg10']:.4f} ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
        if "onnx-fp32" in queries_by:
            # Collections made with torch are served by ONNX fp32 queries: measure the mix.
            mixed = ndcg10(doc_ids, vectors["torch"], queries_by["onnx-fp32"], judged)
            rows.append(
                {
                    "variant": "torch docs + onnx-fp32 queries",
                    "what": "an old (torch) collection searched with the ONNX default",
                    "ndcg10": round(mixed, 5),
                    "ndcg_delta": round(mixed - rows[0]["ndcg10"], 5),
                }
            )
        for row in rows:
            if row["variant"] not in vectors:
                continue
            cos = (vectors[row["variant"]] * vectors["torch"]).sum(axis=1)
            row["ndcg_delta"] = round(row["ndcg10"] - rows[0]["ndcg10"], 5)
            row["min_cos"], row["mean_cos"] = (
                round(float(cos.min()), 4),
                round(float(cos.mean()), 5),
            )

    print("\ncold start (fresh interpreter: import + load + one query):", flush=True)
    cold = {b: cold_start(b, args.cache / "models") for b in ("torch", "onnx", "onnx-int8")}
    print("  " + ", ".join(f"{b} {s} s" for b, s in cold.items()))

    columns = [
        "variant",
        "chunks_per_s",
        "speedup",
        "speedup_min",
        "speedup_max",
        "cpu_speedup",
        "query_p50_ms",
        "ndcg10",
        "ndcg_delta",
        "min_cos",
        "mean_cos",
        "file_mb",
        "what",
    ]
    print_rows(
        rows,
        columns,
        title=f"{info['cpu']}, {info['physical_cores']} cores, load {info['loadavg']}",
    )
    int8 = next((r for r in rows if r["variant"] == "onnx-int8"), None)
    checks = []
    if int8:
        checks.append(
            target(
                "onnx-int8 speed-up vs torch fp32", int8["speedup"], 2.5, "x", higher_is_better=True
            )
        )
        if "ndcg_delta" in int8:
            checks.append(target("onnx-int8 |nDCG@10 - torch|", abs(int8["ndcg_delta"]), 0.01, ""))
    if checks:
        print_targets(checks)
    path = write_json(
        "embed",
        {
            "machine": info,
            "loadavg_end": list(os.getloadavg()),
            "config": {
                "docs": len(sample),
                "rounds": args.rounds,
                "group": args.group,
                "batch_size": args.batch_size,
                "cores": physical_cores(),
                "ndcg": not args.skip_ndcg,
            },
            "variants": rows,
            "speedup_rounds": {n: s["speedup_rounds"] for n, s in speed.items()},
            "load_or_export_s": export_s,
            "cold_start_s": cold,
            "targets": checks,
        },
        merge=False,
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
