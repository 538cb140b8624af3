"""MCP ``search`` against HTTP ``/search`` on the same warm index: does MCP add latency?

Two servers over one index, each started once as its user starts it and warmed up, then asked the
same queries one at a time, ``--rounds`` times, from clients in this process, alternately (each query
through one, then the other, the order swapped every round, so both see the same moment's load):

1. **HTTP**: ``ragidx serve --index DIR --port 0 -q`` and ``POST /search`` over one httpx
   connection, with ``with_passage: true`` (the passage text, as MCP returns it).
2. **MCP**: ``ragidx mcp --index DIR`` over stdio (what an MCP host starts), ``search`` called
   through the official SDK's client (``mcp.Client``) in one session.

Both run the same search (``k``, the index's default mode, lexical snippets: the defaults of both)
on ``--threads`` torch/FAISS threads, and must return the same documents. Reported: p50 and p95
per call as the client sees it, and p50(MCP) − p50(HTTP): the target is within 20 ms.

    python benchmarks/mcp_latency.py                          # examples/docs, the bundled model
    python benchmarks/mcp_latency.py --index /tmp/essays-idx --queries q.tsv --rounds 20 --json out.json

Without ``--index`` it ingests ``examples/docs`` with the default (bundled, offline) model into a
temporary directory first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
from serve import server as http_server  # benchmarks/serve.py, beside this script
from serve import summary
from startup import ragidx_command  # benchmarks/startup.py

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "docs"
QUERIES = [
    "how do honeybees communicate where flowers are",
    "feeding a sourdough starter",
    "why were lighthouses built on rocky coasts",
    "which planet is the largest",
    "how to rebase a branch onto main",
    "coffee near the lake in Zurich",
    "how long does bread need to rise",
    "the queen bee and the hive",
]


def measure(
    url: str, index: Path, queries: list[str], k: int, rounds: int, threads: int | None, env: dict[str, str]
) -> dict[str, Any]:
    """Each query through both servers, alternately (the same moment's load for both): the times of
    each in ms, the top documents each returned, and the MCP server's start-up in seconds."""
    from mcp import Client, StdioServerParameters

    args = [*ragidx_command()[1:], "mcp", "--index", str(index), "--reload-interval", "0"]
    args += [] if threads is None else ["--threads", str(threads)]
    command = StdioServerParameters(command=ragidx_command()[0], args=args, env=env)
    times: dict[str, list[float]] = {"http": [], "mcp": []}
    tops: dict[str, dict[str, list[str]]] = {"http": {}, "mcp": {}}
    body = {"k": k, "with_passage": True}

    async def mcp_search(client: Any, query: str) -> list[str]:
        result = await client.call_tool("search", {"query": query, "k": k})
        if result.is_error:
            raise SystemExit(f"MCP search failed: {result.content[0].text}")
        return [hit["doc_id"] for hit in json.loads(result.content[0].text)["passages"]]

    def http_search(client: httpx.Client, query: str) -> list[str]:
        response = client.post("/search", json={"text": query, **body})
        response.raise_for_status()
        return [hit["doc_id"] for hit in response.json()["results"]]

    async def run() -> float:
        start = time.perf_counter()
        async with Client(command, read_timeout_seconds=120) as client:
            started = time.perf_counter() - start
            with httpx.Client(base_url=url, timeout=60) as http:
                for query in queries:  # warm-up: one of each, both ways
                    await mcp_search(client, query)
                    http_search(http, query)
                for number in range(rounds):
                    for query in queries:
                        for way in ("mcp", "http") if number % 2 else ("http", "mcp"):
                            start = time.perf_counter()
                            if way == "mcp":
                                top = await mcp_search(client, query)
                            else:
                                top = http_search(http, query)
                            times[way].append((time.perf_counter() - start) * 1000)
                            tops[way][query] = top
        return started

    started = anyio.run(run)
    return {"times": times, "tops": tops, "mcp_start_s": started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, help="an index (default: examples/docs ingested now)")
    parser.add_argument("--queries", type=Path, help="a TSV or JSONL query file (ragidx query --queries)")
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch/FAISS threads of both servers")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    queries = QUERIES
    if args.queries is not None:
        from ragidx.search.trec import read_queries

        queries = [text for _, text in read_queries(args.queries)]
    with tempfile.TemporaryDirectory() as scratch:
        index = args.index
        if index is None:
            index = Path(scratch) / "examples-index"
            argv = [*ragidx_command(), "ingest", str(EXAMPLES), "--index", str(index)]
            subprocess.run(argv, check=True, env=env, capture_output=True)
        with http_server(index, args.threads, env) as (url, _):
            measured = measure(url, index, queries, args.k, args.rounds, args.threads, env)
    http, mcp = measured["times"]["http"], measured["times"]["mcp"]
    if measured["tops"]["http"] != measured["tops"]["mcp"]:
        raise SystemExit(f"MCP and HTTP disagree: {measured['tops']}")
    result: dict[str, Any] = {
        "index": str(args.index or EXAMPLES),
        "queries": len(queries),
        "rounds": args.rounds,
        "k": args.k,
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "http": summary(http),
        "mcp": summary(mcp),
        "mcp_start_s": round(measured["mcp_start_s"], 2),
        "p50_difference_ms": summary(mcp)["p50_ms"] - summary(http)["p50_ms"],
    }
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{len(queries)} queries x {args.rounds} rounds, k={args.k}, {args.threads} thread(s); "
        f"load {result['load_avg']}"
    )
    for name in ("http", "mcp"):
        s = result[name]
        print(f"{name:>5}: p50 {s['p50_ms']:7.2f} ms  p95 {s['p95_ms']:7.2f} ms  (n={s['n']})")
    print(
        f"MCP p50 - HTTP p50: {result['p50_difference_ms']:+.2f} ms (target: within 20 ms); "
        f"same top-{args.k}: yes"
    )


if __name__ == "__main__":
    sys.exit(main())
