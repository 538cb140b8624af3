"""CPU speed against what users would pick: ragidx's CPU paths against sentence-transformers'
backends and fastembed, on the same model, texts and batch size, in one process.

Rows (``--systems`` picks some; all by default):

* ``ragidx-float32``: torch, float32, ``max_batch_tokens`` 2048 on CPU (the cosine reference);
* ``ragidx-bfloat16``: ``dtype = "bfloat16"`` on torch (AVX512-BF16 / AMX where the CPU has them);
* ``ragidx-auto``: ragidx's default, ``dtype = "auto"``: what the CPU probe
  (:mod:`ragidx.embed.precision`) chose on this machine, bfloat16 or float32 (its note says which);
* ``ragidx-onnx-float32`` / ``ragidx-onnx-int8``: ``backend = "onnx"`` (ragidx.embed.onnx);
* ``st-torch``: ``SentenceTransformer(folder).encode`` (torch, float32);
* ``st-torch-bfloat16``: the same in bfloat16 (``SentenceTransformer(folder, model_kwargs={"dtype":
  torch.bfloat16})``), where the CPU has native bfloat16 (AVX512-BF16 or AMX, or ragidx's probe
  found bfloat16 faster): sentence-transformers' best dtype there, so the fair peer of ragidx's
  bfloat16 (column ``× st-bf16``);
* ``st-onnx``: sentence-transformers' pipeline (tokenize, batch, pool, normalise) over an ONNX
  Runtime session of the same exported ``model.onnx`` ragidx runs, which is what ``backend="onnx"``
  does through optimum's ``ORTModelForFeatureExtraction``. optimum-onnx (0.1.0, the newest)
  requires transformers < 4.58 while sentence-transformers 6 requires transformers 5, so the
  backend itself cannot be installed beside them; the row puts the session in its place;
* ``st-onnx-int8``: the same over the model ``export_dynamic_quantized_onnx_model(model,
  "avx512_vnni")`` writes: onnxruntime's ``ONNXQuantizer`` with optimum's
  ``AutoQuantizationConfig.avx512_vnni(is_static=False)`` settings (per-channel symmetric int8
  weights, uint8 activations, every op in onnxruntime's dynamic registry: every MatMul, the
  attention products included, and the embedding Gathers);
* ``fastembed``: ``TextEmbedding`` with ``specific_model_path`` on a local folder holding the same
  ``model.onnx`` and the model's tokenizer (offline: nothing is downloaded);
* ``<ragidx row>@<N>``: that ragidx row with ``max_batch_tokens`` N instead of the default (e.g.
  ``ragidx-onnx-int8@16384``: plain batches of ``--batch-size`` for these passages), the batch
  sweep that decides the CPU default;
* diagnostics (``--diagnostics``): ``ragidx-float32-b16k`` (``ragidx-float32@16384`` by its older
  name), ``ragidx-bfloat16-unfused`` (``RAGIDX_CPU_FUSED=0``: the model's own forward instead of
  ragidx.embed.fused_bert, what the fused forward gains) and ``st-torch-own-msl`` (sentence-transformers at
  the folder's own ``max_seq_length``, 256 for all-MiniLM-L6-v2: it truncates longer texts and so
  embeds fewer tokens, counted as it embeds them).

Every system but ``st-torch-own-msl`` sees the same tokens: sentence-transformers' ``max_seq_length``
is raised to ragidx's window and the document prompt is passed to every system, and the script
checks that the per-text token counts agree. Columns: tokens/s (real tokens, padding excluded,
median of the timed passes), the ratios to ``st-torch`` and (where it ran) ``st-torch-bfloat16``,
and the minimum and mean cosine of each system's vectors to ``ragidx-float32``'s on the same texts.
A warm-up pass per system comes first (untimed; its vectors give the cosines), then ``--repeats``
rounds, systems interleaved.
``cpu/wall`` is process CPU time over wall time of the timed passes: near the thread count when
the cores were ours, lower when something else ran.

Texts: ``--n-texts`` passages of 150–360 words cut at random (seeded) from the Paul Graham essays
(``--essays``, default ../shared/data/paul_graham_essays/essays), and with ``--mixed`` also the
log-uniform 16–500-token texts of encode_throughput.py. ONNX files are written under
``$RAGIDX_ONNX_CACHE`` (default ~/.cache/ragidx/onnx), never into the repository.

    python benchmarks/cpu_backends.py --models ~/.cache/ragidx/models/minilm ~/.cache/ragidx/models/e5-small
    python benchmarks/cpu_backends.py --models default --n-texts 256 --repeats 0 \\
        --systems ragidx-float32,ragidx-onnx-int8        # quality only, on more texts

Needs the ``test`` extra (sentence-transformers, onnxruntime, onnx) and optionally fastembed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # encode_throughput's mixed texts

REPO = Path(__file__).resolve().parent.parent
ESSAYS = REPO.parent / "shared" / "data" / "paul_graham_essays" / "essays"
SYSTEMS = (
    "ragidx-float32",
    "ragidx-bfloat16",
    "ragidx-auto",
    "ragidx-onnx-float32",
    "ragidx-onnx-int8",
    "st-torch",
    "st-torch-bfloat16",
    "st-onnx",
    "st-onnx-int8",
    "fastembed",
)
DIAGNOSTICS = ("ragidx-float32-b16k", "ragidx-bfloat16-unfused", "st-torch-own-msl")
REFERENCE = "ragidx-float32"
QUALITY_BAR = 0.99  # minimum cosine to float32 a path must keep (issue 27)


@dataclass
class Row:
    name: str
    run: Callable[[Sequence[str]], np.ndarray]
    counts: Callable[[Sequence[str]], list[int]]  # real tokens per text as this system embeds them
    note: str = ""
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    vectors: np.ndarray | None = None
    tokens: int = 0
    settings: tuple[tuple[Any, ...], dict[str, Any]] = ((), {})  # ragidx rows: how to rebuild them


# ----------------------------------------------------------------------------- texts
def essay_passages(folder: Path, n: int, seed: int) -> list[str]:
    """``n`` passages of 150–360 consecutive words from the essays, seeded."""
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise SystemExit(f"error: no essays in {folder} (--essays)")
    words = [path.read_text(encoding="utf-8", errors="replace").split() for path in files]
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        doc = words[rng.randrange(len(words))]
        size = rng.randint(150, 360)
        if len(doc) < size:
            continue
        start = rng.randrange(len(doc) - size + 1)
        out.append(" ".join(doc[start : start + size]))
    return out


def mixed_texts(encoder: Any, n: int, seed: int) -> list[str]:
    from encode_throughput import MIN_LEN, TextMaker, mixed_lengths

    rng = random.Random(seed)
    maker = TextMaker(encoder, rng)
    return [maker.make(k) for k in mixed_lengths(n, MIN_LEN, min(500, encoder.window_size), rng)]


# ----------------------------------------------------------------------------- systems
def ragidx_encoder(model: str, batch: int, fused: bool = True, **settings: Any) -> Any:
    """A ragidx ``Encoder`` on the CPU (``fused=False``: ``RAGIDX_CPU_FUSED=0``, the model's own
    forward instead of ragidx.embed.fused_bert); also the GPU benchmark's ``host_cpu`` section's."""
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import CPU_FUSED_ENV, Encoder

    before = os.environ.get(CPU_FUSED_ENV)
    os.environ[CPU_FUSED_ENV] = "1" if fused else "0"  # read when the encoder is made
    try:
        return Encoder(EncoderConfig(model=model, device="cpu", batch_size=batch, **settings))
    finally:
        if before is None:
            del os.environ[CPU_FUSED_ENV]
        else:
            os.environ[CPU_FUSED_ENV] = before


def ragidx_row(name: str, model: str, batch: int, fused: bool = True, **settings: Any) -> Row:
    encoder = ragidx_encoder(model, batch, fused, **settings)

    def counts(texts: Sequence[str]) -> list[int]:
        out = []
        for text in texts:
            tokens = encoder.tokenize(text, "document")
            out.append(len(encoder.window(tokens, 0, encoder.content_budget(tokens)).input_ids))
        return out

    note = f"precision {encoder.precision}, max_batch_tokens {encoder.max_batch_tokens}"
    row = Row(name, lambda texts: encoder.embed(texts, role="document")[0], counts, note)
    row.settings = ((model, batch), settings)
    return row


def _with_budget(factory: Callable[[], Row | str], name: str, budget: int) -> Callable[[], Row | str]:
    """A ragidx row's factory with ``max_batch_tokens = budget``: the row is rebuilt from its
    encoder's settings under the new name."""

    def make() -> Row | str:
        made = factory()
        if isinstance(made, str):
            return made
        return ragidx_row(name, *made.settings[0], **{**made.settings[1], "max_batch_tokens": budget})

    return make


