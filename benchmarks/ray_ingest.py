"""Ray vs single-process ingest: tokens/s on the same folder, same model, in one run.

Ingests the first ``--limit`` files of ``--docs`` (default: 30 Paul Graham essays) twice into fresh
indexes: once with the local engine (one process, torch on every core) and once with
``--engine ray`` (a local Ray instance, ``--workers`` CPU encoder actors with one torch thread per
CPU they hold, or ``--gpus-per-worker`` GPU actors). Throughput is model window tokens per wall
second of the whole ingest (reading, embedding, commit); for Ray the embedding job and the
single-process commit step are also shown apart. Ray's own start-up (``ray.init``) is timed but
not counted; actor start-up (process, imports, model load) is counted, as a user pays it. Both
indexes are checked to hold the same vectors. On a 2-core machine expect near parity: the ratio
is Ray's overhead.

    python benchmarks/ray_ingest.py                    # 30 essays, default model, 2 workers
    python benchmarks/ray_ingest.py --limit 10 --json
    python benchmarks/ray_ingest.py --gpus-per-worker 1 --workers 1 --device cuda   # one GPU actor
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
# the evaluation data beside the checkout (../shared/data), or $RAGIDX_EVAL_DATA, as for ragidx eval
DATA = Path(os.environ.get("RAGIDX_EVAL_DATA", ROOT.parent / "shared" / "data"))
ESSAYS = DATA / "paul_graham_essays" / "essays"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=ESSAYS if ESSAYS.is_dir() else ROOT / "examples/docs")
    parser.add_argument("--limit", type=int, default=30, help="files of --docs to use (0: all)")
    parser.add_argument("--model", default="default")
    parser.add_argument("--device", default="cpu", help="local engine and Ray actors: cpu | cuda")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--gpus-per-worker", type=float, default=0.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import ray

    from ragidx.config import RagidxConfig
    from ragidx.index.directory import Index
    from ragidx.ingestion.pipeline import ingest
    from ragidx.ingestion.ray_engine import ingest_ray

    config = RagidxConfig().override(model={"model": args.model, "device": args.device})
    with tempfile.TemporaryDirectory(prefix="ragidx-ray-bench-") as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        files = sorted(p for p in args.docs.iterdir() if p.is_file())
        for path in files[: args.limit or None]:
            shutil.copy(path, docs / path.name)
        started = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        ray_init = time.perf_counter() - started
        local = ingest(docs, Path(tmp) / "local", config)
        distributed = ingest_ray(
            docs, Path(tmp) / "ray", config, workers=args.workers, gpus_per_worker=args.gpus_per_worker
        )
        ray.shutdown()
        a, b = Index.open(Path(tmp) / "local"), Index.open(Path(tmp) / "ray")
        vids = np.sort(a.store.vids())
        same_ids = bool(np.array_equal(vids, np.sort(b.store.vids())))
        max_diff = float(np.abs(a.vectors_of(vids) - b.vectors_of(vids)).max()) if same_ids else float("nan")
    local_tps = local.window_tokens / local.seconds
    ray_tps = distributed.window_tokens / distributed.seconds
    result = {
        "documents": local.added,
        "window_tokens": local.window_tokens,
        "model": args.model,
        "device": args.device,
        "cpus": os.cpu_count(),
        "local": {"seconds": round(local.seconds, 2), "tokens_per_second": round(local_tps, 1)},
        "ray": {
            "workers": distributed.workers,
            "gpus_per_worker": args.gpus_per_worker,
            "seconds": round(distributed.seconds, 2),
            "tokens_per_second": round(ray_tps, 1),
            "ray_job_seconds": round(distributed.embed_seconds, 2),
            "commit_step_seconds": round(distributed.seconds - distributed.embed_seconds, 2),
            "ray_init_seconds_not_counted": round(ray_init, 2),
        },
        "ray_over_local": round(ray_tps / local_tps, 3),
        "same_vector_ids": same_ids,
        "max_vector_difference": max_diff,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['documents']} documents, {result['window_tokens']:,} window tokens, model {args.model}")
    print(f"local  : {local.seconds:7.1f} s  {local_tps:8.0f} tokens/s (1 process, {os.cpu_count()} CPUs)")
    job, commit = distributed.embed_seconds, distributed.seconds - distributed.embed_seconds
    print(
        f"ray    : {distributed.seconds:7.1f} s  {ray_tps:8.0f} tokens/s ({distributed.workers} actors: "
        f"job {job:.1f} s + commit step {commit:.1f} s; ray.init {ray_init:.1f} s not counted)"
    )
    print(f"ray / local throughput: {result['ray_over_local']:.3f}x")
    print(f"same vector ids: {same_ids}, max vector difference {max_diff:.2e}")


if __name__ == "__main__":
    main()
