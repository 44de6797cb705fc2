"""Language-aware text analysis shared by indexing and querying.

One regex-driven tokenizer turns text into index terms; the language only
chooses the Snowball stemmer and the stop words applied to alphabetic words.

Rules, applied after NFKC normalisation and casefolding:

* Alphabetic words are stemmed with the language's Snowball stemmer (when
  PyStemmer has one) and dropped if they are stop words of that language.
* Code-like tokens (``c++``, ``s.40-880``, ``foo_bar``, ``e-mail``, ``3.14``)
  are kept whole, unstemmed, and their alphanumeric parts are emitted as well, so
  both the exact form and the pieces match. Numbers are ordinary terms.
* Runs of scripts written without spaces (Han, Kana, Hangul, Thai, Lao, Khmer,
  Myanmar) become overlapping character bigrams; a one-character run stays a
  unigram. A query for 线程 therefore matches 多线程编程 with no dictionary.

Example:
    >>> analyze("Running C++ on 多线程 v2", "en")
    ['run', 'c++', 'c', '多线', '线程', 'v2', 'v', '2']
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import chain
from typing import Any

import Stemmer

__all__ = [
    "SNOWBALL_LANGUAGES",
    "STOPWORDS",
    "UNDETERMINED",
    "analyze",
    "analyze_query",
    "detect_language",
    "detect_languages",
]

UNDETERMINED = "und"

# ISO 639-1 -> Snowball algorithm. Filtered against the installed PyStemmer,
# because older releases ship fewer algorithms.
_SNOWBALL_CANDIDATES = {
    "ar": "arabic", "ca": "catalan", "cs": "czech", "da": "danish", "de": "german",
    "el": "greek", "en": "english", "eo": "esperanto", "es": "spanish", "et": "estonian",
    "eu": "basque", "fa": "persian", "fi": "finnish", "fr": "french", "ga": "irish",
    "hi": "hindi", "hu": "hungarian", "hy": "armenian", "id": "indonesian",
    "it": "italian", "lt": "lithuanian", "nb": "norwegian", "ne": "nepali",
    "nl": "dutch", "nn": "norwegian", "no": "norwegian", "pl": "polish",
    "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian",
    "st": "sesotho", "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}  # fmt: skip
_AVAILABLE = set(Stemmer.algorithms())
SNOWBALL_LANGUAGES: dict[str, str] = {
    code: algo for code, algo in _SNOWBALL_CANDIDATES.items() if algo in _AVAILABLE
}


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Short lists of function words. BM25's idf already discounts them; removing
# them mostly saves scoring work on huge posting lists and keeps a German "die"
# from matching English "die" in a mixed collection. English is measured on
# SciFact in bench/bm25.py.
STOPWORDS: dict[str, frozenset[str]] = {
    "en": _wordset(
        "a an and are as at be but by for if in into is it no not of on or such that the "
        "their then there these they this to was will with"
    ),
    "de": _wordset(
        "aber als am an auch auf aus bei bin bis da dann das dass dem den der des die "
        "doch du ein eine einem einen einer eines er es für hat ich ihr im in ist ja "
        "kein man mit nach nicht noch nur oder sich sie sind so um und uns von vor "
        "war was wie wir wird zu zum zur"
    ),
    "fr": _wordset(
        "au aux avec ce ces dans de des du elle en et il ils je la le les leur lui ma "
        "mais me même mes mon ne nos notre nous on ou par pas pour qu que qui sa se "
        "ses son sur ta te tes ton tu un une vos votre vous c d j l m n s t"
    ),
    "es": _wordset(
        "a al con de del el en es la las lo los más mi no o para pero por que se sin "
        "su sus un una uno y ya"
    ),
}

# Scripts written without spaces between words: indexed as character bigrams.
_UNSPACED = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1100-\u11ff"  # Hangul Jamo
    "\u1780-\u17ff"  # Khmer
    "\u3005-\u3007"  # 々 〆 〇
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul Jamo extended-A
    "\uac00-\ud7ff"  # Hangul syllables, Jamo extended-B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # halfwidth Katakana (NFKC maps most, kept for safety)
    "\U00020000-\U0003134f"  # CJK extensions B-H
)
# Joiners inside code-like tokens: "s.40-880", "foo_bar", "std::vec", "a/b", "at&t".
_CONNECTORS = r"\-_.'/+#@:&"
_MAX_TOKEN_CHARS = 128  # longer runs are blobs (base64, minified code), not words
_MEMO_TOKENS = 1 << 17  # distinct tokens an analyser remembers before starting afresh
# Longest piece remembered: words with their punctuation repeat, a long run without a
# space ("1,2,3,...", a URL) rarely does, and its terms would be held for nothing.
_MEMO_PIECE_CHARS = 64
_DETECT_CHARS = 2000
_MIN_DETECT_LETTERS = 12
_MIN_CONFIDENCE = 0.5


def _mark_class() -> str:
    """Character-class body for every combining mark (Mn, Mc, Me).

    Python's ``\\w`` excludes combining marks, which would split Devanagari,
    Tamil or Bengali words at every vowel sign.
    """
    ranges: list[list[int]] = []
    for cp in (*range(0x20000), *range(0xE0100, 0xE01F0)):
        if unicodedata.category(chr(cp))[0] == "M":
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )


def _compile(word: str, cjk: str | None) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The token and word-run patterns for a word character and an unspaced-script run
    (None: no such run, and the token pattern has no groups)."""
    joiner = rf"(?:[{_CONNECTORS}]+|(?<=\d),(?=\d))"
    tok = rf"{word}+(?:{joiner}{word}+)*[+#]*"
    token = re.compile(tok if cjk is None else rf"(?P<cjk>{cjk})|(?P<tok>{tok})")
    run = re.compile(rf"{word}+")
    return token, run


@cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Compile the tokenizer once, on first use (building the mark class takes ~40 ms)."""
    return _compile(rf"(?:[^\W_{_UNSPACED}]|[{_mark_class()}])", f"[{_UNSPACED}]+")


@cache
def _ascii_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The tokenizer for ASCII text. No combining mark and no unspaced script is ASCII,
    so these match exactly what :func:`_patterns` matches there (the cjk group never
    matches), without the mark class and the wide ranges, whose building and compiling
    cost ~70 ms at the first analysis in a process: a cold search for an English query.
    On ASCII ``[^\\W_]`` is ``[a-zA-Z0-9]``, which Python's engine matches faster, and
    every match is a token (no group to tell a run apart): a third less time a word."""
    return _compile("[a-zA-Z0-9]", None)


_DIGIT = re.compile(r"\d")
_ALNUM_PIECES = re.compile(r"\d+|\D+")


@dataclass(frozen=True)
class _Analyzer:
    """Stemmer and stop words for one language; ``stem`` is None when unstemmed.

    ``terms`` remembers the terms of each token seen with these stop words, for each
    pattern set (ASCII text or not): words repeat, and one lookup costs a tenth of the
    checks and the stemmer call a word took (analysis was ~80 us a 60-word chunk).
    ``pieces`` does the same for documents a whitespace-separated piece at a time (see
    :func:`_document_terms`)."""

    stem: Callable[[str], str] | None
    stopwords: frozenset[str]
    terms: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]] = field(
        default_factory=lambda: ({}, {}), compare=False
    )
    pieces: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]] = field(
        default_factory=lambda: ({}, {}), compare=False
    )


def _word(
    run: str, stem: Callable[[str], str] | None, stop: frozenset[str], out: list[str]
) -> None:
    """Append the term for one alphanumeric run (nothing for a stop word)."""
    if run in stop or len(run) > _MAX_TOKEN_CHARS:
        return
    out.append(stem(run) if stem is not None and _DIGIT.search(run) is None else run)


# PyStemmer objects must not be shared between threads, so each thread keeps
# its own analysers (the MCP server and LangChain tools may search in threads).
_local = threading.local()


