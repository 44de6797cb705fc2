"""normalize_text: what extracted text looks like after clean-up."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridkb.normalize import normalize_text


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("tax\u00adable income", "taxable income"),
        ("zero\u200bwidth\u200c\u200d join\u2060er\ufeff", "zerowidth joiner"),
        ("bell\x07 and\x00 nul", "bell and nul"),
        ("depre-\nciation", "depreciation"),
        ("depre-\n ciation of assets", "depreciation of assets"),
        ("tax\u00ad\nable", "taxable"),
        ("the ﬁle ﬂow", "the file flow"),  # PDF ligatures
        ("ＡＢＣ１２３", "ABC123"),  # full-width forms
        ("a\u00a0b\u2003c", "a b c"),  # no-break and em spaces
        ("line one\r\nline two\rline three", "line one\nline two\nline three"),
        ("a  \t b\t\tc", "a b c"),
        ("trailing   \nspaces\t\n", "trailing\nspaces"),
        ("one\n\n\n\n\ntwo", "one\n\ntwo"),
        ("one\n \n\t\n  \ntwo", "one\n\ntwo"),
        ("  \n\n text \n\n ", "text"),
        ("flag \U000f03d9 icon", "flag icon"),  # private-use glyphs from icon fonts
        ("e\u200b\u0301", "\u00e9"),  # the accent composes once the ZWSP is gone
    ],
)
def test_normalize_cleans_extracted_text(raw: str, clean: str) -> None:
    assert normalize_text(raw) == clean


@pytest.mark.parametrize(
    "kept",
    [
        "Anglo-\nSaxon",  # capital after the break: a real compound
        "pages 10-\n12",  # digits are not words
        "end-\n\nnew paragraph",  # a blank line is not a line break inside a word
        "tab\tinside",  # a single tab is kept... as one space
    ],
)
def test_normalize_keeps_real_hyphens_and_breaks(kept: str) -> None:
    out = normalize_text(kept)
    if "\t" in kept:
        assert out == kept.replace("\t", " ")
    else:
        assert out == kept


def test_normalize_keep_indent_preserves_code_layout() -> None:
    code = "def f(x):\r\n    if x:\r\n        return x-\n1  \n\n\n\n"
    assert normalize_text(code, keep_indent=True) == "def f(x):\n    if x:\n        return x-\n1"


# Characters that interact (hyphens, line ends, invisibles, compatibility forms)
# drawn densely, plus arbitrary Unicode.
_TRICKY = "ab Z-.\n\r\t\u00ad\u200b\u00a0\u2029\u2028\ufeff\x00\x85ﬁé\u0301ＡİǅΣς\u2010"
_TEXT = st.text(alphabet=_TRICKY, max_size=80) | st.text(max_size=60)


@settings(max_examples=200, deadline=None)
@given(_TEXT)
def test_normalize_is_idempotent(raw: str) -> None:
    once = normalize_text(raw)
    assert normalize_text(once) == once


@settings(max_examples=200, deadline=None)
@given(_TEXT)
def test_normalize_output_has_no_invisible_or_ragged_whitespace(raw: str) -> None:
    out = normalize_text(raw)
    assert "\r" not in out
    assert not re.search("[\u00ad\u200b-\u200d\u2060\ufeff]", out)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", out)
    assert "\n\n\n" not in out
    assert not re.search(r"[ \t]\n|[ \t]$|  |\t", out)
    assert out == out.strip()