def _ort_auto_model(path: Path, config: Any, threads: int) -> Any:
    """What optimum's ``ORTModelForFeatureExtraction`` is to sentence-transformers: the
    transformer's call, run by an ONNX Runtime session (torch tensors in and out)."""
    import onnxruntime as ort
    import torch

    class OrtAutoModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            self.inputs = {i.name for i in self.session.get_inputs()}
            self.config = config

        def forward(self, **features: Any) -> dict[str, Any]:
            feed = {k: v.cpu().numpy() for k, v in features.items() if k in self.inputs}
            if "token_type_ids" in self.inputs and "token_type_ids" not in feed:
                feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
            (hidden,) = self.session.run(["last_hidden_state"], feed)
            return {"last_hidden_state": torch.from_numpy(hidden)}

    return OrtAutoModel()


def st_rows(model: Path, window: int, prompt: str, batch: int, onnx_dir: Path, wanted: set[str]) -> list[Row]:
    import torch
    from sentence_transformers import SentenceTransformer

    rows = []

    def make(name: str, onnx_file: Path | None, own_length: bool, note: str, bfloat16: bool = False) -> Row:
        kwargs = {"model_kwargs": {"dtype": torch.bfloat16}} if bfloat16 else {}
        st = SentenceTransformer(str(model), device="cpu", **kwargs)
        own = st.max_seq_length
        st.max_seq_length = own if own_length else window
        if onnx_file is not None:
            st[0].model = _ort_auto_model(onnx_file, st[0].model.config, torch.get_num_threads())

        def run(texts: Sequence[str]) -> np.ndarray:
            return np.asarray(
                st.encode(
                    list(texts),
                    prompt=prompt,
                    batch_size=batch,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                )
            )

        def counts(texts: Sequence[str]) -> list[int]:
            features = st.preprocess([prompt + t for t in texts])
            return [int(m.sum()) for m in features["attention_mask"]]

        return Row(name, run, counts, f"{note}; max_seq_length {st.max_seq_length} (folder: {own})")

    if "st-torch" in wanted:
        rows.append(make("st-torch", None, False, "torch float32"))
    if "st-torch-bfloat16" in wanted and native_bfloat16():
        rows.append(make("st-torch-bfloat16", None, False, "torch bfloat16", bfloat16=True))
    if "st-onnx" in wanted:
        rows.append(make("st-onnx", onnx_dir / "model.onnx", False, "ONNX Runtime float32"))
    if "st-onnx-int8" in wanted:
        rows.append(make("st-onnx-int8", st_int8_model(onnx_dir), False, "ONNX Runtime qint8 avx512_vnni"))
    if "st-torch-own-msl" in wanted:
        rows.append(make("st-torch-own-msl", None, True, "torch float32"))
    return rows


