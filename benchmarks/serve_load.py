"""Load test of ``ragidx serve``: many concurrent clients, a share of them hostile, on 127.0.0.1 only.

Starts ``ragidx serve --index DIR --port 0 -q --reload-interval 0`` (listening on 127.0.0.1; any
``--serve-arg`` is passed on), waits until it answers, sends a few warm-up searches, then runs
``--clients`` clients at once (asyncio, one HTTP connection each) for ``--duration`` seconds or
``--max-requests`` requests, whichever ends first. Each client thinks (uniformly 0 to 2 ×
``--think`` seconds), then sends one request: a hostile one with probability ``--hostile``, else a
plain search (``{"text": <a query>, "k": 10}``, the server's defaults otherwise). Hostile requests
take turns through :data:`HOSTILE`: unique long ``source`` globs (the memory leak of issue 39),
a glob over the limit, the 49-second request of issue 39 (k 1000 passages, dense sentences, full
texts), the heaviest dense search the default budget admits, a full ``$in`` list of document ids,
JSON nested 100,000 deep, bytes that are not UTF-8, ``"k": "5"``, and a 2 MiB body.

Measured: the latency of every plain search as the client sees it (p50, p95, p99, max), the
search's own time inside the server (``took_ms``: the rest is waiting for a worker and a core) and
its status codes; per hostile kind, its status codes and latency (p50, max); the server process's
resident memory (``/proc/PID/status`` VmRSS, Linux) every 0.5 s, reported at the start, at each
quarter of the run, and at its peak. A short table is printed; ``--json`` writes everything.

    python benchmarks/serve_load.py --index /tmp/d-index --think 10          # 200 clients, 60 s
    python benchmarks/serve_load.py --index /tmp/d-index --clients 50 --duration 20 --json out.json

The plain queries are about the documents of ``examples/docs`` (``ragidx ingest examples/docs
--index /tmp/d-index``); ``--queries FILE`` takes one query a line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
from serve import serving  # benchmarks/serve.py, beside this script
from startup import ragidx_command  # benchmarks/startup.py

QUERIES = [
    "how do you undo a rebase",
    "what does git merge record",
    "how do honeybees tell each other where flowers are",
    "why do lighthouses have different flash patterns",
    "how long should sourdough rise",
    "feeding a sourdough starter",
    "which planet has the most moons",
    "coffee near the lake in zurich",
    "interactive rebase squash commits",
    "the golden rule of rebasing",
    "waggle dance distance",
    "lens of a lighthouse",
    "the largest planet of the solar system",
    "opening hours of the cafe",
]
HOSTILE = [
    "unique-glob",
    "long-glob",
    "issue-49s",
    "dense-max",
    "doc-ids",
    "deep-json",
    "not-utf8",
    "k-string",
    "big-body",
]
JSON_HEADERS = {"content-type": "application/json"}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100), linear between ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def hostile_request(kind: str, rng: random.Random) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one hostile request of ``kind``."""
    body: Any
    if kind == "unique-glob":  # each one new: a server caching compiled patterns grows with each
        pieces = [rng.choice("abcdefghij/?*") for _ in range(1000)]
        body = {"text": "rebase", "where": {"source": "*" + "".join(pieces) + f"{rng.random()}*"}}
    elif kind == "long-glob":
        body = {"text": "rebase", "where": {"source": "*a" * 50_000}}
    elif kind == "issue-49s":
        body = {"text": "bees", "k": 1000, "per": "chunk", "sentences": "dense", "with_text": True}
    elif kind == "dense-max":  # within the default budget of 2,000 units: 19 dense results
        body = {"text": "how do bees communicate", "k": 19, "sentences": "dense"}
    elif kind == "doc-ids":
        ids = [f"doc-{rng.randrange(10**9)}.txt" for _ in range(10_000)]
        body = {"text": "planets", "where": {"doc_id": {"$in": ids}}}
    elif kind == "deep-json":
        return b'{"text": "x", "where": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}", JSON_HEADERS
    elif kind == "not-utf8":
        return b'{"text": "caf\xe9 cr\xe8me"}', JSON_HEADERS
    elif kind == "k-string":
        body = {"text": "lighthouse", "k": "5"}
    elif kind == "big-body":
        body = {"text": "x" * (2 << 20)}
    else:
        raise ValueError(kind)
    return json.dumps(body).encode(), JSON_HEADERS


def rss_mib(pid: int) -> float | None:
    """The resident memory of process ``pid`` (Linux), MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@contextlib.contextmanager
def server(index: Path, extra: list[str]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``ragidx serve`` on a free port of 127.0.0.1: its URL and process."""
    argv = [*ragidx_command(), "serve", "--index", str(index), "--host", "127.0.0.1", "--port", "0", "-q"]
    argv += ["--reload-interval", "0", *extra]
    with serving(argv) as started:
        yield started


