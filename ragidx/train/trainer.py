"""The training run: data → steps → checkpoints → a saved model and its record.

Two objectives share the loop: ``embed`` trains the bi-encoder with sentence-transformers' InfoNCE
(:mod:`ragidx.train.model`, :mod:`ragidx.train.loss`, saved by :mod:`ragidx.train.export`);
``rerank`` trains a cross-encoder with its cross-encoder losses (:mod:`ragidx.train.rerank`). Each is
a :class:`_Run`: the module whose weights learn, its batch's loss and gradients, its saving. The loop
around both is ragidx's own, about sixty lines, because sentence-transformers' trainer (the Hugging Face
``Trainer``) checkpoints with pickles (``training_args.bin``, ``rng_state.pth``) and ragidx loads
no pickle; here every checkpoint is safetensors plus JSON, and a run is reproducible from its seed
alone:

* one epoch's order comes from :func:`ragidx.train.data.batches` seeded with ``seed + epoch``;
* step ``t`` reseeds torch (dropout) and the PoSE/landmark draws with ``(seed, t)``, so a resumed
  run takes exactly the steps the uninterrupted run would have taken.

Output layout: the model folder itself (what ``--model`` takes) and ``training/`` inside it with
``record.json`` (data, settings, steps, seed, per-step loss, time, hardware) and ``loss.png``; while
the run is going, ``training/checkpoint/`` holds the last checkpoint, written to a temporary folder
and renamed into place, and removed once the model is saved.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from ragidx import __version__
from ragidx.embed.config import EncoderConfig
from ragidx.embed.encoder import Encoder
from ragidx.embed.models import portable
from ragidx.errors import ConfigError, InputError
from ragidx.read.document import Document
from ragidx.read.walk import iter_documents
from ragidx.train.config import TrainConfig
from ragidx.train.data import Pair, batches, cloze_pairs, jsonl_is_pairs, mine_negatives, read_pairs
from ragidx.train.export import save_model
from ragidx.train.loss import contrastive_loss
from ragidx.train.model import TrainableEncoder
from ragidx.train.rerank import RerankStep, device_of, load_cross_encoder, save_cross_encoder

TRAINING_DIR = "training"
StepCallback = Callable[[int, int, float], None]  # (step done, total steps, loss)


@dataclass
class TrainResult:
    """What a finished run left: the model folder, its record, and the per-step losses."""

    output: Path
    record: Path
    steps: int
    seconds: float
    losses: list[float]
    pairs: int


def load_examples(data: Path, config: TrainConfig, per_document: int = 8) -> list[Pair]:
    """A pairs file (``.jsonl``) as is, or a folder/file of documents turned into inverse-cloze
    pairs (``per_document`` each)."""
    if not data.exists():
        raise InputError(f"{data}: no such file or folder (give a pairs .jsonl or a folder of documents)")
    if data.is_file() and data.suffix == ".jsonl" and jsonl_is_pairs(data):
        return read_pairs(data)
    documents = [(d.doc_id, "".join(d.pieces())) for d in iter_documents(data) if isinstance(d, Document)]
    pairs = cloze_pairs(documents, per_document, config.seed)
    if len(pairs) < config.batch_size:
        raise InputError(
            f"{data}: {len(documents)} documents gave {len(pairs)} training pairs, fewer than one "
            f"batch of {config.batch_size}; add documents or lower --batch-size"
        )
    return pairs


@dataclass
class _Run:
    """What one objective trains: ``module`` (its parameters that require a gradient learn and are
    checkpointed), ``backward`` (a batch's loss, its gradients added; random draws from the step's
    ``rng``), ``save`` (the finished model into an empty folder)."""

    module: torch.nn.Module
    device: str
    backward: Callable[[list[Pair], Sequence[Pair], random.Random, int], float]  # (…, step seed)
    save: Callable[[Path], None]
    params: list[torch.nn.Parameter]


def _embed_run(config: TrainConfig, encoder: Encoder) -> _Run:
    trainable = TrainableEncoder(encoder, config)
    loss_fn = contrastive_loss(trainable, config)

    def backward(batch: list[Pair], pairs: Sequence[Pair], rng: random.Random, step_seed: int) -> float:
        trainable.generator.manual_seed(step_seed)
        if config.pooling == "lmk":
            trainable.set_granularity(rng.choice(config.granularities()))
        columns = [
            trainable.tokenize([p.query for p in batch], "query"),
            trainable.tokenize([p.positive for p in batch], "document"),
        ]
        for k in range(config.negatives):
            columns.append(trainable.tokenize([_negative(p, k, pairs, rng) for p in batch], "document"))
        loss = loss_fn(columns, None)
        loss.backward()
        return float(loss.detach())

    def save(partial: Path) -> None:
        save_model(trainable, config, partial)

    return _Run(trainable, str(encoder.device), backward, save, trainable.trainable())


def _rerank_run(config: TrainConfig) -> _Run:
    model = load_cross_encoder(config)
    step = RerankStep(model, config, _negative)

    def backward(batch: list[Pair], pairs: Sequence[Pair], rng: random.Random, step_seed: int) -> float:
        return step(batch, pairs, rng)

    def save(partial: Path) -> None:
        save_cross_encoder(model, partial)

    params = [p for p in model.parameters() if p.requires_grad]
    return _Run(model, str(model.device), backward, save, params)


def train(
    config: TrainConfig,
    data: Path,
    output: Path,
    resume: bool = False,
    overwrite: bool = False,
    on_step: StepCallback | None = None,
    on_status: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train ``config.model`` on ``data`` and save the result to ``output`` (see the module
    docstring). ``resume`` continues the checkpoint in ``output``; ``overwrite`` replaces a model
    already there."""
    say = on_status or (lambda _message: None)
    work = output / TRAINING_DIR
    checkpoint = work / "checkpoint"
    _check_output(output, checkpoint, resume, overwrite)
    _seed_everything(config.seed)
    started = time.time()
    rerank = config.objective == "rerank"
    if rerank:
        device_of(config)  # a missing CUDA fails before anything loads
    say(f"loading {config.model}" + (" as a cross-encoder" if rerank else ""))
    encoder = None if rerank else Encoder(_encoder_config(config))
    run = _rerank_run(config) if encoder is None else _embed_run(config, encoder)
    say(f"reading {data}")
    pairs = load_examples(data, config)
    # a pairs file: its bytes; a folder: the pairs made from it (its documents, as read now)
    data_sha = _sha256(data) if data.is_file() else _pairs_sha256(pairs)
    if config.negatives and any(len(p.negatives) < config.negatives for p in pairs):
        say(f"mining {config.negatives} hard negative(s) for {len(pairs)} pairs with the untrained model")
        # rerank: the start model, as a bi-encoder, mines
        miner = encoder if encoder is not None else Encoder(_encoder_config(config))
        pairs = mine_negatives(pairs, lambda texts, role: miner.embed(texts, role)[0], config.negatives)
        del miner
    params = run.params
    if not params:
        raise ConfigError("nothing to train: every weight of the model is frozen")
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    schedule = _schedule(optimizer, config)
    losses: list[float] = []
    start, elapsed = 0, 0.0
    if resume and checkpoint.is_dir():
        start, losses, elapsed = _load_checkpoint(checkpoint, run.module, optimizer, config, data_sha)
        with warnings.catch_warnings():  # fast-forwarding the schedule: no optimiser step is due
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(start):
                schedule.step()
        say(f"resuming at step {start} of {config.steps}")
    run.module.train()
    stream = _batch_stream(pairs, config)
    for _ in range(start):
        next(stream)
    clock = time.time()
    for step in range(start, config.steps):
        batch = next(stream)
        loss = _step(run, optimizer, schedule, [pairs[i] for i in batch], pairs, config, step)
        losses.append(loss)
        if on_step is not None:
            on_step(step + 1, config.steps, loss)
        if (step + 1) % config.checkpoint_every == 0 and step + 1 < config.steps:
            _save_checkpoint(
                checkpoint, run.module, optimizer, config, data_sha, losses, elapsed + time.time() - clock
            )
    seconds = elapsed + time.time() - clock
    run.module.eval()
    say(f"saving the model to {output}")
    _publish(run.save, output)
    record = _write_record(work, config, data, data_sha, pairs, losses, seconds, started, run.device)
    shutil.rmtree(checkpoint, ignore_errors=True)
    return TrainResult(output, record, len(losses), seconds, losses, len(pairs))


