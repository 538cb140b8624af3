"""``POST /search/batch`` against the same queries sent one by one to ``POST /search``.

One ``ragidx serve`` (``--port 0 -q --reload-interval 0``), one HTTP connection (httpx), the
server's defaults (mode, ``k``, lexical sentences). Each round sends the ``--queries`` queries once
as 64 sequential ``/search`` requests and once as one ``/search/batch`` request (the order of the two
alternates between rounds, so that neither always runs on a warmer machine); the answers must be
the same documents with the same scores, query by query, within :data:`SCORE_TOLERANCE` (a query
embedded in a padded batch differs from one embedded alone in the last float digits, so documents
of near-equal scores may swap places: counted as ``swapped``), and each document the same snippet
(one that differs is counted as ``snippets_differ``: a chunk of near-equal cosine may then be the
best). Prints the median wall time of each over ``--rounds`` rounds and their ratio (sequential
over batch: the batch's throughput gain).

    ragidx ingest examples/docs --index /tmp/n-index
    python benchmarks/serve_batch.py --index /tmp/n-index                 # about a minute on 2 cores
    python benchmarks/serve_batch.py --index /tmp/n-index --json out.json --rounds 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from serve import server  # benchmarks/serve.py, beside this script

SCORE_TOLERANCE = 1e-2
TOPICS = [
    "how do bees keep the hive warm",
    "when was the lighthouse built",
    "how long should sourdough ferment",
    "rebase a branch onto main",
    "which planet is the largest",
    "coffee in Zurich",
    "what does the FAQ say about refunds",
    "how far is the moon",
]


def queries(count: int) -> list[str]:
    """``count`` distinct queries over the example documents."""
    return [
        f"{TOPICS[i % len(TOPICS)]} ({i // len(TOPICS)})" if i >= len(TOPICS) else TOPICS[i]
        for i in range(count)
    ]


Found = list[dict[str, tuple[float, str]]]  # per query: document → (score, snippet), in rank order


def one_by_one(client: httpx.Client, texts: list[str], k: int) -> tuple[float, Found, float]:
    """Wall seconds, the answers, and the server's own milliseconds (``took_ms``, summed)."""
    start = time.perf_counter()
    found = []
    took = 0.0
    for text in texts:
        reply = client.post("/search", json={"text": text, "k": k})
        reply.raise_for_status()
        answer = reply.json()
        found.append({hit["doc_id"]: (hit["score"], hit["snippet"]) for hit in answer["results"]})
        took += answer["took_ms"]
    return time.perf_counter() - start, found, took


def batched(client: httpx.Client, texts: list[str], k: int) -> tuple[float, Found, float]:
    start = time.perf_counter()
    reply = client.post("/search/batch", json={"queries": texts, "k": k})
    reply.raise_for_status()
    body = reply.json()
    found = [
        {hit["doc_id"]: (hit["score"], hit["snippet"]) for hit in answer["results"]}
        for answer in body["answers"]
    ]
    return time.perf_counter() - start, found, body["took_ms"]


def check(texts: list[str], single: Found, batch: Found) -> tuple[int, int]:
    """Exit unless each query's documents and scores agree; how many queries' orders differ, and
    how many results' snippets."""
    swapped = snippets = 0
    for text, one, many in zip(texts, single, batch, strict=True):
        if one.keys() != many.keys() or any(abs(one[d][0] - many[d][0]) > SCORE_TOLERANCE for d in one):
            raise SystemExit(f"{text!r}: the batch's results differ from the single search's: {one} {many}")
        swapped += list(one) != list(many)
        snippets += sum(one[d][1] != many[d][1] for d in one)
    return swapped, snippets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=64, help="queries per round (default 64)")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="ragidx serve --threads")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = parser.parse_args()
    texts = queries(args.queries)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    swapped = snippets = 0
    single: list[float] = []
    batch: list[float] = []
    took: dict[Any, list[float]] = {one_by_one: [], batched: []}
    with (
        server(args.index, args.threads, env) as (url, started),
        httpx.Client(base_url=url, timeout=600) as client,
    ):
        one_by_one(client, texts[:4], args.k)  # warm the connection and each path once
        batched(client, texts[:4], args.k)
        for round_ in range(args.rounds):
            order = (one_by_one, batched) if round_ % 2 == 0 else (batched, one_by_one)
            times: dict[Any, float] = {}
            answers = {}
            for run in order:
                times[run], answers[run], server_ms = run(client, texts, args.k)
                took[run].append(server_ms)
            orders, shown = check(texts, answers[one_by_one], answers[batched])
            swapped, snippets = swapped + orders, snippets + shown
            single.append(times[one_by_one])
            batch.append(times[batched])
    result = {
        "queries": args.queries,
        "k": args.k,
        "rounds": args.rounds,
        "server_start_s": round(started, 2),
        "sequential_s": round(statistics.median(single), 4),
        "batch_s": round(statistics.median(batch), 4),
        "sequential_qps": round(args.queries / statistics.median(single), 1),
        "batch_qps": round(args.queries / statistics.median(batch), 1),
        "speedup": round(statistics.median(single) / statistics.median(batch), 2),
        # the server's own time (took_ms): the searches alone for /search, searches and hits for a batch
        "sequential_server_ms": round(statistics.median(took[one_by_one]), 1),
        "batch_server_ms": round(statistics.median(took[batched]), 1),
        "swapped": swapped,
        "snippets_differ": snippets,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
