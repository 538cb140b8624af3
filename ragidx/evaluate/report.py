"""Evaluation results: the ``results.json`` schema, TREC runs, the ``results.md`` table, comparisons.

:class:`EvalRecord` is one (model, strategy, max length, task) result: per-group (per-length)
metrics, their mean, timing, hardware and the ragidx version. A result folder holds
``results.json`` (:class:`EvalResults`: every record and the commands that produced them),
``runs/*.trec`` (one TREC run per record), ``results.md`` and ``plots/``. Metrics are percentages.

:func:`compare_rows` puts several folders' records in one table (rows = model · strategy · L_t,
columns = tasks and their average) next to LongEmbed's Table 2 rows (``data/longembed_table2.json``,
copied from the spec §3.1) for reference.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ragidx.errors import ConfigError, InputError, describe_validation
from ragidx.evaluate.tasks import sample_size
from ragidx.strategy import parse

RESULTS_FILE = "results.json"
# Column order of LongEmbed's tables; other tasks follow in name order.
TASK_ORDER = ("passkey", "needle", "narrativeqa", "qmsum", "summ_screen_fd", "2wikimqa")
TASK_TITLES = {
    "passkey": "Passkey",
    "needle": "Needle",
    "narrativeqa": "NQA",
    "qmsum": "QMSum",
    "summ_screen_fd": "SFD",
    "2wikimqa": "2WmQA",
}


class GroupScore(BaseModel):
    """One group's (one context length's) metrics."""

    group: str
    length: int | None = None
    n_queries: int
    n_docs: int
    metrics: dict[str, float]
    embed_modes: dict[str, int] = Field(default_factory=dict, description="documents per embed mode")


class Timing(BaseModel):
    seconds: float = Field(description="wall time of the whole record")
    embed_seconds: float = Field(description="time spent in the encoder (documents and queries)")
    tokens_embedded: int = Field(description="model input tokens embedded now (cache misses)")
    docs_embedded: int
    docs_cached: int
    queries_embedded: int
    queries_cached: int


class Hardware(BaseModel):
    device: str
    cpu: str
    threads: int
    torch: str
    platform: str
    dtype: str | None = None  # None: written before the dtype was recorded (float32 on CPU)


class EvalRecord(BaseModel):
    """One task evaluated with one model and strategy at one max length."""

    task: str
    task_source: str
    main_metric: str
    score: float = Field(description="main metric, mean over groups (LongEmbed's task score), percent")
    metrics: dict[str, float] = Field(description="every metric, mean over groups, percent")
    groups: list[GroupScore]
    model: str
    model_fingerprint: str
    strategy: str
    whole_document: bool = Field(description="one pass over the whole document (extension)")
    max_length: int | None
    seed: int
    parameters: dict[str, Any] = Field(description="long_doc config, encoder overrides, window")
    timing: Timing
    hardware: Hardware
    ragidx_version: str
    created: str
    run_file: str

    @property
    def key(self) -> tuple[str, str, str, int | None, int, tuple[str, ...]]:
        return (
            self.task,
            self.model_fingerprint,
            self.strategy,
            self.max_length,
            self.seed,
            tuple(g.group for g in self.groups),
        )


class EvalResults(BaseModel):
    records: list[EvalRecord] = Field(default_factory=list)
    commands: list[str] = Field(default_factory=list)


def merge_lengths(records: Sequence[EvalRecord]) -> list[EvalRecord]:
    """Records that differ only in their groups (a synthetic task run at some lengths by one command
    and at others by another) as one record each: groups by length (a later record's group replaces
    an earlier one's), score and metrics the mean over all groups, vectors per document weighted by
    the documents of each. Everything else is the first record's. Tables and plots read these."""
    merged: dict[tuple[Any, ...], list[EvalRecord]] = {}
    for record in records:
        merged.setdefault(record.key[:5], []).append(record)
    out: list[EvalRecord] = []
    for same in merged.values():
        if len(same) == 1:
            out.append(same[0])
            continue
        groups = {g.group: g for r in same for g in r.groups}
        ordered = sorted(groups.values(), key=lambda g: (g.length is None, g.length or 0, g.group))
        metrics = {k: sum(g.metrics[k] for g in ordered) / len(ordered) for k in ordered[0].metrics}
        parameters = dict(same[0].parameters)
        docs = [sum(g.n_docs for g in r.groups) for r in same]
        for name in ("vectors_per_doc", "index_bytes_per_doc", "lexical_bytes_per_doc"):
            values = [r.parameters.get(name) for r in same]
            known = [v for v in values if v is not None]
            if len(known) == len(values):
                parameters[name] = sum(v * n for v, n in zip(known, docs, strict=True)) / sum(docs)
        for name in ("hybrid_tuning", "lexical_tuning", "selection"):  # per group: each record's own
            if any(name in r.parameters for r in same):
                parameters[name] = {k: v for r in same for k, v in r.parameters.get(name, {}).items()}
        main = same[0].main_metric
        out.append(
            same[0].model_copy(
                update={
                    "groups": ordered,
                    "metrics": metrics,
                    "score": metrics[main],
                    "parameters": parameters,
                }
            )
        )
    return out


def file_part(text: str) -> str:
    """``text`` as part of a file name: letters, digits and ``-_.`` kept, ``:`` as ``-``, the rest ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "-" if c == ":" else "_" for c in text)


def task_title(column: str) -> str:
    """A task column's title: "QMSum", or "QMSum, 64 docs" for a sample of its documents."""
    base, sample = sample_size(column)
    title = TASK_TITLES.get(base, base)
    return title if sample is None else f"{title}, {sample} docs"


def task_column(task: str) -> str:
    """A task's column name: LongEmbed configs and the local QMSum split share one column."""
    return task.removeprefix("longembed:")


def read_results(folder: str | Path) -> EvalResults:
    path = Path(folder) / RESULTS_FILE
    if not path.is_file():
        return EvalResults()
    try:
        return EvalResults.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise InputError(f"{path}: not a ragidx results file ({describe_validation(exc)})") from exc
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from exc


def write_results(folder: str | Path, results: EvalResults) -> Path:
    """Write ``results.json`` atomically (a reader never sees half a file), keeping what another run
    wrote there since ``results`` was read: two ``ragidx eval`` commands may share an output folder
    (a long grid beside a short one). Under a lock on the folder the file on disk is read again and
    its records whose key ``results`` lacks, and its commands, are added to ``results`` (in place,
    so the caller keeps them for its next write); a record both hold is ``results``'s."""
    path = Path(folder) / RESULTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent):
        if path.is_file():
            on_disk = read_results(folder)
            known = {r.key for r in results.records}
            results.records.extend(r for r in on_disk.records if r.key not in known)
            results.commands.extend(c for c in on_disk.commands if c not in results.commands)
        temporary = path.with_name(f".{RESULTS_FILE}.{os.getpid()}.tmp")
        temporary.write_text(results.model_dump_json(indent=1), encoding="utf-8")
        os.replace(temporary, path)
    return path


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``folder`` itself (POSIX ``flock`` on the directory, so no lock
    file is left in the results; where there is none, no lock)."""
    try:
        import fcntl
    except ImportError:  # Windows: writes are still atomic, a race may drop a record
        yield
        return
    handle = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing releases the lock


def model_names(models: Iterable[str]) -> dict[str, str]:
    """Each model's display name: its folder or hub name (``e5-small``), or the whole name where two
    of ``models`` share a folder name."""
    unique = list(dict.fromkeys(models))
    short = {m: m.rstrip("/").rsplit("/", 1)[-1] for m in unique}
    return short if len(set(short.values())) == len(unique) else {m: m for m in unique}


def label(record: EvalRecord, names: dict[str, str] | None = None) -> str:
    """A row label: strategy and max length, prefixed by the model's name (``names``, from
    :func:`model_names`) when several models are shown."""
    length = f" @{record.max_length}" if record.max_length else ""
    prefix = f"{names[record.model]} · " if names and len(names) > 1 else ""
    return f"{prefix}{record.strategy}{length}"


def _tasks(records: Iterable[EvalRecord]) -> list[str]:
    names = {task_column(r.task) for r in records}
    return [t for t in TASK_ORDER if t in names] + sorted(names - set(TASK_ORDER))


def table_rows(records: Sequence[EvalRecord]) -> tuple[list[str], list[tuple[str, dict[str, float]]]]:
    """(task columns, [(row label, {task: score, "avg": mean over tasks})]), rows in first-seen order
    (records of one strategy at other lengths merged, :func:`merge_lengths`)."""
    records = merge_lengths(records)
    tasks = _tasks(records)
    names = model_names(r.model for r in records)
    rows: dict[str, dict[str, float]] = {}
    for record in records:
        rows.setdefault(label(record, names), {})[task_column(record.task)] = record.score
    for scores in rows.values():
        present = [scores[t] for t in tasks if t in scores]
        if len(present) == len(tasks):
            scores["avg"] = sum(present) / len(present)
    return tasks, list(rows.items())


def markdown(results: EvalResults) -> str:
    """``results.md``: the main table (best per column in bold), per-length tables, whole vs chunked
    (records of one strategy at other lengths merged, :func:`merge_lengths`)."""
    records = merge_lengths(results.records)
    if not records:
        return "No results yet.\n"
    tasks, rows = table_rows(records)
    lines = [
        "# Evaluation results",
        "",
        "Main metric per task (percent): Acc@1 averaged over lengths for passkey/needle, nDCG@10 for "
        "real tasks; `avg` = mean over the tasks run (LongEmbed average when all six are present).",
        "",
    ]
    lines += _table(["strategy", *[task_title(t) for t in tasks], "avg"], rows, [*tasks, "avg"])
    for task in tasks:
        synthetic = [r for r in records if task_column(r.task) == task and r.groups[0].length]
        if synthetic:
            lengths = sorted({g.length or 0 for r in synthetic for g in r.groups})
            names = model_names(r.model for r in synthetic)
            per_length = [
                (label(r, names), {str(g.length): g.metrics["acc@1"] for g in r.groups} | {"avg": r.score})
                for r in synthetic
            ]
            lines += ["", f"## {task_title(task)}: Acc@1 per length", ""]
            lines += _table(["strategy", *map(str, lengths), "avg"], per_length, [*map(str, lengths), "avg"])
    lines += ["", "## Whole document vs chunking", "", *verdicts(records)]
    if any(_lexical(r) for r in records):
        lines += ["", "## BM25 and hybrids", "", *lexical_table(records)]
    if any("vectors_per_doc" in r.parameters for r in records):
        lines += ["", "## Quality vs index size", "", *tradeoff(records)]
    lines += ["", "## Commands", "", *[f"    {c}" for c in results.commands]]
    return "\n".join(lines) + "\n"


def _table(header: list[str], rows: list[tuple[str, dict[str, float]]], columns: list[str]) -> list[str]:
    best = {c: max((s[c] for _, s in rows if c in s), default=None) for c in columns}
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, scores in rows:
        cells = []
        for c in columns:
            if c not in scores:
                cells.append("–")
            elif (top := best[c]) is not None and round(scores[c], 1) == round(top, 1) and len(rows) > 1:
                cells.append(f"**{scores[c]:.1f}**")
            else:
                cells.append(f"{scores[c]:.1f}")
        lines.append(f"| {cell(name)} | " + " | ".join(cells) + " |")
    return lines


def cell(text: str) -> str:
    """Text for a Markdown table cell: ``|`` (a selection's ``select:A|B|C``) escaped as ``\\|``."""
    return text.replace("|", "\\|")


def verdicts(records: Sequence[EvalRecord]) -> list[str]:
    """Per model, task and length: the best whole-document strategy against the best chunked one."""
    lines: list[str] = []
    for model in dict.fromkeys(r.model for r in records):
        for task in _tasks(r for r in records if r.model == model):
            mine = [r for r in records if r.model == model and task_column(r.task) == task]
            mine = [r for r in mine if not _lexical(r)]  # embeddings against embeddings
            if not mine:
                continue
            whole = [r for r in mine if r.whole_document]
            chunked = [r for r in mine if _bases(r) <= {"chunk", "pcw"}]
            if not whole or not chunked:
                continue
            for group in [g.group for g in mine[0].groups]:
                w = max(whole, key=lambda r: _group_score(r, group))
                c = max(chunked, key=lambda r: _group_score(r, group))
                ws, cs = _group_score(w, group), _group_score(c, group)
                verdict = "whole wins" if ws > cs else "chunking wins" if cs > ws else "tie"
                if ws != cs and _fits_window(w, group):  # then no strategy extended or chunked
                    verdict = "every document fits the window (nothing extended: τ or pooling differ)"
                where = f"{task_title(task)}" + (f" {group}" if group != "all" else "")
                lines.append(
                    f"- {model}, {where}: {verdict} — best whole {label(w)} {ws:.1f} vs "
                    f"best chunked {label(c)} {cs:.1f}"
                )
    return lines or ["- (needs an extend strategy and a chunk or pcw strategy on the same task)"]


def _fits_window(record: EvalRecord, group: str) -> bool:
    """True when ``record`` embedded every document of ``group`` as one plain window."""
    found = next((g for g in record.groups if g.group == group), None)
    return found is not None and set(found.embed_modes) == {"whole"}


def _bases(record: EvalRecord) -> set[str]:
    """The base strategies of a record (``chunk:256+best:2`` → chunk; a selection: its candidates')."""
    specs = record.parameters.get("candidates") or [record.strategy]
    return {spec.split("+")[0].split(":")[0] for spec in specs}


def _specs(record: EvalRecord) -> list[str]:
    """The strategies of a record: its own, or a selection's candidates."""
    return list(record.parameters.get("candidates") or [record.strategy])


def _lexical(record: EvalRecord) -> bool:
    """True when BM25 takes part in the record's ranking (``bm25``, ``+bm25:…``, or a selection
    among such candidates)."""
    return any(p.strip().partition(":")[0] == "bm25" for spec in _specs(record) for p in spec.split("+"))


def _hybrid_parts(spec: str) -> tuple[str, str] | None:
    """A ``+bm25:…`` strategy's two parts: its dense strategy and its BM25 alone (``bm25``, or
    ``bm25+passages:P`` where it sets passages); None: not such a strategy."""
    try:
        strategy = parse(spec)
    except ConfigError:  # a selection's label
        return None
    if strategy.lexical_fusion is None:
        return None
    return strategy.dense.spec, _bm25_alone(strategy.lexical_passages)


def _bm25_alone(passages: int | None) -> str:
    return "bm25" if passages is None else f"bm25+passages:{passages}"


def _bm25_spec(spec: str) -> str | None:
    """A ``bm25`` alone record's strategy in :func:`_bm25_alone`'s spelling (None: not one)."""
    try:
        strategy = parse(spec)
    except ConfigError:
        return None
    return _bm25_alone(strategy.lexical_passages) if strategy.lexical_only else None


def _tuned(record: EvalRecord) -> str:
    """What cross-validation chose on all queries, per group: hybrid (document) and BM25 weights, or
    a selection's choice."""
    if "selection" in record.parameters:
        return ", ".join(s["choice_on_all_queries"] for s in record.parameters["selection"].values())
    hybrid = record.parameters.get("hybrid_tuning") or {}
    lexical = record.parameters.get("lexical_tuning") or {}
    chosen = []
    for group in dict.fromkeys([*hybrid, *lexical]):
        parts = [f"w {hybrid[group]['weight_on_all_queries']:.2f}"] if group in hybrid else []
        if group in lexical:
            parts.append(f"bm25 w {lexical[group]['weight_on_all_queries']:.2f}")
        chosen.append(" · ".join(parts))
    return ", ".join(chosen) or "–"


def lexical_table(records: Sequence[EvalRecord]) -> list[str]:
    """Per model and task: BM25 alone, and each ``+bm25:…`` hybrid against its two parts (its dense
    strategy at the same L_t and BM25 alone, where both were run): Δ is the hybrid's score minus
    the better part's."""
    lines: list[str] = []
    names = model_names(r.model for r in records)
    for model in dict.fromkeys(r.model for r in records):
        for task in _tasks(r for r in records if r.model == model):
            mine = [r for r in records if r.model == model and task_column(r.task) == task]
            alone = {spec: r for r in mine if (spec := _bm25_spec(r.strategy)) is not None}
            hybrids = [r for r in mine if _hybrid_parts(r.strategy) is not None]
            if not alone and not hybrids:
                continue
            prefix = f"{names[model]}, " if len(names) > 1 else ""
            lines += [
                f"**{prefix}{task_title(task)}** ({mine[0].main_metric}; Δ = hybrid − the better part)",
                "",
                "| strategy | score | dense part | BM25 alone | Δ | tuned per group |",
                "|---|---|---|---|---|---|",
            ]
            for r in alone.values():
                lines.append(f"| {cell(label(r))} | {r.score:.1f} | – | {r.score:.1f} | – | – |")
            for hybrid in hybrids:
                spec, lexical = _hybrid_parts(hybrid.strategy) or ("", "")
                bm25 = alone.get(lexical)
                dense = next(
                    (r for r in mine if r.strategy == spec and r.max_length == hybrid.max_length), None
                )
                parts = [r.score for r in (dense, bm25) if r is not None]
                delta = f"{hybrid.score - max(parts):+.1f}" if len(parts) == 2 else "–"
                lines.append(
                    f"| {cell(label(hybrid))} | {hybrid.score:.1f} | "
                    f"{'–' if dense is None else f'{dense.score:.1f}'} | "
                    f"{'–' if bm25 is None else f'{bm25.score:.1f}'} | {delta} | {cell(_tuned(hybrid))} |"
                )
            lines.append("")
    return lines


def tradeoff(records: Sequence[EvalRecord]) -> list[str]:
    """Per task: each strategy's score against its vectors per document and index bytes (float32,
    flat; plus the BM25 index's file for ``bm25`` and ``+bm25:…``), the encoder throughput of the
    run that embedded it, and the Pareto front (no other strategy scores higher with as few or
    fewer vectors) marked ★."""
    lines: list[str] = []
    names = model_names(r.model for r in records)
    for task in _tasks(records):
        mine = [r for r in records if task_column(r.task) == task and "vectors_per_doc" in r.parameters]
        if not mine:
            continue
        front = pareto(mine)
        lines += [
            f"**{task_title(task)}** ({mine[0].main_metric}; ★ = Pareto front)",
            "",
            "| strategy | vectors / doc | index KiB / doc | encoder tokens/s | score | tuned per group |",
            "|---|---|---|---|---|---|",
        ]
        for r in sorted(mine, key=lambda r: (r.parameters["vectors_per_doc"], -r.score)):
            speed = r.timing.tokens_embedded / r.timing.embed_seconds if r.timing.tokens_embedded else None
            nothing = _bm25_spec(r.strategy) is not None  # BM25 alone: no encoder
            shown = f"{speed:,.0f}" if speed else "(no encoder)" if nothing else "(cached)"
            lines.append(
                f"| {cell(label(r, names))}{' ★' if r in front else ''} | "
                f"{r.parameters['vectors_per_doc']:.1f} | {_kib(r)} | "
                f"{shown} | {r.score:.1f} | {cell(_tuned(r))} |"
            )
        lines.append("")
    return lines


def _kib(record: EvalRecord) -> str:
    size = record.parameters.get("index_bytes_per_doc")
    return "–" if size is None else f"{size / 1024:.1f}"


def pareto(records: Sequence[EvalRecord]) -> list[EvalRecord]:
    """Records no other record beats on score with as few or fewer vectors per document."""
    return [
        r
        for r in records
        if not any(
            o.parameters["vectors_per_doc"] <= r.parameters["vectors_per_doc"] and o.score > r.score
            for o in records
        )
    ]


def _group_score(record: EvalRecord, group: str) -> float:
    found = next((g for g in record.groups if g.group == group), None)
    if found is None:
        return float("-inf")
    return found.metrics["acc@1" if record.main_metric == "acc@1" else record.main_metric]


def reference_rows() -> list[tuple[str, dict[str, float]]]:
    """LongEmbed Table 2 (spec §3.1) as comparison rows."""
    text = resources.files("ragidx.evaluate").joinpath("data/longembed_table2.json").read_text("utf-8")
    return [(f"[paper] {row['model']}", row["scores"]) for row in json.loads(text)["rows"]]


def compare_rows(
    folders: Sequence[str | Path], reference: bool = True
) -> tuple[list[str], list[tuple[str, dict[str, float]]]]:
    """One table over several result folders, LongEmbed's Table 2 rows appended."""
    records: list[EvalRecord] = []
    for folder in folders:
        if not (Path(folder) / RESULTS_FILE).is_file():
            raise InputError(f"{folder}: no {RESULTS_FILE}; pass folders written by ragidx eval --out")
        records += read_results(folder).records
    tasks, rows = table_rows(records)
    if reference:
        shown = set(tasks)
        for name, scores in reference_rows():
            row = {t: v for t, v in scores.items() if t in shown}
            if row and len(row) == len(shown):  # the same average as ours: over the tasks shown
                row["avg"] = sum(row.values()) / len(row)
            rows.append((name, row))
    return tasks, rows