def _base_language(language: str) -> str:
    """Reduce "de-CH" or "pt_BR" to the ISO 639-1 part used for lookups."""
    base = re.split(r"[-_]", language.strip().lower(), maxsplit=1)[0]
    return base or UNDETERMINED


def _analyzer(language: str) -> _Analyzer:
    """Return this thread's cached analyser for a base language code."""
    cache: dict[str, _Analyzer] | None = getattr(_local, "analyzers", None)
    if cache is None:
        cache = _local.analyzers = {}
    found = cache.get(language)
    if found is None:
        algo = SNOWBALL_LANGUAGES.get(language)
        stem = Stemmer.Stemmer(algo).stemWord if algo else None
        found = cache[language] = _Analyzer(stem, STOPWORDS.get(language, frozenset()))
    return found


def _clear_cache() -> None:
    """Forget this thread's analysers, e.g. after changing STOPWORDS (bench tuning)."""
    _local.analyzers = {}


def _normalized(text: str) -> str:
    """``text`` as the tokenizer reads it: NFKC, casefolded, curly apostrophes straight."""
    return unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")


def _tokens(text: str, analyzer: _Analyzer, stop: frozenset[str], out: list[str]) -> None:
    """Append the terms of ``text`` to ``out`` (see the module docstring for the rules)."""
    norm = _normalized(text)
    ascii_only = norm.isascii()
    # A query's own stop words differ from the analyser's: its terms are not kept.
    memo = analyzer.terms[ascii_only] if stop is analyzer.stopwords else {}
    _scan(norm, ascii_only, analyzer.stem, stop, memo, out)


def _scan(
    norm: str,
    ascii_only: bool,
    stem: Callable[[str], str] | None,
    stop: frozenset[str],
    memo: dict[str, tuple[str, ...]],
    out: list[str],
) -> None:
    """Append the terms of normalised text to ``out``, its tokens' terms remembered in
    ``memo``; ``ascii_only`` picks the pattern set (the ASCII one for ASCII text)."""
    if ascii_only:
        token_re, run_re = _ascii_patterns()
        for tok in token_re.findall(norm):
            terms = memo.get(tok)
            if terms is None:
                terms = memo[tok] = _token_terms(tok, stem, stop, run_re)
            out.extend(terms)
    else:
        token_re, run_re = _patterns()
        for cjk, tok in token_re.findall(norm):
            if not tok:
                if len(cjk) == 1:
                    out.append(cjk)
                else:
                    out.extend([cjk[i : i + 2] for i in range(len(cjk) - 1)])
                continue
            terms = memo.get(tok)
            if terms is None:
                terms = memo[tok] = _token_terms(tok, stem, stop, run_re)
            out.extend(terms)
    if len(memo) > _MEMO_TOKENS:
        memo.clear()


def _token_terms(
    tok: str, stem: Callable[[str], str] | None, stop: frozenset[str], run_re: re.Pattern[str]
) -> tuple[str, ...]:
    """The terms of one token (not of an unspaced-script run)."""
    if tok.isalpha():  # the common case, a plain word
        if tok in stop or len(tok) > _MAX_TOKEN_CHARS:
            return ()
        return (stem(tok) if stem is not None else tok,)
    out: list[str] = []
    runs = run_re.findall(tok)
    compound = len(runs) > 1 or len(runs[0]) != len(tok)
    if compound and len(tok) <= _MAX_TOKEN_CHARS:
        out.append(tok)  # the whole code-like token, unstemmed
    for run in runs:
        pieces = _ALNUM_PIECES.findall(run) if _DIGIT.search(run) else ()
        if len(pieces) > 1:
            # "p53", "cd4", "itaa1997": the run, then letters and digits apart.
            # Worth +0.01 nDCG@10 on SciFact (bench/bm25.py).
            if len(run) <= _MAX_TOKEN_CHARS:
                out.append(run)
            for piece in pieces:
                _word(piece, stem, stop, out)
        else:
            _word(run, stem, stop, out)
    return tuple(out)


