"""Where one long pass spends its time: ``torch.profiler`` over one extended forward pass of the
Gemma-shaped random model (the benchmark's extension section), per method.

Prints, per method: wall seconds, the number of host-device synchronisations and kernel launches,
and the top operators by device time and by host time. Used to find what to speed up in SelfExtend
(issue 38, item 4). Run after ``prepare.py`` with the same carry:

    python3 benchmarks/gpu/profile_pass.py --carry .gpu-carry --methods pi,selfextend [--length 32768]
    python benchmarks/gpu/profile_pass.py --device cpu --quick      # a CPU check of the code path
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as bench  # noqa: E402  (benchmarks/gpu/run.py: site set-up, the random Gemma, the text)


def _row(e: object, device_key: str) -> str:
    device_ms, host_ms = getattr(e, device_key, 0) / 1e3, e.self_cpu_time_total / 1e3  # type: ignore[attr-defined]
    return f"{e.key[:60]:60s} {e.count:7d} {device_ms:10.2f} {host_ms:10.2f}"  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--carry", default=str(bench.REPO / ".gpu-carry"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--methods", default="pi,selfextend")
    parser.add_argument("--length", type=int, default=None)
    parser.add_argument("--top", type=int, default=14)
    parser.add_argument("--out", help="write the summary JSON here")
    parser.add_argument("--minilm", default=None)
    parser.add_argument("--wheels", default=None)
    parser.add_argument("--site", default=None)
    args = parser.parse_args(argv)
    bench.setup_site(args)
    import torch
    from torch.profiler import ProfilerActivity, profile

    sizes = dict(bench.QUICK if args.quick else bench.FULL)
    if args.length:
        sizes["length"] = args.length
    minilm = args.minilm or bench.default_minilm(Path(args.carry))
    gemma_config = Path(args.carry) / bench.GEMMA_CONFIG_NAME
    if not gemma_config.is_file():
        gemma_config = HERE / bench.GEMMA_CONFIG_NAME
    dtype_name = "bfloat16" if args.device.startswith("cuda") else "float32"
    ctx = SimpleNamespace(
        device=args.device,
        dtype=getattr(torch, dtype_name),
        dtype_name=dtype_name,
        sizes=sizes,
        minilm=minilm,
        gemma_config=gemma_config,
    )
    api = bench.ragidx_api()
    helpers = bench.bench_helpers()
    words, _ = helpers.et.load_words()
    text = bench.long_text(words, sizes["length"])
    summary: dict[str, object] = {"device": args.device, "length": sizes["length"], "methods": {}}
    with tempfile.TemporaryDirectory(prefix="ragidx-profile-") as tmp:
        gemma = bench.build_random_gemma(ctx, Path(tmp))
        for method in args.methods.split(","):
            ext = api.ExtensionConfig(method=method, target_length=sizes["length"])
            config = api.EncoderConfig(
                model=str(gemma["folder"]), device=args.device, dtype=dtype_name, batch_size=1
            )
            encoder = api.Encoder(config, extension=ext)
            tokens = encoder.tokenize(text, "document")
            window = encoder.window(tokens, 0, encoder.content_budget(tokens, extended=True))
            encoder.embed_windows([window])  # warm-up
            bench._sync(args.device)
            start = time.perf_counter()
            encoder.embed_windows([window])
            bench._sync(args.device)
            wall = time.perf_counter() - start
            activities = [ProfilerActivity.CPU] + (
                [ProfilerActivity.CUDA] if args.device.startswith("cuda") else []
            )
            with profile(activities=activities) as prof:
                encoder.embed_windows([window])
                bench._sync(args.device)
            events = prof.key_averages()
            device_key = "self_device_time_total"
            syncs = sum(
                e.count
                for e in events
                if "Synchronize" in e.key or e.key == "cudaMemcpy" or e.key == "aten::item"
            )
            launches = sum(e.count for e in events if "LaunchKernel" in e.key or "cuLaunch" in e.key)
            by_device = sorted(events, key=lambda e: getattr(e, device_key, 0), reverse=True)[: args.top]
            by_host = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[: args.top]
            print(
                f"\n=== {method} at {len(window.input_ids):,} tokens: wall {wall:.3f} s (unprofiled), "
                f"syncs/item {syncs}, kernel launches {launches}"
            )
            print(f"{'op':60s} {'calls':>7s} {'device ms':>10s} {'host ms':>10s}")
            for e in by_device:
                print(_row(e, device_key))
            print("-- by host time")
            for e in by_host:
                print(_row(e, device_key))
            summary["methods"][method] = {  # type: ignore[index]
                "wall_s": round(wall, 4),
                "syncs": syncs,
                "launches": launches,
                "top_device": [
                    [e.key, e.count, round(getattr(e, device_key, 0) / 1e3, 2)] for e in by_device
                ],
                "top_host": [[e.key, e.count, round(e.self_cpu_time_total / 1e3, 2)] for e in by_host],
            }
            del encoder
            bench._free(args.device)
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
