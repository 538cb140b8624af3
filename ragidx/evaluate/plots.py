"""PNG plots of evaluation results (matplotlib, Agg backend: no display needed).

* synthetic tasks (passkey, needle): Acc@1 against document length, one line per strategy, one
  figure per task and model (the LongEmbed per-length curves);
* real tasks: the main metric against the max length L_t, one line per strategy (strategies that
  ignore L_t, such as truncate, are drawn as a flat line over the lengths run);
* quality vs index size: per model and task, each strategy's score against its vectors per
  document (log scale when they span a decade, else linear; plain numbers on the axis), the Pareto
  front drawn as a step line; a strategy without vectors (``bm25``) as a dotted horizontal line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ragidx.evaluate.report import (
    EvalRecord,
    EvalResults,
    file_part,
    label,
    merge_lengths,
    model_names,
    pareto,
    task_column,
    task_title,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def write_plots(results: EvalResults, folder: Path) -> list[Path]:
    """Write every plot for ``results`` into ``folder``; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    records = merge_lengths(results.records)
    titles = model_names(r.model for r in records)
    names = {m: file_part(title.removeprefix("~/")) for m, title in titles.items()}  # in file names
    for model in names:
        mine = [r for r in records if r.model == model]
        for task in dict.fromkeys(task_column(r.task) for r in mine):
            rows = [r for r in mine if task_column(r.task) == task]
            figure, axes = plt.subplots(figsize=(8.8, 4.2))
            synthetic = rows[0].groups[0].length is not None
            if synthetic:
                _synthetic(axes, rows)
            else:
                _real(axes, rows)
            axes.set_title(f"{task_title(task)} — {titles[model]}")
            axes.grid(alpha=0.3)
            axes.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the lines
            figure.tight_layout()
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{file_part(task)}__{names[model]}.png"
            figure.savefig(path, dpi=110)
            plt.close(figure)
            written.append(path)
            sized = [r for r in rows if "vectors_per_doc" in r.parameters]
            if len(sized) > 1:
                tradeoff = folder / f"{file_part(task)}__{names[model]}__tradeoff.png"
                written.append(_tradeoff(plt, sized, tradeoff, task, titles[model]))
    return written


def _tradeoff(plt: object, rows: list[EvalRecord], path: Path, task: str, model: str) -> Path:
    figure, axes = plt.subplots(figsize=(7.2, 4.6))  # type: ignore[attr-defined]
    draw_tradeoff(axes, rows)
    axes.set_title(f"{task_title(task)}: quality vs vectors per document — {model}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)  # type: ignore[attr-defined]
    return path


def draw_tradeoff(axes: Axes, rows: list[EvalRecord]) -> None:
    """Each record's score against its vectors per document, the Pareto front as a step line, a
    record without vectors as a dotted horizontal line."""
    for i, record in enumerate(r for r in rows if r.parameters["vectors_per_doc"] <= 0):
        name = f"{label(record)} (no vectors): {record.score:.1f}"  # no place on a log axis: a line
        axes.axhline(record.score, color=f"C{(i + 3) % 10}", linestyle=":", label=name)
    sizes: list[float] = []
    for record in rows:
        x = record.parameters["vectors_per_doc"]
        if x <= 0:
            continue
        sizes.append(x)
        axes.scatter([x], [record.score], s=28)
        axes.annotate(label(record), (x, record.score), fontsize=7, xytext=(4, 3), textcoords="offset points")
    front = sorted(
        (r for r in pareto(rows) if r.parameters["vectors_per_doc"] > 0),
        key=lambda r: r.parameters["vectors_per_doc"],
    )
    axes.step(
        [r.parameters["vectors_per_doc"] for r in front],
        [r.score for r in front],
        where="post",
        color="black",
        alpha=0.6,
        label="Pareto front",
    )
    _size_axis(axes, sizes)
    axes.set_xlabel("vectors per document (index size)")
    axes.set_ylabel(f"{rows[0].main_metric} (%)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)


def _size_axis(axes: Axes, sizes: list[float]) -> None:
    """Vectors per document: a log axis with plain numbers (1, 2, 5, 10, …) when the sizes span a
    decade or more, else a linear one (a log axis over 1.0–1.7 labels every minor tick in
    scientific notation, and the labels run into each other)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if not sizes or max(sizes) < 10 * min(sizes):
        return  # linear, matplotlib's own ticks
    axes.set_xscale("log")
    axes.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.xaxis.set_minor_formatter(NullFormatter())


def _synthetic(axes: Axes, rows: list[EvalRecord]) -> None:
    """One line per strategy across every length it was run at. A length run at several max lengths
    L_t takes the smallest L_t that holds it (the document read whole), as a user would set it."""
    for i, strategy in enumerate(dict.fromkeys(r.strategy for r in rows)):
        points: dict[int, tuple[tuple[int, int], float]] = {}
        for record in (r for r in rows if r.strategy == strategy):
            for group in record.groups:
                length = group.length or 0
                rank = _fit(record.max_length, length)
                if length not in points or rank < points[length][0]:
                    points[length] = (rank, group.metrics["acc@1"])
        xs = sorted(points)
        ys = [points[x][1] for x in xs]
        color, dash = _style(i)
        axes.plot(
            xs,
            ys,
            marker="o",
            label=f"{strategy} ({sum(ys) / len(ys):.1f})",
            color=color,
            linestyle=dash,
        )
    axes.set_xscale("log", base=2)
    axes.set_xlabel("document length (tokens); legend: mean Acc@1 over the lengths shown")
    axes.set_ylabel("Acc@1 (%)")
    axes.set_ylim(-2, 102)


def _style(i: int) -> tuple[str, str]:
    """The i-th line's (colour, dash): ten colours, then the same ten dashed, then dotted."""
    return f"C{i % 10}", ("-", "--", ":")[i // 10 % 3]


def _fit(max_length: int | None, length: int) -> tuple[int, int]:
    """Sort key of a record's max length for a document length: the smallest L_t that holds the
    document first, then the model's window (``None``), then the largest L_t that cuts it."""
    if max_length is None:
        return (1, 0)
    return (0, max_length) if max_length >= length else (2, -max_length)


def _real(axes: Axes, rows: list[EvalRecord]) -> None:
    lengths = sorted({r.max_length for r in rows if r.max_length})
    if not lengths:  # whole documents only: one bar per strategy
        names = list(dict.fromkeys(r.strategy for r in rows))
        scores = [next(r.score for r in rows if r.strategy == n) for n in names]
        axes.barh(names, scores, label=f"{rows[0].main_metric}, whole documents")
        axes.invert_yaxis()
        axes.tick_params(axis="y", labelsize=7)
        axes.set_xlabel(f"{rows[0].main_metric} (%)")
        return
    for i, strategy in enumerate(dict.fromkeys(r.strategy for r in rows)):
        mine = sorted((r for r in rows if r.strategy == strategy), key=lambda r: r.max_length or 0)
        if len(mine) == 1 and mine[0].max_length is None:
            xs, ys = lengths, [mine[0].score] * len(lengths)
        else:
            xs, ys = [r.max_length or 0 for r in mine], [r.score for r in mine]
        color, dash = _style(i)
        axes.plot(xs, ys, marker="o", label=strategy, color=color, linestyle=dash)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("max length L_t (tokens)")
    axes.set_ylabel(f"{rows[0].main_metric} (%)")