def analyze(text: str, language: str) -> list[str]:
    """Turn document text into index terms, in order, with repeats.

    Args:
        text: The document or chunk text.
        language: ISO 639-1 code (regional suffixes such as "de-CH" are ignored);
            "und" or an unknown code analyses without stemming or stop words.

    Returns:
        The terms in text order; repeats are kept because term frequency counts.
    """
    return _document_terms(text, _analyzer(_base_language(language)))


def _document_terms(text: str, analyzer: _Analyzer) -> list[str]:
    """:func:`analyze` a whitespace-separated piece at a time: no token holds a space
    (nor anything else ``str.split`` splits at), so a text's terms are its pieces' terms
    in order, and a piece ("cells,", "(p53)") repeats as its words do. The pieces are
    looked up in C (``map``) and the tokenizer runs only on a piece not seen yet: the
    regex scan took ~16 us of a 60-word chunk's ~28 us, the lookups per token ~6 more."""
    norm = _normalized(text)
    ascii_only = norm.isascii()
    memo = analyzer.pieces[ascii_only]
    pieces = norm.split()
    try:
        return list(chain.from_iterable(map(memo.__getitem__, pieces)))
    except KeyError:
        pass
    known = list(map(memo.get, pieces))
    stem, stop, tokens = analyzer.stem, analyzer.stopwords, analyzer.terms[ascii_only]
    for i, terms in enumerate(known):
        if terms is None:
            piece = pieces[i]
            terms = memo.get(piece)  # an earlier miss in this text may have filled it
            if terms is None:
                found: list[str] = []
                _scan(piece, ascii_only, stem, stop, tokens, found)
                terms = tuple(found)
                if len(piece) <= _MEMO_PIECE_CHARS:
                    memo[piece] = terms
            known[i] = terms
    if len(memo) > _MEMO_TOKENS:
        memo.clear()
    return list(chain.from_iterable(known))  # type: ignore[arg-type]


def analyze_query(text: str, languages: Iterable[str]) -> list[str]:
    """Turn a query into the unique terms to look up.

    The query is analysed once per language of the collection plus its own
    detected language, and the terms are unioned: a German query then meets
    German stems in German documents while English documents keep matching
    their own stems. Stop words of the query's detected language are dropped
    from every analysis, so a German "die" does not look up English "die".

    Args:
        text: The query text.
        languages: Languages present in the searched collection (ISO 639-1).

    Returns:
        Unique terms in first-seen order, compatible with :func:`analyze`.
    """
    own = detect_language(text)
    codes = dict.fromkeys(_base_language(lang) for lang in (*languages, own))
    extra_stop = STOPWORDS.get(own, frozenset())
    seen: dict[str, None] = {}
    done: set[tuple[Any, frozenset[str]]] = set()
    for code in codes:
        analyzer = _analyzer(code)
        # The analyser's own set when the query's adds nothing (an English query in an
        # English collection): the same stop words, and _tokens then reuses the terms it
        # remembers for them instead of stemming every word again.
        stop = (
            analyzer.stopwords
            if extra_stop <= analyzer.stopwords
            else analyzer.stopwords | extra_stop
        )
        # Languages without a stemmer all analyse alike; do that work once.
        key = (SNOWBALL_LANGUAGES.get(code), stop)
        if key in done:
            continue
        done.add(key)
        out: list[str] = []
        _tokens(text, analyzer, stop, out)
        seen.update(dict.fromkeys(out))
    return list(seen)


# --- language detection ------------------------------------------------------

_HAN = re.compile("[\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
_KANA = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7ff]")
_NON_LETTER = re.compile(r"[\W\d_]+")
# py3langid labels that are not ISO 639-1 but have a close 639-1 code.
_LANGID_ALIASES = {
    "wuu": "zh", "yue": "zh", "arz": "ar", "ary": "ar", "uzs": "uz", "sdh": "ku",
    "kik": "ki", "gug": "gn", "hbo": "he", "grc": "el", "zxx": UNDETERMINED,
}  # fmt: skip
_identifier: Any = None
_identifier_lock = threading.Lock()


