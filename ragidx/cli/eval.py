"""``ragidx eval``: LongEmbed-style evaluation of long-document strategies; ``eval grid`` runs a TOML
grid (``pipelines/``); ``eval compare`` tabulates result folders next to LongEmbed's Table 2."""

from __future__ import annotations

import json
import os
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichBar
from rich.table import Table

from ragidx.cli.console import err, handle_errors, out, plain
from ragidx.cli.options import BackendName, Device, DType, Json
from ragidx.config import describe_problems
from ragidx.errors import ConfigError
from ragidx.evaluate.grid import EvalGrid
from ragidx.evaluate.report import EvalResults, compare_rows, table_rows, task_title
from ragidx.evaluate.tasks import DATA_ENV

CACHE_ENV = "RAGIDX_EVAL_CACHE"
DEFAULT_CACHE = Path(os.environ.get(CACHE_ENV, "~/.cache/ragidx/eval")).expanduser()

eval_app = typer.Typer(
    help=(
        "Evaluate long-document strategies on LongEmbed tasks (whole-document extension vs chunking).\n\n"
        "Example:  ragidx eval --task passkey --task qmsum --strategy chunk --strategy pcw "
        "--strategy extend:pi --max-length 4096 --lengths 256,512,1024,2048 --out results/minilm\n\n"
        "BM25 alone and fused with chunks:  ragidx eval --task qmsum --max-length 4096 --strategy bm25 "
        "--strategy chunk --strategy chunk+bm25:auto --strategy chunk+bm25:rrf --out results/lexical"
    ),
    rich_markup_mode="rich",
)


class _Bars:
    """One line per finished record, a bar per stage (tokens or queries embedded)."""

    def __init__(self, bar: RichBar):
        self.bar = bar
        self.current: TaskID | None = None

    def record(self, description: str, done: bool = False) -> None:
        """Print one line; ``description`` is plain text (``pip install 'ragidx[eval]'`` stays whole)."""
        if done:
            self.bar.console.print(f"  {plain(description)}", highlight=False)
        else:
            self.bar.console.print(f"[bold]{plain(description)}[/]", highlight=False)

    def stage(self, description: str, total: int) -> None:
        if self.current is not None:
            self.bar.remove_task(self.current)
        self.current = self.bar.add_task(description, total=total)

    def advance(self, amount: int) -> None:
        if self.current is not None:
            self.bar.update(self.current, advance=amount)


def _ints(values: list[str] | None, what: str) -> list[int]:
    found: list[int] = []
    for value in values or []:
        for part in value.split(","):
            if part.strip():
                try:
                    found.append(int(part))
                except ValueError:
                    raise ConfigError(f"{what}: {part!r} is not a whole number") from None
    return found


def _lengths(values: list[str] | None) -> list[int | None]:
    """--max-length values: whole numbers, or 'none' for whole documents."""
    found: list[int | None] = []
    for value in values or []:
        for part in value.split(","):
            if part.strip().lower() == "none":
                found.append(None)
            else:
                found += _ints([part], "--max-length")
    return found


class ResultFormat(StrEnum):
    """What ``--format`` writes beside results.json, runs, results.md and plots."""

    ragidx = "ragidx"
    mteb = "mteb"


Format = Annotated[
    ResultFormat,
    typer.Option(
        "--format",
        help="mteb: also write MTEB result files (OUT/mteb/<model>/<revision>/<Task>.json, scores as "
        "fractions, per-length test_<L> splits) for the LongEmbed tasks, to line up with the "
        "public LongEmbed leaderboard.",
    ),
]


def _run(
    grid: EvalGrid, quiet: bool, as_json: bool, result_format: ResultFormat = ResultFormat.ragidx
) -> EvalResults:
    from ragidx.evaluate.runner import run_grid  # torch, transformers

    if quiet or as_json:
        results = run_grid(grid)
    else:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with RichBar(*columns, console=err, transient=True) as bar:
            results = run_grid(grid, _Bars(bar))
    if result_format is ResultFormat.mteb:
        from ragidx.evaluate.mteb import write_mteb

        folder = Path(grid.out) / "mteb"
        written = write_mteb(results, folder)
        for reason in written.skipped:
            err.print(f"MTEB files: left out {plain(reason)}", highlight=False)
        err.print(f"MTEB files: {len(written.files)} in {plain(str(folder))}", highlight=False)
    if as_json:
        out.print_json(results.model_dump_json())
    else:
        tasks, rows = table_rows(results.records)
        _print_table(f"results in {grid.out} (percent)", tasks, rows)
    return results


