"""Warm queries through ``ragidx serve`` against the cold command line, and torch/FAISS threads per query.

Same index, same queries, three measurements:

1. **Cold CLI**: ``ragidx query TEXT --index DIR -k K --json`` as a fresh subprocess per query
   (start-up, model load and search: what every call costs without a server). Wall time each.
2. **Server**: ``ragidx serve --index DIR --port 0 -q`` started once (its start-up timed until the
   port answers), then every query sent ``--rounds`` times, one at a time, over one HTTP connection
   (httpx): latency per request as the client sees it (p50, p95), the server's own search time
   (``took_ms``), and queries per second; first with the server's default snippets (the matched
   sentence found by the query's words), then ``--dense-rounds`` times with ``sentences: dense``
   (each hit's sentences embedded, which is what ``ragidx query`` does for its first 10 results).
   The server's top results are checked against the CLI's for the same query (they must agree).
   The ratios printed are the cold CLI's median over the server's p50.
3. **Threads**: ``Index.search`` (lexical sentences, as the server) in this process at each
   ``--threads-list`` count (torch and FAISS),
   with the machine as it is ("as is") and while one spinning process per core keeps every core
   busy ("busy"): p50 and p95 of one short query, and the CPU time it took (all threads together;
   at one thread, the work itself, whatever the load).

    python benchmarks/serve.py --index /tmp/essays-idx             # about 5 minutes on 2 shared cores
    python benchmarks/serve.py --index /tmp/essays-idx --json out.json --cli-runs 10 --rounds 20

The default queries are about Paul Graham's essays (the index the README's numbers come from:
``ragidx ingest <paul_graham_essays/essays> --index /tmp/essays-idx``); ``--queries FILE`` takes
the TSV or JSONL query files of ``ragidx query --queries``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
from startup import ragidx_command  # benchmarks/startup.py, beside this script

QUERIES = [
    "how do you get startup ideas",
    "why do cities matter to ambitious people",
    "what makes a great hacker",
    "should founders raise money from angel investors",
    "the disadvantages of an elite college education",
    "how to write a good essay",
    "Lisp macros and programming language power",
    "why do startups die",
    "working on what you love",
    "what is wealth and how is it created",
    "how to do great work",
    "do things that don't scale",
    "the hardest lessons for startups to learn",
    "why nerds are unpopular in high school",
    "copy what you like",
    "being a good boss versus a manager",
    "how addictive technology changes the world",
    "corporate development and acquisitions",
    "design and research",
    "the age of the essay",
]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100), linear between ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(ms: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(ms),
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "min_ms": min(ms),
        "max_ms": max(ms),
        "mean_ms": statistics.fmean(ms),
    }


# --------------------------------------------------------------------------------- cold CLI
def cold_cli(
    index: Path, queries: list[str], k: int, runs: int, env: dict[str, str], mode: str | None
) -> dict[str, Any]:
    times, tops = [], {}
    for number in range(runs):
        text = queries[number % len(queries)]
        argv = [*ragidx_command(), "query", text, "--index", str(index), "-k", str(k), "--json"]
        argv += [] if mode is None else ["--mode", mode]
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        times.append((time.perf_counter() - start) * 1000)
        if done.returncode != 0:
            raise SystemExit(f"ragidx query exited {done.returncode}:\n{done.stderr}")
        tops[text] = [hit["doc_id"] for hit in json.loads(done.stdout)]
    return {"latency": summary(times), "times_ms": times, "top": tops}


# ----------------------------------------------------------------------------------- server
@contextlib.contextmanager
def serving(
    argv: list[str], env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A ``ragidx serve`` command line (``--port 0 -q``: it prints ``serving ... at URL``) started,
    once it answers ``/health``: (its URL, its process); stopped on leaving. Shared by the server
    benchmarks (this one, serve_load.py, mcp_latency.py through :func:`server`)."""
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        if not line.startswith("serving "):
            raise SystemExit(f"ragidx serve did not start: {line}{process.stderr.read()}")
        url = line.split(" at ")[1].split()[0]
        httpx.get(f"{url}/health", timeout=60).raise_for_status()
        yield url, process
    finally:
        process.terminate()
        process.wait(timeout=60)


