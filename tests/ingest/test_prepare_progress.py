"""Preparing a model prints one line and one bar for a whole embedder load (an export and
the int8 candidates' exports used to print one each), and nothing when nothing is done."""

from __future__ import annotations

import os
import sys

import pytest

from hybridkb.embedders.onnx_export import export_progress
from hybridkb.embedders.progress import preparation, preparing

MESSAGE = "hybridkb: preparing m for ONNX Runtime"


def bars(err: str) -> set[str]:
    """The distinct bar labels drawn on stderr (tqdm redraws one line with \\r)."""
    return {part.split(":")[0].strip() for part in err.split("\r") if "step" in part}


def test_an_export_and_the_int8_trials_share_one_message_and_one_bar(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with preparation():
        with preparing("m", 1) as judged:  # choose_int8 around its measurement
            with export_progress("m", 3) as step:  # the float32 export
                for name in ("exported", "fused", "verified"):
                    step(name)
            for _ in range(2):  # each int8 candidate
                with export_progress("m", 1) as step:
                    step("quantised")
            judged("int8 judged")
    err = capsys.readouterr().err
    assert err.count(MESSAGE) == 1
    assert bars(err) == {"prepare"}
    assert "/6 " in err  # 1 + 3 + 1 + 1 steps on the one bar


def test_nothing_is_printed_when_nothing_is_prepared(capsys: pytest.CaptureFixture[str]) -> None:
    with preparation():
        pass
    assert capsys.readouterr().err == ""


def test_a_preparation_outside_a_load_still_says_what_it_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for _ in range(2):
        with export_progress("m", 1) as step:
            step("quantised")
    assert capsys.readouterr().err.count(MESSAGE) == 2  # two separate loads, one line each


def test_transformers_bars_are_off_while_preparing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    seen: list[bool] = []
    with preparing("m", 1):
        if "transformers" in sys.modules:
            from transformers.utils import logging as hf_logging

            seen.append(not hf_logging.is_progress_bar_enabled())
        elif "huggingface_hub" in sys.modules:
            from huggingface_hub.utils.tqdm import are_progress_bars_disabled

            seen.append(are_progress_bars_disabled())
        else:
            seen.append(os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS") == "1")
    assert seen == [True]
