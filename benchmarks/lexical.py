"""Lexical retrieval: ragidx's BM25 against the libraries users would pick, and its cost in ragidx.

Sections (each prints a table; ``--json`` prints one JSON object instead):

* ``parity`` — QMSum (LongEmbed-style split, 197 whole meetings, 1,527 queries): nDCG@10, build
  time and query latency of ragidx's ``LexicalIndex`` (whole documents only, as the peers score,
  and its default: + the best passage's BM25), bm25s (``method="lucene"``, the same
  analyzer: PyStemmer English, Lucene's stop words, k1 1.5, b 0.75) and tantivy (``en_stem``:
  lowercase + Snowball English, its fixed BM25 k1 1.2, b 0.75), in one process.
* ``scale`` — synthetic collections of 10⁵ and 10⁶ chunks of 64–192 words drawn from the Paul
  Graham essays (real English vocabulary and Zipf statistics): build time, bytes on disk, memory
  and query latency for ragidx and bm25s; ragidx also adds 1 % new documents and removes 1 %
  (what an incremental ingest costs: no re-analysis of the rest).
* ``hybrid`` — one index of 10⁵ chunks with random unit vectors (384-d, Flat FAISS) and BM25 over
  the same chunks: time of a hybrid search against a dense search of the same query vectors
  (query embedding excluded, the same for both), the issue's ≤ 1.5× target.

Run from the repository root (the ``test`` extra brings bm25s' peers? no: ``pip install bm25s
tantivy`` for the peers; a missing peer is reported and skipped)::

    python benchmarks/lexical.py --data ../shared/data                  # all sections (~10 min)
    python benchmarks/lexical.py --data ../shared/data --sections parity,hybrid --sizes 100000
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ragidx.evaluate.metrics import evaluate
from ragidx.evaluate.tasks import qmsum
from ragidx.index.config import LexicalConfig
from ragidx.index.lexical import ENGLISH_STOPWORDS, LexicalIndex

K = 100


def _ndcg(run: dict[str, list[tuple[str, float]]], qrels: dict[str, dict[str, int]]) -> float:
    return 100 * evaluate(run, qrels)["ndcg@10"]


def parity(data: Path) -> list[dict[str, Any]]:
    group = qmsum(data / "qmsum" / "longembed_style").groups[0]
    ids, texts = list(group.corpus), list(group.corpus.values())
    qids = list(group.queries)
    queries = [group.queries[q] for q in qids]
    rows: list[dict[str, Any]] = []

    runs = {}
    for label, config in (
        ("ragidx LexicalIndex, whole documents", LexicalConfig(passage_terms=0)),
        ("ragidx LexicalIndex (default: + passages)", LexicalConfig()),
    ):
        started = time.perf_counter()
        ours = LexicalIndex.empty(config)
        ours.add_texts(ids, texts)
        ours.flush()
        build = time.perf_counter() - started
        started = time.perf_counter()
        runs[label] = {q: ours.top(text, K) for q, text in zip(qids, queries, strict=True)}
        query = (time.perf_counter() - started) / len(qids)
        rows.append(_row(label, _ndcg(runs[label], group.qrels), build, query, len(ours.to_bytes())))
    run = runs["ragidx LexicalIndex, whole documents"]  # bm25s's scores, to compare

    try:
        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        started = time.perf_counter()
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
        model.index(tokens, show_progress=False)
        build = time.perf_counter() - started
        started = time.perf_counter()
        qtokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
        found, scores = model.retrieve(qtokens, k=K, show_progress=False)
        query = (time.perf_counter() - started) / len(qids)
        run2 = {
            q: [(ids[d], float(s)) for d, s in zip(found[i], scores[i], strict=True)]
            for i, q in enumerate(qids)
        }
        agree = max(abs(a - b) for q in qids[:50] for (_, a), (_, b) in zip(run[q], run2[q], strict=False))
        rows.append(
            _row(
                "bm25s 0.3 (lucene)",
                _ndcg(run2, group.qrels),
                build,
                query,
                None,
                f"max |Δscore| {agree:.1e}",
            )
        )
    except ImportError as exc:
        rows.append({"system": "bm25s", "error": str(exc)})

    try:
        import tantivy

        builder = tantivy.SchemaBuilder()
        builder.add_text_field("id", stored=True, tokenizer_name="raw")
        builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
        schema = builder.build()
        started = time.perf_counter()
        index = tantivy.Index(schema)
        writer = index.writer(heap_size=200_000_000, num_threads=1)
        for doc_id, text in zip(ids, texts, strict=True):
            writer.add_document(tantivy.Document(id=doc_id, body=text))
        writer.commit()
        index.reload()
        build = time.perf_counter() - started
        searcher = index.searcher()
        started = time.perf_counter()
        run3: dict[str, list[tuple[str, float]]] = {}
        for q, text in zip(qids, queries, strict=True):
            words = " ".join(w for w in _words(text) if w not in ENGLISH_STOPWORDS)
            parsed = index.parse_query(words or "x", ["body"])
            hits = searcher.search(parsed, K).hits
            run3[q] = [(searcher.doc(address)["id"][0], float(score)) for score, address in hits]
        query = (time.perf_counter() - started) / len(qids)
        rows.append(_row("tantivy 0.27 (en_stem, k1 1.2)", _ndcg(run3, group.qrels), build, query, None))
    except ImportError as exc:
        rows.append({"system": "tantivy", "error": str(exc)})
    return rows


def _words(text: str) -> list[str]:
    import re

    return re.findall(r"\w\w+", text.lower())


def _row(
    system: str, ndcg: float, build: float, query: float, size: int | None, note: str = ""
) -> dict[str, Any]:
    return {
        "system": system,
        "ndcg@10": round(ndcg, 2),
        "build_s": round(build, 3),
        "query_ms": round(1000 * query, 3),
        "bytes": size,
        "note": note,
    }


def _chunks(data: Path, n: int, seed: int = 0) -> list[str]:
    words = " ".join(
        p.read_text(encoding="utf-8") for p in sorted((data / "paul_graham_essays" / "essays").glob("*"))
    ).split()
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(64, 192)
        start = rng.randrange(0, len(words) - length)
        out.append(" ".join(words[start : start + length]))
    return out


def scale(data: Path, sizes: list[int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    rng = random.Random(1)
    for n in sizes:
        texts = _chunks(data, n)
        ids = [f"c{i}" for i in range(n)]
        queries = [" ".join(rng.sample(texts[rng.randrange(n)].split(), 6)) for _ in range(200)]
        for passages in (0, 256):  # whole documents, as bm25s; the default (+ passages)
            gc.collect()
            started = time.perf_counter()
            index = LexicalIndex.empty(LexicalConfig(passage_terms=passages))
            for lo in range(0, n, 20_000):  # analysed in batches, merged once (as an ingest commits)
                index.add_texts(ids[lo : lo + 20_000], texts[lo : lo + 20_000])
            index.flush()
            build = time.perf_counter() - started
            size = len(index.to_bytes())
            latencies = []
            for q in queries:
                t = time.perf_counter()
                index.top(q, 10)
                latencies.append(time.perf_counter() - t)
            extra = n // 100
            started = time.perf_counter()
            index.remove(ids[:extra])
            index.add_texts([f"new{i}" for i in range(extra)], texts[-extra:])
            index.flush()
            update = time.perf_counter() - started
            rows.append(
                {
                    "system": "ragidx" + ("" if passages else ", whole documents"),
                    "chunks": n,
                    "build_s": round(build, 1),
                    "bytes": size,
                    "query_ms_p50": round(1000 * statistics.median(latencies), 2),
                    "update_1pct_s": round(update, 2),
                }
            )
            del index
        try:
            import bm25s
            import Stemmer

            gc.collect()
            started = time.perf_counter()
            tokens = bm25s.tokenize(
                texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False
            )
            model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
            model.index(tokens, show_progress=False)
            build = time.perf_counter() - started
            qtok = bm25s.tokenize(
                queries, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False
            )
            started = time.perf_counter()
            model.retrieve(qtok, k=10, show_progress=False, n_threads=1)
            query = (time.perf_counter() - started) / len(queries)
            rows.append(
                {
                    "system": "bm25s",
                    "chunks": n,
                    "build_s": round(build, 1),
                    "bytes": None,
                    "query_ms_p50": round(1000 * query, 2),
                    "update_1pct_s": f"rebuild {build:.1f}",
                }
            )
            del model, tokens
        except ImportError:
            pass
    return rows


def hybrid(data: Path, n: int) -> list[dict[str, Any]]:
    from ragidx.index.directory import Index
    from ragidx.index.manifest import ExternalEncoderInfo
    from ragidx.index.store import DocumentRecord, VectorRecord
    from ragidx.search.options import SearchOptions
    from ragidx.search.retriever import Retriever

    texts = _chunks(data, n, seed=2)
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = Index.create(None, ExternalEncoderInfo(name="random", dim=384), lexical=LexicalConfig())
    for i, text in enumerate(texts):
        record = DocumentRecord(
            doc_id=f"c{i}",
            source=f"c{i}",
            sha256="0" * 64,
            title=None,
            text=text,
            n_tokens=len(text.split()),
            n_embedded=len(text.split()),
            embed_mode="whole",
            n_vectors=1,
            metadata={},
            ingested_at="",
        )
        index.add(
            record,
            vectors[i : i + 1],
            [
                VectorRecord(
                    vid=0, doc_id=f"c{i}", ordinal=0, tok_start=0, tok_end=1, char_start=0, char_end=len(text)
                )
            ],
        )
    index.flush()
    assert index.lexical is not None
    index.lexical.flush()
    pyrng = random.Random(3)
    queries = [" ".join(pyrng.sample(texts[pyrng.randrange(n)].split(), 6)) for _ in range(100)]
    qv = rng.standard_normal((len(queries), 384)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    retriever = Retriever(index)
    times: dict[str, list[float]] = {"dense": [], "hybrid": [], "lexical": []}
    for _ in range(3):
        for mode in times:
            started = time.perf_counter()
            for i, q in enumerate(queries):
                retriever.rank([q], qv[i : i + 1], 10, SearchOptions(mode=mode))  # type: ignore[arg-type]
            times[mode].append((time.perf_counter() - started) / len(queries))
    dense = statistics.median(times["dense"])
    return [
        {
            "mode": mode,
            "chunks": n,
            "query_ms": round(1000 * statistics.median(t), 2),
            "vs_dense": round(statistics.median(t) / dense, 2),
        }
        for mode, t in times.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--sections", default="parity,scale,hybrid")
    parser.add_argument("--sizes", default="100000,1000000", help="scale: collection sizes in chunks")
    parser.add_argument("--hybrid-size", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    for section in args.sections.split(","):
        started = time.perf_counter()
        if section == "parity":
            out[section] = parity(args.data)
        elif section == "scale":
            out[section] = scale(args.data, [int(s) for s in args.sizes.split(",")])
        elif section == "hybrid":
            out[section] = hybrid(args.data, args.hybrid_size)
        else:
            parser.error(f"unknown section {section!r}")
        if not args.json:
            print(f"\n## {section} ({time.perf_counter() - started:.0f} s)")
            rows = out[section]
            keys = list(dict.fromkeys(k for r in rows for k in r))
            print(" | ".join(keys))
            for r in rows:
                print(" | ".join(str(r.get(k, "")) for k in keys))
            sys.stdout.flush()
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
