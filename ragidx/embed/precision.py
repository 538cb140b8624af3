"""The CPU's default precision (``dtype = "auto"`` on a CPU): bfloat16 where it is measured faster.

Whether bfloat16 pays on a CPU is a property of its matmul kernels, not of one instruction set: on
an Intel Xeon with AMX ragidx bfloat16 ran 2.4× float32, on an AMD EPYC with AVX512-BF16 and no
AMX 1.5× (benchmarks/README.md), and on a CPU without native bfloat16 it is emulated and slower.
So :func:`cpu_bfloat16` measures it, once per CPU model and torch version:

* the **probe** (:func:`measure`) runs a MiniLM-shaped transformer layer (a window of 256 tokens,
  hidden 384, 12 heads, feed-forward 1,536; random weights, seeded) on one thread in float32 and in
  bfloat16, interleaved, and keeps each dtype's fastest pass and the minimum cosine between the two
  dtypes' token states; about 0.1–0.3 s where bfloat16 is native, a little more where it is not;
* the **rule** (:func:`decide`): bfloat16 when it is at least :data:`MIN_SPEEDUP` × as fast as
  float32 and its minimum cosine to float32 is at least :data:`MIN_COSINE` (the quality bar of
  issue 27: QMSum nDCG@10 moved by at most 0.1 with bfloat16 at min cosine 0.9999);
* the **cache**: the decision and its measurements are kept in a JSON file
  (``$RAGIDX_PRECISION_CACHE``, default ``~/.cache/ragidx/cpu_precision.json``), keyed by the CPU's
  model name and the torch version (:func:`cpu_key`), so the probe runs at the first use on a machine
  and again only after a torch upgrade; an unreadable file is measured again and rewritten.

``$RAGIDX_CPU_BFLOAT16`` = 1 or 0 overrides the probe (and skips it); ``dtype = "float32"`` or
``"bfloat16"`` in the model settings overrides both. The index manifest records the precision the
vectors were computed in (:attr:`ragidx.embed.encoder.Encoder.precision`), whichever way it was chosen.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ragidx.errors import ConfigError

CPU_BFLOAT16_ENV = "RAGIDX_CPU_BFLOAT16"
CACHE_ENV = "RAGIDX_PRECISION_CACHE"
MIN_SPEEDUP = 1.1  # bfloat16 must beat float32 by this much: a tie is not worth moving the vectors
MIN_COSINE = 0.99
# the probe's layer: all-MiniLM-L6-v2's widths, one 256-token window
TOKENS, HIDDEN, HEADS, FFN = 256, 384, 12, 1536
ROUNDS = 5

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Probe:
    """One measurement: each dtype's fastest pass of the probe layer, and the minimum cosine of the
    bfloat16 token states to the float32 ones."""

    float32_seconds: float
    bfloat16_seconds: float
    min_cosine: float

    @property
    def speedup(self) -> float:
        """float32 time over bfloat16 time (above 1: bfloat16 is faster)."""
        return self.float32_seconds / self.bfloat16_seconds if self.bfloat16_seconds > 0 else 0.0


def decide(probe: Probe) -> bool:
    """The rule (see the module docstring): bfloat16 when it is :data:`MIN_SPEEDUP` × as fast at a
    minimum cosine of :data:`MIN_COSINE`."""
    return probe.speedup >= MIN_SPEEDUP and probe.min_cosine >= MIN_COSINE


def env_switch(name: str, meaning: str) -> bool | None:
    """An on/off environment variable: True for 1/true/yes/on, False for 0/false/no/off, None when
    unset or empty; anything else is a ConfigError naming the variable (``meaning``: what 1 and 0
    do, for the message)."""
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    if value:
        raise ConfigError(f"${name} = {value!r}: use {meaning}")
    return None


def cpu_bfloat16() -> bool:
    """Whether ``dtype = "auto"`` runs bfloat16 on this CPU: ``$RAGIDX_CPU_BFLOAT16`` when set, else
    the cached decision for this CPU and torch version, else a probe (cached)."""
    switch = env_switch(CPU_BFLOAT16_ENV, "1 (bfloat16 on the CPU) or 0 (float32)")
    return cached_decision() if switch is None else switch


_decided: dict[tuple[str, str], bool] = {}  # (cache file, key) -> decision, for this process


def cached_decision(path: Path | None = None) -> bool:
    """The decision for :func:`cpu_key` from the cache file at ``path`` (default
    :func:`cache_path`), probing and recording it when the file has none."""
    path = path or cache_path()
    key = cpu_key()
    memo = (str(path), key)
    if memo in _decided:
        return _decided[memo]
    entries = _read(path)
    entry = entries.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("bfloat16"), bool):
        decision = bool(entry["bfloat16"])
    else:
        probe = measure()
        decision = decide(probe)
        entries[key] = {"bfloat16": decision, **asdict(probe), "speedup": round(probe.speedup, 3)}
        _write(path, entries)
        log.info(
            "CPU precision probe: bfloat16 %.2fx float32 at min cosine %.5f -> %s (cached in %s)",
            probe.speedup,
            probe.min_cosine,
            "bfloat16" if decision else "float32",
            path,
        )
    _decided[memo] = decision
    return decision


def cache_path() -> Path:
    """``$RAGIDX_PRECISION_CACHE``, else ``~/.cache/ragidx/cpu_precision.json``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured or Path.home() / ".cache" / "ragidx" / "cpu_precision.json").expanduser()


