"""The deterministic fake model: the vectors it gave word by word, bit for bit.

Its vectors are stored (embedding caches, tests' expected rankings), so computing them
faster (one bincount for a block of texts) must not change a bit of them.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridkb.embedders import FakeEmbedder

_WORD = re.compile(r"\w+", re.UNICODE)


def word_by_word(text: str, dim: int) -> np.ndarray:
    """The fake model as it was first written: each word adds +-1 to one slot."""
    vec = np.zeros(dim, dtype=np.float32)
    for token in _WORD.findall(text.lower()):
        h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
        vec[h % dim] += 1.0 if (h >> 32) & 1 else -1.0
    norm = float(np.linalg.norm(vec))
    if norm == 0.0:
        vec[0] = 1.0
        norm = 1.0
    return vec / norm


_WORDS = st.sampled_from(["tax", "Tax", "ATO", "über", "x1", "", " ", "...", "é", "tax tax"])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(_WORDS | st.text(max_size=6), max_size=40).map(" ".join), max_size=12),
    st.sampled_from([8, 64, 384]),
)
def test_vectors_are_the_word_by_word_ones(texts: list[str], dim: int) -> None:
    fake = FakeEmbedder(dim)
    got = fake.embed_documents(texts)
    assert got.dtype == np.float32 and got.shape == (len(texts), dim)
    for text, row in zip(texts, got, strict=True):
        assert row.tobytes() == word_by_word(text, dim).tobytes()
    for text in texts[:3]:
        assert fake.embed_query(text).tobytes() == word_by_word(text, dim).tobytes()


def test_long_texts_and_blocks_keep_every_bit() -> None:
    """Past 4096 words a row's squares may not sum exactly in float32: its norm is
    taken as before; more texts than a block are embedded a block at a time."""
    texts = ["w " * 5000, "a b " * 3000 + "c", " ".join(f"t{i % 70}" for i in range(9000))]
    texts += [f"note {i} on tax" for i in range(2500)]
    got = FakeEmbedder(64).embed_documents(texts)
    want = np.stack([word_by_word(t, 64) for t in texts])
    assert got.tobytes() == want.tobytes()
