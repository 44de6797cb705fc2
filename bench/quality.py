"""Retrieval quality levers on SciFact, chosen on the train split, reported on test.

    .venv/bin/python bench/quality.py --sweep            # every query-time lever (~3 min)
    .venv/bin/python bench/quality.py --sweep --index    # + levers that change what is
                                                         #   indexed (re-embeds ~10k chunks)

The eval collection is built (or reused) by ``hybridkb eval``'s own code with the
shipped defaults in ``--db`` (default quality-scifact.duckdb in ``_common.SCRATCH``), and its
test figure with the defaults is printed first: that is what a user gets. The sweep
then takes each query's keyword and vector legs once (300 deep, as ``hybridkb eval``
asks for 300 chunks) and re-ranks them under each lever with the project's own
fusion functions; a lever that needs another search (vector feedback) runs it
through the storage like the product does. Documents rank by their best chunk.

Every row prints train and test nDCG@10 side by side with test recall@100; the
choice is made on train only: the best lever of a group, unless one with less
machinery is within 0.002 (noise on 809 queries) of it. The end shows the shipped default against the better
single leg per query (wins / ties / losses on test), and search latency (p50, query
embedding excluded) with and without the default's extra levers. Results:
bench/results/quality.json, with the machine and its CPU flags.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import hybridkb  # noqa: E402
from hybridkb.devtools.evaluate import (  # noqa: E402
    FINGERPRINT_ID,
    PrecomputedQuery,
    ndcg_at_k,
    recall_at_k,
    run_eval,
)
from hybridkb.index.keywords import KeywordIndex  # noqa: E402
from hybridkb.search import fusion
from hybridkb.search.hybrid import Target, feedback_leg  # noqa: E402
from hybridkb.storage.duckdb.schema import table_names  # noqa: E402
from hybridkb.text.analysis import analyze, analyze_query  # noqa: E402
from hybridkb.text.chunking import contextual_text  # noqa: E402

DEFAULT_DB = C.SCRATCH / "quality-scifact.duckdb"  # hybridkb refuses /tmp itself
NAME = "eval:scifact"
DEPTH = 300
# nDCG@10 differences on train (809 queries) below this are noise: a lever that adds
# machinery (feedback chunks, document terms) must beat the simpler one by more.
NOISE = 0.002
Leg = list[tuple[int, float]]


@dataclass
class Query:
    qid: str
    text: str
    vector: np.ndarray
    qrels: dict[str, int]
    terms: list[str]
    kw: Leg = field(default_factory=list)
    vec: Leg = field(default_factory=list)


@dataclass
class Lab:
    """The eval collection opened for sweeping: its chunks, legs per split."""

    kb: hybridkb.KnowledgeBase
    record: Any
    doc_of: dict[int, str]
    splits: dict[str, list[Query]]


def open_lab(db: Path) -> Lab:
    kb = hybridkb.connect(str(db), read_only=True)
    record = kb.record(NAME)
    rows = kb.storage.query(f"SELECT key, document_id FROM {table_names(record.id)['chunks']}")
    languages = kb.storage.stats(record).languages
    embedder = kb.embedder_for(record)
    splits: dict[str, list[Query]] = {}
    for split in ("train", "test"):
        data = C.load_scifact(split)
        qids = C.query_ids(data)
        vectors = np.asarray(embedder.embed_documents([data.queries[q] for q in qids]))
        queries = []
        for qid, vector in zip(qids, vectors, strict=True):
            text = data.queries[qid]
            q = Query(qid, text, vector, data.qrels[qid], analyze_query(text, languages))
            q.kw = kb.storage.keyword_search(record, q.terms, DEPTH, None)
            q.vec = kb.storage.vector_search(record, vector, DEPTH, None)
            queries.append(q)
        splits[split] = queries
    return Lab(kb, record, {int(k): d for k, d in rows}, splits)


# -- ranking under a lever ------------------------------------------------------------------


@dataclass(frozen=True)
class Lever:
    fusion: str = "zscore"  # zscore | weighted | rrf | keyword | vector
    alpha: float = 0.5  # keyword share
    depth: int = DEPTH
    feedback: float = 0.4
    feedback_chunks: int = 1
    second_chunk: float = 0.0  # document score = best chunk + this x second best

    def machinery(self) -> int:
        """How much a lever adds to the search: feedback chunks read, extra document terms."""
        return (self.feedback_chunks if self.feedback else 0) + (1 if self.second_chunk else 0)

    def label(self) -> str:
        if self.fusion in ("keyword", "vector"):
            return f"{self.fusion} leg"
        parts = [self.fusion, f"a={self.alpha:g}", f"d={self.depth}", f"fb={self.feedback:g}"]
        if self.feedback and self.feedback_chunks != 1:
            parts.append(f"fb_chunks={self.feedback_chunks}")
        if self.second_chunk:
            parts.append(f"2nd={self.second_chunk:g}")
        return " ".join(parts)


def fuse(kw: Leg, vec: Leg, lever: Lever) -> list[tuple[int, float]]:
    kw, vec = kw[: lever.depth], vec[: lever.depth]
    weights = [lever.alpha, 1 - lever.alpha]
    floor = 0.0 if len(kw) < lever.depth else None
    if lever.fusion == "rrf":
        fused = fusion.rrf([kw, vec], weights=[2 * w for w in weights])
    elif lever.fusion == "weighted":
        fused = fusion.weighted([kw, vec], weights=weights, floors=[floor, None])
    else:
        fused = fusion.zscore([kw, vec], weights=weights, floors=[floor, None])
    return [(int(f.key), f.score) for f in fused]  # type: ignore[call-overload]


def ranked_chunks(
    lab: Lab, q: Query, lever: Lever, kw: Leg | None = None
) -> list[tuple[int, float]]:
    kw = q.kw if kw is None else kw
    if lever.fusion == "keyword":
        return kw[: lever.depth]
    if lever.fusion == "vector":
        return q.vec[: lever.depth]
    fused = fuse(kw, q.vec, lever)
    if lever.feedback > 0 and fused:
        # The product's own feedback step, with this lever's weight and chunk count.
        cid = lab.record.id
        target = Target(lab.record, PrecomputedQuery(lab.record.model, lab.record.dim), [])
        candidates = [((cid, k), s) for k, s in (*kw[: lever.depth], *q.vec[: lever.depth])]
        best = [fusion.Fused((cid, k), s) for k, s in fused[: lever.feedback_chunks]]
        vec = feedback_leg(
            lab.kb.storage, [target], {lab.record.model: q.vector}, candidates, best,
            lever.feedback, lever.depth, chunks=lever.feedback_chunks,
        )  # fmt: skip
        fused = fuse(kw, [(k, s) for (_, k), s in vec], lever)
    return fused


def documents(lab: Lab, chunks: list[tuple[int, float]], second: float) -> list[str]:
    per: dict[str, list[float]] = {}
    for key, score in chunks:
        doc = lab.doc_of.get(key)
        if doc is not None and doc != FINGERPRINT_ID:
            per.setdefault(doc, []).append(score)
    best = {d: s[0] + second * (s[1] if len(s) > 1 else 0.0) for d, s in per.items()}
    return sorted(best, key=lambda d: -best[d])


def per_query(
    lab: Lab, split: str, lever: Lever, keyword_legs: dict[str, Leg] | None = None
) -> tuple[list[float], list[float]]:
    nd, rc = [], []
    for q in lab.splits[split]:
        kw = keyword_legs[q.qid] if keyword_legs is not None else None
        docs = documents(lab, ranked_chunks(lab, q, lever, kw), lever.second_chunk)
        docs = [d for d in docs if d != q.qid][:100]
        nd.append(ndcg_at_k(docs, q.qrels, 10))
        rc.append(recall_at_k(docs, q.qrels, 100))
    return nd, rc


def row(lab: Lab, group: str, lever: Lever, label: str = "", **legs: Any) -> dict[str, Any]:
    train, _ = per_query(lab, "train", lever, legs.get("train"))
    test, recall = per_query(lab, "test", lever, legs.get("test"))
    out = {
        "group": group,
        "lever": label or lever.label(),
        "train_ndcg@10": round(float(np.mean(train)), 4),
        "test_ndcg@10": round(float(np.mean(test)), 4),
        "test_recall@100": round(float(np.mean(recall)), 4),
    }
    print(
        f"  {out['lever']:<46} train {out['train_ndcg@10']:.4f}  test {out['test_ndcg@10']:.4f}"
        f"  recall@100 {out['test_recall@100']:.4f}",
        flush=True,
    )
    return out


def sweep_group(lab: Lab, group: str, levers: Sequence[Lever], rows: list[dict[str, Any]]) -> Lever:
    """Score every lever of a group; return the one chosen on train: the best, unless a
    lever with less machinery is within NOISE of it (then the best of those)."""
    print(f"\n-- {group} --", flush=True)
    scored = [(lever, row(lab, group, lever)) for lever in levers]
    rows += [r for _, r in scored]
    top = max(r["train_ndcg@10"] for _, r in scored)
    near = [(lever, r) for lever, r in scored if r["train_ndcg@10"] >= top - NOISE]
    least = min(lever.machinery() for lever, _ in near)
    best = max(
        ((lever, r) for lever, r in near if lever.machinery() == least),
        key=lambda lr: lr[1]["train_ndcg@10"],
    )
    print(f"  chosen on train: {best[0].label()}", flush=True)
    return best[0]


# -- levers that change what is indexed --------------------------------------------------------


def keyword_legs_with(
    lab: Lab, terms_of: Callable[[Any], list[str]], k1: float, b: float
) -> dict[str, dict[str, Leg]]:
    """Keyword legs from an index of the collection's chunks rebuilt in memory."""
    t = table_names(lab.record.id)
    rows = lab.kb.storage.query(f"SELECT key, text, section, language FROM {t['chunks']}")
    index = KeywordIndex(k1=k1, b=b)
    index.add([int(r[0]) for r in rows], [terms_of(r) for r in rows])
    return {
        split: {q.qid: index.search(q.terms, DEPTH) for q in queries}
        for split, queries in lab.splits.items()
    }


