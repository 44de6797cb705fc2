"""Each step of preparing the model from an empty cache, timed (wall and CPU seconds).

    .venv/bin/python bench/first_use.py [--model all-MiniLM-L6-v2]

What a first use (or `hybridkb setup`) does, one step at a time, in a fresh cache folder:
build the float32 graph from the model's files, fuse it and write the serving graph
(each verified), the memory-mapped copy, the first session and query; then what the int8
judgement adds: quantise each candidate, load it, and the timed trials. A first use
waits for the first group only; the second runs in a background judge
(embedders/judge.py). CPU seconds are this process's (all threads), which machine load
inflates less than wall time; the load average is printed with each step. Writes
bench/results/first_use.json with the machine description.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

import argparse
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypeVar

from _common import DEFAULT_MODEL, machine, write_json

from hybridkb.embedders import onnx_export, onnx_model, precision
from hybridkb.embedders.onnx import OnnxEmbedder
from hybridkb.machine import describe

T = TypeVar("T")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args()
    model = args.model
    print("machine:", describe(), flush=True)
    rows: list[dict[str, Any]] = []

    def step(name: str, run: Callable[[], T]) -> T:
        wall, cpu = time.perf_counter(), time.process_time()
        out = run()
        rows.append(
            {
                "step": name,
                "wall_s": round(time.perf_counter() - wall, 2),
                "cpu_s": round(time.process_time() - cpu, 2),
                "load": round(os.getloadavg()[0], 2),
            }
        )
        print(rows[-1], flush=True)
        return out

    with tempfile.TemporaryDirectory(prefix="hkb-first-use-") as cache:
        spec = step(
            "read the model folder",
            lambda: onnx_model.read_spec(model, onnx_model.model_folder(model)),
        )
        folder = onnx_model.export_dir(model, spec, cache)
        folder.mkdir(parents=True)
        marks: list[tuple[str, float, float]] = [("", time.perf_counter(), time.process_time())]

        def mark(name: str) -> None:
            marks.append((name, time.perf_counter(), time.process_time()))

        step("float32 graphs (built, fused, serving; verified)",
             lambda: onnx_export.export_fp32(spec, folder, model, mark))  # fmt: skip
        for (_, w0, c0), (name, w1, c1) in zip(marks, marks[1:], strict=False):
            print(f"  of which {name}: {w1 - w0:.2f} s wall, {c1 - c0:.2f} s CPU", flush=True)
            rows[-1][f"{name}_cpu_s"] = round(c1 - c0, 2)
        serve = folder / onnx_model.SERVE_FILE
        step("memory-mapped copy", lambda: onnx_export.ensure_mapped(serve))
        fp32 = step("float32 session", lambda: OnnxEmbedder(model, cache_dir=cache))
        step("first query", lambda: fp32.embed_query("how many days of annual leave"))
        for recipe in precision.CANDIDATES:
            step(f"quantise int8 {recipe.name}",
                 lambda r=recipe: onnx_export.ensure_exported(model, quantize=r, cache_dir=cache))  # fmt: skip
            step(f"int8 {recipe.name} session (with its mapped copy)",
                 lambda r=recipe: OnnxEmbedder(model, quantize=r, cache_dir=cache))  # fmt: skip
        step("int8 trials (timed against float32, top-10 agreement)",
             lambda: precision.measure(model, cache))  # fmt: skip
    first_use = sum(r["cpu_s"] for r in rows[:5])
    judging = sum(r["cpu_s"] for r in rows[5:])
    print(f"a first use waits for {first_use:.1f} s CPU; judging int8 adds {judging:.1f} s CPU")
    write_json(
        "first_use",
        {
            "model": model,
            "steps": rows,
            "first_use_cpu_s": round(first_use, 2),
            "judging_cpu_s": round(judging, 2),
            "machine": machine(),
        },  # fmt: skip
        merge=False,
    )


if __name__ == "__main__":
    main()
