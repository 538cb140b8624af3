"""What a reranking stage adds to a query: ``Index.search(…, rerank=…)`` against the first stage alone.

The cross-encoder has all-MiniLM-L6-v2's shape (6 layers, 384 wide, 12 heads, its tokenizer and a
window of 512 tokens, like the ms-marco MiniLM-L6 cross-encoders) with *random* weights and a
one-score head, built from the real MiniLM folder's config and tokenizer: timing only, its ranking
means nothing. The index holds the Paul Graham essays, each cut in two at a paragraph break (98
documents, so that N = 50 are there to rerank), ingested with the default model (chunks of 256
tokens; built once under ``--index``).

Each question is searched warm (models loaded, one untimed search of each kind first) ``--runs``
times with the first stage alone (hybrid, the default mode, ``k`` = 10, sentences by the words) and
with ``rerank`` (N = ``--top-n``, each document read on its K best passages, for each K of
``--passages``), interleaved so that both see the same machine, on ``--threads`` CPU threads; the
median per question, then over questions, of the wall time, the added time, and the reranker's own
time (``SearchResult.rerank["ms"]``) with the pairs it scored.

    python ../shared/models/fetch.py minilm       # the MiniLM folder (config and tokenizer)
    python benchmarks/rerank_latency.py --index /tmp/essays-halves --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from essay_questions import QUESTIONS  # beside this script (run as a script: its folder is on sys.path)

from ragidx import Index
from ragidx.search.options import Rerank

ROOT = Path(__file__).resolve().parent.parent
ESSAYS = ROOT.parent / "shared" / "data" / "paul_graham_essays" / "essays"
MINILM = Path("~/.cache/ragidx/models/minilm").expanduser()


def cross_encoder(minilm: Path, folder: Path) -> Path:
    """A random cross-encoder of MiniLM-L6's shape (its config, a one-score head) with its tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig.from_pretrained(minilm, num_labels=1)
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    tokenizer.model_max_length = 512
    tokenizer.save_pretrained(folder)
    return folder


def build_index(essays: Path, directory: Path) -> None:
    """The essays, each cut in two at the paragraph break nearest its middle, ingested (default model)."""
    from ragidx.config import RagidxConfig
    from ragidx.ingestion.pipeline import ingest

    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(essays.glob("*.txt")):
            text = path.read_text(encoding="utf-8")
            cut = text.find("\n\n", len(text) // 2)
            cut = cut if cut > 0 else len(text) // 2
            (Path(tmp) / f"{path.stem}-1.txt").write_text(text[:cut], encoding="utf-8")
            (Path(tmp) / f"{path.stem}-2.txt").write_text(text[cut:], encoding="utf-8")
        ingest(Path(tmp), directory, RagidxConfig())


def timed(index: Index, question: str, rerank: Rerank | None) -> tuple[float, float, int]:
    """Wall milliseconds of one search, the reranker's own milliseconds and its pairs (0 without)."""
    start = time.perf_counter()
    results = index.search(question, 10, sentences="lexical", rerank=rerank)
    wall = 1000 * (time.perf_counter() - start)
    info = results[0].rerank if results else None
    return wall, (info["ms"] if info else 0.0), (info["pairs"] if info else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, required=True, help="the essays index (built when missing)")
    parser.add_argument("--essays", type=Path, default=ESSAYS)
    parser.add_argument(
        "--minilm", type=Path, default=MINILM, help="the real MiniLM folder (config, tokenizer)"
    )
    parser.add_argument("--runs", type=int, default=3, help="timed searches per question and setting")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--top-n", type=int, default=50)
    parser.add_argument("--passages", default="1,2", help="K values, comma-separated")
    parser.add_argument("--threads", type=int, default=1, help="torch and FAISS CPU threads")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = parser.parse_args()
    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    if not Index.exists(args.index):
        build_index(args.essays, args.index)
    index = Index.open(args.index)
    questions = QUESTIONS[: args.questions]
    with tempfile.TemporaryDirectory() as tmp:
        model = str(cross_encoder(args.minilm, Path(tmp)))
        settings: dict[str, Rerank | None] = {"first stage": None}
        for k in (int(x) for x in args.passages.split(",")):
            settings[f"rerank N={args.top_n} K={k}"] = Rerank(model=model, top_n=args.top_n, passages=k)
        for rerank in settings.values():  # warm: models loaded, first-use structures built
            timed(index, "warm up", rerank)
        rows: dict[str, dict[str, list[float]]] = {
            name: {"wall": [], "own": [], "pairs": []} for name in settings
        }
        for question in questions:
            per: dict[str, list[tuple[float, float, int]]] = {name: [] for name in settings}
            for _ in range(args.runs):
                for name, rerank in settings.items():
                    per[name].append(timed(index, question, rerank))
            for name, runs in per.items():
                rows[name]["wall"].append(statistics.median(w for w, _, _ in runs))
                rows[name]["own"].append(statistics.median(o for _, o, _ in runs))
                rows[name]["pairs"].append(statistics.median(p for _, _, p in runs))
    base = statistics.median(rows["first stage"]["wall"])
    result: dict[str, Any] = {
        "documents": index.manifest.counts.documents,
        "vectors": index.manifest.counts.vectors,
        "threads": args.threads,
        "cpu": os.cpu_count(),
        "dtype": str(index.encoder.dtype).removeprefix("torch."),
        "questions": len(questions),
        "runs": args.runs,
        "settings": {
            name: {
                "median_ms": round(statistics.median(row["wall"]), 1),
                "added_ms": round(statistics.median(row["wall"]) - base, 1),
                "reranker_ms": round(statistics.median(row["own"]), 1),
                "pairs": statistics.median(row["pairs"]),
            }
            for name, row in rows.items()
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['documents']} documents ({result['vectors']} vectors), {args.threads} thread(s) of "
        f"{result['cpu']} CPUs, {result['dtype']}, {len(questions)} questions × {args.runs} runs"
    )
    print(f"{'setting':<22} {'median ms':>10} {'added ms':>9} {'reranker ms':>12} {'pairs':>6}")
    for name, row in result["settings"].items():
        print(
            f"{name:<22} {row['median_ms']:>10.1f} {row['added_ms']:>9.1f} {row['reranker_ms']:>12.1f} "
            f"{row['pairs']:>6.0f}"
        )


if __name__ == "__main__":
    main()
