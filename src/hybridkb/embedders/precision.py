"""Choose int8 or float32 ONNX inference by measuring on this CPU, once.

int8 is only a gain where the CPU has fast int8 kernels (AMX, AVX-512 VNNI) and only
safe where its rounding does not change what a search returns: on an AVX2-only EPYC
the default int8 recipe's cosine to float32 fell to 0.974 on an empty text, while on a
Xeon with AMX it stayed above 0.988 and ran 3.8x faster. So nothing is assumed: at the
first export each int8 candidate is timed against float32 on a fixed probe set of
passages and queries, and its top-10 results are compared with float32's. A candidate
is chosen only if it is at least :data:`MIN_SPEEDUP` faster and agrees on at least
:data:`MIN_AGREEMENT` of the top-10. The verdict is stored beside the export, keyed by
:func:`~hybridkb.machine.cpu_signature`, so it is measured once per CPU kind.

``hybridkb setup`` measures in the foreground; a first use without it is served in
float32 while a detached child measures (:mod:`.judge`). A measurement that fails is
recorded as float32 with its error (float32 is always right; ``setup --remeasure``
tries again), so a broken quantiser is not retried at every start.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..machine import cpu_flags, cpu_model, cpu_signature
from .onnx_export import DEFAULT_INT8, REDUCED_INT8, Int8Recipe
from .onnx_files import export_lock
from .onnx_model import SERVE_FILE, atomic_write, export_dir, model_folder, read_spec
from .progress import preparing

MIN_SPEEDUP = 1.2  # int8 loses a little accuracy; below this it is not worth it
MIN_AGREEMENT = 0.9  # mean share of float32's top-10 that int8 also returns
CANDIDATES = (DEFAULT_INT8, REDUCED_INT8)
TOP = 10
JUDGE_LOCK = ".precision.lock"  # held while measuring: by a judge, or `hybridkb setup`

# Sentences from several domains and languages, combined below into probe passages.
_FACTS = [
    "Depreciation spreads the cost of an asset over its useful life.",
    "Straight-line depreciation charges the same amount every year.",
    "Employees accrue four weeks of paid annual leave each year.",
    "Sick leave requires a doctor's note after three consecutive days.",
    "The invoice is payable within thirty days of receipt.",
    "Late payments incur interest at eight percent above the base rate.",
    "Mitochondria produce most of the cell's supply of ATP.",
    "Insulin lowers blood glucose by promoting uptake into muscle and fat.",
    "Vitamin D deficiency is associated with weaker bones in older adults.",
    "Randomised controlled trials are the strongest design for causal claims.",
    "The Treaty of Westphalia ended the Thirty Years' War in 1648.",
    "The Roman aqueducts carried water across valleys on stone arches.",
    "Photosynthesis converts light energy into chemical energy in chloroplasts.",
    "A black hole's event horizon is the boundary from which light cannot escape.",
    "Python lists are dynamic arrays that grow by over-allocating memory.",
    "A B-tree keeps data sorted and allows searches in logarithmic time.",
    "TLS encrypts traffic between a browser and a web server.",
    "Backups should be tested by restoring them, not only by writing them.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Bake the bread at 220 degrees for thirty-five minutes.",
    "The marathon route follows the river before climbing to the old town.",
    "Goalkeepers may handle the ball only inside their own penalty area.",
    "The heat pump moves heat from outside air into the house.",
    "Solar panels produce less electricity on cloudy winter days.",
    "The lease ends on 31 March 2025 unless either party renews it.",
    "The tenant must give two months' notice before moving out.",
    "Die Mehrwertsteuer beträgt in Deutschland in der Regel 19 Prozent.",
    "Les congés payés sont de cinq semaines par an en France.",
    "公司每年为员工提供十五天带薪年假。",
    "Quarterly revenue grew 12% to 4.2 million euros.",
    "Error 0x80070005 means access to the file was denied.",
    "Restart the router if the status light blinks orange.",
    "Bees communicate the direction of flowers with a waggle dance.",
    "Coral reefs bleach when sea temperatures stay too high for weeks.",
    "The committee meets on the first Tuesday of every month.",
    "Minutes of each meeting are published within five working days.",
    "Children under twelve travel free when accompanied by an adult.",
    "The museum is closed on Mondays and public holidays.",
    "Compound interest grows savings faster than simple interest.",
    "Index funds track a market index at low cost.",
]
_QUERIES = [
    "how does depreciation work",
    "how many weeks of holiday do staff get",
    "when is the invoice due",
    "what produces ATP in cells",
    "how does insulin affect blood sugar",
    "best study design for causality",
    "when did the thirty years war end",
    "what is an event horizon",
    "how do python lists grow",
    "how to make sure backups work",
    "how long to bake bread",
    "can the goalkeeper use hands",
    "how does a heat pump heat a home",
    "when does the lease end",
    "notice period for tenants",
    "Mehrwertsteuersatz Deutschland",
    "combien de semaines de congés en France",
    "带薪年假有几天",
    "revenue growth last quarter",
    "access denied error code",
    "router light blinking orange",
    "how do bees tell others where flowers are",
    "why do coral reefs bleach",
    "when does the committee meet",
    "do children pay for the train",
    "is the museum open on monday",
    "compound versus simple interest",
    "what is an index fund",
    "",
    "sick note",
]


def probe_passages() -> list[str]:
    """200 passages of one to three facts each (deterministic)."""
    n = len(_FACTS)
    out = []
    for i in range(200):
        parts = [_FACTS[i % n], _FACTS[(i * 7 + 3) % n], _FACTS[(i * 13 + 5) % n]]
        out.append(" ".join(parts[: 1 + i % 3]))
    out[-1] = ""  # the empty text is where int8 drifted furthest (see the module docstring)
    out[-2] = " ".join(_FACTS)  # longer than the model's window: truncation
    return out


def top_agreement(
    fp32: np.ndarray, other: np.ndarray, passages: np.ndarray, p2: np.ndarray
) -> float:
    """Mean share of the float32 top-10 that the other vectors also rank top-10."""
    first = np.argsort(-(fp32 @ passages.T), axis=1)[:, :TOP]
    second = np.argsort(-(other @ p2.T), axis=1)[:, :TOP]
    shared = [len(set(a) & set(b)) / TOP for a, b in zip(first, second, strict=True)]
    return float(np.mean(shared))


@dataclass
class Trial:
    recipe: Int8Recipe
    speedup: float
    agreement: float
    min_cosine: float

    @property
    def accepted(self) -> bool:
        return self.speedup >= MIN_SPEEDUP and self.agreement >= MIN_AGREEMENT

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe.to_dict(),
            "key": self.recipe.key,
            "speedup": round(self.speedup, 3),
            "agreement": round(self.agreement, 4),
            "min_cosine": round(self.min_cosine, 4),
            "accepted": self.accepted,
        }


def _best_time(embed: Any, texts: list[str], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        embed(texts)
        best = min(best, time.perf_counter() - start)
    return best


def measure(
    model_id: str, cache_dir: str | os.PathLike[str] | None, rounds: int = 3
) -> list[Trial]:
    """Time and compare every int8 candidate against float32 ONNX on the probe set."""
    from .onnx import OnnxEmbedder

    passages, queries = probe_passages(), _QUERIES
    fp32 = OnnxEmbedder(model_id, cache_dir=cache_dir)
    ref_p = fp32.embed_documents(passages)
    ref_q = fp32.embed_documents(queries)
    trials = []
    for recipe in CANDIDATES:
        int8 = OnnxEmbedder(model_id, quantize=recipe, cache_dir=cache_dir)
        got_p = int8.embed_documents(passages)
        got_q = int8.embed_documents(queries)
        # Interleaved best-of-N timings in one process: the ratio survives machine load.
        t32 = t8 = float("inf")
        for _ in range(rounds):
            t32 = min(t32, _best_time(fp32.embed_documents, passages, 1))
            t8 = min(t8, _best_time(int8.embed_documents, passages, 1))
        cos = np.concatenate([(got_p * ref_p).sum(axis=1), (got_q * ref_q).sum(axis=1)])
        trials.append(
            Trial(recipe, t32 / t8, top_agreement(ref_q, got_q, ref_p, got_p), float(cos.min()))
        )
    return trials


def verdict_path(model_id: str, cache_dir: str | os.PathLike[str] | None) -> Path:
    """Where this CPU's verdict for ``model_id`` is kept (beside the model's exports)."""
    folder = export_dir(model_id, read_spec(model_id, model_folder(model_id)), cache_dir)
    return folder / f"precision-{cpu_signature()}.json"


def verdict_ready(model_id: str, cache_dir: str | os.PathLike[str] | None) -> bool:
    """Whether int8 has been judged for ``model_id`` on this CPU (the verdict is written
    whole or not at all, so existing means readable, unless edited by hand)."""
    return verdict_path(model_id, cache_dir).exists()


def choose_int8(
    model_id: str, cache_dir: str | os.PathLike[str] | None, *, remeasure: bool = False
) -> Int8Recipe | None:
    """The int8 recipe to use on this CPU, or None for float32 (measured once, then read)."""
    path = verdict_path(model_id, cache_dir)
    if not remeasure and path.exists():
        return _read_verdict(path)
    # Its own lock file: measuring exports (and takes the export lock) inside it.
    with export_lock(path.parent, JUDGE_LOCK):
        if not remeasure and path.exists():  # another process measured while we waited
            return _read_verdict(path)
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            with preparing(model_id, 1) as step:  # the exports inside add their steps
                trials = measure(model_id, cache_dir)
                step("int8 judged")
        except Exception as exc:
            # Not when the cache was cleared under it: the next use judges afresh then.
            if (path.parent / SERVE_FILE).exists():
                _write_record(path, {"trials": [], "chosen": None, "error": _one_line(exc)})
            raise
        accepted = [t for t in trials if t.accepted]
        chosen = max(accepted, key=lambda t: t.speedup) if accepted else None
        record = {
            "trials": [t.to_dict() for t in trials],
            "chosen": chosen.recipe.to_dict() if chosen else None,
            "rule": f"speedup >= {MIN_SPEEDUP} and top-{TOP} agreement >= {MIN_AGREEMENT}",
            # What judging cost (quantising included), for bench/mcp_start.py and the curious.
            "took_s": round(time.perf_counter() - wall, 1),
            "took_cpu_s": round(time.process_time() - cpu, 1),
            "load": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        }
        _write_record(path, record)
    return chosen.recipe if chosen else None


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


def _write_record(path: Path, record: dict[str, Any]) -> None:
    """Write the verdict whole (temporary file, then rename). Under the export lock too:
    an exporter clears temporary files it finds there, which must not be this one."""
    data = {"cpu": cpu_model(), "cpu_flags": list(cpu_flags()), **record}
    with export_lock(path.parent):
        atomic_write(path, lambda t: t.write_text(json.dumps(data, indent=1)))


def read_record(model_id: str, cache_dir: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """The stored measurement for this CPU, if any (for ``hybridkb setup`` and bench)."""
    path = verdict_path(model_id, cache_dir)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _read_verdict(path: Path) -> Int8Recipe | None:
    try:
        chosen = json.loads(path.read_text()).get("chosen")
    except (OSError, ValueError, AttributeError):
        return None  # unreadable: float32 is always safe
    if not isinstance(chosen, dict):
        return None
    # Only a recipe this version measures: an edited verdict cannot pick another one.
    return next((c for c in CANDIDATES if c.to_dict() == chosen), None)
