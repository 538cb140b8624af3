"""What a probe writes: the ``results.json`` schema (pydantic) and ``results.md``.

:class:`ProbeResults` holds the model, the parameters, the data, one entry per strategy
(:class:`PositionResult` or :class:`CollapseResult`) and the figures; :func:`write_results` writes
``results.json``, ``results.md`` and the PNGs it is given, each to a temporary name renamed into
place, so a failed probe leaves no half-written file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ragidx import __version__


class ModelInfo(BaseModel):
    name: str
    fingerprint: str
    window: int
    dim: int


class DataInfo(BaseModel):
    path: str
    n_texts: int = Field(description="texts read")
    n_used: int = Field(description="texts long enough for the probe")
    text_ids: list[str] = Field(default_factory=list, description="the texts read, by id")


class Condition(BaseModel):
    """cosine(original, altered) over the documents for one ablation."""

    kind: Literal["insert", "remove"]
    size: float
    position: float
    n: int
    mean: float
    median: float
    mean_changed_tokens: float


class Drop(BaseModel):
    """The headline figure: ``(sim_end − sim_begin) / sim_end`` of the mean cosines."""

    kind: Literal["insert", "remove"]
    size: float
    begin: float
    end: float
    drop: float


class BucketFit(BaseModel):
    """Pearson r and p of coefficient vs relative position, over the sentences of some documents."""

    bucket: str
    n_docs: int
    n_sentences: int
    r: float | None
    p: float | None


class Importance(BaseModel):
    n_docs: int
    r2_mean: float
    r2_min: float
    r2_max: float
    squared_error_mean: float
    original: list[BucketFit]
    shuffled: list[BucketFit]
    profile_original: list[float | None] = Field(
        description="mean relative weight (coefficient · k / Σ coefficients) per position decile"
    )
    profile_shuffled: list[float | None]


class PositionResult(BaseModel):
    strategy: str
    reach: int = Field(description="content tokens the strategy reads; longer texts were cut to it")
    insert_base_tokens: int = Field(description="documents cut to this for insertion, so the longest fits")
    insertion: list[Condition]
    removal: list[Condition]
    drops: list[Drop]
    importance: Importance | None
    seconds: float


class Bucket(BaseModel):
    lo: int
    hi: int
    n_texts: int
    mean_tokens: float
    pairwise_cosine: float
    centroid_distance: float


class TauRow(BaseModel):
    tau: float
    buckets: list[Bucket]
    gap: float | None = Field(description="pairwise cosine of the longest bucket − the shortest")
    repetition: list[float] = Field(description="cosine(word A × n, word B × n) per n")


class CollapseResult(BaseModel):
    strategy: str
    reach: int
    repetition_n: list[int]
    taus: list[TauRow]
    seconds: float


class ProbeResults(BaseModel):
    probe: Literal["position", "collapse"]
    command: str
    model: ModelInfo
    parameters: dict[str, object]
    data: DataInfo
    strategies: list[PositionResult] | list[CollapseResult]
    figures: list[str] = Field(default_factory=list)
    ragidx_version: str = __version__
    created: datetime = Field(default_factory=lambda: datetime.now(UTC))


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(results: ProbeResults) -> str:
    """``results.md``: the command, the headline table, then every figure per strategy."""
    lines = [
        f"# ragidx probe {results.probe}: {results.model.name}",
        "",
        "```bash",
        results.command,
        "```",
        "",
        f"Model `{results.model.name}` (fingerprint {results.model.fingerprint}, window "
        f"{results.model.window} tokens, dim {results.model.dim}); data `{results.data.path}`: "
        f"{results.data.n_used} of {results.data.n_texts} texts used; ragidx {results.ragidx_version}, "
        f"{results.created:%Y-%m-%d %H:%M} UTC.",
        "",
        *([f"Texts: {', '.join(results.data.text_ids)}.", ""] if results.data.text_ids else []),
        "Parameters: " + ", ".join(f"{k} = {v}" for k, v in results.parameters.items()),
        "",
    ]
    if results.probe == "position":
        lines += _position_md([r for r in results.strategies if isinstance(r, PositionResult)])
    else:
        lines += _collapse_md([r for r in results.strategies if isinstance(r, CollapseResult)])
    lines += ["", *(f"![{Path(f).stem}]({f})" for f in results.figures)]
    return "\n".join(lines) + "\n"


def _position_md(rows: list[PositionResult]) -> list[str]:
    lines = [
        "## Begin-vs-end drop `(sim_end − sim_begin) / sim_end` (mean cosine)",
        "",
        "| strategy | reach | insert 20 %: begin | end | drop | remove 50 %: begin | end | drop | "
        "R² | r (orig., all) | r (shuffled, all) | s (this run) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ins = next((d for d in row.drops if d.kind == "insert" and d.size == 0.2), None)
        rem = next((d for d in row.drops if d.kind == "remove" and d.size == 0.5), None)
        imp = row.importance
        pooled = [_fmt(b[-1].r) if b else "–" for b in ((imp.original, imp.shuffled) if imp else ([], []))]
        cells = [
            row.strategy,
            str(row.reach),
            *(
                (_fmt(d.begin), _fmt(d.end), f"{100 * d.drop:.1f} %") if d else ("–", "–", "–")
                for d in (ins, rem)
            ),
            _fmt(imp.r2_mean) if imp else "–",
            *pooled,
            f"{row.seconds:.0f}",
        ]
        flat = [c if isinstance(c, str) else " | ".join(c) for c in cells]
        lines.append("| " + " | ".join(flat) + " |")
    for row in rows:
        lines += [
            "",
            f"## {row.strategy}",
            "",
            "| ablation | size | "
            + " | ".join(f"pos {p:g}" for p in sorted({c.position for c in row.insertion}))
            + " |",
            "|---|---|" + "---|" * len({c.position for c in row.insertion}),
        ]
        for kind, conditions in (("insert", row.insertion), ("remove", row.removal)):
            for size in sorted({c.size for c in conditions}):
                means = [f"{c.mean:.3f} / {c.median:.3f}" for c in conditions if c.size == size]
                lines.append(f"| {kind} (mean / median) | {size:g} | " + " | ".join(means) + " |")
        if row.importance:
            imp = row.importance
            lines += [
                "",
                f"Regression over {imp.n_docs} documents: R² mean {imp.r2_mean:.3f} (min {imp.r2_min:.3f}, "
                f"max {imp.r2_max:.3f}), squared error summed over dimensions {imp.squared_error_mean:.4f}.",
                "",
                "| sentences | docs | r (original) | p | r (shuffled) | p |",
                "|---|---|---|---|---|---|",
            ]
            for orig, shuf in zip(imp.original, imp.shuffled, strict=True):
                lines.append(
                    f"| {orig.bucket} | {orig.n_docs} | {_fmt(orig.r, 4)} | {_p(orig.p)} | "
                    f"{_fmt(shuf.r, 4)} | {_p(shuf.p)} |"
                )
    return lines


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.2e}"


def _collapse_md(rows: list[CollapseResult]) -> list[str]:
    lines = [
        "## Mean pairwise cosine per length bucket (and mean distance to the centroid)",
        "",
    ]
    for row in rows:
        buckets = [(b.lo, b.hi) for b in row.taus[0].buckets] if row.taus else []
        lines += [
            f"### {row.strategy} (reach {row.reach} tokens, {row.seconds:.0f} s this run)",
            "",
            "| τ | " + " | ".join(f"{lo}–{hi}" for lo, hi in buckets) + " | gap (long − short) |",
            "|---|" + "---|" * (len(buckets) + 1),
        ]
        for tau in row.taus:
            cells = [f"{b.pairwise_cosine:.3f} ({b.centroid_distance:.3f})" for b in tau.buckets]
            lines.append(f"| {tau.tau:g} | " + " | ".join(cells) + f" | {_fmt(tau.gap)} |")
        if row.taus:
            counts = ", ".join(f"{b.lo}–{b.hi}: {b.n_texts}" for b in row.taus[0].buckets)
            lines += ["", f"Texts per bucket: {counts}.", ""]
            lines += [
                "Repetition demo, cosine(A × n, B × n): "
                + "; ".join(
                    f"τ {t.tau:g}: "
                    + ", ".join(f"n={n} {c:.3f}" for n, c in zip(row.repetition_n, t.repetition, strict=True))
                    for t in row.taus
                ),
                "",
            ]
    return lines


def write_results(out: Path, results: ProbeResults, figures: dict[str, Callable[[Path], None]]) -> None:
    """Write the figures (``name.png`` → a function that draws to a path), ``results.json`` and
    ``results.md`` into ``out``; each file appears whole or not at all."""
    out.mkdir(parents=True, exist_ok=True)
    results.figures = sorted(figures)
    for name, draw in figures.items():
        temp = out / f".{name}.tmp.png"
        draw(temp)
        os.replace(temp, out / name)
    for name, text in (
        ("results.json", results.model_dump_json(indent=2)),
        ("results.md", markdown(results)),
    ):
        temp = out / f".{name}.tmp"
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, out / name)