def st_int8_model(onnx_dir: Path) -> Path:
    """``model_qint8_avx512_vnni.onnx`` as sentence-transformers' export writes it (see the
    module docstring), from the same ``model.onnx``."""
    path = onnx_dir / "model_qint8_avx512_vnni.onnx"
    if path.is_file():
        return path
    import logging

    import onnx
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer
    from onnxruntime.quantization.quant_utils import QuantizationMode
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    logging.getLogger().setLevel(logging.ERROR)
    quantizer = ONNXQuantizer(
        onnx.load(str(onnx_dir / "model.onnx")),
        True,  # per_channel: avx512_vnni's default
        False,  # reduce_range
        QuantizationMode.IntegerOps,
        False,  # static
        QuantType.QInt8,  # weights
        QuantType.QUInt8,  # activations
        None,
        [],
        [],
        list(IntegerOpsRegistry.keys()),
        {
            "WeightSymmetric": True,
            "ActivationSymmetric": False,
            "EnableSubgraph": False,
            "ForceSymmetric": False,
        },
    )
    quantizer.quantize_model()
    temporary = path.with_suffix(".tmp")
    quantizer.model.save_model_to_file(str(temporary))
    os.replace(temporary, path)
    return path


def fastembed_row(model: Path, onnx_dir: Path, prompt: str, batch: int, threads: int) -> Row | str:
    """fastembed from a local folder (the same model.onnx and the model's tokenizer files), or why not."""
    try:
        from fastembed import TextEmbedding
        from fastembed.common.model_description import ModelSource, PoolingType
    except ImportError as exc:
        return f"fastembed not installed ({exc})"
    local = onnx_dir / "fastembed"
    local.mkdir(exist_ok=True)
    for name in ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"):
        if (model / name).is_file():
            shutil.copyfile(model / name, local / name)
    if not (local / "model.onnx").exists():
        os.link(onnx_dir / "model.onnx", local / "model.onnx")
    name = f"ragidx-bench/{onnx_dir.name}"
    known = {m["model"] for m in TextEmbedding.list_supported_models()}
    if name not in known:
        TextEmbedding.add_custom_model(
            model=name,
            pooling=PoolingType.MEAN,
            normalization=True,
            sources=ModelSource(hf=name),
            dim=384,
            model_file="model.onnx",
        )
    try:
        embedder = TextEmbedding(name, specific_model_path=str(local), threads=threads, lazy_load=False)
    except Exception as exc:  # any failure to start offline is the answer
        return f"fastembed did not start offline from {local}: {str(exc).splitlines()[0]}"
    tokenizer = embedder.model.tokenizer  # type: ignore[attr-defined]

    def run(texts: Sequence[str]) -> np.ndarray:
        return np.stack(list(embedder.embed([prompt + t for t in texts], batch_size=batch)))

    def counts(texts: Sequence[str]) -> list[int]:
        return [sum(e.attention_mask) for e in tokenizer.encode_batch([prompt + t for t in texts])]

    return Row(
        "fastembed", run, counts, f"fastembed custom mean+normalize model, max_length {tokenizer.truncation}"
    )