# ------------------------------------------------------------------------------------ set-up
def _encoder_config(config: TrainConfig) -> EncoderConfig:
    lmk = config.pooling == "lmk"
    return EncoderConfig(
        model=config.model,
        device=config.device,
        dtype="float32",  # the optimiser updates float32 weights (auto may be bfloat16 on a CPU)
        pooling=(config.pooling,),
        landmark_every=config.granularities()[0] if lmk else None,
        landmark_placement=config.landmark_placement if lmk else None,
    )


def _check_output(output: Path, checkpoint: Path, resume: bool, overwrite: bool) -> None:
    if output.exists() and not output.is_dir():
        raise ConfigError(f"{output}: is a file; --output takes a folder for the trained model")
    if resume:
        if not checkpoint.is_dir():
            raise ConfigError(f"{output}: no checkpoint to resume (start without --resume)")
        return
    if checkpoint.is_dir():
        raise ConfigError(
            f"{output}: holds an unfinished training run; add --resume to continue it, or "
            "choose another --output"
        )
    if output.is_dir() and any(output.iterdir()):
        if not overwrite:
            raise ConfigError(f"{output}: not empty; choose another --output or add --overwrite")
        shutil.rmtree(output)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _schedule(optimizer: torch.optim.Optimizer, config: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up, then linear decay to zero at the last step."""
    warmup, total = config.warmup_steps, config.steps

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _batch_stream(pairs: Sequence[Pair], config: TrainConfig) -> Iterator[list[int]]:
    epoch = 0
    while True:
        produced = False
        for batch in batches(pairs, config.batch_size, config.seed + epoch):
            produced = True
            yield batch
        if not produced:
            raise InputError(f"{len(pairs)} pairs make no batch of two from different sources")
        epoch += 1


# ------------------------------------------------------------------------------------- steps
def _step(
    run: _Run,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LambdaLR,
    batch: list[Pair],
    pairs: Sequence[Pair],
    config: TrainConfig,
    step: int,
) -> float:
    """One optimiser step on ``batch``; every random draw is seeded by ``(seed, step)``."""
    step_seed = config.seed * 1_000_003 + step
    torch.manual_seed(step_seed)
    rng = random.Random(step_seed)
    optimizer.zero_grad(set_to_none=True)
    loss = run.backward(batch, pairs, rng, step_seed)
    torch.nn.utils.clip_grad_norm_(run.params, 1.0)
    optimizer.step()
    schedule.step()
    return loss


def _negative(pair: Pair, k: int, pairs: Sequence[Pair], rng: random.Random) -> str:
    """The pair's k-th hard negative, or a random other source's positive when it has fewer."""
    if k < len(pair.negatives):
        return pair.negatives[k]
    for _ in range(100):
        other = pairs[rng.randrange(len(pairs))]
        if other.positive != pair.positive and (not pair.source or other.source != pair.source):
            return other.positive
    return pairs[rng.randrange(len(pairs))].positive


# ------------------------------------------------------------------------------- checkpoints
def _save_checkpoint(
    folder: Path,
    trainable: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
    data_sha: str,
    losses: list[float],
    seconds: float,
) -> None:
    from safetensors.torch import save_file

    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    names = [name for name, p in trainable.named_parameters() if p.requires_grad]
    params = dict(trainable.named_parameters())
    save_file({n: params[n].detach().contiguous().cpu() for n in names}, str(partial / "weights.safetensors"))
    state: dict[str, torch.Tensor] = {}
    for i, (name, _) in enumerate(zip(names, optimizer.param_groups[0]["params"], strict=True)):
        for key, value in optimizer.state[params[name]].items():
            state[f"{i}.{key}"] = torch.as_tensor(value).detach().contiguous().cpu()
    save_file(state, str(partial / "optimizer.safetensors"))
    meta = {
        "step": len(losses),
        "losses": losses,
        "seconds": seconds,
        "config": config.model_dump(mode="json"),
        "data_sha256": data_sha,
        "parameters": names,
    }
    (partial / "state.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)


def _load_checkpoint(
    folder: Path,
    trainable: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
    data_sha: str,
) -> tuple[int, list[float], float]:
    from safetensors.torch import load_file

    try:
        meta = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        weights = load_file(str(folder / "weights.safetensors"))
        state = load_file(str(folder / "optimizer.safetensors"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder}: unreadable checkpoint ({exc}); start again with --overwrite") from exc
    saved = TrainConfig.model_validate(meta["config"])
    changed = [k for k, v in config.model_dump().items() if saved.model_dump()[k] != v]
    if changed:
        raise ConfigError(
            f"{folder}: the checkpoint was trained with other settings ({', '.join(changed)}); resume "
            "with the same settings, or start again with --overwrite"
        )
    if meta.get("data_sha256", "") != data_sha:
        raise ConfigError(
            f"{folder}: the training data changed since the checkpoint; start again with --overwrite"
        )
    params = dict(trainable.named_parameters())
    with torch.no_grad():
        for name in meta["parameters"]:
            params[name].copy_(weights[name])
    optimizer_state = optimizer.state_dict()
    optimizer_state["state"] = {
        i: {key: state[f"{i}.{key}"] for key in ("step", "exp_avg", "exp_avg_sq") if f"{i}.{key}" in state}
        for i in range(len(meta["parameters"]))
    }
    optimizer.load_state_dict(optimizer_state)
    losses = [float(x) for x in meta["losses"]]
    return int(meta["step"]), losses, float(meta["seconds"])


# ------------------------------------------------------------------------------------ output
def _publish(save: Callable[[Path], None], output: Path) -> None:
    """Write the model into ``output`` beside ``training/``: saved to a temporary folder, moved in
    file by file, ``modules.json`` last (a folder without it is not a finished model)."""
    partial = output / ".model.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    save(partial)
    entries = sorted(partial.iterdir(), key=lambda p: p.name == "modules.json")
    for entry in entries:
        target = output / entry.name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(entry, target)
    partial.rmdir()


def _recorded_path(data: Path) -> str:
    """The training data as the record names it: a relative path as given (relative to where
    ``ragidx train`` ran, so a record committed with the data beside it names no machine's
    folders), an absolute one with the home directory as ``~``."""
    return str(data) if not data.is_absolute() else portable(str(data))


def _write_record(
    work: Path,
    config: TrainConfig,
    data: Path,
    data_sha: str,
    pairs: Sequence[Pair],
    losses: list[float],
    seconds: float,
    started: float,
    device: str,
) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    record = {
        "ragidx": __version__,
        "model": portable(config.model),
        "data": {
            "path": _recorded_path(data),
            "sha256": data_sha,
            "pairs": len(pairs),
            "with_negatives": sum(bool(p.negatives) for p in pairs),
        },
        "config": {**config.model_dump(mode="json"), "model": portable(config.model)},
        "steps": len(losses),
        "seconds": round(seconds, 1),
        "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "hardware": {
            "device": device,
            "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        "loss": [round(x, 5) for x in losses],
    }
    path = work / "record.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    _plot_loss(losses, work / "loss.png", config)
    return path


def _plot_loss(losses: list[float], path: Path, config: TrainConfig) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(losses) + 1), losses, lw=0.8, alpha=0.5, label="per step")
    window = max(1, len(losses) // 20)
    if len(losses) >= window > 1:
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
        ax.plot(range(window, len(losses) + 1), smooth, lw=1.6, label=f"mean of {window}")
    ax.set_xlabel("step")
    if config.objective == "rerank":
        ax.set_ylabel(f"{config.rerank_loss.upper()} loss")
        ax.set_title(f"ragidx train: cross-encoder (rerank), {config.rerank_loss} loss")
    else:
        ax.set_ylabel("InfoNCE loss")
        ax.set_title(f"ragidx train: {config.pooling} pooling, positions {config.positions}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _pairs_sha256(pairs: Sequence[Pair]) -> str:
    """The sha256 of training pairs (query, positive, negatives, source of each, in order)."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(json.dumps([pair.query, pair.positive, list(pair.negatives), pair.source]).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
