"""``ragidx probe position|collapse``: the diagnostics of :mod:`ragidx.probe` from the shell."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichBar

from ragidx.cli.console import err, handle_errors, out
from ragidx.cli.options import Device, Json
from ragidx.embed.config import EncoderConfig
from ragidx.embed.models import portable_command
from ragidx.errors import ConfigError
from ragidx.probe.report import ProbeResults
from ragidx.read.formats import suffix_list

probe_app = typer.Typer(
    help=(
        "Diagnostics on your own model and texts. [bold]position[/]: does the end of a document "
        "still count? (filler inserted / spans removed at 5 positions, sentence-importance "
        "regression). [bold]collapse[/]: do long documents crowd together? (pairwise cosine per "
        "length bucket, TempScale τ sweep). Each writes results.json, results.md and PNG plots."
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
)

Model = Annotated[
    str,
    typer.Option(
        "--model", "-m", help="'default' (all-MiniLM-L6-v2), a folder, or a name under $RAGIDX_MODELS."
    ),
]
Strategies = Annotated[
    list[str] | None,
    typer.Option(
        "--strategy",
        "-s",
        help="Repeatable: truncate | pcw | extend:<pi|gp|rp|ntk|selfextend> | extend:<preset.toml> | "
        "lmk:<g> (landmarks over PCW windows), modifiers joined by '+' (extend:pi+lmk:64). "
        "Default: truncate, pcw.",
    ),
]
Texts = Annotated[
    Path,
    typer.Option(
        "--texts",
        "-t",
        help=f"A file or folder of {suffix_list('/')} files (a .jsonl file: one {{_id, text}} per line).",
    ),
]
Out = Annotated[Path, typer.Option("--out", "-o", help="Folder for results.json, results.md and the PNGs.")]
MaxTokens = Annotated[
    int,
    typer.Option(
        help="Longest text PCW, LMK and extension strategies read (L_t; texts are cut to it). "
        "truncate reads one window."
    ),
]
Limit = Annotated[int | None, typer.Option(help="Use only the first N texts (sorted by id).")]
MinTokens = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Use only texts of at least N model tokens (before --limit): an extension or PCW has "
        "nothing to do on a text shorter than the window, e.g. --min-tokens 4096 for a 2,048-token model "
        "probed at --max-tokens 4096.",
    ),
]
Cache = Annotated[
    Path | None,
    typer.Option(help="Embedding cache folder (Parquet), reused across strategies and runs. Default: none."),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]

if TYPE_CHECKING:
    from ragidx.probe.run import ProbeInputs


def _bar(quiet: bool, as_json: bool) -> RichBar:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return RichBar(*columns, console=err, transient=True, disable=quiet or as_json or not err.is_terminal)


def _progress(bar: RichBar) -> Callable[[str, int], Callable[[int], None]]:
    def start(name: str, total: int) -> Callable[[int], None]:
        task = bar.add_task(name, total=total)
        return lambda n: bar.update(task, advance=n)

    return start


def _inputs(
    model: str,
    strategy: list[str] | None,
    texts: Path,
    out_dir: Path,
    max_tokens: int,
    limit: int | None,
    min_tokens: int | None,
    cache: Path | None,
    device: str | None,
    tau: float | None,
) -> ProbeInputs:
    from ragidx.probe.run import ProbeInputs  # torch, transformers

    command = portable_command(["python", "-m", "ragidx", *sys.argv[1:]]) if sys.argv else ""
    return ProbeInputs(
        model=EncoderConfig(model=model, device=device or "auto"),
        strategies=strategy or ["truncate", "pcw"],
        texts=texts,
        out=out_dir,
        max_tokens=max_tokens,
        limit=limit,
        min_tokens=min_tokens,
        cache=cache,
        command=command,
        tau=tau,
    )


def _finish(results: ProbeResults, out_dir: Path, as_json: bool, lines: list[str]) -> None:
    if as_json:
        out.print_json(json.dumps({"out": str(out_dir), **results.model_dump(mode="json")}))
        return
    for line in lines:
        out.print(line, highlight=False)
    out.print(f"wrote {out_dir}/results.json, results.md, {', '.join(results.figures)}", highlight=False)


@probe_app.command("position")
@handle_errors
def position_command(
    texts: Texts,
    out_dir: Out,
    model: Model = "default",
    strategy: Strategies = None,
    tau: Annotated[float | None, typer.Option(help="TempScale τ for every strategy (0 < τ ≤ 1).")] = None,
    max_tokens: MaxTokens = 2048,
    limit: Limit = None,
    min_tokens: MinTokens = None,
    no_regression: Annotated[
        bool, typer.Option("--no-regression", help="Skip the sentence regression.")
    ] = False,
    cache: Cache = None,
    device: Device = None,
    as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Where does the encoder look? Filler (a generated Lorem-Ipsum-like text) of 5–100 % of a
    document's tokens inserted at relative positions 0, 0.25, 0.5, 0.75, 1, and spans of 5–50 %
    removed there: cosine(original, altered), mean and median. Then the sentence-importance
    regression (document vector on its sentence vectors, OLS), original and shuffled order.

    Headline: the begin-vs-end drop (sim_end − sim_begin) / sim_end; a large drop means the start of
    a document dominates its vector.
    """
    from ragidx.probe.position import PositionSettings
    from ragidx.probe.run import run_position

    if tau is not None and not 0 < tau <= 1:
        raise ConfigError(f"--tau {tau:g}: must be in (0, 1]")
    inputs = _inputs(model, strategy, texts, out_dir, max_tokens, limit, min_tokens, cache, device, tau)
    with _bar(quiet, as_json) as bar:
        results = run_position(inputs, PositionSettings(regression=not no_regression), _progress(bar))
    lines = []
    for row in results.strategies:
        drop = next((d for d in row.drops if d.kind == "insert" and d.size == 0.2), None)  # type: ignore[union-attr]
        if drop is not None:
            lines.append(
                f"{row.strategy}: 20 % inserted at the beginning {drop.begin:.3f}, "
                f"at the end {drop.end:.3f}, "
                f"drop {100 * drop.drop:.1f} %"
            )
    _finish(results, out_dir, as_json, lines)


