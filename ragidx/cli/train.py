"""``ragidx train``: contrastive fine-tuning of an encoder ragidx loads, or (``--objective rerank``)
training a cross-encoder for reranking (:mod:`ragidx.train`).

Flags override the ``[train]`` table of ``--config`` (keys: :class:`ragidx.train.config.TrainConfig`).
Prints a progress bar with the loss and the time left, and at the end where the model went and how
to use it (``--json``: one object instead).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichBar

from ragidx.cli.console import err, handle_errors, out, plain
from ragidx.errors import ConfigError


@handle_errors
def train_command(
    data: Annotated[
        Path,
        typer.Argument(
            help="A pairs file (.jsonl: query, positive, optional negatives, optional source) or a "
            "folder of documents (inverse-cloze pairs are made from it).",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Folder for the trained model (and training/ in it).")
    ],
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Start from this encoder (default: 'default').")
    ] = None,
    objective: Annotated[
        str | None,
        typer.Option(
            help="embed: a bi-encoder (the default) | rerank: a cross-encoder, one score per query-passage "
            "pair (sentence-transformers' CrossEncoder)."
        ),
    ] = None,
    rerank_loss: Annotated[
        str | None,
        typer.Option(
            "--rerank-loss",
            help="With --objective rerank: bce (positives 1, hard negatives 0; the default) | mnrl "
            "(listwise, in-batch and hard negatives).",
        ),
    ] = None,
    pooling: Annotated[str | None, typer.Option(help="mean | cls | lmk (landmark pooling).")] = None,
    landmark_every: Annotated[
        str | None, typer.Option("--landmark-every", help="LMK granularity g, or 'variable' (32/64/128/256).")
    ] = None,
    positions: Annotated[
        str | None,
        typer.Option(help="none | pi: extend an APE model's positions by PI and train only the new rows."),
    ] = None,
    target_length: Annotated[
        int | None, typer.Option("--target-length", help="With --positions pi: the window to reach (4096).")
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Optimiser steps (200).")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Queries per step (16).")] = None,
    mini_batch_size: Annotated[
        int | None, typer.Option("--mini-batch-size", help="Cached loss: embed in mini-batches of this size.")
    ] = None,
    negatives: Annotated[
        int | None, typer.Option(help="Hard negatives per query (1; mined if missing).")
    ] = None,
    document_tokens: Annotated[
        int | None,
        typer.Option(
            "--document-tokens",
            help="Cut positives and negatives to this (default: window); rerank: the query-passage pair.",
        ),
    ] = None,
    learning_rate: Annotated[
        float | None, typer.Option("--lr", help="Learning rate (2e-5; 5e-4 with --positions pi).")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of every random draw (0).")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda.")] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="TOML file with a [train] table.", show_default=False),
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the checkpoint in --output.")] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a model already in --output.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Fine-tune an encoder contrastively (InfoNCE with in-batch and hard negatives) so that one vector
    per long document works better: mean, CLS or landmark (LMK) pooling, and position tuning for
    APE models (only the rows PI adds learn; inputs within the original window embed exactly as
    before). The result is a sentence-transformers folder that --model takes anywhere in ragidx.
    With --objective rerank it trains a cross-encoder instead, from the same pairs and mined
    negatives: a folder sentence_transformers.CrossEncoder loads, for reranking.

    Examples:  ragidx train pairs.jsonl -o my-model --pooling lmk --landmark-every variable ;
    ragidx train ./docs -o my-model --steps 300 ;  ragidx train pairs.jsonl -o my-model-4k
    --positions pi --target-length 4096 ;  then  ragidx ingest ./docs --model my-model ;
    ragidx train pairs.jsonl -o my-reranker --objective rerank
    """
    from ragidx.config import describe_problems
    from ragidx.train.config import TrainConfig
    from ragidx.train.trainer import train

    flags = {
        "model": model,
        "objective": objective,
        "rerank_loss": rerank_loss,
        "pooling": pooling,
        "landmark_every": _granularity(landmark_every),
        "positions": positions,
        "target_length": target_length,
        "steps": steps,
        "batch_size": batch_size,
        "mini_batch_size": mini_batch_size,
        "negatives": negatives,
        "document_tokens": document_tokens,
        "learning_rate": learning_rate,
        "seed": seed,
        "device": device,
    }
    settings = {**_read_config(config), **{k: v for k, v in flags.items() if v is not None}}
    try:
        train_config = TrainConfig.model_validate(settings)
    except ValidationError as exc:
        raise ConfigError("\n".join(describe_problems(exc, TrainConfig))) from None
    show = not (quiet or as_json) and err.is_terminal
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("steps  loss {task.fields[loss]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with RichBar(*columns, console=err, transient=True, disable=not show) as bar:
        task = bar.add_task("training", total=train_config.steps, loss="–")

        def step(done: int, total: int, loss: float) -> None:
            bar.update(task, completed=done, loss=f"{loss:.3f}")

        def status(message: str) -> None:
            if not (quiet or as_json):
                err.print(plain(message), highlight=False)

        result = train(
            train_config, data, output, resume=resume, overwrite=overwrite, on_step=step, on_status=status
        )
    summary = {
        "objective": train_config.objective,
        "model": str(result.output),
        "record": str(result.record),
        "steps": result.steps,
        "pairs": result.pairs,
        "seconds": round(result.seconds, 1),
        "first_loss": round(result.losses[0], 4) if result.losses else None,
        "last_loss": round(result.losses[-1], 4) if result.losses else None,
    }
    if as_json:
        out.print_json(json.dumps(summary))
        return
    out.print(
        f"trained {result.steps} steps on {result.pairs:,} pairs in {result.seconds:.0f} s "
        f"(loss {summary['first_loss']} → {summary['last_loss']}); model in {plain(str(result.output))}",
        highlight=False,
    )
    folder = plain(str(result.output))
    if train_config.objective == "rerank":
        out.print(f"use it:  sentence_transformers.CrossEncoder({folder!r}).predict(pairs)", highlight=False)
    else:
        out.print(f"use it:  ragidx ingest ./docs --model {folder}", highlight=False)


def _granularity(value: str | None) -> int | str | None:
    if value is None or value == "variable":
        return value
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"--landmark-every {value!r}: give a number of tokens or 'variable'") from None


def _read_config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config ({exc})") from exc
    table = data.get("train", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [train] must be a table")
    return table