def index_levers(lab: Lab, base: Lever, rows: list[dict[str, Any]]) -> None:
    print("\n-- BM25 k1 / b (index rebuilt from the stored chunks) --", flush=True)
    with_context = lambda r: analyze(contextual_text(r[2], r[1]), r[3] or "en")  # noqa: E731
    for k1, b in ((1.2, 0.5), (0.9, 0.4), (1.2, 0.75), (1.5, 0.5), (2.0, 0.5), (1.2, 0.3)):
        legs = keyword_legs_with(lab, with_context, k1, b)
        rows.append(row(lab, "bm25", base, f"k1={k1} b={b} ({base.label()})", **legs))
    print("\n-- section before each chunk (ablation: without it in both legs) --", flush=True)
    plain = keyword_legs_with(lab, lambda r: analyze(r[1], r[3] or "en"), 1.2, 0.5)
    t = table_names(lab.record.id)
    chunk_rows = lab.kb.storage.query(f"SELECT key, text, section FROM {t['chunks']}")
    changed = [r for r in chunk_rows if contextual_text(r[2], r[1]) != r[1]]
    print(f"  re-embedding {len(changed)} chunks without their section ...", flush=True)
    embedder = lab.kb.embedder_for(lab.record)
    t0 = time.perf_counter()
    vectors = np.asarray(embedder.embed_documents([r[1] for r in changed]), dtype=np.float32)
    print(f"  ({time.perf_counter() - t0:.0f}s)", flush=True)
    keys = [int(r[0]) for r in chunk_rows]
    shipped = lab.kb.storage.fetch_vectors(lab.record, keys)
    without = shipped.copy()
    pos = {k: i for i, k in enumerate(keys)}
    for r, v in zip(changed, vectors, strict=True):
        without[pos[int(r[0])]] = v
    with_context_legs = keyword_legs_with(lab, with_context, 1.2, 0.5)
    # Both arms by exact search over float32 vectors, so only the text differs.
    for label, matrix, legs in (
        ("without section prefix", without, plain),
        ("with section prefix (shipped)", shipped, with_context_legs),
    ):
        rows.append(_exact_arm(lab, base, f"{label}, exact ({base.label()})", matrix, keys, legs))