# ----------------------------------------------------------------------------- machine
def native_bfloat16() -> bool:
    """Whether this CPU has native bfloat16 matmuls: AVX512-BF16 or AMX, or (other architectures)
    ragidx's probe found bfloat16 faster than float32."""
    import torch

    from ragidx.embed.precision import decide, measure

    flags = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    if any(bool(getattr(torch.cpu, flag, lambda: False)()) for flag in flags):
        return True
    return decide(measure())


def machine() -> dict[str, Any]:
    import torch

    flags: list[str] = []
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name in ("", "x86_64"):
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = [
                    f
                    for f in line.split(":", 1)[1].split()
                    if f.startswith(("avx512", "amx")) or f in ("avx2", "avx_vnni", "fma")
                ]
                break
    except OSError:
        pass
    import sentence_transformers
    import transformers

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    versions["sentence-transformers"] = sentence_transformers.__version__
    for package in ("onnxruntime", "fastembed"):
        try:
            versions[package] = __import__(package).__version__
        except ImportError:
            versions[package] = None
    from ragidx.embed.precision import measure

    probe = measure()
    return {
        "cpu": name,
        "cpu_count": os.cpu_count(),
        "native_bfloat16": native_bfloat16(),
        "precision_probe": {
            "float32_s": round(probe.float32_seconds, 5),
            "bfloat16_s": round(probe.bfloat16_seconds, 5),
            "speedup": round(probe.speedup, 3),
            "min_cosine": round(probe.min_cosine, 6),
        },
        "torch_threads": torch.get_num_threads(),
        "flags": flags,
        "load_average_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "versions": versions,
    }


# ----------------------------------------------------------------------------- run
def measure(rows: list[Row], texts: Sequence[str], repeats: int) -> None:
    for row in rows:  # warm-up; its vectors give the cosines
        row.vectors = row.run(texts)
        row.tokens = sum(row.counts(texts))
    for _ in range(repeats):
        for row in rows:
            wall, cpu = time.perf_counter(), time.process_time()
            row.run(texts)
            row.seconds.append(time.perf_counter() - wall)
            row.cpu.append(time.process_time() - cpu)


