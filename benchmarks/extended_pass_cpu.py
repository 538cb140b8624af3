"""One extended EmbeddingGemma pass on the CPU, float32 against bfloat16: time, where it goes, and
whether the vector holds (issue 27, item 2).

For each method (``--methods``, default NTK and SelfExtend), length (``--lengths``, default 16,384)
and dtype (float32, the default path, and bfloat16, ``[model] dtype = "bfloat16"``), one process
loads ``Encoder(EncoderConfig(model=gemma, dtype=...), extension=ExtensionConfig(method, L))``,
runs a warm-up pass (600 tokens, then ``L_o + 64`` through the extended path), and times one pass of
``L`` random token ids (seeded; ``Encoder.embed_windows``, tokenizing not measured) under
``torch.profiler``. The profile is grouped into what the issue asks about: projections and MLP
(``aten::linear``/``addmm``/``mm``/``matmul``/``bmm``), attention kernels (SDPA / flash for CPU), the
rotary re-rotation and position work (``mul``/``cat``/``neg``/``sin``/``cos``… on the rotary path,
counted as "elementwise"), and the rest. Cosine of each bfloat16 vector to the float32 one of the
same method and length is the quality check (a bfloat16 pass is "unchanged" at cosine ≥ 0.99).
Peak memory: the pass's resident-set high-water mark above the RSS before it (``clear_refs``, as in
``extension_memory.py``). With glibc's default allocator a freed buffer may stay in the heap, so
this is an upper bound of the pass's own need; ``--memory`` runs the children as
``extension_memory.py`` does (every large buffer mmapped and returned on free) for steady peaks, at
the cost of slower passes, so take times from a run without it. ``top_ops``: the eight operators
with the most self CPU time, as shares.

Run from the repository root (a quiet machine: the ratios are only as good as the cores are free)::

    python ../shared/models/fetch.py gemma                      # once
    python benchmarks/extended_pass_cpu.py                       # ~12 minutes on 2 cores
    python benchmarks/extended_pass_cpu.py --lengths 8192 --methods ntk --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS = Path(os.environ.get("RAGIDX_MODELS", Path.home() / ".cache" / "ragidx" / "models"))

_GROUPS = {
    "linear": ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::bmm"),
    "attention": ("attention", "sdpa", "_scaled_dot_product"),
}


def _group(name: str) -> str:
    lower = name.lower()
    for group, keys in _GROUPS.items():
        if any(key.lower() in lower for key in keys):
            return group
    return "other"


def _reset_peak() -> int | None:
    """Reset the kernel's resident-set high-water mark and return the current RSS (bytes); None
    where /proc/self/clear_refs cannot be written (not Linux): no memory figure then."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _status("VmRSS")
    except OSError:
        return None


def _peak() -> int:
    return _status("VmHWM")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise OSError(f"no {field} in /proc/self/status")


def one_pass(model: str, method: str, length: int, dtype: str, out: Path, threads: int) -> dict[str, Any]:
    """Run in a child process: one timed, profiled pass; its vector saved to ``out`` (.npy)."""
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ragidx.embed.config import EncoderConfig, ExtensionConfig
    from ragidx.embed.encoder import Encoder, Window

    torch.set_num_threads(threads)
    encoder = Encoder(
        EncoderConfig(model=model, device="cpu", dtype=dtype),  # type: ignore[arg-type]
        extension=ExtensionConfig(method=method, target_length=length),  # type: ignore[arg-type]
    )
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (length,), generator=generator).tolist()
    original = encoder.window_size
    for n in (600, min(length, original + 64)):
        encoder.embed_windows([Window(ids[:n], 1)])
    before = _reset_peak()
    started = time.perf_counter()
    cpu0 = time.process_time()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        vector = encoder.embed_windows([Window(ids, 1)])
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    peak = _peak() - before if before is not None else None
    np.save(out, vector)
    groups: dict[str, float] = {}
    ops: dict[str, float] = {}
    for event in prof.key_averages():
        if event.key.startswith("aten::") or "attention" in event.key.lower():
            group = _group(event.key)
            groups[group] = groups.get(group, 0.0) + event.self_cpu_time_total / 1e6
            ops[event.key] = event.self_cpu_time_total / 1e6
    total = sum(groups.values()) or 1.0
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:8]
    return {
        "peak_mib": None if peak is None else round(peak / 2**20),
        "top_ops": {name: round(value / total, 3) for name, value in top},
        "method": method,
        "length": length,
        "dtype": dtype,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(length / seconds, 1),
        "cpu_over_wall": round(cpu / seconds, 2),
        "share": {group: round(value / total, 3) for group, value in sorted(groups.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(MODELS / "gemma"))
    parser.add_argument("--methods", nargs="+", default=["ntk", "selfextend"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[8192, 16384, 32768])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--memory",
        action="store_true",
        help="children run with MALLOC_MMAP_THRESHOLD_=65536 (every large buffer mmapped and given back "
        "on free, as extension_memory.py does): steady peak figures, slower passes (time not comparable)",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        method, length, dtype, out, threads = args.child
        print(json.dumps(one_pass(args.model, method, int(length), dtype, Path(out), int(threads))))
        return 0
    if not Path(args.model).is_dir():
        print(f"error: {args.model}: no such model folder; run python ../shared/models/fetch.py gemma")
        return 1
    import tempfile

    import numpy as np

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for length in args.lengths:
            for method in args.methods:
                vectors: dict[str, Any] = {}
                for dtype in args.dtypes:
                    out = Path(tmp) / f"{method}-{length}-{dtype}.npy"
                    child = [sys.executable, __file__, "--model", args.model, "--child"]
                    child += [method, str(length), dtype, str(out), str(args.threads)]
                    env = {**os.environ, **({"MALLOC_MMAP_THRESHOLD_": "65536"} if args.memory else {})}
                    done = subprocess.run(child, capture_output=True, text=True, cwd=ROOT, env=env)
                    if done.returncode:
                        print(done.stderr[-2000:], file=sys.stderr)
                        return 1
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    vectors[dtype] = np.load(out)[0]
                    base = vectors.get(args.dtypes[0])
                    row["cosine_to_first"] = round(float(np.dot(base, vectors[dtype])), 5)
                    first = next((r for r in rows if (r["method"], r["length"]) == (method, length)), row)
                    row["speedup"] = round(first["seconds"] / row["seconds"], 2)
                    rows.append(row)
                    share = " ".join(f"{k} {v:.0%}" for k, v in row["share"].items())
                    print(
                        f"{method:10} {length:6} {dtype:8} {row['seconds']:7.1f} s "
                        f"{row['tokens_per_s']:6.0f} tok/s "
                        f"x{row['speedup']:.2f} cos {row['cosine_to_first']:.5f} peak {row['peak_mib']} MiB "
                        f"cpu/wall {row['cpu_over_wall']:.2f} "
                        f"[{share}]",
                        flush=True,
                    )
    if args.json:
        from encode_throughput import cpu_name  # the machine record the other benchmarks write

        machine = {"cpu": cpu_name(), "threads": args.threads, "memory_mode": args.memory}
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
