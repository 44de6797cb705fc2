"""Promises of the text analyser: stems, code tokens, CJK bigrams, language detection."""

from __future__ import annotations

import string
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridkb.index.keywords import KeywordIndex
from hybridkb.text.analysis import (
    SNOWBALL_LANGUAGES,
    STOPWORDS,
    analyze,
    analyze_query,
    detect_language,
    detect_languages,
)

GERMAN = (
    "Jeder Wert in Rust hat eine Variable, die als sein Eigentümer bezeichnet wird. Es kann "
    "immer nur einen Eigentümer zur gleichen Zeit geben. Wenn der Eigentümer den "
    "Gültigkeitsbereich verlässt, wird der Wert aufgeräumt und der Speicher freigegeben."
)
ENGLISH = (
    "Each value in Rust has a variable that is called its owner. There can only be one "
    "owner at a time. When the owner goes out of scope, the value will be dropped and the "
    "memory is returned to the allocator."
)
CHINESE = "Rust 中的每一个值都有一个被称为其所有者的变量。值在任一时刻有且只有一个所有者。当所有者离开作用域，这个值将被丢弃。"


def search(docs: dict[int, tuple[str, str]], query: str, k: int = 10) -> list[int]:
    """Index (text, language) documents as the core does and return the ranked keys."""
    index = KeywordIndex()
    index.add(list(docs), [analyze(text, lang) for text, lang in docs.values()])
    langs = {lang for _, lang in docs.values()}
    return [key for key, _ in index.search(analyze_query(query, langs), k)]


# -- stemming ----------------------------------------------------------------------


def test_english_inflections_share_a_stem() -> None:
    assert analyze("running", "en") == analyze("runs", "en") == analyze("run", "en") == ["run"]


def test_german_plural_and_singular_share_a_stem() -> None:
    assert analyze("Häuser", "de") == analyze("Haus", "de") == analyze("Hauses", "de")
    assert analyze("Straße", "de") == analyze("STRASSE", "de")


def test_regional_language_tags_use_the_base_language() -> None:
    assert analyze("running", "en-US") == analyze("running", "en_GB") == ["run"]


def test_unknown_or_undetermined_language_is_not_stemmed() -> None:
    assert analyze("running houses", "und") == ["running", "houses"]
    assert analyze("running houses", "xx") == ["running", "houses"]


def test_snowball_languages_map_iso_codes_to_stemmers() -> None:
    assert SNOWBALL_LANGUAGES["en"] == "english"
    assert SNOWBALL_LANGUAGES["de"] == "german"
    assert all(len(code) == 2 for code in SNOWBALL_LANGUAGES)


def test_stopwords_are_dropped_per_language() -> None:
    assert analyze("the cat and the hat", "en") == ["cat", "hat"]
    assert "die" in analyze("the plants die", "en")  # an English verb, not a German article
    assert "die" not in analyze("die Katze", "de")


# -- normalisation and code-like tokens ----------------------------------------------


def test_text_is_nfkc_normalised_and_casefolded() -> None:
    assert analyze("ＡＢＣ ﬁle ÉTÉ", "und") == ["abc", "file", "été"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("C++", ["c++", "c"]),
        ("C#", ["c#", "c"]),
        ("v2", ["v2", "v", "2"]),
        ("1997", ["1997"]),
        ("3.14", ["3.14", "3", "14"]),
        ("s.40-880", ["s.40-880", "s", "40", "880"]),
        ("ITAA1997", ["itaa1997", "itaa", "1997"]),
        ("foo_bar", ["foo_bar", "foo", "bar"]),
        ("e-mail", ["e-mail", "e", "mail"]),
        ("std::thread::spawn", ["std::thread::spawn", "std", "thread", "spawn"]),
    ],
)
def test_code_tokens_keep_the_whole_form_and_its_parts(text: str, expected: list[str]) -> None:
    assert analyze(text, "und") == expected


def test_sentence_punctuation_does_not_join_tokens() -> None:
    assert analyze("It costs 1997. Really, (v2)!", "und") == [
        "it",
        "costs",
        "1997",
        "really",
        "v2",
        "v",
        "2",
    ]


@pytest.mark.parametrize("query", ["C++", "c++", "v2", "1997", "s.40-880", "ITAA1997", "40-880"])
def test_code_tokens_are_searchable(query: str) -> None:
    docs = {
        1: ("Deductions under s.40-880 of the ITAA1997 for C++ v2 tooling.", "en"),
        2: ("A plain paragraph about apples, pears and section headings.", "en"),
    }
    assert search(docs, query)[0] == 1


def test_exact_code_form_outranks_its_pieces() -> None:
    docs = {1: ("see s 40 and 880 pages", "en"), 2: ("see s.40-880", "en")}
    assert search(docs, "s.40-880")[0] == 2