def table(title: str, rows: list[Row], reference: Row, threads: int) -> tuple[str, list[dict[str, Any]]]:
    base = next((r for r in rows if r.name == "st-torch" and r.seconds), None)
    half = next((r for r in rows if r.name == "st-torch-bfloat16" and r.seconds), None)
    lines = [
        title,
        f"  {'system':22s} {'tokens':>7s} {'tok/s':>7s} {'× st-torch':>10s} {'× st-bf16':>9s} "
        f"{'min cos':>8s} {'mean cos':>8s} {'cpu/wall':>8s}  passes s",
    ]
    out = []
    for row in rows:
        assert row.vectors is not None and reference.vectors is not None
        # normalised again: a bfloat16 system's unit vectors are unit only to bfloat16's precision
        ours = row.vectors / np.linalg.norm(row.vectors, axis=1, keepdims=True)
        theirs = reference.vectors / np.linalg.norm(reference.vectors, axis=1, keepdims=True)
        cos = np.sum(ours * theirs, axis=1)
        median = statistics.median(row.seconds) if row.seconds else None
        speed = row.tokens / median if median else None
        ratio = speed / (base.tokens / statistics.median(base.seconds)) if speed and base else None
        ratio_half = speed / (half.tokens / statistics.median(half.seconds)) if speed and half else None
        busy = sum(row.cpu) / sum(row.seconds) if row.seconds else None
        lines.append(
            f"  {row.name:22s} {row.tokens:7,d} {speed or 0:7,.0f} {ratio or 0:10.2f} {ratio_half or 0:9.2f} "
            f"{cos.min():8.4f} {cos.mean():8.4f} {busy or 0:8.2f}  "
            + " ".join(f"{s:.2f}" for s in row.seconds)
        )
        out.append(
            {
                "system": row.name,
                "note": row.note,
                "tokens": row.tokens,
                "seconds": [round(s, 4) for s in row.seconds],
                "cpu_seconds": [round(s, 4) for s in row.cpu],
                "tokens_per_s_median": round(speed, 1) if speed else None,
                "ratio_to_st_torch": round(ratio, 3) if ratio else None,
                "ratio_to_st_torch_bfloat16": round(ratio_half, 3) if ratio_half else None,
                "min_cosine_to_float32": round(float(cos.min()), 6),
                "mean_cosine_to_float32": round(float(cos.mean()), 6),
                "cpu_over_wall": round(busy, 2) if busy else None,
                "holds_quality_bar": bool(cos.min() >= QUALITY_BAR),
            }
        )
    lines.append(f"  (cpu/wall of {threads} means the {threads} threads had the cores to themselves)")
    return "\n".join(lines), out


def run_model(model_arg: str, args: argparse.Namespace, wanted: list[str]) -> tuple[str, dict[str, Any]]:
    import torch

    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder
    from ragidx.embed.onnx import OnnxModel

    reference = Encoder(
        EncoderConfig(model=model_arg, device="cpu", batch_size=args.batch_size, dtype="float32")
    )
    folder = reference.folder
    onnx_dir = OnnxModel.load(folder, reference.model, "float32").path.parent  # the cached export
    prompt = reference.prompts["document"]
    scenarios = {"essays": essay_passages(args.essays, args.n_texts, args.seed)}
    if args.mixed:
        scenarios["mixed"] = mixed_texts(reference, args.n_texts, args.seed)
    b = args.batch_size
    factories: dict[str, Callable[[], Row | str]] = {
        "ragidx-float32": lambda: ragidx_row("ragidx-float32", model_arg, b, dtype="float32"),
        "ragidx-bfloat16": lambda: ragidx_row("ragidx-bfloat16", model_arg, b, dtype="bfloat16"),
        "ragidx-auto": lambda: ragidx_row("ragidx-auto", model_arg, b),
        "ragidx-onnx-float32": lambda: ragidx_row("ragidx-onnx-float32", model_arg, b, backend="onnx"),
        "ragidx-onnx-int8": lambda: ragidx_row(
            "ragidx-onnx-int8", model_arg, b, backend="onnx", dtype="int8"
        ),
        "ragidx-bfloat16-unfused": lambda: ragidx_row(
            "ragidx-bfloat16-unfused", model_arg, b, fused=False, dtype="bfloat16"
        ),
        "ragidx-float32-b16k": lambda: ragidx_row(
            "ragidx-float32-b16k", model_arg, b, max_batch_tokens=16384
        ),
        "fastembed": lambda: fastembed_row(folder.path, onnx_dir, prompt, b, torch.get_num_threads()),
    }
    for name in wanted:  # <ragidx row>@<max_batch_tokens>
        base, at, budget = name.partition("@")
        if at and base in factories and base.startswith("ragidx-"):
            factories[name] = _with_budget(factories[base], name, int(budget))
    rows: list[Row] = []
    skipped: dict[str, str] = {}
    st_wanted = {w for w in wanted if w.startswith("st-")}
    st_made = {r.name: r for r in st_rows(folder.path, reference.window_size, prompt, b, onnx_dir, st_wanted)}
    for name in wanted:
        made = st_made.get(name) if name.startswith("st-") else factories[name]()
        if made is None and name == "st-torch-bfloat16":
            made = "no native bfloat16 on this CPU (AVX512-BF16, AMX): emulated, slower than float32"
        if isinstance(made, str):
            skipped[name] = made
        elif made is not None:
            rows.append(made)
    if REFERENCE not in [r.name for r in rows]:
        raise SystemExit(f"error: {REFERENCE} is the cosine reference; keep it in --systems")
    report = [f"model {folder.name} ({folder.path}), window {reference.window_size}, prompt {prompt!r}"]
    result: dict[str, Any] = {
        "model": folder.name,
        "path": str(folder.path),
        "window": reference.window_size,
        "onnx_dir": str(onnx_dir),
        "skipped": skipped,
        "scenarios": {},
    }
    for scenario, texts in scenarios.items():
        for row in rows:
            row.seconds, row.cpu = [], []
        measure(rows, texts, args.repeats)
        same = {r.name: r.counts(texts) for r in rows if r.name != "st-torch-own-msl"}
        agree = len({tuple(c) for c in same.values()}) == 1
        ref = next(r for r in rows if r.name == REFERENCE)
        title = (
            f"[{scenario}] {len(texts)} texts, batch {b}, {ref.tokens:,} tokens; token counts "
            f"agree across systems: {'yes' if agree else 'NO ' + str({k: sum(v) for k, v in same.items()})}"
        )
        text, data = table(title, rows, ref, torch.get_num_threads())
        report.append(text)
        result["scenarios"][scenario] = {"texts": len(texts), "token_counts_agree": agree, "rows": data}
    for name, why in skipped.items():
        report.append(f"  {name}: not run: {why}")
    return "\n".join(report), result


