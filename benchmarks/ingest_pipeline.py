"""The ingest pipeline's own speed: everything but the model, with the model's forward a stub.

On a GPU an ingest must keep the encoder busy (issue 38: at least 80 % of the encoder's own
tokens/s on the same texts), so everything around the forward pass (reading, hashing,
tokenizing, planning windows, building batches, pooling and combining, checkpoints, FAISS add,
the Parquet store and BM25 postings, the commit) must run faster than a GPU embeds. This
benchmark measures that side alone on the CPU: the library's :func:`ragidx.ingest` (the code
``ragidx ingest`` runs) over ``--copies`` copies of a text set (the 49 Paul Graham essays in
``../shared/data`` beside the checkout or ``$RAGIDX_EVAL_DATA``, else ``examples/docs``), copied
to a temporary folder, with the real tokenizer, configuration and Dense layers of ``--model``
(default: the bundled all-MiniLM-L6-v2) and its transformer's ``forward`` replaced by a stub of
zero cost that returns zero hidden states of the right shape (an expanded view: nothing is
computed or allocated). Pooling, segment sums (late chunking), the Dense layers and the copies to
the host still run, on the CPU: a conservative measure (on a GPU they are GPU work).

The encoder is set up as on a GPU: batches of up to ``--batch-tokens`` (16,384) padded tokens,
float32; ``TOKENIZERS_PARALLELISM=false`` as ``ragidx ingest`` sets it. After a warm-up ingest
(imports), per strategy (``chunk``, ``extend:pi`` to ``--max-tokens`` 8,192, ``late``) it ingests
``--repeats`` times into new indexes and prints the best run's window tokens per second of the
whole ingest, the encoder's load left out (window tokens: what the encoder is given, specials and
prompts included, the unit of the encoder benchmarks' tokens/s), with the CPU time of all threads
and of the main thread (on a shared machine the wall time says little; half the all-threads CPU
time bounds an idle 2-core machine's wall time from below), and writes ``ingest_pipeline.json``
beside this file. Target: at least 500k tokens/s on the 2-core machine, so that a GPU at ~200k
tokens/s (all-MiniLM-L6-v2 on an H100) never waits for Python.

    python benchmarks/ingest_pipeline.py                       # 4 copies of the essays, 3 strategies
    python benchmarks/ingest_pipeline.py --copies 1 --strategies chunk --profile
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as `ragidx ingest` sets it (ragidx/cli/app.py)
os.environ["RAGIDX_CPU_FUSED"] = "0"  # the model's (stubbed) forward, not the fused CPU one

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ("chunk", "extend:pi", "late")


def default_texts() -> Path:
    """The 49 essays beside the checkout (or under ``$RAGIDX_EVAL_DATA``), else examples/docs."""
    base = Path(os.environ.get("RAGIDX_EVAL_DATA", ROOT.parent / "shared" / "data"))
    essays = base / "paul_graham_essays" / "essays"
    return essays if essays.is_dir() else ROOT / "examples" / "docs"


def copy_texts(source: Path, target: Path, copies: int) -> int:
    """``copies`` copies of every file under ``source`` in ``target/copy-N/`` (each copy its own
    documents: other ids, the same texts with a copy number in front, so none is a duplicate)."""
    n = 0
    for copy in range(copies):
        folder = target / f"copy-{copy}"
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            out = folder / path.relative_to(source)
            out.parent.mkdir(parents=True, exist_ok=True)
            if path.suffix in (".txt", ".md"):  # bytes: a file in another charset stays readable
                out.write_bytes(f"Copy {copy}.\n".encode() + path.read_bytes())
            else:
                shutil.copyfile(path, out)
            n += 1
    return n


def stub_forward(hidden_size: int) -> Callable[..., Any]:
    """A transformer forward of zero cost: zero hidden states (batch, seq, hidden), an expanded
    view of one element (nothing computed or allocated)."""
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    def forward(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **_: Any) -> Any:
        zero = torch.zeros((), dtype=torch.float32, device=input_ids.device)
        return BaseModelOutput(last_hidden_state=zero.expand(*input_ids.shape, hidden_size))

    return forward


loading = [0.0, 0.0]  # wall and CPU seconds the last ingest spent loading its encoder (not counted)


def install_stub() -> None:
    """Every encoder loaded from now on gets the stub forward (its tokenizer and config are real);
    the time spent loading it is kept in :data:`loading`."""
    import ragidx.embed.encoder as encoder_module

    load = encoder_module._load

    def stubbed(*args: Any, **kwargs: Any) -> Any:
        started, cpu = time.perf_counter(), time.process_time()
        tokenizer, model = load(*args, **kwargs)
        model.forward = stub_forward(int(model.config.hidden_size))
        loading[0] += time.perf_counter() - started
        loading[1] += time.process_time() - cpu
        return tokenizer, model

    encoder_module._load = stubbed


def run_once(folder: Path, strategy: str, args: argparse.Namespace, index: Path) -> dict[str, Any]:
    from ragidx.config import RagidxConfig
    from ragidx.ingestion.pipeline import ingest
    from ragidx.strategy import parse

    long_doc = parse(strategy).long_doc(args.max_tokens if "extend" in strategy else None)
    config = RagidxConfig().override(
        model={
            "model": args.model,
            "device": "cpu",
            "dtype": "float32",
            "max_batch_tokens": args.batch_tokens,
        },
        long_doc=long_doc.model_dump(exclude_unset=True),
    )
    loading[:] = [0.0, 0.0]
    started, cpu, main = time.perf_counter(), time.process_time(), time.thread_time()
    report = ingest(folder, index, config)
    seconds = time.perf_counter() - started - loading[0]
    return {
        "seconds": seconds,
        "cpu_seconds": time.process_time() - cpu - loading[1],
        "main_thread_cpu_seconds": time.thread_time() - main - loading[1],
        "load_seconds": loading[0],
        "documents": report.added,
        "tokens": report.tokens,
        "window_tokens": report.window_tokens,
        "vectors": report.vectors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=Path, default=None, help="a folder of texts (default: the essays)")
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    parser.add_argument("--max-tokens", type=int, default=8192, help="extend's target length")
    parser.add_argument("--batch-tokens", type=int, default=16384, help="padded tokens per batch (a GPU's)")
    parser.add_argument("--model", default="default")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="print the cProfile of the last run")
    parser.add_argument("--json", type=Path, default=Path(__file__).with_suffix(".json"))
    args = parser.parse_args()
    source = args.texts or default_texts()
    install_stub()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        n_files = copy_texts(source, Path(tmp) / "texts", args.copies)
        run_once(Path(tmp) / "texts" / "copy-0", args.strategies[0], args, Path(tmp) / "warm-up")  # imports
        for strategy in args.strategies:
            runs = []
            for repeat in range(args.repeats):
                index = Path(tmp) / f"ix-{strategy.replace(':', '-')}-{repeat}"
                profile = cProfile.Profile() if args.profile and repeat == args.repeats - 1 else None
                if profile:
                    profile.enable()
                runs.append(run_once(Path(tmp) / "texts", strategy, args, index))
                if profile:
                    profile.disable()
                    pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
                    pstats.Stats(profile).sort_stats("tottime").print_stats(30)
            best = min(runs, key=lambda r: r["seconds"])
            rate = best["window_tokens"] / best["seconds"]
            results[strategy] = {
                **best,
                "window_tokens_per_s": round(rate),
                "tokens_read_per_s": round(best["tokens"] / best["seconds"]),
                "window_tokens_per_cpu_s": round(best["window_tokens"] / best["cpu_seconds"]),
                "seconds_all": [round(r["seconds"], 3) for r in runs],
                "median_s": round(statistics.median(r["seconds"] for r in runs), 3),
            }
            print(
                f"{strategy:12s} {best['documents']:5d} docs {best['window_tokens']:9,d} window tokens "
                f"{best['seconds']:7.2f} s  {rate:10,.0f} tok/s  "
                f"(CPU: all threads {best['cpu_seconds']:.2f} s, main thread "
                f"{best['main_thread_cpu_seconds']:.2f} s; model load {best['load_seconds']:.2f} s)"
            )
    out = {
        "command": " ".join(["python benchmarks/ingest_pipeline.py", *sys.argv[1:]]),
        "load_average": os.getloadavg(),
        "texts": os.path.relpath(source, ROOT),
        "files": n_files,
        "copies": args.copies,
        "batch_tokens": args.batch_tokens,
        "max_tokens": args.max_tokens,
        "cpus": os.cpu_count(),
        "results": results,
    }
    args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
