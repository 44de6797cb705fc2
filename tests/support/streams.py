"""Batches of a streamed document ("big"), as ingest hands a huge file to
``Storage.put_document_stream``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from hybridkb.embedders import Embedder
from hybridkb.storage.base import ChunkRecord, chunk_key, make_chunk_id
from hybridkb.text.analysis import analyze

Batches = Iterator[tuple[list[ChunkRecord], np.ndarray]]


def streamed_batches(
    collection_id: int,
    embedder: Embedder,
    version: str,
    n: int,
    *,
    during: Callable[[int], None] | None = None,
) -> Batches:
    """n batches of 3 chunks of document "big"; ``during(b)`` runs after batch b is taken."""
    for b in range(n):
        texts = [f"{version} streamed part {b} line {i} about lemurs" for i in range(3)]
        chunks = []
        for i, text in enumerate(texts):
            cid = make_chunk_id(collection_id, "big", version, b * 3 + i)
            chunks.append(
                ChunkRecord(
                    chunk_key(cid),
                    cid,
                    "big",
                    b * 3 + i,
                    text,
                    None,
                    None,
                    0,
                    len(text),
                    version,
                    "en",
                    analyze(text, "en"),
                    {},
                    "big.txt",
                    "/big.txt",
                )  # fmt: skip
            )
        yield chunks, embedder.embed_documents(texts)
        if during is not None:
            during(b)