def _exact_arm(
    lab: Lab, base: Lever, label: str, matrix: np.ndarray, keys: list[int], legs: dict[str, Any]
) -> dict[str, Any]:
    matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    key_array = np.asarray(keys)
    pos = {k: i for i, k in enumerate(keys)}

    def exact(vector: np.ndarray) -> Leg:
        scores = matrix @ (vector / np.linalg.norm(vector))
        top = np.argpartition(-scores, DEPTH)[:DEPTH]
        top = top[np.argsort(-scores[top])]
        return [(int(key_array[i]), float(scores[i])) for i in top]

    def directions(coll: Any, wanted: Sequence[int]) -> np.ndarray:
        return matrix[[pos[int(k)] for k in wanted]]

    storage: Any = lab.kb.storage
    saved = {s: [q.vec for q in qs] for s, qs in lab.splits.items()}
    try:
        for queries in lab.splits.values():
            for q in queries:
                q.vec = exact(q.vector)
        storage.vector_directions = directions  # feedback reads the same vectors
        return row(lab, "context", base, label, **legs)
    finally:
        del storage.vector_directions
        for split, queries in lab.splits.items():
            for q, vec in zip(queries, saved[split], strict=True):
                q.vec = vec


# -- what a reranker costs ---------------------------------------------------------------------


