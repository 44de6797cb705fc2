"""A query's language: the one-text classifier answers as py3langid's own ``classify``,
to the bit, in every script, with its remembered walks cold, warm or cleared."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridkb.text import analysis, langid_model
from hybridkb.text.langid_model import BatchClassifier, load_identifier

# Words of many scripts, with marks, digits, code-like tokens and odd spacing.
WORDS = (
    "the of a report tax deduction orchard apple review protein cells mice p53 cd4 "
    "der die und Steuer Abschreibung Häuser la le et impôt déduction el los impuesto "
    "il della tassa и в налог вычет отчёт και το φόρος έκθεση 税 年度 報告 これは テスト "
    "세금 보고서 ภาษี รายงาน कर रिपोर्ट ضريبة تقرير מס דוח ITAA GST s.40-880 2024 café "
    "naïve α-synuclein β-cells IL-6 TNF-α ½ ﬁle"
).split()
SEPARATORS = [" ", " ", " ", "  ", "\t", "\n", ", ", ". ", "-", ""]


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[object, BatchClassifier]]:
    identifier = load_identifier()
    assert BatchClassifier.usable(identifier)
    yield identifier, BatchClassifier(identifier)


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = ["", " ", "   ", "ok", "ALL CAPS QUERY ABOUT TAXES", "x" * 300, "税" * 700]
    for _ in range(n):
        pool = rng.sample(WORDS, 5) if rng.random() < 0.5 else WORDS
        words = [rng.choice(pool) for _ in range(rng.choice([1, 3, 8, 15, 40, 400]))]
        text = "".join(w + rng.choice(SEPARATORS) for w in words)
        texts.append(text.upper() if rng.random() < 0.1 else text)
    return [t[:2000] for t in texts]


def test_one_text_is_classified_as_py3langid_classifies_it(
    pair: tuple[object, BatchClassifier],
) -> None:
    identifier, batch = pair
    texts = _texts(500, seed=5)
    expected = [identifier.classify(t) for t in texts]  # type: ignore[attr-defined]
    assert [batch.classify_one(t) for t in texts] == expected  # cold walks
    assert [batch.classify_one(t) for t in texts] == expected  # every piece remembered
    assert [batch.classify_one(t) for t in reversed(texts)] == expected[::-1]


def test_remembered_walks_stay_bounded(
    pair: tuple[object, BatchClassifier], monkeypatch: pytest.MonkeyPatch
) -> None:
    identifier, batch = pair
    monkeypatch.setattr(langid_model, "MAX_WALKS", 50)
    texts = _texts(200, seed=6)
    for text in texts:
        assert batch.classify_one(text) == identifier.classify(text)  # type: ignore[attr-defined]
        assert len(batch.walks) <= 50 + len(text.split()) + 1
    # A long run without spaces is walked, not remembered.
    assert all(len(piece) <= langid_model.MAX_WALK_BYTES for _, piece in batch.walks)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(WORDS) | st.text(max_size=12),
        max_size=20,
    ).map(" ".join)
)
def test_any_query_gets_the_language_py3langid_gives(text: str) -> None:
    identifier = analysis._langid()
    batch = BatchClassifier(identifier)
    assert batch.classify_one(text) == identifier.classify(text)
    expected = analysis._langid_code(*identifier.classify(text[:2000]))
    if analysis._by_script(text[:2000]) is None:
        assert analysis.detect_language(text) == expected


def _analysed_afresh(text: str, languages: list[str]) -> list[str]:
    """analyze_query's terms with every stop-word set a new object (no remembered terms)."""
    own = analysis.detect_language(text)
    codes = dict.fromkeys(analysis._base_language(lang) for lang in (*languages, own))
    extra = analysis.STOPWORDS.get(own, frozenset())
    seen: dict[str, None] = {}
    for code in codes:
        analyzer = analysis._analyzer(code)
        out: list[str] = []
        analysis._tokens(text, analyzer, frozenset(analyzer.stopwords | extra), out)
        seen.update(dict.fromkeys(out))
    return list(seen)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(WORDS) | st.text(max_size=10), max_size=25).map(" ".join),
    st.lists(st.sampled_from(["en", "de", "fr", "es", "und", "ru", "ja", "de-CH"]), max_size=3),
)
def test_a_query_is_analysed_as_with_fresh_stop_words(text: str, languages: list[str]) -> None:
    expected = _analysed_afresh(text, languages)
    assert analysis.analyze_query(text, languages) == expected
    assert analysis.analyze_query(text, languages) == expected  # its terms remembered


def test_english_queries_in_an_english_collection_keep_their_terms() -> None:
    for text in _texts(300, seed=7) + ["The effects of the p53 protein on the cells of mice"]:
        assert analysis.analyze_query(text, ["en"]) == _analysed_afresh(text, ["en"])


def test_a_query_does_not_wait_for_a_bulk_classify(pair: tuple[object, BatchClassifier]) -> None:
    """A bulk add holds the classifier's lock for a whole group: a query's detection
    meanwhile converts its rows apart, to the same answer, instead of waiting."""
    import threading

    identifier, batch = pair
    texts = _texts(60, seed=8)
    found: list[tuple[str, float]] = []
    with batch.lock:  # as a bulk classify in another thread holds it
        worker = threading.Thread(target=lambda: found.extend(map(batch.classify_one, texts)))
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive()
    assert found == [identifier.classify(t) for t in texts]  # type: ignore[attr-defined]
