"""Retrieval quality on a BEIR-layout folder: nDCG@10, recall@100 and search latency.

The corpus is loaded into the collection ``eval:<folder name>`` (one document per
corpus ``_id``) and reused on the next run while the corpus file and the chunking and
model settings are unchanged: a fingerprint document, written after the last corpus
document, records them, so a re-run checks one row instead of 5,000 documents.

Documents are ranked by their best chunk. Metrics follow BEIR / pytrec_eval: graded
relevance as linear gain, ideal DCG from the qrels, queries taken from the qrels
of the split, a document whose id equals the query id is ignored (BEIR's default).
Latency is the search alone: queries are embedded in one batch first and the
vector is handed to the search through :class:`PrecomputedQuery`.
"""

from __future__ import annotations

import csv
import hashlib
import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..bars import progress_bar
from ..errors import ConfigError, DatabaseLocked
from ..limits import MAX_DOCUMENTS_CHARS, parse_json
from ..local import LocalEngine
from ..machine import cpu_flags, cpu_model
from ..search.hybrid import MODES, Target, run_search

if TYPE_CHECKING:
    from ..kb import Collection, KnowledgeBase
    from ..storage.base import CollectionRecord

FINGERPRINT_ID = "__hybridkb_eval_fingerprint__"
FINGERPRINT_VERSION = 2  # 2: chunks embed and index their section (implicit title)
BATCH = 256
CHUNKS_PER_DOC = 3  # chunk depth per wanted document when ranking documents by best chunk


@dataclass
class BeirData:
    """A BEIR data set: the corpus, the queries and the graded relevance judgements."""

    corpus: dict[str, tuple[str, str]]  # _id -> (title, text)
    queries: dict[str, str]  # _id -> text
    qrels: dict[str, dict[str, int]]  # query id -> {corpus id: graded relevance}


# -- loading -----------------------------------------------------------------------


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise ConfigError(
            f"{path}: not found; a BEIR folder holds corpus.jsonl, queries.jsonl, qrels/"
        )
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            # The rule of every JSON text from outside: size and depth first (a crafted
            # line nested 100,000 deep made json.loads raise RecursionError).
            row = parse_json(line, what=f"{path}:{n}", max_chars=MAX_DOCUMENTS_CHARS)
            if not isinstance(row, dict) or "_id" not in row:
                raise ConfigError(f"{path}:{n}: expected an object with an '_id' field")
            yield n, row


def load_beir(folder: str | Path, split: str = "test") -> BeirData:
    """Read ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` from a BEIR folder.

    Args:
        folder: the dataset folder (e.g. ``scifact/``).
        split: the qrels file to use (``test``, ``dev``, ``train``).

    Raises:
        ConfigError: a file is missing or malformed.
    """
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{root}: not a folder; pass a BEIR dataset folder (corpus.jsonl, ...)")
    corpus: dict[str, tuple[str, str]] = {}
    for _, row in _jsonl(root / "corpus.jsonl"):
        corpus[str(row["_id"])] = (str(row.get("title") or ""), str(row.get("text") or ""))
    queries = {
        str(row["_id"]): str(row.get("text") or "") for _, row in _jsonl(root / "queries.jsonl")
    }
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        have = (
            sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
            if (root / "qrels").is_dir()
            else []
        )
        raise ConfigError(
            f"{qrels_path}: not found; available splits: {', '.join(have) if have else 'none'}"
        )
    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        for n, cells in enumerate(reader, 1):
            if not cells or (
                n == 1 and cells[0].strip().lower() in ("query-id", "query_id", "qid")
            ):
                continue
            if len(cells) < 3:
                raise ConfigError(f"{qrels_path}:{n}: expected query-id, corpus-id, score")
            try:
                score = int(float(cells[2]))
            except ValueError as exc:
                raise ConfigError(f"{qrels_path}:{n}: score {cells[2]!r} is not a number") from exc
            qrels.setdefault(cells[0].strip(), {})[cells[1].strip()] = score
    return BeirData(corpus, queries, qrels)


# -- metrics -------------------------------------------------------------------------


def _unique(ranked: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranked))