def cpu_key() -> str:
    """The CPU's model name and the torch version, e.g. ``AMD EPYC | torch 2.13.0+cpu``."""
    return f"{cpu_model()} | torch {torch.__version__}"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first ``model name``, else the platform's)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and value.strip():
                return " ".join(value.split())
    return platform.processor() or platform.machine() or "unknown CPU"


def _read(path: Path) -> dict[str, object]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable (%s); measuring the CPU precision again", path, exc)
        return {}
    if not isinstance(entries, dict):
        log.warning("%s: not a JSON object; measuring the CPU precision again", path)
        return {}
    return entries


def _write(path: Path, entries: dict[str, object]) -> None:
    """Replace the cache file atomically; a cache that cannot be written only costs a probe later."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(entries, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(temporary, path)
    except OSError as exc:
        log.warning("%s: cannot record the CPU precision (%s)", path, exc)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def measure(rounds: int = ROUNDS) -> Probe:
    """Run the probe layer (see the module docstring) ``rounds`` times per dtype after a warm-up."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, TOKENS, HIDDEN, generator=generator)
    weights = {
        "qkv": torch.randn(HIDDEN, 3 * HIDDEN, generator=generator) / HIDDEN**0.5,
        "out": torch.randn(HIDDEN, HIDDEN, generator=generator) / HIDDEN**0.5,
        "up": torch.randn(HIDDEN, FFN, generator=generator) / HIDDEN**0.5,
        "down": torch.randn(FFN, HIDDEN, generator=generator) / FFN**0.5,
    }
    inputs = {
        dtype: (x.to(dtype), {name: w.to(dtype) for name, w in weights.items()})
        for dtype in (torch.float32, torch.bfloat16)
    }
    best = {torch.float32: float("inf"), torch.bfloat16: float("inf")}
    states: dict[torch.dtype, torch.Tensor] = {}
    with _one_thread(), torch.inference_mode():
        for round_ in range(rounds + 1):  # round 0 warms up
            for dtype, (hidden, layer) in inputs.items():
                start = time.perf_counter()
                states[dtype] = _layer(hidden, layer)
                elapsed = time.perf_counter() - start
                if round_:
                    best[dtype] = min(best[dtype], elapsed)
    cosine = torch.nn.functional.cosine_similarity(
        states[torch.float32][0].double(), states[torch.bfloat16][0].double(), dim=-1
    )
    return Probe(best[torch.float32], best[torch.bfloat16], float(cosine.min()))


def _layer(x: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    """A post-norm BERT layer: fused attention, GELU feed-forward, residuals and layer norms."""
    batch, tokens, hidden = x.shape
    q, k, v = (x @ w["qkv"]).view(batch, tokens, 3, HEADS, hidden // HEADS).permute(2, 0, 3, 1, 4)
    attended = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    x = torch.nn.functional.layer_norm(x + attended.transpose(1, 2).reshape(x.shape) @ w["out"], (hidden,))
    ffn = torch.nn.functional.gelu(x @ w["up"]) @ w["down"]
    return torch.nn.functional.layer_norm(x + ffn, (hidden,))