@probe_app.command("collapse")
@handle_errors
def collapse_command(
    texts: Texts,
    out_dir: Out,
    model: Model = "default",
    strategy: Strategies = None,
    tau: Annotated[
        str, typer.Option(help="TempScale τ values to sweep, comma-separated, e.g. 0.5,0.7,0.9,1.0.")
    ] = "1.0",
    words: Annotated[str, typer.Option(help="The repetition demo's two words, comma-separated.")] = "dog,cat",
    max_tokens: MaxTokens = 2048,
    limit: Limit = None,
    min_tokens: MinTokens = None,
    cache: Cache = None,
    device: Device = None,
    as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Do long documents crowd together? Texts grouped by token length (0–256, 256–512, 512–1k,
    1–2k, … up to what the strategy reads; each text contributes a prefix to every bucket it
    reaches): mean pairwise cosine and mean distance to the centroid per bucket, for every τ, and
    the gap between the longest and the shortest bucket. Plus the repetition demo: cosine between
    one word repeated n times and another repeated n times.
    """
    try:
        taus = [float(t) for t in tau.split(",") if t.strip()]
    except ValueError:
        raise ConfigError(f"--tau {tau}: give numbers in (0, 1] separated by commas") from None
    if not taus or not all(0 < t <= 1 for t in taus):
        raise ConfigError(f"--tau {tau}: give numbers in (0, 1] separated by commas")
    pair = [w.strip() for w in words.split(",") if w.strip()]
    if len(pair) != 2:
        raise ConfigError(f"--words {words}: give exactly two words separated by a comma")
    from ragidx.probe.run import run_collapse

    inputs = _inputs(model, strategy, texts, out_dir, max_tokens, limit, min_tokens, cache, device, None)
    with _bar(quiet, as_json) as bar:
        results = run_collapse(inputs, taus, (pair[0], pair[1]), progress=_progress(bar))
    lines = [
        f"{row.strategy} τ {t.tau:g}: pairwise cosine "
        + ", ".join(f"{b.lo}–{b.hi} {b.pairwise_cosine:.3f}" for b in t.buckets)
        + (f"; gap {t.gap:.3f}" if t.gap is not None else "")
        for row in results.strategies
        for t in row.taus  # type: ignore[union-attr]
    ]
    _finish(results, out_dir, as_json, lines)
