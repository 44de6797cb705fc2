"""Put back the spaces OCR drops between English words ("Theeffectivelifeofan asset").

PP-OCR's recogniser (the model in rapidocr's wheel) often reads the gap between two
Latin words as no character at all. Its character positions do not tell the gap apart
(bench/ocr.py: within-word gaps of 1-4 feature columns, dropped spaces 2-4), so words
are cut by a dictionary instead: ``wordninja`` (part of the ``ocr`` extra: a pure-Python
wheel whose word list, 126k English words by frequency, ships inside it) splits a run
of letters into the most probable words.

Only what is safely a glued run is touched: a run of 5+ ASCII letters, not all
capitals, that is not itself a word, and whose split has only common enough words
(the list also holds fragments such as "rde" or "ida" that would cut a name or a
foreign word into pieces): a one-letter part must be "a" or "I", a part of 2-3 letters
among the 300 most frequent words ("of", "can"), of 4-6 letters among the 40,000 most frequent; longer parts
only need to be in the list ("depreciating" is word 121,539). Letters glued to punctuation (``use,or``,
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
# The most frequent rank a part of 1-3 and of 4-6 letters may have (see above).
_RANK_SHORT, _RANK_MEDIUM = 300, 40_000


def respace_available() -> bool:
    """True when the word list (wordninja, in the ``ocr`` extra) is installed."""
    return importlib.util.find_spec("wordninja") is not None


@cache
def _model() -> tuple[Any, dict[str, int]]:
    """wordninja's model and each word's frequency rank (0 = most frequent)."""
    import wordninja

    model = wordninja.DEFAULT_LANGUAGE_MODEL
    # Its word list, most frequent first, is only kept as costs (no public accessor).
    ranked = sorted(model._wordcost, key=model._wordcost.__getitem__)
    return model, {word: rank for rank, word in enumerate(ranked)}


def _common_enough(part: str, ranks: dict[str, int]) -> bool:
    rank = ranks.get(part.lower())
    if rank is None:
        return False
    if len(part) == 1:
        return part.lower() in ("a", "i")
    if len(part) <= 3:
        return rank < _RANK_SHORT
    return len(part) > 6 or rank < _RANK_MEDIUM


def _split(run: str) -> str:
    model, ranks = _model()
    if run.isupper() or run.lower() in ranks:
        return run
    parts = model.split(run)
    if len(parts) < 2 or not all(_common_enough(p, ranks) for p in parts):
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
