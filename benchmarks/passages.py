"""What passages cost and save: the latency a result's matched sentence adds to a query, and the
characters a retrieval-augmented prompt carries with passages instead of whole documents.

Latency: each question searched warm (model loaded, one untimed search first) ``--runs`` times with
``sentences="lexical"`` (the query's words: no model call; the library's default), with
``sentences="auto"`` (``ragidx query``'s: the sentences the query's words cannot tell apart embedded
with the index's encoder and compared with the question, at most ``DENSE_BUDGET`` = 32 per query,
top results first: ``ragidx.search.snippets``) and with
``sentences="dense"`` (no budget), the three
interleaved so that both see the same machine, at ``k`` = 4 (RagidxRetriever's default) and 10
(``ragidx query``'s), on ``--threads`` CPU threads (1: ``ragidx query``'s default); the median per
question, then the median over questions, of wall time and of the process's CPU time (which a busy
machine inflates less), and how many sentences were embedded.

Prompt size: ``examples/langchain_rag.py``'s chain (``RagidxRetriever`` → numbered sources → the
prompt) for each question, with ``search_type="passage"`` (the default) and ``"document"``: the
characters of the whole prompt an LLM would receive.

    ragidx ingest ../shared/data/paul_graham_essays/essays --index /tmp/essays   # default model
    python benchmarks/passages.py --index /tmp/essays                            # table
    python benchmarks/passages.py --index /tmp/essays --json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from essay_questions import QUESTIONS  # beside this script (run as a script: its folder is on sys.path)

from ragidx import Index
from ragidx.integrations.langchain import RagidxRetriever
from ragidx.search import snippets

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "langchain_rag.py"


def example() -> ModuleType:
    """``examples/langchain_rag.py`` as a module (the examples folder is not a package)."""
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        return importlib.import_module(EXAMPLE.stem)
    finally:
        sys.path.remove(str(EXAMPLE.parent))


SETTINGS: dict[str, str | None] = {"lexical": "lexical", "auto": "auto", "dense": "dense"}


def latency(index: Index, questions: list[str], k: int, runs: int) -> dict[str, Any]:
    """Per setting: the median search time (wall and CPU ms) and sentences embedded per search."""
    embedded: list[int] = []
    original = index.encoder.embed

    def counting(texts: Any, role: Any = "query") -> Any:
        if role == "document":
            embedded.append(len(texts))
        return original(texts, role=role)

    index.encoder.embed = counting  # type: ignore[method-assign]
    medians: dict[str, list[float]] = {
        f"{n}_{c}": [] for n in SETTINGS for c in ("ms", "cpu_ms", "sentences")
    }
    for question in questions:
        for sentences in SETTINGS.values():
            index.search(question, k=k, sentences=sentences)  # type: ignore[typeddict-item]
        times: dict[str, list[float]] = {key: [] for key in medians}
        for _ in range(runs):
            for name, sentences in SETTINGS.items():
                embedded.clear()
                wall, cpu = time.perf_counter(), time.process_time()
                index.search(question, k=k, sentences=sentences)  # type: ignore[typeddict-item]
                times[f"{name}_ms"].append(1000 * (time.perf_counter() - wall))
                times[f"{name}_cpu_ms"].append(1000 * (time.process_time() - cpu))
                times[f"{name}_sentences"].append(sum(embedded))
        for key, values in times.items():
            medians[key].append(statistics.median(values))
    index.encoder.embed = original  # type: ignore[method-assign]
    return {"k": k, **{key: statistics.median(values) for key, values in medians.items()}}


def prompt_sizes(index: Index, questions: list[str], k: int) -> list[dict[str, Any]]:
    chain = example().build_chain
    rows = []
    for question in questions:
        row: dict[str, Any] = {"question": question}
        for kind in ("passage", "document"):
            retriever = RagidxRetriever(index=index, k=k, search_type=kind)
            prompt = chain(retriever).invoke(question)
            row[kind] = sum(len(str(message.content)) for message in prompt.to_messages())
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, required=True, help="an index of the essays (default model)")
    parser.add_argument("--runs", type=int, default=5, help="timed searches per question and setting")
    parser.add_argument("-k", type=int, default=3, help="sources per prompt (the example's default)")
    parser.add_argument("--threads", type=int, default=1, help="torch and FAISS CPU threads (0: default)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    args = parser.parse_args()
    if args.threads:
        import faiss
        import torch

        torch.set_num_threads(args.threads)
        faiss.omp_set_num_threads(args.threads)
    index = Index.open(args.index)
    timed = [latency(index, QUESTIONS, k, args.runs) for k in (4, 10)]
    sizes = prompt_sizes(index, QUESTIONS, args.k)
    result = {
        "index": str(args.index),
        "documents": len(index),
        "cpu_count": os.cpu_count(),
        "threads": args.threads,
        "load_average": os.getloadavg(),
        "dense_budget": snippets.DENSE_BUDGET,
        "latency": timed,
        "prompt_k": args.k,
        "prompts": sizes,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['documents']} documents, {result['cpu_count']} CPUs, {args.threads} thread(s), "
        f"load average {', '.join(f'{x:.1f}' for x in result['load_average'])}\n"
    )
    print("| k | sentences | wall ms | CPU ms | sentences embedded | added: wall ms | added: CPU ms |")
    print("|---|---|---|---|---|---|---|")
    for row in timed:
        for name in SETTINGS:
            added = row[f"{name}_ms"] - row["lexical_ms"]
            added_cpu = row[f"{name}_cpu_ms"] - row["lexical_cpu_ms"]
            print(
                f"| {row['k']} | {name} | {row[f'{name}_ms']:.1f} | {row[f'{name}_cpu_ms']:.1f} "
                f"| {row[f'{name}_sentences']:.0f} | {added:.1f} | {added_cpu:.1f} |"
            )
    print(f"\n| question (k = {args.k}) | prompt with passages | with whole documents | ratio |")
    print("|---|---|---|---|")
    for row in sizes:
        print(
            f"| {row['question']} | {row['passage']:,} | {row['document']:,} "
            f"| {row['document'] / row['passage']:.1f}× |"
        )
    total_p, total_d = sum(r["passage"] for r in sizes), sum(r["document"] for r in sizes)
    print(f"| all | {total_p:,} | {total_d:,} | {total_d / total_p:.1f}× |")


if __name__ == "__main__":
    main()
