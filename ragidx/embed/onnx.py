"""ONNX Runtime for the windows the model's own window holds (``EncoderConfig.backend = "onnx"``).

The transformer is exported once per model to ONNX, with ``torch.onnx.export``, into a cache
folder outside any repository (``$RAGIDX_ONNX_CACHE``, default ``~/.cache/ragidx/onnx/<key>/``), and
run by ONNX Runtime on the CPU with its full graph optimisations (fused attention, bias + GELU,
skip + layer norm). The encoder keeps the torch model beside it: windows longer than the model's
window (context extension), TempScale (τ ≠ 1) and position-tuned models run on torch, so every
long-document policy keeps working and gives the same vectors it gives on torch for those windows.

The export is always made from a float32 CPU copy of the loaded model, whatever its dtype: a graph
traced from a bfloat16 model holds bfloat16 ``Add`` nodes, which ONNX Runtime's CPU provider cannot
run (``Could not find an implementation for Add(14)``). The cache key (:func:`cache_key`) is the
weights' fingerprint, the recipe, the dtype the loaded model had (a bfloat16 model's weights are
rounded, so its float32 copy is another model) and the torch and onnx versions that exported it.

Two precisions:

* ``float32``: the same arithmetic as torch up to operation order (minimum cosine to torch
  float32 above 0.99999 on real texts).
* ``int8``: dynamic int8 quantization (ONNX Runtime's ``quantize_dynamic``: per-channel symmetric
  int8 weights, activations quantized per batch to uint8, VNNI/AMX integer kernels) of the weight
  matrix multiplications only. Two things set it apart from the ``avx512_vnni`` model that
  sentence-transformers' ``export_dynamic_quantized_onnx_model`` writes, whose minimum cosine to
  float32 was 0.966–0.971 on essay passages with all-MiniLM-L6-v2: attention's activation ×
  activation products (QKᵀ and softmax·V) and the embedding tables stay float32, and so does each
  layer's feed-forward down-projection (intermediate → hidden, whose input after GELU has the
  widest range); see :func:`quantize` and benchmarks/README.md (``cpu_backends.py``).

A folder holding a **ready ONNX graph** and no torch weights (``ModelFolder.onnx_ready``: its
``model.onnx`` or ``model_quantized.onnx``, e.g. bge-small-en-v1.5 int8 from
``pipelines/fetch_bge_small_onnx.py``) runs on ONNX Runtime alone, whatever ``backend`` says:
:meth:`OnnxModel.ready` opens the graph as it is (its precision is read from its operators:
quantized ones make it ``int8``), the tokenizer, pooling, Dense layers, prompts and normalisation
come from the folder as for any model, and the encoder's torch model is a :class:`ReadyGraph`
stand-in holding only the transformers config. What needs torch weights fails with one line
(:func:`check_ready`, :class:`ReadyGraph`): context extension and TempScale, windows longer than the
graph's positions, a CUDA device (ragidx runs ONNX Runtime's CPU provider), bfloat16 or float16,
and any torch forward pass (training, probes).

Needs the ``onnx`` extra (``onnxruntime`` and ``onnx``); loading without it is a one-line
:class:`~ragidx.errors.ModelError` naming it.
"""

from __future__ import annotations

import copy
import importlib.metadata
import inspect
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from ragidx.errors import ModelError, first_line

if TYPE_CHECKING:
    from transformers import PreTrainedConfig, PreTrainedModel

    from ragidx.embed.config import EncoderConfig, ExtensionConfig
    from ragidx.embed.models import ModelFolder

OnnxPrecision = Literal["float32", "int8"]
# Bump when the export or the quantization recipe changes: older files are then not reused.
# 2: exported from a float32 copy, keyed by the source dtype and the torch and onnx versions.
RECIPE = 2
CACHE_ENV = "RAGIDX_ONNX_CACHE"
INSTALL_HINT = "pip install 'ragidx[onnx]' (onnxruntime and onnx), or use backend torch"
_OPSET = 17
# What a ready graph may take (ragidx feeds these) and give (token states, batch × sequence × hidden)
READY_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
READY_OUTPUTS = ("last_hidden_state", "token_embeddings")
# Operators only a quantized graph holds: a ready graph with any of them is int8
_QUANTIZED_OPS = frozenset(
    {
        "MatMulInteger",
        "DynamicQuantizeLinear",
        "DynamicQuantizeMatMul",
        "QLinearMatMul",
        "QuantizeLinear",
        "DequantizeLinear",
        "QAttention",
        "QGemm",
        "MatMulNBits",
    }
)