def tiny_cross_encoder(folder: Path, words: Sequence[str]) -> Path:
    """A randomly initialised 2-layer BERT cross-encoder (the plumbing's stand-in)."""
    import torch
    import transformers

    torch.manual_seed(0)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(words))]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=512, num_labels=1,
    )  # fmt: skip
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    transformers.BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def rerank_cost(db: Path, queries: int = 20, depth: int = 30) -> dict[str, Any]:
    """Per-query cost of reranking ``depth`` hits: the tiny cross-encoder measured through
    the plug-in, and a MiniLM-L6 cross-encoder estimated from the collection's own
    MiniLM-L6 embedder reading the same (query, passage) pairs: same architecture, so
    the same work per token (a FLOP ratio from the tiny model would only scale its
    fixed overhead)."""
    import tempfile

    from hybridkb.search.rerank import CrossEncoderReranker

    data = C.load_scifact("test")
    qids = C.query_ids(data)[:queries]
    with hybridkb.connect(str(db), read_only=True) as kb:
        tops = [kb.search(data.queries[q], k=depth, rerank=False) for q in qids]
        pairs = [
            (data.queries[q], [h.text for h in hits]) for q, hits in zip(qids, tops, strict=True)
        ]
        embedder = kb.embedder_for(kb.record(NAME))
        t0 = time.perf_counter()
        for query, texts in pairs:
            embedder.embed_documents([f"{query} [SEP] {t}" for t in texts])
        same_arch = (time.perf_counter() - t0) / len(pairs)
    words = {w.lower() for q, texts in pairs for t in [q, *texts] for w in t.split()}
    with tempfile.TemporaryDirectory() as tmp:
        reranker = CrossEncoderReranker(str(tiny_cross_encoder(Path(tmp) / "tiny", words)))
        reranker.score(*pairs[0])  # load once
        t0 = time.perf_counter()
        for query, texts in pairs:
            reranker.score(query, texts)
        tiny = (time.perf_counter() - t0) / len(pairs)
    out = {
        "queries": len(pairs),
        "passages_per_query": depth,
        "tiny_cross_encoder_ms_per_query": round(tiny * 1000, 1),
        "minilm_l6_estimate_ms_per_query": round(same_arch * 1000, 1),
        "estimate_from": f"the collection's embedder ({embedder.model_id}) on the same pairs",
    }
    print(f"\n# reranking {depth} hits per query: {out}", flush=True)
    return out


# -- the run ----------------------------------------------------------------------------------