def _print_table(title: str, tasks: list[str], rows: list[tuple[str, dict[str, float]]]) -> None:
    table = Table(title=title, title_justify="left")
    table.add_column("strategy")
    for name in [*tasks, "avg"]:
        table.add_column(task_title(name), justify="right")
    for name, scores in rows:
        table.add_row(name, *[f"{scores[t]:.1f}" if t in scores else "–" for t in [*tasks, "avg"]])
    out.print(table)


@eval_app.callback(invoke_without_command=True)
@handle_errors
def eval_command(
    ctx: typer.Context,
    task: Annotated[
        list[str] | None,
        typer.Option(
            "--task",
            "-t",
            help="passkey, needle, qmsum (or one split: qmsum:val, qmsum:train), beir:PATH (a BEIR "
            "folder) or longembed:CONFIG (narrativeqa, summ_screen_fd, 2wikimqa, qmsum, passkey, "
            "needle; on disk or hub). Repeatable.",
        ),
    ] = None,
    model: Annotated[
        list[str] | None, typer.Option("--model", "-m", help="'default', a folder or hub id. Repeatable.")
    ] = None,
    strategy: Annotated[
        list[str] | None,
        typer.Option(
            "--strategy",
            "-s",
            help="truncate | chunk[:N[:O]] | pcw | extend:<pi|gp|rp|ntk|selfextend|preset.toml> | "
            "late[:N[:O]] | lmk:<g>; add '+tau:<τ>' (TempScale), '+vectors:<K>' (chunk/late: K "
            "vectors per document), '+best:<N>' (chunk/late: score by the mean of the N best chunks), "
            "'+hybrid:<rrf|w|auto>' (chunk/late plus a document vector; auto tunes w by 5-fold "
            "cross-validation), e.g. late:256+extend:pi+hybrid:rrf. 'bm25': BM25 alone over whole "
            "documents (nothing embedded); '+bm25:<w|rrf|auto>' on any of the above: its document "
            "scores fused with BM25 as a hybrid search does (w = BM25's weight over z-scores, rrf, or "
            "auto: w tuned by 5-fold cross-validation), e.g. chunk:256:0+best:2+bm25:auto. "
            "'+rerank:<model>[:N][:w<W>]' last: the N best documents (default 50) reranked by a "
            "cross-encoder, W the first stage's weight (default 0). "
            "Repeatable (default chunk).",
        ),
    ] = None,
    select: Annotated[
        list[str] | None,
        typer.Option(
            "--select",
            help="Candidates A,B,C (comma-separated strategies): each is evaluated, then every query "
            "fold is ranked by the candidate with the best score on the other four folds (5-fold "
            "cross-validation, e.g. to choose a chunk size honestly): a record 'select:A|B|C'. "
            "Repeatable.",
        ),
    ] = None,
    max_length: Annotated[
        list[str] | None,
        typer.Option(
            "--max-length",
            help="L_t: documents cut to it, extensions reach it (e.g. 2048,4096); 'none': whole "
            "documents. With late+extend or a hybrid's extend: the extended pass length (no cut).",
        ),
    ] = None,
    lengths: Annotated[
        str | None, typer.Option(help="passkey/needle lengths, e.g. 256,512,1024,2048 (default all 8).")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help=f"Evaluation data folder (default ${DATA_ENV}).")
    ] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", help="Result folder (resumable).")] = None,
    cache_dir: Annotated[
        Path, typer.Option(help=f"Embedding cache (Parquet; env {CACHE_ENV}).")
    ] = DEFAULT_CACHE,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the cache.")] = False,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic tasks and of --sample.")] = 0,
    sample: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="A seeded sample of N documents (per length for passkey and needle: the full "
            "task's own documents) and the queries judged on them, recorded as task NAME[N] (e.g. "
            "qmsum[64], passkey[50]) apart from the full task: for slow models on a CPU.",
        ),
    ] = None,
    device: Device = None,
    dtype: Annotated[
        DType,
        typer.Option(
            help="Weights and activations: auto is bfloat16 on CUDA and on a CPU where it measured "
            "faster than float32, else float32; int8 needs --backend onnx."
        ),
    ] = DType.auto,
    backend: Annotated[
        BackendName,
        typer.Option(
            help="torch, or onnx: ONNX Runtime on the CPU, float32 or (--dtype int8) dynamic int8, "
            "for windows the model's own window holds (the onnx extra)."
        ),
    ] = BackendName.torch,
    batch_size: Annotated[int | None, typer.Option(min=1, help="Most windows per forward pass.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Recompute results already in --out.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    result_format: Format = ResultFormat.ragidx,
    as_json: Json = False,
) -> None:
    """Evaluate strategies on tasks; writes results.json, runs/, results.md and plots/ into --out.

    Reruns skip results already in --out, and cached document embeddings are reused.

    Example (chunk size chosen by cross-validation):  ragidx eval --task qmsum --max-length none
    --select chunk:128:0,chunk:256:0,chunk:512:0 --out results/sizes
    """
    if ctx.invoked_subcommand is not None:
        return
    if not task:
        raise ConfigError("give at least one --task (passkey, needle, qmsum, beir:PATH, longembed:CONFIG)")
    if out_dir is None:
        raise ConfigError("give --out DIR: the folder that receives results.json, runs, results.md, plots")
    settings = {
        "tasks": task,
        "models": model or ["default"],
        "strategies": strategy or ([] if select else ["chunk"]),
        "selections": [[c.strip() for c in value.split(",") if c.strip()] for value in select or []],
        "max_lengths": _lengths(max_length) or [4096],
        "seed": seed,
        "sample": sample,
        "data_dir": str(data_dir) if data_dir else None,
        "out": str(out_dir),
        "cache_dir": None if no_cache else str(cache_dir),
        "device": device or "auto",
        "dtype": dtype.value,
        "backend": backend.value,
        "batch_size": batch_size,
        "force": force,
    }
    if lengths:
        settings["lengths"] = _ints([lengths], "--lengths")
    _run(_grid(settings, "command-line options"), quiet, as_json, result_format)


def _grid(settings: dict[str, object], where: str) -> EvalGrid:
    try:
        return EvalGrid.model_validate(settings)
    except ValidationError as exc:
        raise ConfigError("\n".join(f"{where}: {line}" for line in describe_problems(exc, EvalGrid))) from exc
    except ConfigError as exc:  # a strategy spec the validator parsed and refused
        raise ConfigError(f"{where}: {exc}") from exc


@eval_app.command("grid")
@handle_errors
def grid_command(
    file: Annotated[
        Path, typer.Argument(help="Grid TOML, e.g. pipelines/minilm-cpu.toml.", show_default=False)
    ],
    force: Annotated[bool, typer.Option("--force", help="Recompute results already in the output.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    result_format: Format = ResultFormat.ragidx,
    as_json: Json = False,
) -> None:
    """Run a TOML grid (models × strategies × max lengths × tasks) as one resumable batch.

    Keys: models, strategies, selections (lists of candidates, as --select), max_lengths, tasks,
    lengths, seed, sample, data_dir, out, cache_dir, device, dtype, backend.
    """
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read grid ({exc.strerror})") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: invalid TOML ({exc})") from exc
    raw.setdefault("cache_dir", str(DEFAULT_CACHE))
    raw["force"] = force or raw.get("force", False)
    _run(_grid(raw, str(file)), quiet, as_json, result_format)


@eval_app.command("compare")
@handle_errors
def compare_command(
    folders: Annotated[list[Path], typer.Argument(help="Result folders (from --out).", show_default=False)],
    no_reference: Annotated[
        bool, typer.Option("--no-reference", help="Leave out LongEmbed's Table 2 rows.")
    ] = False,
    as_json: Json = False,
) -> None:
    """One table across result folders, with LongEmbed's Table 2 rows for reference."""
    tasks, rows = compare_rows(folders, reference=not no_reference)
    if as_json:
        out.print_json(json.dumps({"tasks": tasks, "rows": [{"name": n, "scores": s} for n, s in rows]}))
        return
    _print_table("scores (percent); [paper] rows: LongEmbed Table 2", tasks, rows)