def cache_key(folder: ModelFolder, model: torch.nn.Module) -> str:
    """The cache folder's name for ``model`` loaded from ``folder`` (see the module docstring), e.g.
    ``<fingerprint>-r2-bfloat16-torch2.13.0-onnx1.23.2``."""
    return (
        f"{folder.fingerprint()}-r{RECIPE}-{_dtype_name(model)}"
        f"-torch{torch.__version__.split('+')[0]}-onnx{_version('onnx')}"
    )


def _dtype_name(model: torch.nn.Module) -> str:
    """The dtype of ``model``'s floating-point weights (``mixed`` when they differ)."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    return str(dtypes.pop()).removeprefix("torch.") if len(dtypes) == 1 else "mixed"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def cache_root() -> Path:
    """Where exported models live: ``$RAGIDX_ONNX_CACHE``, else ``~/.cache/ragidx/onnx``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "ragidx" / "onnx").expanduser()


class OnnxModel:
    """An ONNX Runtime session over a model's transformer: token ids and mask in, final hidden
    states out (float32 torch tensors, like the torch model's ``last_hidden_state``)."""

    def __init__(self, path: Path, precision: OnnxPrecision, threads: int | None = None) -> None:
        ort = _onnxruntime()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.log_severity_level = 3  # errors only
        self.path = path
        self.precision: OnnxPrecision = precision
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ONNX Runtime raises its own types; one line names the file
            why = first_line(exc)
            raise ModelError(f"{path}: ONNX Runtime cannot load this graph ({why})") from exc
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.output = "last_hidden_state"
        # run each window alone, without padding (a ready int8 graph: see __call__)
        self.rows_alone = False

    @classmethod
    def load(
        cls, folder: ModelFolder, model: PreTrainedModel, precision: OnnxPrecision, root: Path | None = None
    ) -> OnnxModel:
        """The session for ``folder``'s model at ``precision``, exporting (and quantizing) it into
        the cache on first use. ``model`` is the loaded torch model, exported from a float32 CPU
        copy whatever its dtype and device (see the module docstring)."""
        _onnxruntime()
        base = (root or cache_root()) / cache_key(folder, model)
        exported = base / "model.onnx"
        if not exported.is_file():
            export(model, exported)
        path = exported
        if precision == "int8":
            path = base / "model_int8.onnx"
            if not path.is_file():
                quantize(exported, path, int(getattr(model.config, "intermediate_size", 0) or 0))
        return cls(path, precision)

    @classmethod
    def ready(cls, folder: ModelFolder, dtype: str, hidden_size: int) -> OnnxModel:
        """The session over an ``onnx_ready`` folder's own graph: the first of its graphs
        (``ModelFolder.onnx_graphs``) whose precision ``dtype`` asks for (``auto``: the first).
        The graph must take ``input_ids`` and ``attention_mask`` (``token_type_ids`` optional)
        and give ``last_hidden_state`` (or ``token_embeddings``) of ``hidden_size``."""
        _onnxruntime()
        graphs = folder.onnx_graphs
        found = {path: graph_precision(path) for path in graphs}
        chosen = [path for path in graphs if dtype in ("auto", found[path])]
        if not chosen:
            have = ", ".join(f"{p.relative_to(folder.transformer_path)} ({found[p]})" for p in graphs)
            raise ModelError(f"{folder.name}: no {dtype} ONNX graph (it holds {have}); use --dtype auto")
        session = cls(chosen[0], found[chosen[0]])
        session.check_ready(hidden_size)
        session.rows_alone = session.precision == "int8"
        return session

    def check_ready(self, hidden_size: int) -> None:
        """A one-line :class:`ModelError` unless the graph's inputs and outputs are ones ragidx feeds
        and reads (see :meth:`ready`); picks the output it reads."""
        unknown = sorted(self.inputs - set(READY_INPUTS))
        missing = [name for name in READY_INPUTS[:2] if name not in self.inputs]
        if unknown or missing:
            what = f"takes {', '.join(unknown)}" if unknown else f"lacks {', '.join(missing)}"
            raise ModelError(
                f"{self.path}: the graph {what}; ragidx feeds input_ids, attention_mask and token_type_ids"
            )
        outputs = {o.name: o.shape for o in self.session.get_outputs()}
        names = [name for name in READY_OUTPUTS if name in outputs and len(outputs[name]) == 3]
        if not names:
            raise ModelError(
                f"{self.path}: no token-state output (has {', '.join(outputs)}); "
                f"ragidx reads {' or '.join(READY_OUTPUTS)} (batch × sequence × hidden)"
            )
        self.output = names[0]
        width = outputs[self.output][2]
        if isinstance(width, int) and width != hidden_size:
            raise ModelError(
                f"{self.path}: {self.output} has width {width}, config.json says hidden_size {hidden_size}"
            )

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Final hidden states of right-padded windows (zeros at padding when :attr:`rows_alone`).

        A dynamically quantized graph scales each activation by its whole input tensor, padding
        and batch mates included, so its vector of a window would move with the batch the window
        happened to be in (min cosine 0.991 on bge-small int8, passkey 512 Acc@1 52 vs 62): a
        ready int8 graph therefore runs each window alone, unpadded, and gives every window the
        vector a direct one-window run gives (as fast on a CPU: 2.5k tokens/s either way)."""
        ids = input_ids.cpu().numpy().astype(np.int64, copy=False)
        mask = attention_mask.cpu().numpy().astype(np.int64, copy=False)
        if not self.rows_alone or (len(ids) == 1 and bool(mask.all())):
            return torch.from_numpy(self._run(ids, mask))
        lengths = mask.sum(axis=1)
        rows = [
            self._run(ids[i : i + 1, : lengths[i]], mask[i : i + 1, : lengths[i]]) for i in range(len(ids))
        ]
        out = np.zeros((len(ids), ids.shape[1], rows[0].shape[-1]), dtype=np.float32)
        for i, row in enumerate(rows):
            out[i, : lengths[i]] = row[0]
        return torch.from_numpy(out)

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = self.session.run([self.output], feed)
        return np.asarray(hidden, dtype=np.float32)


def graph_precision(path: Path) -> OnnxPrecision:
    """``int8`` for a graph holding quantized operators (:data:`_QUANTIZED_OPS`), else ``float32``."""
    onnx = _onnx()
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:  # protobuf's DecodeError and friends: one line names the file
        why = first_line(exc)
        raise ModelError(f"{path}: not a readable ONNX graph ({why})") from exc
    ops = {node.op_type for node in graph.node}
    return "int8" if ops & _QUANTIZED_OPS else "float32"


class ReadyGraph(torch.nn.Module):
    """The encoder's torch model for an ``onnx_ready`` folder: the transformers config (window,
    hidden size, model type, which the encoder reads) and no weights. ONNX Runtime computes every
    vector; a torch forward pass (training, probes) is a one-line :class:`ModelError`."""

    def __init__(self, folder: ModelFolder, config: PreTrainedConfig) -> None:
        super().__init__()
        self.config = config
        self.name = folder.name
        graphs = folder.onnx_graphs
        self.graph = graphs[0].name if graphs else "an ONNX graph"

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        raise ModelError(
            f"{self.name}: holds only a ready ONNX graph ({self.graph}), no torch weights: it embeds "
            "on ONNX Runtime, but training, probes and context extension need a folder with the weights"
        )


def check_ready(folder: ModelFolder, config: EncoderConfig, extension: ExtensionConfig | None) -> None:
    """A one-line :class:`ModelError` for a setting an ``onnx_ready`` folder cannot run: a device
    other than the CPU, a torch dtype, context extension or TempScale (see the module docstring)."""
    graph = folder.onnx_graphs[0].name
    if config.device not in ("auto", "cpu"):
        try:
            import onnxruntime

            cuda = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
        except ImportError:
            cuda = False
        why = (
            "ragidx runs ready ONNX graphs on ONNX Runtime's CPU provider only"
            if cuda
            else "this onnxruntime has no CUDA execution provider"
        )
        raise ModelError(
            f"{folder.name}: holds only an ONNX graph ({graph}) and {why}; use --device cpu (or auto)"
        )
    if config.dtype not in ("auto", "float32", "int8"):
        raise ModelError(
            f"{folder.name}: holds only an ONNX graph ({graph}), which runs at its own precision, "
            f"not {config.dtype}; use --dtype auto"
        )
    if extension is not None and (extension.method != "none" or extension.uses_tau):
        what = f"context extension ({extension.method})" if extension.method != "none" else "TempScale"
        raise ModelError(
            f"{folder.name}: holds only an ONNX graph ({graph}), which runs windows within its "
            f"positions: {what} needs the torch weights; use chunk or pcw for long documents"
        )


class _Transformer(torch.nn.Module):
    """The model's forward with named tensor inputs and ``last_hidden_state`` out, for export."""

    def __init__(self, model: PreTrainedModel, token_types: bool) -> None:
        super().__init__()
        self.model = model
        self.token_types = token_types

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        extra = {"token_type_ids": token_type_ids} if self.token_types else {}
        hidden: torch.Tensor = self.model(
            input_ids=input_ids, attention_mask=attention_mask, **extra
        ).last_hidden_state
        return hidden


