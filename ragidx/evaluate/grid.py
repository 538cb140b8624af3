"""The settings of an evaluation run and its bookkeeping: what to run (:class:`EvalGrid`, validated
from a TOML grid or the command line), what a run reports (:class:`EvalProgress`), the records of a
result folder (:class:`Records`: each computed once, ``results.json`` rewritten after each) and
where each record's TREC run goes (:func:`run_file`).

Imports no torch: ``ragidx eval`` validates a grid before anything heavy loads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ragidx.embed.config import Backend, DTypeName
from ragidx.embed.models import portable
from ragidx.errors import ConfigError
from ragidx.evaluate.report import EvalRecord, EvalResults, file_part, write_results
from ragidx.evaluate.tasks import LENGTHS, Task
from ragidx.strategy import Strategy, parse

__all__ = [
    "MAX_STEM",
    "SELECT",
    "EvalGrid",
    "EvalProgress",
    "Records",
    "SilentProgress",
    "max_lengths_for",
    "run_file",
]

SELECT = "select:"  # a selection record's strategy label: select:A|B|C
MAX_STEM = 200  # longest run file name stem (file systems allow 255 bytes a name)
_DEFAULT_MAX_LENGTHS: list[int | None] = [4096]


class EvalProgress(Protocol):
    """What the runner reports (the CLI draws it with rich)."""

    def record(self, description: str, done: bool = False) -> None: ...
    def stage(self, description: str, total: int) -> None: ...
    def advance(self, amount: int) -> None: ...


class SilentProgress:
    """Progress that reports nothing (a run without a progress display)."""

    def record(self, description: str, done: bool = False) -> None:
        pass

    def stage(self, description: str, total: int) -> None:
        pass

    def advance(self, amount: int) -> None:
        pass


class EvalGrid(BaseModel):
    """What to run: the grid, where the data is, where results and the cache go."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    models: list[str] = Field(default_factory=lambda: ["default"], min_length=1)
    strategies: list[str] = Field(default_factory=lambda: ["chunk"])
    selections: list[list[str]] = Field(
        default_factory=list, description="candidate lists: each a strategy chosen by 5-fold CV"
    )
    max_lengths: list[int | None] = Field(default_factory=lambda: _DEFAULT_MAX_LENGTHS.copy(), min_length=1)
    tasks: list[str] = Field(min_length=1)
    lengths: list[int] = Field(default_factory=lambda: list(LENGTHS), description="passkey/needle lengths")
    seed: int = 0
    sample: int | None = Field(
        None, ge=1, description="a seeded sample of this many documents per group (task NAME[N])"
    )
    data_dir: str | None = Field(None, description="evaluation data (default $RAGIDX_EVAL_DATA)")
    out: str = Field(description="result folder")
    cache_dir: str | None = Field(None, description="embedding cache (None: no disk cache)")
    device: str = "auto"
    dtype: DTypeName = Field(
        "auto",
        description="weights and activations (auto: bfloat16/float16 on CUDA, bfloat16 on a CPU where "
        "it measured faster, else float32; int8: backend onnx)",
    )
    backend: Backend = Field(
        "torch", description="torch, or onnx: ONNX Runtime on the CPU (float32 or int8, ragidx.embed.onnx)"
    )
    batch_size: int | None = Field(None, ge=1)
    force: bool = Field(False, description="recompute records already in results.json")

    @field_validator("strategies")
    @classmethod
    def _parse(cls, value: list[str]) -> list[str]:
        for spec in value:
            parse(spec)
        return value

    @field_validator("selections")
    @classmethod
    def _candidates(cls, value: list[list[str]]) -> list[list[str]]:
        """Each list's specs parsed, a repeated one dropped (``chunk,pcw,chunk`` is ``chunk,pcw``)."""
        for candidates in value:
            if len(set(candidates)) < 2:
                raise ConfigError(f"select {','.join(candidates)}: give at least two different strategies")
            for spec in candidates:
                parse(spec)
        return [list(dict.fromkeys(candidates)) for candidates in value]

    @model_validator(mode="after")
    def _something(self) -> EvalGrid:
        if not self.strategies and not self.selections:
            raise ConfigError("give at least one strategy (or a selection of strategies)")
        return self


def max_lengths_for(strategy: Strategy, lengths: Sequence[int | None]) -> list[int | None]:
    """Max lengths that change this strategy: truncate and BM25 alone (whole documents) ignore them,
    presets fix their own."""
    if strategy.policy == "truncate" or strategy.lexical_only:
        return [None]
    if strategy.preset is not None:
        return [strategy.long_doc(None).extension.target_length]
    return list(dict.fromkeys(lengths))


class Records:
    """The records of one result folder: each computed once per call (``force`` recomputes those
    found from earlier calls), results.json rewritten after each new one."""

    def __init__(self, results: EvalResults, out: Path, grid: EvalGrid, progress: EvalProgress) -> None:
        self.results, self.out, self.grid, self.progress = results, out, grid, progress
        self.done = {r.key: i for i, r in enumerate(results.records)}
        self.fresh: set[tuple[Any, ...]] = set()

    def key(self, task: Task, fingerprint: str, spec: str, max_length: int | None) -> tuple[Any, ...]:
        """The identity of a record (as :attr:`EvalRecord.key`)."""
        return (task.name, fingerprint, spec, max_length, self.grid.seed, tuple(g.name for g in task.groups))

    def ensure(self, key: tuple[Any, ...], make: Callable[[], EvalRecord]) -> EvalRecord:
        """The record with this key: found, or made by ``make`` and stored."""
        task, _, spec, max_length, *_ = key
        name = f"{task} · {spec}" + (f" @{max_length}" if max_length is not None else "")
        found = self.done.get(key)
        if found is not None and (key in self.fresh or not self.grid.force):
            self.progress.record(f"{name}: done earlier", done=True)
            return self.results.records[found]
        self.progress.record(name)
        record = make()
        if found is not None:
            self.results.records[found] = record
        else:
            self.done[key] = len(self.results.records)
            self.results.records.append(record)
        self.fresh.add(key)
        write_results(self.out, self.results)  # adds what another run wrote meanwhile
        self.done = {r.key: i for i, r in enumerate(self.results.records)}
        self.progress.record(f"{task} · {spec}: {record.main_metric} {record.score:.1f}", done=True)
        return record


def run_file(out: Path, task: Task, spec: str, max_length: int | None, model: str) -> Path:
    """Where a record's TREC run goes: ``runs/<task>__<strategy>__<max length>__<model>[__<lengths>]
    .trec.gz`` (a synthetic task's lengths in the name, so runs at other lengths are kept apart). A
    name longer than a file system allows (a selection of many candidates, a deep model folder) is cut
    to :data:`MAX_STEM` bytes, ending in a hash of the whole name."""
    parts = [file_part(task.name), file_part(spec), str(max_length or "window"), file_part(portable(model))]
    lengths = [g.length for g in task.groups]
    if all(length is not None for length in lengths):
        parts.append("-".join(map(str, lengths)))
    stem = "__".join(parts)
    if len(stem.encode()) > MAX_STEM:
        digest = hashlib.sha256(stem.encode()).hexdigest()[:16]
        stem = f"{stem.encode()[: MAX_STEM - 18].decode(errors='ignore')}__{digest}"
    path = out / "runs" / (stem + ".trec.gz")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
