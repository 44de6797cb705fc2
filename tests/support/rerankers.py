"""A reranker for tests: scores by the words a passage shares with the query."""

from __future__ import annotations

from collections.abc import Sequence


class WordCount:
    """Deterministic: scores a passage by how often it says ``word``."""

    def __init__(self, word: str) -> None:
        self.name = f"count:{word}"
        self.word = word
        self.calls: list[int] = []

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append(len(texts))
        return [float(t.lower().count(self.word)) for t in texts]