def export(model: PreTrainedModel, path: Path) -> None:
    """Export ``model``'s transformer to ``path`` (written to a temporary name, then renamed):
    inputs ``input_ids``, ``attention_mask`` (and ``token_type_ids`` where the model takes them),
    batch and sequence dynamic; output ``last_hidden_state``. The trace runs eager attention on a
    padded batch, so the graph masks padding whatever the loaded model's attention kernel. A model
    that is not float32 on the CPU is exported from a float32 CPU copy (``model`` is left as it is)."""
    model = float32_copy(model)
    token_types = "token_type_ids" in inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask", *(["token_type_ids"] if token_types else [])]
    ids = torch.full((2, 16), 5, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0  # a padded row: the traced mask path is the one padding takes
    args: tuple[torch.Tensor, ...] = (ids, mask, *([torch.zeros_like(ids)] if token_types else []))
    axes = {name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    config = model.config
    previous = getattr(config, "_attn_implementation", None)
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    try:
        quiet.setLevel(logging.ERROR)
        if previous is not None:
            config._attn_implementation = "eager"
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _Transformer(model, token_types).eval(),
                args,
                temporary,
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=_OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        os.replace(temporary, path)
    except Exception as exc:  # the exporter raises many types; one line names the model and the fix
        why = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ModelError(f"cannot export {type(model).__name__} to ONNX ({why}); use backend torch") from exc
    finally:
        quiet.setLevel(level)
        if previous is not None:
            config._attn_implementation = previous
        Path(temporary).unlink(missing_ok=True)


def float32_copy(model: PreTrainedModel) -> PreTrainedModel:
    """``model`` itself when every weight and buffer is float32 (or integer) on the CPU, else a
    float32 CPU copy of it (``model`` is not changed)."""
    tensors = [*model.parameters(), *model.buffers()]
    if all(
        t.device.type == "cpu" and (t.dtype == torch.float32 or not t.is_floating_point()) for t in tensors
    ):
        return model
    twin = copy.deepcopy(model)
    # transformers wraps PreTrainedModel.to in functools.wraps, whose stub type leaves self unbound
    twin.to(device="cpu", dtype=torch.float32)  # type: ignore[call-arg]
    return twin


def quantize(source: Path, path: Path, intermediate_size: int) -> None:
    """Dynamic int8 quantization of ``source`` into ``path``: the MatMuls with a constant weight
    (per-channel symmetric int8 weights, uint8 activations), except the feed-forward
    down-projections (a weight of ``intermediate_size`` rows); attention's activation products,
    the embeddings (Gather) and everything else stay float32 (see the module docstring)."""
    onnx = _onnx()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    rows = {init.name: int(init.dims[0]) for init in graph.initializer if len(init.dims) == 2}
    keep = [
        node.name
        for node in graph.node
        if node.op_type == "MatMul" and intermediate_size and rows.get(node.input[1]) == intermediate_size
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    root = logging.getLogger()  # onnxruntime's quantizer advises pre-processing on the root logger
    level = root.level
    try:
        root.setLevel(logging.ERROR)
        quantize_dynamic(
            str(source),
            temporary,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            reduce_range=False,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=keep,
            extra_options={"MatMulConstBOnly": True, "WeightSymmetric": True, "ActivationSymmetric": False},
        )
        os.replace(temporary, path)
    finally:
        root.setLevel(level)
        Path(temporary).unlink(missing_ok=True)


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise ModelError(f"backend onnx needs ONNX Runtime: {INSTALL_HINT}") from exc
    return onnxruntime


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:
        raise ModelError(f"backend onnx needs the onnx package to export: {INSTALL_HINT}") from exc
    return onnx