# -- scripts without spaces ----------------------------------------------------------


def test_cjk_runs_become_overlapping_bigrams() -> None:
    assert analyze("多线程编程很难", "zh") == ["多线", "线程", "程编", "编程", "程很", "很难"]


def test_a_single_cjk_character_is_a_unigram() -> None:
    assert analyze("我 是", "zh") == ["我", "是"]


def test_chinese_query_matches_inside_unspaced_text() -> None:
    docs = {1: ("多线程编程很难", "zh"), 2: ("内存安全与所有权", "zh")}
    assert search(docs, "线程") == [1]


def test_korean_word_matches_when_followed_by_a_particle() -> None:
    docs = {1: ("빅포인트의 가격", "ko"), 2: ("다른 문서입니다", "ko")}
    assert search(docs, "빅포인트") == [1]


def test_mixed_latin_and_cjk_text_yields_both_kinds_of_terms() -> None:
    terms = analyze("Rust中的线程 threads", "zh")
    assert terms[0] == "rust" and "线程" in terms and "threads" in terms


def test_combining_marks_do_not_split_words() -> None:
    assert analyze("हिन्दी भाषा", "und") == ["हिन्दी", "भाषा"]


# -- queries ---------------------------------------------------------------------------


def test_german_query_ranks_the_german_document_first_in_a_mixed_collection() -> None:
    docs = {
        1: (ENGLISH, detect_language(ENGLISH)),
        2: (GERMAN, detect_language(GERMAN)),
        3: (CHINESE, detect_language(CHINESE)),
    }
    assert [lang for _, lang in docs.values()] == ["en", "de", "zh"]
    assert search(docs, "Wer ist der Eigentümer eines Wertes?")[0] == 2
    assert search(docs, "who owns a value?")[0] == 1
    assert search(docs, "所有者")[0] == 3


def test_query_terms_are_unique() -> None:
    terms = analyze_query("run running runs RUN", ["en", "de"])
    assert len(terms) == len(set(terms))
    assert "run" in terms


def test_query_stopwords_of_its_own_language_are_dropped_everywhere() -> None:
    terms = analyze_query("Die Häuser stehen am See und die Straße ist leer", ["en", "de"])
    assert "die" not in terms and "haus" in terms


WORDS = st.sampled_from(
    ["running", "Häuser", "C++", "v2", "3.14", "s.40-880", "foo_bar", "多线程", "빅포인트의",
     "Straße", "naïve", "ÉTÉ", "x", "42", "e-mail", "data-driven", "ＡＢＣ"]
)  # fmt: skip
FILLER = st.text(alphabet=string.ascii_letters + string.digits + " .,-_+#", max_size=20)
ALL_STOPWORDS = frozenset().union(*STOPWORDS.values())


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(st.one_of(WORDS, FILLER), max_size=8),
    lang=st.sampled_from(["en", "de", "zh", "und"]),
)
def test_query_analysis_is_compatible_with_document_analysis(words: list[str], lang: str) -> None:
    text = " ".join(words)
    doc_terms = analyze(text, lang)
    query_terms = analyze_query(text, [lang])
    assert len(query_terms) == len(set(query_terms))
    assert all(t and t == t.casefold() and not any(c.isspace() for c in t) for t in doc_terms)
    lowered = set(analyze(text, "und"))
    if not lowered & ALL_STOPWORDS:  # query-side stop words are the one allowed difference
        assert set(doc_terms) <= set(query_terms)


# -- language detection --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ENGLISH, "en"),
        (GERMAN, "de"),
        (CHINESE, "zh"),
        ("多线程编程很难", "zh"),
        ("線程", "zh"),
        ("これはテストです", "ja"),
        ("빅포인트의 가격", "ko"),
        ("La liberté guide le peuple et tous les êtres humains naissent libres.", "fr"),
    ],
)
def test_detect_language_returns_iso_639_1(text: str, expected: str) -> None:
    assert detect_language(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "42 17.5", "ok", "--- ***"])
def test_detect_language_is_und_for_short_or_letterless_text(text: str) -> None:
    assert detect_language(text) == "und"


def test_detect_language_reads_only_the_start_of_long_text() -> None:
    assert detect_language(ENGLISH * 12 + CHINESE * 200) == "en"


# Words of several scripts and languages, mixed into texts of every length the detector
# reads (up to past its 2,000-character window), with case, digits and marks.
_SAMPLE_WORDS = (
    "the of report tax deduction orchard apple quarterly review der die und Steuer "
    "Abschreibung la le et impôt déduction el los impuesto deducción il della tassa "
    "и в налог вычет отчёт και το φόρος έκθεση 税 年度 報告 これは テスト 세금 보고서 "
    "ภาษี รายงาน कर रिपोर्ट ضريبة تقرير מס דוח ITAA GST s.40-880 2024 café naïve"
).split()