def _langid() -> Any:
    """Load py3langid's bundled model once, on first detection (see langid_model)."""
    global _identifier
    if _identifier is None:
        with _identifier_lock:
            if _identifier is None:
                from .langid_model import load_identifier

                # A private instance: py3langid's module-level one is shared
                # global state that other code may restrict with set_languages.
                _identifier = load_identifier()
    return _identifier


def detect_language(text: str) -> str:
    """Guess the language of a text.

    Scripts decide first: text dominated by Han, Kana or Hangul maps to zh, ja or
    ko by script counts (langid is unreliable on a few ideographs). Other text
    goes to py3langid using the first 2,000 characters.

    Args:
        text: Any text; only the first ~2,000 characters are read.

    Returns:
        An ISO 639-1 code, or "und" when the text is too short, has no letters,
        or the classifier is not confident.
    """
    sample = text[:_DETECT_CHARS]
    by_script = _by_script(sample)
    if by_script is not None:
        return by_script
    batch = _batch_classifier()
    if batch is not None:  # the same answer as classify, at a third of its CPU
        return _langid_code(*batch.classify_one(sample))
    return _langid_code(*_langid().classify(sample))


def detect_languages(texts: Sequence[str]) -> list[str]:
    """:func:`detect_language` of each text, for many texts at once (a bulk add): the
    same codes, with py3langid's per-byte Python loop done for all texts together."""
    out: list[str | None] = [_by_script(t[:_DETECT_CHARS]) for t in texts]
    asked = [i for i, code in enumerate(out) if code is None]
    if asked:
        samples = [texts[i][:_DETECT_CHARS] for i in asked]
        batch = _batch_classifier()
        if batch is not None:
            found = batch.classify(samples)
        else:  # another py3langid than the one BatchClassifier reads
            found = [_langid().classify(sample) for sample in samples]
        for i, (label, confidence) in zip(asked, found, strict=True):
            out[i] = _langid_code(label, confidence)
    return [code or UNDETERMINED for code in out]


_batch: Any = None


def _batch_classifier() -> Any:
    """The identifier's :class:`~hybridkb.text.langid_model.BatchClassifier`, made once; None
    when the installed py3langid is laid out otherwise."""
    global _batch
    if _batch is None:
        from .langid_model import BatchClassifier

        identifier = _langid()
        _batch = BatchClassifier(identifier) if BatchClassifier.usable(identifier) else False
    return _batch or None


# Every ASCII character _NON_LETTER removes: all but A-Z and a-z.
_ASCII_NON_LETTERS = bytes(c for c in range(128) if not chr(c).isalpha())


def _by_script(sample: str) -> str | None:
    """The code the script rules decide for a sample, or None to ask the classifier."""
    if sample.isascii():
        # No Han, Kana or Hangul; the letters are A-Z and a-z, counted by one C call
        # (the regexes below took ~20 us of a 60-word text's ~100 us detection).
        count = len(sample.encode("ascii").translate(None, _ASCII_NON_LETTERS))
        if not count:
            return UNDETERMINED
        return UNDETERMINED if count < _MIN_DETECT_LETTERS else None
    letters = _NON_LETTER.sub("", sample)
    if not letters:
        return UNDETERMINED
    han = len(_HAN.findall(letters))
    kana = len(_KANA.findall(letters))
    hangul = len(_HANGUL.findall(letters))
    cjk = han + kana + hangul
    # An ideograph carries about a word; weigh it like a short word of letters.
    if cjk and 3 * cjk >= len(letters) - cjk:
        if hangul >= han + kana:
            return "ko"
        if kana * 10 >= han + kana:
            return "ja"
        return "zh"
    if len(letters) < _MIN_DETECT_LETTERS:
        return UNDETERMINED
    return None


def _langid_code(label: str, confidence: float) -> str:
    code = _LANGID_ALIASES.get(label, label)
    if confidence < _MIN_CONFIDENCE or len(code) != 2:
        return UNDETERMINED
    return str(code)
