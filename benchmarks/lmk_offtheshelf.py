"""What landmark (LMK) pooling does on an encoder that was never fine-tuned with it.

LMK pooling was trained into the encoders of the LMK paper; this measures the training-free case
the paper leaves open (spec §8.10): the same off-the-shelf encoder, the same documents, mean
pooling against LMK (g = 64, 128), MultiCLS (k = 128) and Mean@k (k = 64), both with PCW windows
and with one extended pass (PI).

Data: the first ``--docs`` meetings (sorted by id) of the QMSum LongEmbed-style split and all their
queries (the query text is a gold summary, as in LongEmbed), each document cut to ``--max-tokens``.
Metric: nDCG@10 and Acc@1 over those queries (one relevant document each). A small, quick slice of
the real task: compare the rows with each other, not with the paper's full-task numbers.

    python benchmarks/lmk_offtheshelf.py --data-dir ../shared/data/qmsum/longembed_style
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragidx import Index, RagidxConfig, ingest

STRATEGIES: dict[str, dict[str, object]] = {
    "pcw + mean": {"long_doc": {"policy": "pcw"}},
    "pcw + lmk 64": {"long_doc": {"policy": "pcw"}, "model": {"pooling": ["lmk"], "landmark_every": 64}},
    "pcw + lmk 128": {"long_doc": {"policy": "pcw"}, "model": {"pooling": ["lmk"], "landmark_every": 128}},
    "pcw + multicls 128": {
        "long_doc": {"policy": "pcw"},
        "model": {"pooling": ["multicls"], "multicls_every": 128},
    },
    "pcw + mean@64": {"long_doc": {"policy": "pcw"}, "model": {"pooling": ["mean_every"], "mean_every": 64}},
    "extend pi + mean": {"long_doc": {"policy": "extend", "extension": {"method": "pi"}}},
    "extend pi + lmk 64": {
        "long_doc": {"policy": "extend", "extension": {"method": "pi"}},
        "model": {"pooling": ["lmk"], "landmark_every": 64},
    },
}


def load(data_dir: Path, n_docs: int) -> tuple[list[dict], list[dict], dict[str, str]]:
    corpus = [json.loads(line) for line in (data_dir / "corpus.jsonl").open()]
    keep = sorted(d["id"] for d in corpus)[:n_docs]
    docs = [d for d in corpus if d["id"] in set(keep)]
    qrels = {q["query_id"]: q["doc_id"] for q in map(json.loads, (data_dir / "qrels.jsonl").open())}
    queries = [q for q in map(json.loads, (data_dir / "queries.jsonl").open()) if qrels[q["id"]] in set(keep)]
    return docs, queries, qrels


def run(name: str, layer: dict, docs_file: Path, queries: list[dict], qrels: dict, max_tokens: int) -> dict:
    model = {"device": "cpu", **layer.get("model", {})}
    long_doc = {"max_tokens": max_tokens, **layer["long_doc"]}
    if long_doc["policy"] == "extend":
        long_doc["extension"] = {**long_doc["extension"], "target_length": max_tokens}
    config = RagidxConfig().override(model=model, long_doc=long_doc)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        report = ingest(docs_file, Path(tmp) / "ix", config)
        ranked = Index.open(Path(tmp) / "ix").search_many([q["text"] for q in queries], k=10)
        seconds = time.perf_counter() - started
    ndcg = acc1 = 0.0
    for query, hits in zip(queries, ranked, strict=True):
        ids = [h.doc_id for h in hits]
        gold = qrels[query["id"]]
        if gold in ids:
            ndcg += 1 / math.log2(ids.index(gold) + 2)
            acc1 += ids[0] == gold
    n = len(queries)
    return {
        "strategy": name,
        "ndcg@10": 100 * ndcg / n,
        "acc@1": 100 * acc1 / n,
        "seconds": seconds,
        "by_mode": dict(report.by_mode),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("RAGIDX_QMSUM", "")))
    parser.add_argument("--docs", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--only", nargs="*", help="strategy names to run (default: all)")
    args = parser.parse_args()
    if not (args.data_dir / "corpus.jsonl").is_file():
        raise SystemExit(
            "error: --data-dir must hold corpus.jsonl, queries.jsonl, qrels.jsonl (QMSum LongEmbed-style)"
        )
    docs, queries, qrels = load(args.data_dir, args.docs)
    with tempfile.TemporaryDirectory() as tmp:
        docs_file = Path(tmp) / "corpus.jsonl"
        docs_file.write_text("".join(json.dumps({"_id": d["id"], "text": d["text"]}) + "\n" for d in docs))
        print(
            f"QMSum slice: {len(docs)} meetings, {len(queries)} queries, documents cut to "
            f"{args.max_tokens} tokens, all-MiniLM-L6-v2 (never trained with LMK)"
        )
        print(f"{'strategy':22} {'nDCG@10':>8} {'Acc@1':>7} {'seconds':>8}")
        for name, layer in STRATEGIES.items():
            if args.only and name not in args.only:
                continue
            row = run(name, layer, docs_file, queries, qrels, args.max_tokens)
            print(f"{name:22} {row['ndcg@10']:8.1f} {row['acc@1']:7.1f} {row['seconds']:8.0f}", flush=True)


if __name__ == "__main__":
    main()
