"""The loader fuzzer: feeds mutated inputs (fuzz_inputs.py) to ``load_file`` and reports
every call that raised anything but a KBError, broke the result contract or hung.

A crash or a call that does not finish within the guard time is saved under the work
folder and its path printed, so it can be replayed with ``load_file(path)``. Its own
module because two runners share it: tests/loaders/test_fuzz_loaders.py (a short run
in the fast subset, ~1,000 inputs in CI, 10,000 as ``slow``) and bench/reliability.py.
"""

from __future__ import annotations

import signal
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fuzz_inputs import make_seeds, mutations

from hybridkb.errors import KBError
from hybridkb.loaders import load_file
from hybridkb.results import Block, LoadedFile

CALL_GUARD_SECONDS = 20.0  # a call running this long counts as a hang, not as slow


# --- running -----------------------------------------------------------------------


class CallTimeout(BaseException):
    """Raised by the guard timer; a BaseException so loaders' ``except Exception`` miss it."""


@contextmanager
def call_guard(seconds: float) -> Iterator[None]:
    """Interrupt a call that runs longer than ``seconds`` (POSIX main thread only)."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise CallTimeout(f"still running after {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Finding:
    index: int
    seed: str
    kind: str  # crash | hang | contract
    detail: str
    saved: str


@dataclass
class FuzzReport:
    tried: int = 0
    loaded: int = 0
    refused: int = 0
    findings: list[Finding] = field(default_factory=list)
    error_codes: Counter[str] = field(default_factory=Counter)
    warnings: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    slowest: tuple[float, str] = (0.0, "")

    @property
    def crashes(self) -> int:
        return len(self.findings)

    def to_dict(self) -> dict[str, object]:
        return {
            "inputs_tried": self.tried,
            "loaded": self.loaded,
            "refused_with_kberror": self.refused,
            "crashes": self.crashes,
            "findings": [f.__dict__ for f in self.findings],
            "error_codes": dict(self.error_codes),
            "warnings": dict(self.warnings),
            "seconds": round(self.seconds, 1),
            "slowest_call_s": round(self.slowest[0], 2),
            "slowest_input": self.slowest[1],
        }


def _contract(loaded: object, path: Path) -> str | None:
    """What is wrong with a successful result, or None."""
    if not isinstance(loaded, LoadedFile):
        return f"returned {type(loaded).__name__}, not LoadedFile"
    if not loaded.blocks:
        return "returned no blocks instead of raising ExtractionError"
    for block in loaded.blocks:
        if (
            not isinstance(block, Block)
            or not isinstance(block.text, str)
            or not block.text.strip()
        ):
            return f"bad block {block!r:.120}"
    return None


def check_one(path: Path, timeout: float = CALL_GUARD_SECONDS) -> tuple[str, str]:
    """Load one file; return (outcome, detail), outcome in loaded|refused|crash|hang|contract."""
    try:
        with call_guard(timeout), warnings.catch_warnings(record=True):
            warnings.simplefilter("ignore")
            # OCR off: rendering and recognising every mutated scan page would make the
            # run minutes longer and test PDFium, not our loaders.
            loaded = load_file(path, ocr=False)
    except KBError as exc:
        message = str(exc)
        if "\n" in message or path.name not in message:
            return "contract", f"{exc.code}: message not one line naming the file: {message!r:.200}"
        return "refused", exc.code
    except CallTimeout as exc:
        return "hang", str(exc)
    except Exception as exc:  # noqa: BLE001 - exactly what the fuzzer hunts
        tail = "".join(traceback.format_exception(exc)[-3:])
        return "crash", f"{type(exc).__name__}: {str(exc)[:200]}\n{tail}"
    problem = _contract(loaded, path)
    return ("contract", problem) if problem else ("loaded", "")


def fuzz_loaders(
    n: int, *, seed: int, workdir: Path, timeout: float = CALL_GUARD_SECONDS
) -> FuzzReport:
    """Feed ``n`` mutated inputs to ``load_file``; crashes and hangs are saved in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    crash_dir = workdir / "crashes"
    report = FuzzReport()
    seeds = make_seeds()
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # count what a user would see, do not fail on it
        for index, name, ext, data in mutations(seeds, n, seed):
            path = workdir / f"input-{name.replace('.', '-')}{ext}"
            path.write_bytes(data)
            t0 = time.perf_counter()
            outcome, detail = check_one(path, timeout)
            took = time.perf_counter() - t0
            report.tried += 1
            if took > report.slowest[0]:
                report.slowest = (took, f"seed={seed} index={index} ({name})")
            if outcome == "loaded":
                report.loaded += 1
            elif outcome == "refused":
                report.refused += 1
                report.error_codes[detail] += 1
            else:
                crash_dir.mkdir(exist_ok=True)
                saved = crash_dir / f"{outcome}-{index:05d}{ext}"
                saved.write_bytes(data)
                print(f"fuzz {outcome} on input {index} ({name}): {saved}\n{detail}")
                report.findings.append(Finding(index, name, outcome, detail, str(saved)))
        for warning in caught:
            report.warnings[warning.category.__name__] += 1
    report.seconds = time.perf_counter() - started
    return report
