"""ragidx's torch search backend against FAISS on the CPU: equal results, float16's recall.

Exact top-k by inner product of seeded random unit vectors (normal, L2-normalised), searched by
``faiss.IndexIDMap2(IndexFlatIP)`` (the peer, and what ``Index`` searches with on a CPU) and by
``ragidx.index.torch_search.TorchFlatSearch`` on the CPU device: float32, whose ids and scores must
be FAISS's (ids: the share equal position by position, and equal up to the order of scores closer
than 1e-5; scores: the largest difference), and float16 (vectors and queries rounded to float16,
products summed in float32: what ``[index] gpu_dtype = "float16"`` computes on CUDA), whose
recall@k against FAISS is the number benchmarks/README.md states. Timings are of the CPU, where
ragidx never picks the torch backend; they are not GPU claims.

    python benchmarks/torch_search.py                       # 200,000 x 384, 1,000 queries
    python benchmarks/torch_search.py --n 1000000 --queries 200 --json

Threads: FAISS (OpenMP) and torch both use ``--threads`` (default: every core).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000, help="vectors searched")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="timed searches per system (median)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args(argv)

    import faiss
    import torch

    from ragidx.index.torch_search import TorchFlatSearch

    faiss.omp_set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    docs = rng.standard_normal((args.n, args.dim), dtype=np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    ids = np.arange(args.n, dtype=np.int64)

    peer = faiss.IndexIDMap2(faiss.IndexFlatIP(args.dim))
    peer.add_with_ids(docs, ids)
    systems: dict[str, Any] = {
        "faiss IndexFlatIP": peer,
        "torch float32": TorchFlatSearch(docs, ids, device="cpu"),
        "torch float16": TorchFlatSearch(docs, ids, device="cpu", dtype="float16"),
    }
    rows: dict[str, dict[str, Any]] = {}
    want_scores = want_ids = None
    for name, system in systems.items():
        seconds = []
        for _ in range(max(1, args.repeats)):
            start = time.perf_counter()
            scores, found = system.search(queries, args.k)
            seconds.append(time.perf_counter() - start)
        row: dict[str, Any] = {"median_s": round(statistics.median(seconds), 4)}
        if want_ids is None:
            want_scores, want_ids = scores, found
        else:
            assert want_scores is not None
            row |= _compare(scores, found, want_scores, want_ids)
        rows[name] = row
    result = {
        "n": args.n,
        "dim": args.dim,
        "queries": args.queries,
        "k": args.k,
        "threads": args.threads,
        "faiss": faiss.__version__,
        "torch": torch.__version__,
        "data": f"random unit vectors, numpy seed {args.seed}",
        "systems": rows,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _table(result)
    exact = rows["torch float32"]
    return 0 if exact["ids_equal_up_to_rounding"] and exact["max_abs_score_diff"] < 1e-5 else 1


def _compare(
    scores: np.ndarray, found: np.ndarray, want_scores: np.ndarray, want: np.ndarray
) -> dict[str, Any]:
    """How close one system's results are to FAISS's."""
    k = want.shape[1]
    recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(found, want, strict=True)])
    same_sets = True
    for row in range(len(want)):  # within a run of scores closer than 1e-5, the order is rounding's
        runs = np.concatenate([[0], np.cumsum(np.abs(np.diff(want_scores[row])) > 1e-5)])
        same_sets &= all(set(found[row, runs == r]) == set(want[row, runs == r]) for r in np.unique(runs))
    return {
        "recall_at_k": round(float(recall), 4),
        "ids_equal_by_position": round(float((found == want).mean()), 6),
        "ids_equal_up_to_rounding": bool(same_sets),
        "max_abs_score_diff": float(np.abs(scores - want_scores).max()),
    }


def _table(result: dict[str, Any]) -> None:
    print(
        f"exact top-{result['k']} of {result['queries']:,} queries over {result['n']:,} x {result['dim']} "
        f"({result['data']}; {result['threads']} threads; faiss {result['faiss']}, torch {result['torch']})"
    )
    print(f"{'system':<18} | {'median s':>9} | {'recall@k':>8} | {'ids = faiss':>11} | {'max |Δscore|':>12}")
    for name, row in result["systems"].items():
        recall = f"{row['recall_at_k']:.4f}" if "recall_at_k" in row else "peer"
        same = f"{row['ids_equal_by_position']:.4%}" if "ids_equal_by_position" in row else ""
        diff = f"{row['max_abs_score_diff']:.2e}" if "max_abs_score_diff" in row else ""
        print(f"{name:<18} | {row['median_s']:>9.4f} | {recall:>8} | {same:>11} | {diff:>12}")


if __name__ == "__main__":
    raise SystemExit(main())
