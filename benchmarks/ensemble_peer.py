"""The peer hybrid: LangChain's ``EnsembleRetriever`` (BM25Retriever + FAISS, RRF) on a ragidx eval task.

The question: how does ragidx's ``chunk+bm25:rrf`` / ``chunk+bm25:auto`` (``ragidx eval``) compare
with the hybrid a LangChain user builds today, on the same split (LongEmbed-style QMSum: 197
meetings, 1,527 queries), the same model and the same chunks:

* the chunks are ragidx's ``chunk`` strategy at ``--max-length`` (window-sized chunks, overlap 32,
  each meeting cut to its first L_t tokens), their text cut from the meeting at the chunk's token
  offsets; their vectors and the query vectors come from ``ragidx eval``'s embedding cache (the
  exact vectors of the ``chunk`` record; a cold cache embeds them), so only the retrieval differs;
* ``langchain_community`` ``BM25Retriever.from_documents`` over the chunks (rank_bm25's
  ``BM25Okapi``, its default preprocessing: ``str.split``, no lower-casing or stemming) and a
  ``langchain_community`` ``FAISS`` vector store over the same chunks (built from the cached
  vectors; its default distance, L2, ranks unit vectors as the inner product does);
* ``EnsembleRetriever(retrievers=[bm25, faiss], weights=[0.5, 0.5])`` (reciprocal-rank fusion,
  c = 60); each retriever returns ``k`` chunks (LangChain's default k = 4, and ``--k``); the fused
  chunks are turned into a meeting ranking by each meeting's first chunk, as a user would.

``--bm25-over meetings`` gives BM25Retriever the whole meetings instead (one document each, what
ragidx's BM25 reads, also past L_t), to separate the analyzer and the documents BM25 sees from the
fusion. ``--task passkey`` / ``needle`` (with ``--lengths``) runs the same on the synthetic tasks,
one score per length (their main metric, Acc@1, and nDCG@10); "meetings" are then the documents.
Each retriever alone is scored too. Needs ``langchain-community``, ``langchain-classic`` and
``rank-bm25`` (``pip install langchain-community langchain-classic rank-bm25``; not ragidx
dependencies: run it from a virtual environment that has them beside ragidx).

    python benchmarks/ensemble_peer.py --data-dir ../shared/data --max-length 4096 --k 4 --k 100 \
        --out results/lexical/peer-ensemble-chunk.json
    python benchmarks/ensemble_peer.py --data-dir ../shared/data --max-length 4096 --k 4 --k 100 \
        --bm25-over meetings --out results/lexical/peer-ensemble-meetings.json
    python benchmarks/ensemble_peer.py --task passkey --task needle --lengths 256,512,1024,2048,4096 \
        --max-length 4096 --k 4 --out results/lexical-synthetic/peer-ensemble-minilm.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragidx.embed.cache import EmbeddingCache
from ragidx.embed.documents import plan_tokens
from ragidx.embed.models import portable
from ragidx.evaluate.embedding import EmbedStats, Encoders, embed_documents, embed_queries
from ragidx.evaluate.grid import SilentProgress
from ragidx.evaluate.metrics import evaluate
from ragidx.evaluate.tasks import load_task
from ragidx.strategy import parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("RAGIDX_EVAL_DATA", "../shared/data"))
    parser.add_argument("--model", default="default")
    parser.add_argument("--task", action="append", help="qmsum (default), passkey, needle (repeatable)")
    parser.add_argument("--lengths", default="256,512,1024,2048,4096", help="passkey/needle lengths")
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--strategy", default="chunk", help="a ragidx chunk strategy: the chunks")
    parser.add_argument("--k", type=int, action="append", help="chunks per retriever (repeatable)")
    parser.add_argument("--sample", type=int, default=None)
    parser.add_argument("--cache-dir", default=os.environ.get("RAGIDX_EVAL_CACHE", "~/.cache/ragidx/eval"))
    parser.add_argument(
        "--bm25-over", choices=("chunks", "meetings"), default="chunks", help="what BM25Retriever indexes"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the scores here (JSON)")
    args = parser.parse_args()
    ks = args.k or [4, 100]

    started = time.perf_counter()
    strategy = parse(args.strategy)
    long_doc = strategy.long_doc(args.max_length)
    encoders = Encoders("cpu", "auto", None)
    encoder, encoder_id = encoders.get(args.model, strategy.model_overrides, long_doc.extension)
    cache = EmbeddingCache(args.cache_dir)
    cache.load(encoder.folder.fingerprint())
    tasks = [
        load_task(
            name,
            encoder=encoder,
            data=args.data_dir,
            sample=args.sample,
            lengths=[int(n) for n in args.lengths.split(",")],
        )
        for name in args.task or ["qmsum"]
    ]
    results: dict[str, Any] = {
        "tasks": [task.name for task in tasks],
        "strategy": args.strategy,
        "bm25_over": args.bm25_over,
        "max_length": args.max_length,
        "model": portable(args.model),  # ~ for the home folder: no path of this machine
        "scores": {},
    }
    for task in tasks:
        for group in task.groups:
            label = task.name if len(task.groups) == 1 else f"{task.name} {group.name}"
            results["scores"][label] = _score_group(
                group, task.main_metric, encoder, encoder_id, strategy, long_doc, cache, args, ks
            )
    results["seconds"] = round(time.perf_counter() - started, 1)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


def _score_group(
    group: Any,
    metric: str,
    encoder: Any,
    encoder_id: str,
    strategy: Any,
    long_doc: Any,
    cache: EmbeddingCache,
    args: argparse.Namespace,
    ks: list[int],
) -> dict[str, Any]:
    """Each retriever's scores on one task group (the ensemble and its two parts, per k)."""
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community's sunset notice
        from langchain_classic.retrievers import EnsembleRetriever
        from langchain_community.retrievers import BM25Retriever
        from langchain_community.vectorstores import FAISS

    stats = EmbedStats()
    progress = SilentProgress()
    docs = embed_documents(encoder, encoder_id, strategy, long_doc, group, cache, stats, progress)
    query_vectors = embed_queries(encoder, encoder_id, long_doc.extension, group, cache, stats, progress)

    chunks: list[Document] = []
    for doc_id, text in group.corpus.items():
        tokens = encoder.tokenize(text, "document")
        assert tokens.offsets is not None
        for start, end in plan_tokens(encoder, tokens, long_doc).chunk_rows:
            piece = text[tokens.offsets[start][0] : tokens.offsets[end - 1][1]]
            chunks.append(Document(page_content=piece, metadata={"doc_id": doc_id}))
    if len(chunks) != len(docs.vectors):
        raise SystemExit(f"{len(chunks)} chunk texts for {len(docs.vectors)} cached vectors")
    by_text = dict(zip(group.queries.values(), query_vectors.tolist(), strict=True))

    class Cached(Embeddings):
        """The cached ragidx query vectors (what ``ragidx eval`` scored with), looked up by text."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            raise NotImplementedError("the chunks come with their vectors")

        def embed_query(self, text: str) -> list[float]:
            return by_text[text]

    pairs = [(c.page_content, v) for c, v in zip(chunks, docs.vectors.tolist(), strict=True)]
    store = FAISS.from_embeddings(pairs, Cached(), metadatas=[c.metadata for c in chunks])
    out: dict[str, Any] = {"queries": len(group.queries), "documents": len(group.corpus)}
    out["chunks"] = len(chunks)
    meetings = [Document(page_content=t, metadata={"doc_id": d}) for d, t in group.corpus.items()]
    for k in ks:
        bm25 = BM25Retriever.from_documents(chunks if args.bm25_over == "chunks" else meetings, k=k)
        dense = store.as_retriever(search_kwargs={"k": k})
        ensemble = EnsembleRetriever(retrievers=[bm25, dense], weights=[0.5, 0.5])
        for name, retriever in (("BM25Retriever", bm25), ("FAISS", dense), ("EnsembleRetriever", ensemble)):
            tic = time.perf_counter()
            run = {qid: _meetings(retriever.invoke(text)) for qid, text in group.queries.items()}
            metrics = {m: 100 * v for m, v in evaluate(run, group.qrels).items()}
            label = f"{name}, k={k}" + (", BM25 over meetings" if args.bm25_over == "meetings" else "")
            out[label] = {
                metric: round(metrics[metric], 2),
                "ndcg@10": round(metrics["ndcg@10"], 2),
                "recall@10": round(metrics["recall@10"], 2),
                "seconds": round(time.perf_counter() - tic, 1),
            }
            print(f"{group.name:8} {label:50} {metric} {metrics[metric]:5.1f}  ({out[label]['seconds']} s)")
    return out


def _meetings(found: list[Any]) -> list[tuple[str, float]]:
    """A chunk ranking as a meeting ranking: each meeting at its first chunk's rank."""
    ranked = list(dict.fromkeys(d.metadata["doc_id"] for d in found))
    return [(doc_id, float(len(ranked) - i)) for i, doc_id in enumerate(ranked)]


if __name__ == "__main__":
    main()
