"""Encode throughput: ragidx's ``Encoder`` against sentence-transformers, side by side.

Both systems load the same model folder on the same device in float32 (ragidx's own default on
CUDA would be bfloat16), in one process, and embed exactly the same inputs with the same batch
size. Two scenarios are timed:

1. **Mixed lengths** – ``--n-texts`` texts (default 256) whose lengths are spread log-uniformly
   from 16 to ``--max-len`` tokens (default 500, special tokens included): short queries,
   paragraphs and near-window documents, cut from the English files in ``examples/docs``
   (seeded, so every run sees the same texts). ragidx runs ``encoder.embed(texts, role="document")``
   (token-length sort, batches packed by ``batch_size`` and ``max_batch_tokens``);
   sentence-transformers runs ``model.encode(texts, batch_size=…, normalize_embeddings=True)``
   with ``max_seq_length`` raised to ragidx's window (512), so neither side truncates.
2. **Long documents** – 16 documents of about 2,000 tokens. ragidx tokenizes each once, cuts it
   into 512-token windows (``tokenize``, ``content_budget``, ``window``) and embeds them with
   ``embed_windows``; sentence-transformers encodes the same chunks as text, obtained by decoding
   each window's content tokens with the tokenizer (decoding happens before timing). When the
   decoded text re-tokenizes differently, the difference is reported, never hidden.

In the mixed scenario the script checks that the inputs really are the same: per-text token
counts from the tokenizer, ragidx's windows and sentence-transformers' own preprocessing must
agree (else it exits 1), and the minimum cosine between the two systems' embeddings must exceed
0.9999 (else it prints the table and exits 1). The long-document scenario reports its minimum
cosine without enforcing it: chunks that re-tokenize differently are different inputs.

Each system gets one untimed warm-up pass per scenario (its output feeds the cosine check), then
``--repeats`` timed passes, interleaved (ragidx, ST, ragidx, ST, …) so both share the machine's
noise. Throughput is real tokens per second: special tokens included, padding excluded, counted
once with the tokenizer (identical for both systems in the mixed scenario; in the long-document
scenario each side's own count, which differ only where decoded text re-tokenizes differently).
The ratio is ragidx / sentence-transformers throughput on median times (> 1: ragidx faster).
``cpu s`` is the process CPU time (all threads) of a pass: near ``threads x wall`` when the cores
were ours, near ``wall`` when something else was using them.

Run from the repository root::

    python benchmarks/encode_throughput.py                  # defaults: ~2-3 minutes on 2 CPU cores
    python benchmarks/encode_throughput.py --json           # one JSON object instead of the table
    python benchmarks/encode_throughput.py --device cuda --batch-size 64 --repeats 5
    python benchmarks/encode_throughput.py --model /path/to/sentence-transformers/folder

Needs ``sentence-transformers`` (the ``test`` extra). The hub is never contacted
(``HF_HUB_OFFLINE=1``): ``--model`` must be the bundled default or something ragidx resolves
offline (a local folder, ``$RAGIDX_MODELS/<name>``, a hub id already in the local cache).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from ragidx.embed.encoder import Encoder, Window

DOCS_DIR = Path(__file__).resolve().parent.parent / "examples" / "docs"
SEED = 1234
MIN_LEN = 16
LONG_DOCS = 16
LONG_DOC_TOKENS = 2000
MIN_COSINE = 0.9999


# ----------------------------------------------------------------------------- results
@dataclass
class Timing:
    """Wall-clock seconds of every timed pass of one system in one scenario."""

    tokens: int
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)  # process CPU time, all threads

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def as_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "seconds": [round(s, 4) for s in self.seconds],
            "cpu_seconds": [round(s, 4) for s in self.cpu_seconds],
            "best_s": round(self.best, 4),
            "median_s": round(self.median, 4),
            "tokens_per_s_median": round(self.tokens / self.median, 1),
            "tokens_per_s_best": round(self.tokens / self.best, 1),
        }


@dataclass
class Scenario:
    """One timed comparison and the checks that make it a fair one."""

    name: str
    description: str
    ragidx: Timing
    st: Timing
    checks: dict[str, Any]

    @property
    def ratio(self) -> float:
        """ragidx / ST throughput on median times (each side's own token count)."""
        return (self.ragidx.tokens / self.ragidx.median) / (self.st.tokens / self.st.median)

    def as_dict(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "checks": self.checks,
            "ragidx": self.ragidx.as_dict(),
            "sentence_transformers": self.st.as_dict(),
            "ratio_ragidx_over_st": round(self.ratio, 3),
        }


# ----------------------------------------------------------------------------- texts
def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # examples/docs holds a cp1252 file on purpose
        return raw.decode("cp1252")


def load_words(docs_dir: Path = DOCS_DIR) -> tuple[list[str], list[int]]:
    """English words of the example ``.txt``/``.md`` files, and where each sentence starts."""
    files = sorted([*docs_dir.glob("*.txt"), *docs_dir.glob("*.md")])
    if not files:
        raise SystemExit(f"error: no .txt/.md files in {docs_dir} to build texts from")
    words: list[str] = []
    starts: list[int] = []
    for path in files:
        text = _read_text(path)
        text = re.sub(r"[#*`>|]+", " ", text)  # markdown markup is not prose
        text = re.sub(r"^\s*[-+]\s+", " ", text, flags=re.MULTILINE)
        for sentence in re.split(r"(?<=[.!?])\s+|\n\s*\n", text):
            sentence_words = sentence.split()
            if len(sentence_words) >= 3:
                starts.append(len(words))
                words.extend(sentence_words)
    return words, starts


class TextMaker:
    """Deterministic English texts of a given token length, cut from a word stream."""

    def __init__(self, encoder: Encoder, rng: random.Random):
        self.encoder = encoder
        self.rng = rng
        self.words, self.starts = load_words()
        probe = encoder.tokenize("", "document")
        self.overhead = encoder.window_size - encoder.content_budget(probe)  # specials + prompt

    def content_tokens(self, text: str) -> int:
        return len(self.encoder.tokenize(text, "document"))

    def make(self, total_tokens: int) -> str:
        """A text of at most ``total_tokens`` model tokens (specials and prompt included),
        as close to it as whole words allow, starting at a random sentence."""
        target = max(total_tokens - self.overhead, 1)
        start = self.rng.choice(self.starts)
        stream = (self.words[start:] + self.words) * (1 + 4 * target // len(self.words))
        lo, hi = 1, min(len(stream), 4 * target)  # a word is at least one token
        while lo < hi:  # the most words whose tokens fit the target
            mid = (lo + hi + 1) // 2
            if self.content_tokens(" ".join(stream[:mid])) <= target:
                lo = mid
            else:
                hi = mid - 1
        return " ".join(stream[:lo])


def mixed_lengths(n: int, low: int, high: int, rng: random.Random) -> list[int]:
    """Token lengths spread log-uniformly over [low, high] (as many short texts as long ones
    per doubling), with both ends always present."""
    if n == 1:
        return [high]
    lengths = [round(math.exp(rng.uniform(math.log(low), math.log(high)))) for _ in range(n - 2)]
    lengths += [low, high]
    rng.shuffle(lengths)
    return lengths


# ----------------------------------------------------------------------------- timing
def run_interleaved(
    systems: dict[str, Callable[[], np.ndarray]], repeats: int, device: str
) -> tuple[dict[str, Timing], dict[str, np.ndarray]]:
    """One warm-up pass per system, then ``repeats`` timed rounds, systems interleaved.

    Returns each system's wall and CPU seconds (token counts filled in by the caller) and its
    warm-up output (used for the agreement checks)."""
    import torch

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    outputs: dict[str, np.ndarray] = {}
    for name, fn in systems.items():  # warm-up (kernels, allocator, thread pool); untimed
        outputs[name] = fn()
    sync()
    timings = {name: Timing(tokens=0) for name in systems}
    for _ in range(repeats):
        for name, fn in systems.items():
            gc.collect()
            sync()
            cpu, start = time.process_time(), time.perf_counter()
            fn()
            sync()
            timings[name].seconds.append(time.perf_counter() - start)
            timings[name].cpu_seconds.append(time.process_time() - cpu)
    return timings, outputs


def st_encode(st: SentenceTransformer, texts: Sequence[str], prompt: str, batch_size: int) -> np.ndarray:
    """sentence-transformers' side of every comparison: same prompt, batch size, normalisation."""
    return st.encode(
        list(texts),
        prompt=prompt,
        batch_size=batch_size,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.min(np.sum(a * b, axis=1)))


def st_token_counts(st: SentenceTransformer, texts: Sequence[str], prompt: str) -> list[list[int]]:
    """The input ids sentence-transformers itself builds for each text (its own preprocessing)."""
    ids: list[list[int]] = []
    for i in range(0, len(texts), 64):
        batch = list(texts[i : i + 64])
        if hasattr(st, "preprocess"):  # sentence-transformers >= 5.2
            features = st.preprocess(batch, prompt=prompt)
        else:
            features = st.tokenize([(prompt or "") + t for t in batch])
        for row, mask in zip(features["input_ids"], features["attention_mask"], strict=True):
            ids.append(row[mask.bool()].tolist())
    return ids


def ragidx_batches(encoder: Encoder, windows: Sequence[Window]) -> int:
    """How many forward passes ragidx's packing makes (reads a private helper; untimed)."""
    order = sorted(range(len(windows)), key=lambda i: len(windows[i].input_ids), reverse=True)
    return len(encoder._batches(order, windows))


# ----------------------------------------------------------------------------- scenarios
def scenario_mixed(
    encoder: Encoder, st: SentenceTransformer, args: argparse.Namespace, prompt: str
) -> Scenario:
    rng = random.Random(SEED)
    maker = TextMaker(encoder, rng)
    texts = [maker.make(n) for n in mixed_lengths(args.n_texts, MIN_LEN, args.max_len, rng)]

    # Count tokens once with the tokenizer, then check both systems see exactly those tokens.
    full = [encoder.prompts["document"] + t for t in texts]
    counts = [len(ids) for ids in encoder.tokenizer(full, add_special_tokens=True)["input_ids"]]
    windows = []
    for text in texts:
        tokens = encoder.tokenize(text, "document")
        windows.append(encoder.window(tokens, 0, encoder.content_budget(tokens)))
    ragidx_counts = [len(w.input_ids) for w in windows]
    st_counts = [len(ids) for ids in st_token_counts(st, texts, prompt)]
    if not counts == ragidx_counts == st_counts:
        bad = sum(not (a == b == c) for a, b, c in zip(counts, ragidx_counts, st_counts, strict=True))
        raise SystemExit(f"error: token counts differ between tokenizer, ragidx and ST for {bad} texts")
    tokens = sum(counts)

    def run_ragidx() -> np.ndarray:
        vectors, truncated = encoder.embed(texts, role="document")
        if truncated:
            raise SystemExit(f"error: ragidx truncated {truncated} texts")
        return vectors

    def run_st() -> np.ndarray:
        return st_encode(st, texts, prompt, args.batch_size)

    timings, outputs = run_interleaved({"ragidx": run_ragidx, "st": run_st}, args.repeats, args.device)
    timings["ragidx"].tokens = timings["st"].tokens = tokens
    cosine = min_cosine(outputs["ragidx"], outputs["st"])
    checks = {
        "texts": len(texts),
        "tokens_min": min(counts),
        "tokens_median": int(statistics.median(counts)),
        "tokens_max": max(counts),
        "token_counts_match": True,
        "min_cosine": cosine,
        "min_cosine_ok": cosine > MIN_COSINE,
        "ragidx_batches": ragidx_batches(encoder, windows),
        "st_batches": math.ceil(len(texts) / args.batch_size),
    }
    description = (
        f"{len(texts)} texts, {min(counts)}-{max(counts)} tokens "
        f"(median {checks['tokens_median']}), {tokens:,} tokens in all"
    )
    return Scenario("mixed", description, timings["ragidx"], timings["st"], checks)


def scenario_long(
    encoder: Encoder, st: SentenceTransformer, args: argparse.Namespace, prompt: str
) -> Scenario:
    rng = random.Random(SEED + 1)
    maker = TextMaker(encoder, rng)
    docs = [maker.make(LONG_DOC_TOKENS + maker.overhead) for _ in range(LONG_DOCS)]

    def cut(doc: str) -> list[Window]:
        tokens = encoder.tokenize(doc, "document")
        budget = encoder.content_budget(tokens)
        return [encoder.window(tokens, s, s + budget) for s in range(0, len(tokens), budget)]

    windows = [w for doc in docs for w in cut(doc)]
    tail = len(encoder.suffix_ids)  # content_start already skips leading specials and the prompt
    chunks = [
        encoder.tokenizer.decode(w.input_ids[w.content_start : len(w.input_ids) - tail]) for w in windows
    ]
    ragidx_ids = [w.input_ids for w in windows]
    st_ids = st_token_counts(st, chunks, prompt)
    ragidx_tokens = sum(len(ids) for ids in ragidx_ids)
    st_tokens = sum(len(ids) for ids in st_ids)
    # Lengths of the decoded chunks re-tokenized, before ST cuts anything at its max_seq_length.
    st_untruncated = st_token_counts_untruncated(encoder, chunks)
    length_diffs = [n - len(ids) for n, ids in zip(st_untruncated, ragidx_ids, strict=True)]

    def run_ragidx() -> np.ndarray:
        return encoder.embed_windows([w for doc in docs for w in cut(doc)])

    def run_st() -> np.ndarray:
        return st_encode(st, chunks, prompt, args.batch_size)

    timings, outputs = run_interleaved({"ragidx": run_ragidx, "st": run_st}, args.repeats, args.device)
    timings["ragidx"].tokens, timings["st"].tokens = ragidx_tokens, st_tokens
    checks = {
        "documents": len(docs),
        "doc_tokens_median": int(statistics.median(len(encoder.tokenize(d, "document")) for d in docs)),
        "windows": len(windows),
        "ragidx_tokens": ragidx_tokens,
        "st_tokens": st_tokens,
        "chunks_same_ids": sum(a == b for a, b in zip(ragidx_ids, st_ids, strict=True)),
        "chunks_same_length": sum(d == 0 for d in length_diffs),
        "chunks_longer_after_decode": sum(d > 0 for d in length_diffs),
        "chunks_shorter_after_decode": sum(d < 0 for d in length_diffs),
        "chunks_truncated_by_st": sum(n > encoder.window_size for n in st_untruncated),
        "min_cosine": min_cosine(outputs["ragidx"], outputs["st"]),
        "ragidx_batches": ragidx_batches(encoder, windows),
        "st_batches": math.ceil(len(chunks) / args.batch_size),
    }
    description = (
        f"{len(docs)} docs x ~{checks['doc_tokens_median']:,} tokens -> {len(windows)} windows "
        f"of <= {encoder.window_size} tokens, {ragidx_tokens:,} tokens in all"
    )
    return Scenario(
        "long_documents",
        description,
        timings["ragidx"],
        timings["st"],
        checks,
    )


def st_token_counts_untruncated(encoder: Encoder, chunks: Sequence[str]) -> list[int]:
    """Token counts of the decoded chunks before any truncation (to spot ST cutting them)."""
    full = [encoder.prompts["document"] + c for c in chunks]
    return [len(ids) for ids in encoder.tokenizer(full, add_special_tokens=True, verbose=False)["input_ids"]]


# ----------------------------------------------------------------------------- report
def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def print_table(env: dict[str, Any], scenarios: Sequence[Scenario]) -> None:
    print("ragidx vs sentence-transformers: encode throughput")
    print(f"model    {env['model']} (window {env['window']}, dtype {env['dtype']})")
    print(
        f"machine  {env['device']} | {env['cpu']} | cpu_count {env['cpu_count']} | "
        f"torch threads {env['torch_threads']}"
    )
    print(
        f"versions torch {env['torch']} | transformers {env['transformers']} | "
        f"sentence-transformers {env['sentence_transformers']} | python {env['python']}"
    )
    print(
        f"run      batch size {env['batch_size']} both (ragidx max_batch_tokens "
        f"{env['max_batch_tokens']}) | 1 warm-up + {env['repeats']} timed passes each, interleaved"
    )
    for sc in scenarios:
        c = sc.checks
        print()
        print(f"[{sc.name}] {sc.description}")
        if sc.name == "mixed":
            print(
                f"  checks: token counts tokenizer == ragidx == ST: yes | min cosine {c['min_cosine']:.7f}"
                f" | forward passes ragidx {c['ragidx_batches']}, ST {c['st_batches']}"
            )
        else:
            print(
                f"  checks: decoded chunks re-tokenized: "
                f"{c['chunks_same_length']}/{c['windows']} same length, "
                f"{c['chunks_longer_after_decode']} longer, {c['chunks_shorter_after_decode']} shorter, "
                f"{c['chunks_truncated_by_st']} over the window (cut by ST); "
                f"{c['chunks_same_ids']}/{c['windows']} identical ids"
            )
            print(
                f"          tokens ragidx {c['ragidx_tokens']:,} vs ST {c['st_tokens']:,} | "
                f"min cosine {c['min_cosine']:.7f} | forward passes ragidx {c['ragidx_batches']}, "
                f"ST {c['st_batches']}"
            )
        print(
            f"  {'system':<22}{'tokens':>9}{'best s':>9}{'median s':>10}{'cpu s med':>11}"
            f"{'tok/s med':>11}{'tok/s best':>12}  all passes s"
        )
        for label, t in (("ragidx", sc.ragidx), ("sentence-transformers", sc.st)):
            print(
                f"  {label:<22}{t.tokens:>9,}{t.best:>9.3f}{t.median:>10.3f}"
                f"{statistics.median(t.cpu_seconds):>11.3f}"
                f"{t.tokens / t.median:>11,.0f}{t.tokens / t.best:>12,.0f}  "
                + " ".join(f"{x:.2f}" for x in t.seconds)
            )
        print(f"  ratio ragidx / ST (tok/s on medians): {sc.ratio:.3f}x")
    peak = max(t.tokens / t.best for sc in scenarios for t in (sc.ragidx, sc.st))
    print()
    print(
        f"hardware note: measured peak on this machine {peak:,.0f} tok/s ({env['device']}, "
        f"{env['torch_threads']} threads); measured numbers only, no theoretical hardware limit implied."
    )


# ----------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default="default", help="'default' (bundled MiniLM) or a local folder")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass, both systems")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per system and scenario")
    parser.add_argument("--n-texts", type=int, default=256, help="texts in the mixed-length scenario")
    parser.add_argument("--max-len", type=int, default=500, help="longest mixed text, in tokens")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.repeats < 1 or args.n_texts < 1:
        parser.error("--batch-size, --repeats and --n-texts must be at least 1")
    if args.max_len < MIN_LEN:
        parser.error(f"--max-len must be at least {MIN_LEN}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers / huggingface_hub are imported

    import sentence_transformers
    import torch
    import transformers
    from huggingface_hub.utils import disable_progress_bars
    from sentence_transformers import SentenceTransformer

    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder
    from ragidx.errors import RagidxError

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    disable_progress_bars()  # "Loading weights" bars
    try:
        encoder = Encoder(
            EncoderConfig(model=args.model, device=args.device, dtype="float32", batch_size=args.batch_size)
        )
    except RagidxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.max_len > encoder.window_size:
        print(
            f"error: --max-len {args.max_len} exceeds the {encoder.window_size}-token window", file=sys.stderr
        )
        return 2
    st = SentenceTransformer(str(encoder.folder.path), device=args.device)
    st.max_seq_length = encoder.window_size  # the model folder may say less (MiniLM: 256)
    # The same document prompt for both; "" (not None) so ST never falls back to a default prompt.
    prompt = encoder.prompts["document"]

    scenarios = [scenario_mixed(encoder, st, args, prompt), scenario_long(encoder, st, args, prompt)]

    env: dict[str, Any] = {
        "model": encoder.folder.name,
        "model_path": str(encoder.folder.path),
        "window": encoder.window_size,
        "dtype": str(encoder.dtype).removeprefix("torch."),
        "device": str(encoder.device),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "python": platform.python_version(),
        "batch_size": args.batch_size,
        "max_batch_tokens": encoder.max_batch_tokens,
        "repeats": args.repeats,
    }
    if args.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(encoder.device)
    mixed_cosine = scenarios[0].checks["min_cosine"]
    if args.json:
        print(json.dumps({"env": env, "scenarios": {sc.name: sc.as_dict() for sc in scenarios}}, indent=2))
    else:
        print_table(env, scenarios)
    if mixed_cosine <= MIN_COSINE:
        print(f"FAIL: min cosine {mixed_cosine} <= {MIN_COSINE}: the two systems disagree", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
