"""What late chunking costs at ingest: document tokens per second, side by side with plain chunking.

One process, one model, the same documents: the first ``--docs`` QMSum meetings (sorted by id),
each cut to ``--max-tokens`` content tokens. Timed, interleaved over ``--repeats`` rounds:

* **peer** — sentence-transformers ``encode`` of the 256-token chunks as text (each chunk's content
  tokens decoded before timing), the chunk max-sim ingest users run today;
* ``chunk:256:0`` — ragidx plain chunks (``longdoc.embed_plans``);
* ``late:256`` — late chunking over passes of the model window (a quarter overlap);
* ``late:256+extend:pi`` — late chunking over one PI-extended pass of ``--max-tokens``.

Throughput is the documents' content tokens per second (the same numerator for every row, so
rows compare what a user waits for); the ratio is against the peer's median time. ``cpu s`` is the
process CPU time of a pass (near threads × wall when the cores were ours).

    python benchmarks/late_chunking.py --data-dir ../shared/data/qmsum/longembed_style
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from ragidx.embed.config import EncoderConfig, ExtensionConfig, LongDocConfig
from ragidx.embed.documents import embed_plans, plan_tokens
from ragidx.embed.encoder import Encoder
from ragidx.strategy import parse

CHUNK = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_data = os.environ.get("RAGIDX_EVAL_DATA", "../shared/data") + "/qmsum/longembed_style"
    parser.add_argument("--data-dir", type=Path, default=Path(default_data))
    parser.add_argument("--model", default="default")
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    texts = [
        d["text"]
        for d in sorted(map(json.loads, (args.data_dir / "corpus.jsonl").open()), key=lambda d: d["id"])[
            : args.docs
        ]
    ]
    base = Encoder(EncoderConfig(model=args.model, device="cpu"))
    extension = ExtensionConfig(method="pi", target_length=args.max_tokens)
    extended = Encoder(EncoderConfig(model=args.model, device="cpu"), extension=extension)
    documents = []
    for text in texts:
        tokens = base.tokenize(text, "document")
        documents.append(type(tokens)(tokens.prompt_ids, tokens.ids[: args.max_tokens], None))
    n_tokens = sum(len(t) for t in documents)

    def ragidx(spec: str, encoder: Encoder) -> Callable[[], None]:
        config: LongDocConfig = parse(spec).long_doc(args.max_tokens)
        planned = [(t, plan_tokens(encoder, t, config)) for t in documents]

        def run() -> None:
            embed_plans(encoder, planned)

        return run

    runs: dict[str, Callable[[], None]] = {}
    try:
        from sentence_transformers import SentenceTransformer

        peer = SentenceTransformer(str(base.folder.path), device="cpu")
        peer.max_seq_length = base.window_size
        chunks = [
            base.tokenizer.decode(t.ids[s : s + CHUNK]) for t in documents for s in range(0, len(t), CHUNK)
        ]

        def encode_peer() -> None:
            peer.encode(chunks, batch_size=32)

        runs["peer: sentence-transformers chunks"] = encode_peer
    except ImportError:
        print("sentence-transformers not installed: no peer row (pip install 'ragidx[test]')")
    runs[f"chunk:{CHUNK}:0"] = ragidx(f"chunk:{CHUNK}:0", base)
    runs[f"late:{CHUNK}"] = ragidx(f"late:{CHUNK}", base)
    runs[f"late:{CHUNK}+extend:pi"] = ragidx(f"late:{CHUNK}+extend:pi", extended)

    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for run in runs.values():
        run()  # warm-up
    for _ in range(args.repeats):
        for name, run in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    reference = statistics.median(w for w, _ in next(iter(times.values())))
    rows = []
    for name, passes in times.items():
        wall = statistics.median(w for w, _ in passes)
        cpu = statistics.median(c for _, c in passes)
        rows.append(
            {
                "run": name,
                "wall_s": wall,
                "cpu_s": cpu,
                "tokens_per_s": n_tokens / wall,
                "ratio": reference / wall,
            }
        )
    info = {
        "model": base.folder.name,
        "docs": len(documents),
        "content_tokens": n_tokens,
        "max_tokens": args.max_tokens,
        "threads": torch.get_num_threads(),
        "rows": rows,
    }
    if args.json:
        print(json.dumps(info, indent=1))
        return
    print(
        f"{info['model']}: {info['docs']} documents, {n_tokens:,} content tokens, {info['threads']} threads"
    )
    print(f"{'run':<38}{'wall s':>9}{'cpu s':>9}{'doc tok/s':>12}{'vs peer':>9}")
    for row in rows:
        print(
            f"{row['run']:<38}{row['wall_s']:>9.2f}{row['cpu_s']:>9.2f}{row['tokens_per_s']:>12,.0f}{row['ratio']:>9.2f}"
        )


if __name__ == "__main__":
    main()
