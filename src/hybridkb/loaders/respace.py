"""Put back the spaces OCR drops between English words ("Theeffectivelifeofan asset").

PP-OCR's recogniser (the model in rapidocr's wheel) often reads the gap between two
Latin words as no character at all. Its character positions do not tell the gap apart
(bench/ocr.py: within-word gaps of 1-4 feature columns, dropped spaces 2-4), so words
are cut by a dictionary instead: ``wordninja`` (part of the ``ocr`` extra: a pure-Python
wheel whose word list, 126k English words by frequency, ships inside it) splits a run
of letters into the most probable words.

Only what is safely a glued run is touched: a run of 5+ ASCII letters, not all
capitals, that is not itself a word, and whose split has only dictionary words, none a
single letter but "a" or "I". Letters glued to punctuation (``use,or``,
``Commissioner.Travel``) get their space back too. The caller applies it to English
pages only (other languages' words are not in the list and would be cut into English
fragments).
"""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from typing import Any

_RUN = re.compile(r"[A-Za-z]{5,}")
# A comma, semicolon or colon after a letter and before a letter or digit ("Ltd,4"), or
# a full stop between a word of 2+ letters and a capital: a clause glued to the next.
_PUNCT = re.compile(r"(?<=[A-Za-z])([,;:])(?=[A-Za-z0-9])|(?<=[A-Za-z]{2})(\.)(?=[A-Z][a-z])")
_SHORT_WORDS = frozenset({"a", "i"})


def respace_available() -> bool:
    """True when the word list (wordninja, in the ``ocr`` extra) is installed."""
    return importlib.util.find_spec("wordninja") is not None


@cache
def _model() -> Any:
    import wordninja

    return wordninja.DEFAULT_LANGUAGE_MODEL


def _split(run: str) -> str:
    model = _model()
    known = model._wordcost  # the word list as a dict (wordninja has no public accessor)
    if run.isupper() or run.lower() in known:
        return run
    parts = model.split(run)
    if len(parts) < 2 or any(
        p.lower() not in known or (len(p) == 1 and p.lower() not in _SHORT_WORDS) for p in parts
    ):
        return run
    out, at = [], 0
    for part in parts:  # the run's own letters, in its own case
        out.append(run[at : at + len(part)])
        at += len(part)
    return " ".join(out) if at == len(run) else run


def respace(text: str) -> str:
    """``text`` with the spaces OCR dropped between English words put back."""
    text = _PUNCT.sub(lambda m: (m.group(1) or m.group(2)) + " ", text)
    return _RUN.sub(lambda m: _split(m.group(0)), text)