def ndcg_at_k(
    ranked_doc_ids: Sequence[str], qrels_for_query: Mapping[str, int], k: int = 10
) -> float:
    """nDCG@k as trec_eval's ``ndcg_cut`` computes it: gain = relevance grade, log2 discount.

    Args:
        ranked_doc_ids: retrieved ids, best first (repeats after the first are ignored).
        qrels_for_query: judged ids and their grades (0 or below is not relevant).
        k: cut-off.

    Returns:
        A value in [0, 1]; 0 when the query has no relevant document.
    """
    dcg = sum(
        max(qrels_for_query.get(doc, 0), 0) / math.log2(i + 2)
        for i, doc in enumerate(_unique(ranked_doc_ids)[:k])
    )
    ideal = sorted((g for g in qrels_for_query.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(
    ranked_doc_ids: Sequence[str], qrels_for_query: Mapping[str, int], k: int = 100
) -> float:
    """Share of the relevant documents (grade > 0) found in the first ``k`` results."""
    relevant = {doc for doc, g in qrels_for_query.items() if g > 0}
    if not relevant:
        return 0.0
    found = relevant.intersection(_unique(ranked_doc_ids)[:k])
    return len(found) / len(relevant)


# -- search with a precomputed query vector --------------------------------------------


class PrecomputedQuery:
    """An Embedder whose ``embed_query`` returns a vector set beforehand.

    Lets the timed search skip query embedding without a change to the core search.
    """

    def __init__(self, model_id: str, dim: int) -> None:
        self.model_id = model_id
        self.dim = dim
        self.vector: np.ndarray | None = None

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """Refused: this embedder only hands back the query vector it was given."""
        raise RuntimeError("PrecomputedQuery only answers embed_query")

    def embed_query(self, text: str) -> np.ndarray:
        """The vector set in ``.vector`` (the query embedded once, outside the timing)."""
        if self.vector is None:
            raise RuntimeError("PrecomputedQuery: set .vector before searching")
        return self.vector


# -- the collection --------------------------------------------------------------------


def file_fingerprint(path: Path) -> dict[str, Any]:
    """Size and SHA-256 of a file: recorded with an evaluation collection, so a changed
    data set is noticed and the collection rebuilt."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return {"size": path.stat().st_size, "sha256": digest.hexdigest()}


def collection_name(folder: str | Path) -> str:
    """The name of the collection an evaluation of ``folder`` builds: ``eval:<folder name>``."""
    return f"eval:{Path(folder).expanduser().resolve().name}"


def _wanted_settings(kb: KnowledgeBase) -> dict[str, Any]:
    s = kb.settings
    return {
        "model": s.model,
        "chunking": {
            "strategy": s.chunk_strategy,
            "size": s.chunk_size,
            "overlap": s.chunk_overlap,
        },
        "language": s.language,
    }


def _fingerprint(record: CollectionRecord, corpus_file: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": FINGERPRINT_VERSION,
        "corpus": corpus_file,
        "model": record.model,
        # The numeric recipe that made the vectors (backend, precision), and the CPU it
        # was measured on: int8 is chosen per CPU, so a figure means little without them.
        "recipe": dict(record.recipe),
        "cpu": {"model": cpu_model(), "flags": list(cpu_flags())},
        "chunking": record.chunking,
        "language": record.language,
    }


def _progress(total: int, what: str) -> Any:
    if not sys.stderr.isatty():
        return None
    return progress_bar(total, unit="doc", desc=what)


def _document_text(title: str, text: str) -> str:
    title, text = title.strip(), text.strip()
    return f"{title}\n\n{text}" if title and text else (title or text)


def _all_document_ids(coll: Collection) -> set[str]:
    ids: set[str] = set()
    offset = 0
    while True:
        page = coll.documents(limit=1000, offset=offset)
        ids.update(d.document_id for d in page)
        if len(page) < 1000:
            return ids
        offset += len(page)


def prepare_collection(
    kb: KnowledgeBase, folder: str | Path, data: BeirData
) -> tuple[Collection, dict[str, Any]]:
    """Load (or reuse) ``eval:<folder name>``; returns the collection and what was done."""
    root = Path(folder).expanduser()
    name = collection_name(root)
    corpus_file = file_fingerprint(root / "corpus.jsonl")
    wanted = _wanted_settings(kb)
    record = kb.storage.get_collection(kb.workspace, name)
    if record is not None:
        same_model = (
            record.model == wanted["model"] or record.model == kb.embedder(wanted["model"]).model_id
        )
        if not (
            same_model
            and record.chunking == wanted["chunking"]
            and record.language == wanted["language"]
        ):
            kb.drop_collection(name)  # settings changed: the stored chunks answer another question
            record = None
    if record is not None:
        coll = kb.collection(name)
        marker = coll.get(FINGERPRINT_ID)
        if (
            marker is not None
            and marker.metadata.get("fingerprint") == _fingerprint(record, corpus_file)
            and marker.metadata.get("documents") == kb.storage.stats(record).documents
        ):
            return coll, {
                "reused": True,
                "added": 0,
                "unchanged": len(data.corpus),
                "failed": 0,
                "removed": 0,
            }
        coll.delete([FINGERPRINT_ID])  # an interrupted or stale load: top it up below
    else:
        coll = kb.create_collection(name)
        record = coll.record
    stats = {"reused": False, "added": 0, "unchanged": 0, "failed": 0, "removed": 0}
    ids = list(data.corpus)
    bar = _progress(len(ids), f"loading {name}")
    try:
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]
            report = coll.add_texts([_document_text(*data.corpus[i]) for i in batch], ids=batch)
            stats["added"] += len(report.added)
            stats["unchanged"] += len(report.unchanged)
            stats["failed"] += len(report.failed)  # empty documents: nothing to retrieve
            if bar is not None:
                bar.update(len(batch))
    finally:
        if bar is not None:
            bar.close()
    stale = sorted(_all_document_ids(coll) - set(ids) - {FINGERPRINT_ID})
    if stale:
        stats["removed"] = len(coll.delete(stale).deleted)
    stored = kb.storage.stats(record).documents
    # Written last, so its presence means the whole corpus is in; "documents" (the marker
    # included) notices documents deleted by hand since.
    coll.add_texts(
        # English prose, so the marker adds no new language to query analysis.
        ["This record holds the fingerprint of the evaluation corpus loaded by hybridkb."],
        metadatas=[{"fingerprint": _fingerprint(record, corpus_file), "documents": stored + 1}],
        ids=[FINGERPRINT_ID],
    )
    return coll, stats


# -- the run ---------------------------------------------------------------------------


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


def _check_eval_arguments(kb: KnowledgeBase, mode: str, k_docs: int) -> None:
    if not isinstance(kb.door, LocalEngine):
        raise DatabaseLocked(
            "eval builds its own collection and needs the file itself; another process "
            "holds it and serves it: run eval when that process has exited"
        )
    if mode not in MODES:
        raise ConfigError(f"mode: unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if not isinstance(k_docs, int) or isinstance(k_docs, bool) or not 100 <= k_docs <= 3000:
        raise ConfigError(f"k_docs: must be a whole number from 100 to 3000, got {k_docs!r}")


def _embed_queries(
    kb: KnowledgeBase, record: CollectionRecord, texts: list[str], mode: str
) -> np.ndarray:
    """Every query vector in one batch, so the timed searches do not embed; keyword mode
    uses no vector and gets zeros."""
    if mode != "keyword":
        return kb.embedder_for(record).embed_documents(texts)
    return np.zeros((len(texts), record.dim), dtype=np.float32)


def _search_languages(kb: KnowledgeBase, record: CollectionRecord) -> list[str]:
    if record.language and record.language != "auto":
        return [record.language]
    return kb.storage.stats(record).languages


def _ranked_documents(
    hits: Sequence[Any], qid: str, k_docs: int, ignore_identical_ids: bool
) -> list[str]:
    """The first ``k_docs`` distinct documents of the hits (each ranked by its best
    chunk), without the fingerprint and, BEIR's default, without the query itself."""
    ranked = [
        h.document_id
        for h in hits
        if h.document_id != FINGERPRINT_ID and not (ignore_identical_ids and h.document_id == qid)
    ]
    return _unique(ranked)[:k_docs]


@dataclass
class _QueryScores:
    """The figures of every query of a run, in query order."""

    ndcg10: list[float]
    recall100: list[float]
    recall_k: list[float]  # recall at the run's k_docs
    latency_ms: list[float]


def _score_queries(
    kb: KnowledgeBase,
    record: CollectionRecord,
    data: BeirData,
    qids: list[str],
    vectors: np.ndarray,
    *,
    mode: str,
    k_docs: int,
    ignore_identical_ids: bool,
) -> _QueryScores:
    """Search each query with its precomputed vector; the latency is the search alone."""
    query_embedder = PrecomputedQuery(record.model, record.dim)
    target = Target(record, query_embedder, _search_languages(kb, record))
    k_chunks = min(k_docs * CHUNKS_PER_DOC, 10_000)
    scores = _QueryScores([], [], [], [])
    for qid, vector in zip(qids, vectors, strict=False):
        query_embedder.vector = np.asarray(vector, dtype=np.float32)
        start = time.perf_counter()
        hits = run_search(
            kb.storage,
            [target],
            data.queries[qid],
            k=k_chunks,
            mode=mode,
            where=None,
            settings=kb.settings,
        )
        scores.latency_ms.append((time.perf_counter() - start) * 1000.0)
        ranked = _ranked_documents(hits, qid, k_docs, ignore_identical_ids)
        scores.ndcg10.append(ndcg_at_k(ranked, data.qrels[qid], 10))
        scores.recall100.append(recall_at_k(ranked, data.qrels[qid], 100))
        scores.recall_k.append(recall_at_k(ranked, data.qrels[qid], k_docs))
    return scores


def run_eval(
    kb: KnowledgeBase,
    folder: str | Path,
    *,
    mode: str = "hybrid",
    split: str = "test",
    k_docs: int = 100,
    ignore_identical_ids: bool = True,
) -> dict[str, Any]:
    """Evaluate document retrieval on a BEIR folder with ``kb``'s settings.

    Args:
        kb: the knowledge base that holds (or will hold) ``eval:<folder name>``.
        folder: BEIR dataset folder.
        mode: search mode (hybrid, vector, keyword, filter).
        split: qrels split.
        k_docs: documents ranked per query (100-3000); ``recall@<k_docs>`` is added when not 100.
        ignore_identical_ids: drop a retrieved document whose id is the query's (BEIR default).

    Returns:
        ``ndcg@10``, ``recall@100``, ``queries``, ``mode``, ``p50_ms``,
        ``p95_ms`` plus ``collection``, ``split``, ``documents``, ``reused``, ``load``,
        ``load_seconds``, ``embed_seconds``, ``mean_ms``, ``missing_queries``.
    """
    _check_eval_arguments(kb, mode, k_docs)
    data = load_beir(folder, split)
    qids = [q for q in data.qrels if q in data.queries and data.queries[q].strip()]
    if not qids:
        raise ConfigError(f"{folder}: no query of split {split!r} has text in queries.jsonl")

    t0 = time.perf_counter()
    coll, load = prepare_collection(kb, folder, data)
    load_seconds = time.perf_counter() - t0
    record = coll.record

    t0 = time.perf_counter()
    vectors = _embed_queries(kb, record, [data.queries[q] for q in qids], mode)
    embed_seconds = time.perf_counter() - t0

    scores = _score_queries(
        kb,
        record,
        data,
        qids,
        vectors,
        mode=mode,
        k_docs=k_docs,
        ignore_identical_ids=ignore_identical_ids,
    )
    result: dict[str, Any] = {
        "ndcg@10": round(float(np.mean(scores.ndcg10)), 5),
        "recall@100": round(float(np.mean(scores.recall100)), 5),
        "queries": len(qids),
        "mode": mode,
        "p50_ms": round(_percentile(scores.latency_ms, 50), 3),
        "p95_ms": round(_percentile(scores.latency_ms, 95), 3),
        "mean_ms": round(float(np.mean(scores.latency_ms)), 3),
        "collection": coll.name,
        "split": split,
        "documents": len(data.corpus),
        "model": record.model,
        # The numeric recipe that made the vectors (backend, precision), and the CPU it
        # was measured on: int8 is chosen per CPU, so a figure means little without them.
        "recipe": dict(record.recipe),
        "cpu": {"model": cpu_model(), "flags": list(cpu_flags())},
        "chunking": record.chunking,
        "reused": load["reused"],
        "load": load,
        "load_seconds": round(load_seconds, 3),
        "embed_seconds": round(embed_seconds, 3),
        "missing_queries": len(data.qrels) - len(qids),
    }
    if k_docs != 100:
        result[f"recall@{k_docs}"] = round(float(np.mean(scores.recall_k)), 5)
    return result