def _mixed_texts(n: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    texts = ["", " ", "ok", "42 17.5", "ALL CAPS ENGLISH HEADLINE ABOUT TAXES", ENGLISH, GERMAN]
    for _ in range(n):
        length = rng.choice([3, 8, 20, 60, 200, 700])
        if rng.random() < 0.5:  # mostly one language
            pool = rng.sample(_SAMPLE_WORDS, 6)
        else:
            pool = _SAMPLE_WORDS
        words = [rng.choice(pool) for _ in range(length)]
        text = " ".join(words)
        texts.append(text.upper() if rng.random() < 0.05 else text)
    return texts


def test_detect_languages_gives_each_text_the_code_detect_language_gives() -> None:
    texts = _mixed_texts(600, seed=11)
    assert detect_languages(texts) == [detect_language(t) for t in texts]
    assert detect_languages([]) == []


def test_batch_classifier_scores_are_py3langids_to_the_bit() -> None:
    from hybridkb.text.langid_model import BatchClassifier, load_identifier

    identifier = load_identifier()
    assert BatchClassifier.usable(identifier)
    batch = BatchClassifier(identifier)
    texts = [t[:2000] for t in _mixed_texts(400, seed=12)]
    assert batch.classify(texts) == [identifier.classify(t) for t in texts]


class _SaysEnglish:
    """A classifier that answers English, so a test sees which texts reach it."""

    def classify(self, text: str) -> tuple[str, float]:
        return "en", 1.0


@settings(max_examples=200, deadline=None)
@given(st.text(string.ascii_letters[:6] + "0123456789_ .,-'\t\n", max_size=40))
def test_an_ascii_text_reaches_the_classifier_as_a_unicode_one_does(text: str) -> None:
    """ASCII text counts its letters without the script regexes: fewer than 12 letters
    (digits and underscores are none) is und, else the classifier decides, exactly as
    for the same text with a dash that is no letter sending it the Unicode way."""
    import hybridkb.text.analysis as analysis

    saved = analysis._batch, analysis._identifier
    analysis._batch, analysis._identifier = False, _SaysEnglish()
    try:
        letters = sum(ch.isalpha() for ch in text)
        expected = "en" if letters >= 12 else "und"
        assert detect_language(text) == expected
        assert detect_language(text + "\u2014") == expected
        assert detect_languages([text, text + "\u2014"]) == [expected, expected]
    finally:
        analysis._batch, analysis._identifier = saved


_ASCII_PIECES = st.sampled_from(
    ["running", "Runs", "the", "C++", "c#", "s.40-880", "foo_bar", "e-mail", "3,14", "1,000",
     "p53", "ITAA1997", "a/b", "at&t", "x" * 130, "std::vec", "'quoted'", "--", ",", "_a_"]
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_ASCII_PIECES | st.text(string.printable, max_size=8), max_size=20),
    st.sampled_from(["en", "de", "und"]),
)
def test_ascii_text_gets_the_terms_the_unicode_tokenizer_gives(
    pieces: list[str], lang: str
) -> None:
    """ASCII text takes a faster pattern and remembered terms; a non-ASCII word after it
    sends the same tokens through the full Unicode tokenizer, in a thread whose
    analysers remember nothing yet."""
    text = " ".join(pieces)
    warm = analyze(text, lang)
    assert analyze(text, lang) == warm
    fresh: list[list[str]] = []
    worker = threading.Thread(target=lambda: fresh.append(analyze(text + " é", lang)))
    worker.start()
    worker.join()
    assert fresh == [[*warm, "é"]]


def _in_a_fresh_thread(texts: list[str], lang: str) -> list[list[str]]:
    """Each text's terms from analysers that remember nothing yet (a new thread's)."""
    out: list[list[str]] = []
    worker = threading.Thread(target=lambda: out.extend(analyze(t, lang) for t in texts))
    worker.start()
    worker.join()
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_ASCII_PIECES | st.text(max_size=8), max_size=20),
    st.sampled_from(["en", "de", "und"]),
)
def test_a_document_gets_its_pieces_terms_in_order_however_warm_the_analyser(
    pieces: list[str], lang: str
) -> None:
    """A document is analysed a whitespace-separated piece at a time, each piece's terms
    remembered: the text analysed cold, warm, and piece by piece gets the same terms."""
    text = " ".join(pieces)
    (cold,) = _in_a_fresh_thread([text], lang)
    assert analyze(text, lang) == cold
    assert analyze(text, lang) == cold  # every piece remembered now
    alone = _in_a_fresh_thread(pieces, lang)
    assert [term for terms in alone for term in terms] == cold
    assert analyze(f"{text}\u3000{text}", lang) == [*cold, *cold]  # any whitespace parts
