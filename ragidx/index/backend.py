"""Which code searches an index's vectors: faiss on a GPU, torch on a CUDA device, or faiss on the
CPU, chosen once per index (at its first search) from ``[index] gpu`` and what the machine offers.

Owns :func:`choose` (the rule), :class:`SearchBackend` (the choice, and the ``search_backend``
label that ``ragidx info``, ``query --json`` and the server's ``/info`` show), :func:`machine`
(what faiss and torch see here) and :func:`expected` (the choice as ``ragidx info`` predicts it
without importing torch or faiss).

The rule, for ``gpu = "auto"`` (the default) and ``"always"``:

1. **faiss-gpu** when faiss has GPU support and sees a GPU: a GPU clone of the index, any factory
   FAISS can clone (``ragidx.index.faiss_index``; one that cannot, such as HNSW, searches on the
   CPU, or fails under ``always``).
2. **torch** on a CUDA device when the index is Flat (exact) and torch sees one:
   :class:`~ragidx.index.torch_search.TorchFlatSearch`, float32 (FAISS Flat's results) or, with
   ``[index] gpu_dtype = "float16"``, float16. This is the GPU path of every pip install on CUDA 13,
   where no faiss GPU wheel fits. IVF, HNSW, PQ and other approximate factories keep faiss on the
   CPU: their search is FAISS's own structure, which torch does not reproduce.
3. **faiss-cpu** otherwise.

``gpu = "never"`` is always faiss-cpu; ``"always"`` without a GPU path (1 or 2) is a
:class:`~ragidx.errors.ConfigError` at the first search, naming what is missing.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ragidx.errors import ConfigError
from ragidx.index.config import FaissConfig

__all__ = ["Machine", "SearchBackend", "choose", "expected", "machine"]

BackendName = Literal["faiss-gpu", "torch", "faiss-cpu"]
NO_FAISS_GPU = "faiss has no GPU support or no GPU is visible"


@dataclass(frozen=True)
class Machine:
    """What the search can run on here."""

    faiss_gpus: int  # GPUs faiss can use (0 where its build has no GPU support)
    cuda_devices: int  # CUDA devices torch sees (0 without a CUDA build of torch or a device)
    device_type: str = "cuda"  # the torch device type searched on (tests: cpu, through the same code)


@dataclass(frozen=True)
class SearchBackend:
    """The code that searches an index's vectors (see the module docstring)."""

    name: BackendName
    dtype: Literal["float32", "float16"] = "float32"  # torch's
    cuda_devices: int = 0  # torch's: shard i of a sharded index searches on cuda:(i % cuda_devices)
    device_type: str = "cuda"  # torch's

    @property
    def torch(self) -> bool:
        return self.name == "torch"

    @property
    def label(self) -> str:
        """What ``search_backend`` says: ``faiss-gpu``, ``faiss-cpu``, ``torch-cuda float32`` …"""
        return f"torch-{self.device_type} {self.dtype}" if self.torch else self.name

    def device(self, shard: int = 0) -> str:
        """The torch device of shard ``shard`` (``cuda`` for an index of one file)."""
        if self.cuda_devices <= 1 or self.device_type != "cuda":
            return self.device_type
        return f"cuda:{shard % self.cuda_devices}"


def choose(config: FaissConfig, exact: bool, here: Machine | None = None) -> SearchBackend:
    """The backend for an index with settings ``config`` (``exact``: its factory is Flat) on
    ``here`` (default: this machine, :func:`machine`)."""
    if config.gpu == "never":
        return SearchBackend("faiss-cpu")
    here = machine() if here is None else here
    if here.faiss_gpus > 0:
        return SearchBackend("faiss-gpu")
    if exact and here.cuda_devices > 0:
        return SearchBackend("torch", config.gpu_dtype, here.cuda_devices, here.device_type)
    if config.gpu == "always":
        if not exact and here.cuda_devices > 0:
            why = (
                f"torch searches only Flat indexes on the GPU (this one is {config.factory}); "
                'install faiss with GPU support, or set [index] gpu = "auto" to search it on the CPU'
            )
        else:
            why = (
                "torch sees no CUDA device; install faiss-gpu (CUDA 12) or a CUDA build of torch "
                '(README: GPU search), or set [index] gpu = "auto"'
            )
        raise ConfigError(f"gpu = 'always' but {NO_FAISS_GPU}, and {why}")
    return SearchBackend("faiss-cpu")


@functools.lru_cache(maxsize=1)
def machine() -> Machine:
    """What faiss and torch see on this machine (imports both; torch only where it is installed)."""
    import faiss

    faiss_gpus = faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0
    cuda = 0
    if importlib.util.find_spec("torch") is not None:
        import torch

        cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return Machine(int(faiss_gpus), int(cuda))


def expected(config: FaissConfig) -> str:
    """The ``search_backend`` a search of an index with these settings would use here, for
    ``ragidx info``, which starts without torch or faiss: where they are not imported yet, faiss
    counts as GPU-capable when a ``faiss-gpu*`` package is installed and torch as CUDA-capable when
    it is a CUDA build (not ``+cpu``/``+rocm``, with NVIDIA's CUDA runtime package beside a plain
    version), either only while an NVIDIA GPU is visible (``/proc/driver/nvidia/gpus`` or
    ``/dev/nvidia0``, and ``CUDA_VISIBLE_DEVICES`` not empty or -1). ``none (…)`` where ``gpu =
    'always'`` finds no GPU path."""
    if "faiss" in sys.modules and "torch" in sys.modules:
        here = machine()
    else:
        visible = _nvidia_visible()
        faiss_gpu = _faiss_gpus() if "faiss" in sys.modules else int(visible and _has_dist("faiss-gpu"))
        cuda = _torch_cuda() if "torch" in sys.modules else int(visible and _torch_cuda_build())
        here = Machine(faiss_gpu, cuda)
    exact = config.factory == "Flat"
    try:
        return choose(config, exact, here).label
    except ConfigError:
        return "none (gpu = 'always' and no GPU path here)"


def _faiss_gpus() -> int:
    import faiss

    return int(faiss.get_num_gpus()) if hasattr(faiss, "StandardGpuResources") else 0


def _torch_cuda() -> int:
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _nvidia_visible() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return (gpus.is_dir() and any(gpus.iterdir())) or Path("/dev/nvidia0").exists()


def _has_dist(prefix: str) -> bool:
    """Whether an installed distribution's name starts with ``prefix``."""
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith(prefix):
            return True
    return False


def _torch_cuda_build() -> bool:
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return False
    local = version.partition("+")[2]
    if local:
        return local.startswith("cu")
    return _has_dist("nvidia-cuda-runtime")