@contextlib.contextmanager
def server(index: Path, threads: int | None, env: dict[str, str]) -> Iterator[tuple[str, float]]:
    """``ragidx serve`` on a free port: (its URL, seconds until it answered /health)."""
    argv = [*ragidx_command(), "serve", "--index", str(index), "--port", "0", "-q", "--reload-interval", "0"]
    if threads is not None:
        argv += ["--threads", str(threads)]
    start = time.perf_counter()
    with serving(argv, env) as (url, _):
        yield url, time.perf_counter() - start


def warm_queries(
    url: str, queries: list[str], k: int, rounds: int, mode: str | None, sentences: str
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    client_ms, server_ms, tops = [], [], {}
    body: dict[str, Any] = {"k": k, "sentences": sentences}
    if mode is not None:
        body["mode"] = mode
    with httpx.Client(base_url=url, timeout=60) as client:
        for text in queries[:3]:  # warm the connection and the first code paths
            client.post("/search", json={"text": text, **body}).raise_for_status()
        wall = time.perf_counter()
        for _ in range(rounds):
            for text in queries:
                start = time.perf_counter()
                response = client.post("/search", json={"text": text, **body})
                client_ms.append((time.perf_counter() - start) * 1000)
                response.raise_for_status()
                answer = response.json()
                server_ms.append(answer["took_ms"])
                tops[text] = [hit["doc_id"] for hit in answer["results"]]
        wall = time.perf_counter() - wall
    result = {
        "latency": summary(client_ms),
        "search_only": summary(server_ms),
        "queries_per_s": len(client_ms) / wall,
        "mode": answer["mode"],
        "sentences": sentences,
    }
    return result, tops


# ---------------------------------------------------------------------------------- threads
@contextlib.contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU while the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    time.sleep(1.0)  # let the scheduler spread them
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def thread_latency(
    index: Path, queries: list[str], k: int, counts: list[int], repeats: int, mode: str | None
) -> list[dict[str, Any]]:
    import faiss
    import torch

    from ragidx import Index

    opened = Index.open(index)
    opened.search("warm up the model", k=k)
    cores = len(os.sched_getaffinity(0))
    rows = []
    for load in ("as is", "busy"):
        with busy_cores(cores) if load == "busy" else contextlib.nullcontext():
            for count in counts:
                torch.set_num_threads(count)
                faiss.omp_set_num_threads(count)
                opened.search(queries[0], k=k, mode=mode, sentences="lexical")
                times = []
                cpu = time.process_time()
                for number in range(repeats):
                    start = time.perf_counter()
                    opened.search(queries[number % len(queries)], k=k, mode=mode, sentences="lexical")
                    times.append((time.perf_counter() - start) * 1000)
                cpu_ms = (time.process_time() - cpu) * 1000 / repeats
                rows.append(
                    {
                        "load": load,
                        "threads": count,
                        "spinners": cores if load == "busy" else 0,
                        "cpu_ms": cpu_ms,
                        **summary(times),
                    }
                )
    return rows


# ------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--index", type=Path, required=True, help="an index built by ragidx ingest")
    parser.add_argument("--queries", type=Path, help="TSV or JSONL queries (default: 20 about the essays)")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--mode", choices=("dense", "lexical", "hybrid"), help="default: the index's")
    parser.add_argument("--cli-runs", type=int, default=5, help="cold ragidx query subprocesses")
    parser.add_argument("--rounds", type=int, default=10, help="times each query is sent to the server")
    parser.add_argument(
        "--dense-rounds", type=int, default=1, help="the same with sentences dense (the CLI's snippets)"
    )
    parser.add_argument("--threads", type=int, help="ragidx serve --threads (default: its own)")
    parser.add_argument("--threads-list", default="1,2", help="thread counts of the threads section")
    parser.add_argument("--thread-repeats", type=int, default=40, help="searches per thread count and load")
    parser.add_argument("--json", type=Path, help="write every figure here too")
    args = parser.parse_args()

    if args.queries is not None:
        from ragidx.search.trec import read_queries

        queries = [text for _, text in read_queries(args.queries)]
    else:
        queries = QUERIES
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RAGIDX_THREADS")}
    env["HF_HUB_OFFLINE"] = "1"

    load_before = os.getloadavg()
    print(
        f"index {args.index}, {len(queries)} queries, k {args.k}, {len(os.sched_getaffinity(0))} cores, "
        f"load average {load_before[0]:.2f}",
        flush=True,
    )
    cli = cold_cli(args.index, queries, args.k, args.cli_runs, env, args.mode)
    print(f"cold CLI: median {cli['latency']['p50_ms']:.0f} ms over {args.cli_runs} runs", flush=True)
    with server(args.index, args.threads, env) as (url, startup_s):
        warm, served_tops = warm_queries(url, queries, args.k, args.rounds, args.mode, "lexical")
        dense, dense_tops = warm_queries(url, queries, args.k, args.dense_rounds, args.mode, "dense")
    agree = all(served_tops[t] == top and dense_tops[t] == top for t, top in cli["top"].items())
    counts = [int(n) for n in args.threads_list.split(",")]
    threads = thread_latency(args.index, queries, args.k, counts, args.thread_repeats, args.mode)
    ratio = cli["latency"]["p50_ms"] / warm["latency"]["p50_ms"]
    ratio_dense = cli["latency"]["p50_ms"] / dense["latency"]["p50_ms"]
    result = {
        "index": str(args.index),
        "queries": len(queries),
        "k": args.k,
        "mode": warm["mode"],
        "cores": len(os.sched_getaffinity(0)),
        "load_average": [load_before, os.getloadavg()],
        "cold_cli": cli,
        "server": {"startup_s": startup_s, **warm},
        "server_dense_sentences": dense,
        "same_results": agree,
        "ratio_cold_over_warm_p50": ratio,
        "ratio_cold_over_warm_dense_p50": ratio_dense,
        "threads": threads,
    }
    print_report(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    if not agree:
        raise SystemExit("the server and the CLI disagree on the same query: see the JSON")


def print_report(result: dict[str, Any]) -> None:
    cli = result["cold_cli"]["latency"]
    print()
    print(
        f"mode {result['mode']}, k {result['k']}; load average before/after "
        f"{result['load_average'][0][0]:.2f} / {result['load_average'][1][0]:.2f}"
    )
    print("| how | runs | p50 ms | p95 ms | min ms | queries/s |")
    print("|---|---:|---:|---:|---:|---:|")
    print(
        f"| cold `ragidx query` (subprocess; dense sentences) | {cli['n']} | {cli['p50_ms']:.0f} | "
        f"{cli['p95_ms']:.0f} | {cli['min_ms']:.0f} | {1000 / cli['mean_ms']:.2f} |"
    )
    for key, label in (("server", "lexical"), ("server_dense_sentences", "dense")):
        served = result[key]
        warm, search = served["latency"], served["search_only"]
        print(
            f"| `ragidx serve`, HTTP round trip ({label} sentences) | {warm['n']} | {warm['p50_ms']:.1f} | "
            f"{warm['p95_ms']:.1f} | {warm['min_ms']:.1f} | {served['queries_per_s']:.1f} |"
        )
        print(
            f"| `ragidx serve`, search inside ({label} sentences) | {search['n']} | {search['p50_ms']:.1f} | "
            f"{search['p95_ms']:.1f} | {search['min_ms']:.1f} | |"
        )
    print(
        f"\ncold CLI p50 / warm server p50 = {result['ratio_cold_over_warm_p50']:.0f}x (server default), "
        f"{result['ratio_cold_over_warm_dense_p50']:.0f}x (dense sentences, the CLI's work); server start-up "
        f"{result['server']['startup_s']:.1f} s; same top-{result['k']} as the CLI: {result['same_results']}"
    )
    print("\n| load | threads | p50 ms | p95 ms | min ms | CPU ms per query |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in result["threads"]:
        load = row["load"] if row["load"] == "as is" else f"busy ({row['spinners']} spinning processes)"
        print(
            f"| {load} | {row['threads']} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | "
            f"{row['min_ms']:.1f} | {row['cpu_ms']:.1f} |"
        )


if __name__ == "__main__":
    main()
