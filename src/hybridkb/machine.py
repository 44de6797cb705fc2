"""What the CPU can do: the facts that decide numeric kernels (and so speed and accuracy).

int8 inference and the vector index's kernels depend on AVX2, AVX-512 VNNI and AMX on
x86 and on NEON / dot-product instructions on ARM; a choice measured on one CPU does
not carry to another, so choices made by measurement are stored per
:func:`cpu_signature` and benchmarks print :func:`cpu_flags` with every figure.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import sys
from pathlib import Path

# The instruction sets that change int8 / float kernels (x86 names as /proc/cpuinfo
# spells them; ARM ones as its "Features" line does).
KERNEL_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "amx_int8",
    "amx_bf16",
    "asimddp",
    "i8mm",
    "sve",
)


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo, else what ``platform`` says), for reports."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


@functools.cache
def cpu_flags() -> tuple[str, ...]:
    """The :data:`KERNEL_FLAGS` this CPU has (empty where /proc/cpuinfo is missing)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key = line.split(":", 1)[0].strip()
            if key in ("flags", "Features"):
                have = set(line.split(":", 1)[1].split())
                return tuple(f for f in KERNEL_FLAGS if f in have)
    return ()


def cpu_signature() -> str:
    """A short id of the architecture and kernel flags: equal ids run the same kernels."""
    text = f"{platform.machine()}|{','.join(cpu_flags())}|{cpu_model()}"
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def describe() -> str:
    """One line for logs and benchmarks: model, flags, usable CPUs."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        usable = os.cpu_count() or 1
    flags = ",".join(cpu_flags()) or "none known"
    return f"{cpu_model()} ({platform.machine()}, {usable} CPUs; flags {flags})"


def peak_rss_mb() -> int:
    """This process's peak resident memory in MiB.

    VmHWM belongs to the process image: Linux carries ``ru_maxrss`` over from the parent
    across fork and exec, so a child of a 1.7 GB test runner reported 1.7 GB whatever it
    did. ``ru_maxrss`` serves where /proc does not (bytes on macOS, KiB elsewhere).
    """
    import resource

    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    scale = 1 if sys.platform == "darwin" else 1024
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale) >> 20
