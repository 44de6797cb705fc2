"""Mutation fuzzing of the loaders: only a KBError may leave ``load_file``, and every call ends.

The seeds and their mutations are in tests/support/fuzz_inputs.py, the run that feeds
them to the loaders (a guard time per call, a report, crashing inputs saved to replay
with ``load_file(path)``) in tests/support/loader_fuzz.py. The CI variant tries 1,000
inputs (150 in the fast inner loop: tests/support/long_runs.py); the ``slow`` one tries
10,000, as ``bench/reliability.py`` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_inputs import make_seeds, mutations
from loader_fuzz import FuzzReport, check_one, fuzz_loaders
from long_runs import budget

from hybridkb.errors import KBError
from hybridkb.loaders import load_file

FUZZ_INPUTS = budget(ci=1_000, fast=150)  # 150: each seed mutated 8 or 9 times

# --- tests -------------------------------------------------------------------------


def _assert_clean(report: FuzzReport) -> None:
    summary = "\n".join(
        f"{f.kind} {f.seed} #{f.index} -> {f.saved}: {f.detail}" for f in report.findings
    )
    assert not report.findings, f"{report.crashes} loader failures that are not KBError:\n{summary}"


def test_seeds_load_cleanly(tmp_path: Path) -> None:
    for name, data in make_seeds().items():
        path = tmp_path / name
        path.write_bytes(data)
        assert check_one(path)[0] == "loaded", name


def test_mutations_are_reproducible() -> None:
    seeds = make_seeds()
    first = [(i, n, hash(d)) for i, n, _, d in mutations(seeds, 40, seed=5)]
    assert first == [(i, n, hash(d)) for i, n, _, d in mutations(seeds, 40, seed=5)]
    docx_again = make_seeds()["doc.docx"]
    assert docx_again == seeds["doc.docx"]  # the DOCX seed holds no wall-clock time either


def test_fuzzed_loaders_raise_only_kberror(tmp_path: Path) -> None:
    report = fuzz_loaders(FUZZ_INPUTS, seed=20240601, workdir=tmp_path / "fuzz")
    assert report.tried == FUZZ_INPUTS
    _assert_clean(report)
    assert report.loaded and report.refused  # the mutations reach both outcomes


@pytest.mark.slow
def test_fuzzed_loaders_raise_only_kberror_10000(tmp_path: Path) -> None:
    report = fuzz_loaders(10_000, seed=7, workdir=tmp_path / "fuzz")
    assert report.tried == 10_000
    _assert_clean(report)


# --- regressions found by fuzzing (inputs generated, never stored) ----------------------

_RUN = 300_000  # long enough that the old quadratic regexes ran for many minutes


@pytest.mark.parametrize(
    "name, text",
    [
        # ATX heading regex: `(.*?)` then `[ \t]*$` over a long blank run.
        ("heading.md", "# a" + " " * _RUN + "x\n\nbody\n"),
        # Table delimiter regex: two `[ \t]*` side by side after the dashes.
        ("table.md", "| a | b |\n|---" + " " * _RUN + "x\n"),
        # normalize_text(keep_indent=True): `[ \t]+\n` tried at every blank of a run.
        ("code.md", "```\ncode" + " " * _RUN + "x\n```\n"),
    ],
)
def test_long_blank_runs_do_not_take_quadratic_time(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert check_one(path, timeout=60)[0] == "loaded"


def test_docx_needing_an_unknown_zip_version_is_an_extraction_error(tmp_path: Path) -> None:
    # zipfile raises NotImplementedError("zip file version 6.5") for such an entry.
    data = bytearray(make_seeds()["doc.docx"])
    offset = data.find(b"PK\x01\x02")
    data[offset + 6 : offset + 8] = (65).to_bytes(2, "little")  # "version needed to extract"
    path = tmp_path / "future.docx"
    path.write_bytes(bytes(data))
    outcome, detail = check_one(path)
    assert (outcome, detail) == ("refused", "extraction_error")
    with pytest.raises(KBError, match="zip file version 6.5"):
        load_file(path)