class Memory:
    """Samples a process's RSS every ``every`` seconds in a thread."""

    def __init__(self, pid: int, every: float = 0.5):
        self.pid = pid
        self.every = every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Memory:
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            value = rss_mib(self.pid)
            if value is not None:
                self.samples.append((time.monotonic() - self._start, value))
            if self._stop.wait(self.every):
                return

    def report(self) -> dict[str, float]:
        values = [v for _, v in self.samples]
        if not values:
            return {}
        quarter = {f"at_{q}%": values[min(len(values) - 1, len(values) * q // 100)] for q in (25, 50, 75)}
        return {"start": values[0], **quarter, "end": values[-1], "peak": max(values)}


async def run_clients(url: str, args: argparse.Namespace, queries: list[str]) -> list[dict[str, Any]]:
    """Every request sent: kind, status, seconds, start time."""
    records: list[dict[str, Any]] = []
    budget = itertools.count()
    hostile_turn = itertools.count()
    stop_at = time.monotonic() + args.duration
    # idle connections dropped after 2 s, before the server's keep-alive timeout (uvicorn: 5 s) closes
    # them: reusing one the server is closing fails as a ReadError, an artefact of the client
    limits = httpx.Limits(
        max_connections=args.clients, max_keepalive_connections=args.clients, keepalive_expiry=2.0
    )
    async with httpx.AsyncClient(base_url=url, timeout=args.client_timeout, limits=limits) as client:

        async def one_client(number: int) -> None:
            rng = random.Random(args.seed * 100_003 + number)
            await asyncio.sleep(rng.uniform(0, 2 * args.think))  # spread the starts
            while time.monotonic() < stop_at and next(budget) < args.max_requests:
                if rng.random() < args.hostile:
                    kind = HOSTILE[next(hostile_turn) % len(HOSTILE)]
                    content, headers = hostile_request(kind, rng)
                else:
                    kind = "plain"
                    content = json.dumps({"text": rng.choice(queries), "k": 10}).encode()
                    headers = JSON_HEADERS
                start = time.monotonic()
                took_ms = None
                try:
                    response = await client.post("/search", content=content, headers=headers)
                    status: int | str = response.status_code
                    if status == 200:
                        took_ms = response.json()["took_ms"]  # the search inside the server
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                seconds = time.monotonic() - start
                records.append(
                    {"kind": kind, "status": status, "s": seconds, "at": start, "took_ms": took_ms}
                )
                await asyncio.sleep(rng.uniform(0, 2 * args.think))

        await asyncio.gather(*(one_client(n) for n in range(args.clients)))
    return records


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_kind[record["kind"]].append(record)
    out: dict[str, Any] = {}
    for kind, rows in sorted(by_kind.items()):
        ms = [r["s"] * 1000 for r in rows]
        out[kind] = {
            "n": len(rows),
            "status": dict(Counter(str(r["status"]) for r in rows)),
            "p50_ms": percentile(ms, 50),
            "p95_ms": percentile(ms, 95),
            "p99_ms": percentile(ms, 99),
            "max_ms": max(ms),
            "mean_ms": statistics.fmean(ms),
        }
        took = [r["took_ms"] for r in rows if r["took_ms"] is not None]
        if took:
            out[kind]["search_p50_ms"] = percentile(took, 50)
            out[kind]["search_p99_ms"] = percentile(took, 99)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--index", type=Path, required=True, help="the index to serve")
    parser.add_argument("--clients", type=int, default=200, help="concurrent clients (default 200)")
    parser.add_argument("--hostile", type=float, default=0.1, help="share of hostile requests (default 0.1)")
    parser.add_argument("--think", type=float, default=10.0, help="mean seconds between a client's requests")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (at most 600)")
    parser.add_argument("--max-requests", type=int, default=20_000, help="requests in all, at most")
    parser.add_argument("--client-timeout", type=float, default=120.0, help="seconds a client waits")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--queries", type=Path, help="plain queries, one a line")
    parser.add_argument("--serve-arg", action="append", default=[], help="passed to ragidx serve (repeat)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    if not 0 < args.duration <= 600 or not 1 <= args.clients <= 1000 or not 0 <= args.hostile <= 1:
        parser.error("--duration in (0, 600], --clients in [1, 1000], --hostile in [0, 1]")
    queries = QUERIES
    if args.queries is not None:
        queries = [q.strip() for q in args.queries.read_text(encoding="utf-8").splitlines() if q.strip()]

    with server(args.index, args.serve_arg) as (url, process):
        info = httpx.get(f"{url}/info", timeout=60).json()
        for query in queries[:5]:  # warm: first requests of a fresh process
            httpx.post(f"{url}/search", json={"text": query, "k": 10}, timeout=60).raise_for_status()
        with Memory(process.pid) as memory:
            start = time.monotonic()
            records = asyncio.run(run_clients(url, args, queries))
            elapsed = time.monotonic() - start
        alive = process.poll() is None

    result = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "index": {key: info.get(key) for key in ("documents", "vectors", "model")},
        "limits": info.get("limits"),
        "seconds": elapsed,
        "requests": len(records),
        "requests_per_s": len(records) / elapsed,
        "server_alive_at_end": alive,
        "kinds": summarize(records),
        "rss_mib": memory.report(),
        "rss_samples": memory.samples,
    }
    print(
        f"{args.clients} clients, {args.hostile:.0%} hostile, think {args.think:g} s: "
        f"{len(records)} requests in {elapsed:.0f} s ({len(records) / elapsed:.1f}/s); "
        f"index {info.get('documents')} documents"
    )
    print(
        f"{'kind':<12} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'search p50/p99':>15}  status"
    )
    for kind, row in result["kinds"].items():
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(row["status"].items()))
        inside = f"{row['search_p50_ms']:.0f}/{row['search_p99_ms']:.0f}" if "search_p50_ms" in row else "-"
        print(
            f"{kind:<12} {row['n']:>6} {row['p50_ms']:>8.0f} {row['p95_ms']:>8.0f} {row['p99_ms']:>8.0f} "
            f"{row['max_ms']:>8.0f} {inside:>15}  {codes}"
        )
    rss = result["rss_mib"]
    print("server RSS MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in rss.items()))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