def wins_losses(lab: Lab, lever: Lever) -> dict[str, Any]:
    hybrid, _ = per_query(lab, "test", lever)
    kw, _ = per_query(lab, "test", Lever(fusion="keyword"))
    vec, _ = per_query(lab, "test", Lever(fusion="vector"))
    better_name, better = max((("keyword", kw), ("vector", vec)), key=lambda nv: np.mean(nv[1]))
    diff = np.asarray(hybrid) - np.asarray(better)
    return {
        "better_leg": better_name,
        "better_leg_ndcg@10": round(float(np.mean(better)), 4),
        "hybrid_ndcg@10": round(float(np.mean(hybrid)), 4),
        "wins": int((diff > 1e-9).sum()),
        "ties": int((np.abs(diff) <= 1e-9).sum()),
        "losses": int((diff < -1e-9).sum()),
    }


def product_eval(db: Path, **overrides: Any) -> dict[str, Any]:
    with hybridkb.connect(str(db), **overrides) as kb:
        result = run_eval(kb, C.SCIFACT, split="test")
    keep = ("ndcg@10", "recall@100", "p50_ms", "p95_ms", "model", "load_seconds", "reused")
    return {k: result[k] for k in keep}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sweep", action="store_true", help="sweep the levers (else only evaluate)")
    ap.add_argument("--index", action="store_true", help="also levers that change the index")
    ap.add_argument("--db", type=Path, default=DEFAULT_DB, help="DuckDB file for eval:scifact")
    ap.add_argument("--rerank-cost", action="store_true", help="time the reranking plug-in")
    args = ap.parse_args(argv)
    C.expendable()
    results: dict[str, Any] = {"machine": C.machine(), "started": time.strftime("%F %T")}
    m = results["machine"]
    print(f"machine: {m['cpu']}, flags {' '.join(m['cpu_flags'])}, load {m['loadavg']}")
    print(f"\n# the shipped defaults through hybridkb eval (builds {args.db} if needed)")
    shipped = product_eval(args.db)
    no_feedback = product_eval(args.db, vector_feedback=0)
    results["defaults"] = {"shipped": shipped, "vector_feedback=0": no_feedback}
    print(f"  shipped:    {shipped}\n  no feedback: {no_feedback}", flush=True)
    if args.rerank_cost:
        results["rerank_cost"] = rerank_cost(args.db)
    if not args.sweep:
        C.write_json("quality", results)
        return 0
    t0 = time.perf_counter()
    lab = open_lab(args.db)
    print(
        f"\n# legs of {len(lab.splits['train'])} train and {len(lab.splits['test'])} test "
        f"queries in {time.perf_counter() - t0:.0f}s; recipe {lab.record.recipe}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    try:
        sweep_group(lab, "legs", [Lever(fusion="keyword"), Lever(fusion="vector")], rows)
        fusions = [
            Lever(fusion=f, alpha=a, depth=d, feedback=0)
            for f in ("zscore", "weighted", "rrf")
            for a in (0.3, 0.4, 0.5, 0.6, 0.7)
            for d in (100, 300)
        ]
        best = sweep_group(lab, "fusion (no feedback)", fusions, rows)
        feedback = [
            Lever(best.fusion, best.alpha, best.depth, feedback=w, feedback_chunks=n)
            for w in (0.0, 0.2, 0.4, 0.6)
            for n in ((1,) if w == 0 else (1, 2, 3))
        ]
        best = sweep_group(lab, "vector feedback", feedback, rows)
        documents_by = [
            Lever(best.fusion, best.alpha, best.depth, best.feedback, best.feedback_chunks, s)
            for s in (0.0, 0.1, 0.2)
        ]
        best = sweep_group(lab, "document score from its chunks", documents_by, rows)
        if args.index:
            index_levers(lab, best, rows)
        shipped_lever = Lever()
        results["chosen_on_train"] = best.label()
        results["shipped_lever"] = shipped_lever.label()
        results["wins_losses_vs_better_leg"] = wins_losses(lab, shipped_lever)
    finally:
        lab.kb.close()
    results["rows"] = rows
    print(f"\nchosen on train: {results['chosen_on_train']}; shipped: {results['shipped_lever']}")
    print(f"shipped vs better leg on test, per query: {results['wins_losses_vs_better_leg']}")
    C.write_json("quality", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