def portable_paths(text: str) -> str:
    """Paths in the committed JSON as they read on any machine: the repository's relative, its
    neighbours as ``../…``, the home folder as ``~``."""
    for local, shown in ((f"{REPO}/", ""), (f"{REPO.parent}/", "../"), (str(Path.home()), "~")):
        text = text.replace(local, shown)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["default"])
    parser.add_argument("--essays", type=Path, default=ESSAYS)
    parser.add_argument("--n-texts", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (0: vectors and cosines only)")
    parser.add_argument("--mixed", action="store_true", help="also encode_throughput.py's mixed-length texts")
    parser.add_argument("--diagnostics", action="store_true", help=f"add {', '.join(DIAGNOSTICS)}")
    parser.add_argument("--systems", help=f"comma-separated subset of {', '.join(SYSTEMS + DIAGNOSTICS)}")
    parser.add_argument("--json", type=Path, help="write the results here (default: print the path only)")
    parser.add_argument("--threads", type=int, help="threads for every system (default: torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)  # ragidx's ONNX sessions, st-onnx and fastembed follow it
    wanted = list(SYSTEMS + (DIAGNOSTICS if args.diagnostics else ()))
    if args.systems:
        wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
        known = set(SYSTEMS + DIAGNOSTICS)
        unknown = {
            w
            for w in wanted
            if w not in known
            and not (
                w.partition("@")[0] in known and w.startswith("ragidx-") and w.partition("@")[2].isdigit()
            )
        }
        if unknown:
            parser.error(f"unknown systems {sorted(unknown)}")
    started = time.perf_counter()
    cpu_started = time.process_time()
    info = machine()
    print("ragidx CPU backends: tokens/s on the same texts, model and batch, interleaved in one process")
    print(
        f"machine  {info['cpu']} | cpu_count {info['cpu_count']} | torch threads {info['torch_threads']} | "
        f"load average at start {' '.join(f'{x:.2f}' for x in info['load_average_start'])}"
    )
    print(f"flags    {' '.join(info['flags'])}")
    print("versions " + " | ".join(f"{k} {v}" for k, v in info["versions"].items()))
    results = []
    for model in args.models:
        text, result = run_model(model, args, wanted)
        print()
        print(text)
        results.append(result)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    info["load_average_end"] = list(os.getloadavg())
    info["process_cpu_s"] = round(cpu, 1)
    info["wall_s"] = round(wall, 1)
    print(
        f"\nrun: {wall:.0f} s wall, {cpu:.0f} s process CPU "
        f"({cpu / wall:.2f} of {info['torch_threads']} threads); "
        f"load average at end {' '.join(f'{x:.2f}' for x in info['load_average_end'])}"
    )
    payload = {"machine": info, "args": {k: str(v) for k, v in vars(args).items()}, "models": results}
    if args.json:
        args.json.write_text(portable_paths(json.dumps(payload, indent=1)))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
