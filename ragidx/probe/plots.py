"""PNG figures of probe results (matplotlib, Agg backend: no display needed).

* :func:`ablation_plot` — mean cosine(original, altered) vs position, one panel per size, a line per
  strategy (insertion or removal);
* :func:`importance_plot` — relative sentence weight (1 = the average sentence) vs position, one panel per
  strategy, original and shuffled order;
* :func:`collapse_plot` — mean pairwise cosine vs length bucket, one panel per strategy, a line per τ;
* :func:`repetition_plot` — cosine(word A × n, word B × n) vs n, a line per strategy and τ.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ragidx.probe.report import CollapseResult, PositionResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# matplotlib is imported lazily, inside the functions: it is needed only when figures are drawn.


def _grid(n: int, width: float = 3.6, height: float = 3.0) -> tuple[Figure, list[Axes]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _save(fig: Figure, path: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def ablation_plot(results: list[PositionResult], kind: str, path: Path, title: str) -> None:
    conditions = {r.strategy: (r.insertion if kind == "insert" else r.removal) for r in results}
    sizes = sorted({c.size for cs in conditions.values() for c in cs})
    fig, axes = _grid(len(sizes))
    for ax, size in zip(axes, sizes, strict=True):
        for strategy, cs in conditions.items():
            points = sorted((c.position, c.mean) for c in cs if c.size == size)
            ax.plot([p for p, _ in points], [m for _, m in points], marker="o", label=strategy)
        ax.set_title(f"{'inserted' if kind == 'insert' else 'removed'} {100 * size:g} %")
        ax.set_xlabel("relative position")
        ax.set_ylabel("mean cosine(original, altered)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    _save(fig, path, title)


def importance_plot(results: list[PositionResult], path: Path, title: str) -> None:
    shown = [r for r in results if r.importance is not None]
    fig, axes = _grid(max(len(shown), 1))
    for ax, result in zip(axes, shown, strict=False):
        assert result.importance is not None
        for label, values in (
            ("original order", result.importance.profile_original),
            ("shuffled (control)", result.importance.profile_shuffled),
        ):
            points = [((i + 0.5) / len(values), v) for i, v in enumerate(values) if v is not None]
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(result.strategy)
        ax.set_xlabel("relative position of the sentence")
        ax.set_ylabel("relative weight (1 = average sentence)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    _save(fig, path, title)


def collapse_plot(results: list[CollapseResult], path: Path, title: str) -> None:
    fig, axes = _grid(len(results))
    for ax, result in zip(axes, results, strict=True):
        for row in result.taus:
            labels = [f"{b.lo}–{b.hi}" for b in row.buckets]
            ax.plot(labels, [b.pairwise_cosine for b in row.buckets], marker="o", label=f"τ = {row.tau:g}")
        ax.set_title(result.strategy)
        ax.set_xlabel("length bucket (tokens)")
        ax.set_ylabel("mean pairwise cosine")
        ax.tick_params(axis="x", labelrotation=30)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    _save(fig, path, title)


def repetition_plot(results: list[CollapseResult], words: tuple[str, str], path: Path, title: str) -> None:
    fig, axes = _grid(1, width=5.5, height=4.0)
    ax = axes[0]
    for result in results:
        for row in result.taus:
            ax.plot(
                result.repetition_n, row.repetition, marker="o", label=f"{result.strategy}, τ {row.tau:g}"
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("n (repetitions)")
    ax.set_ylabel(f"cosine({words[0]} × n, {words[1]} × n)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    _save(fig, path, title)
