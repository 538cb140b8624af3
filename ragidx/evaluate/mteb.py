"""MTEB-style result files: ``ragidx eval --format mteb`` writes ``OUT/mteb/<model>/<revision>/<Task>.json``.

The format is the one MTEB writes and the public leaderboard reads (the ``embeddings-benchmark/results``
repository, e.g. ``results/intfloat__e5-base-v2/1c644c92ad3ba1efdad3f1451a637716616a20e8/
LEMBPasskeyRetrieval.json`` and ``LEMBQMSumRetrieval.json``, written by mteb 1.18.0; loaded by
``mteb.results.task_result.TaskResult``)::

    {"dataset_revision": "6e346642246bfb4928c560ee08640dc84d074e8c", "task_name": "LEMBPasskeyRetrieval",
     "mteb_version": "1.18.0", "evaluation_time": 7.1, "kg_co2_emissions": null,
     "scores": {"test_1024": [{"hf_subset": "default", "languages": ["eng-Latn"], "main_score": 0.62,
                               "ndcg_at_1": 0.62, "ndcg_at_10": 0.62, "recall_at_10": 0.62, ...}], ...}}

What ragidx's records become:

* **Tasks**: the six LongEmbed tasks, by the names MTEB gives them (``mteb/tasks/Retrieval/eng/LEMB*.py``):
  passkey → ``LEMBPasskeyRetrieval``, needle → ``LEMBNeedleRetrieval``, narrativeqa →
  ``LEMBNarrativeQARetrieval``, qmsum → ``LEMBQMSumRetrieval``, summ_screen_fd →
  ``LEMBSummScreenFDRetrieval``, 2wikimqa → ``LEMBWikimQARetrieval``, with the dataset revision MTEB
  pins for them (``dwzhu/LongEmbed`` at ``6e346642…``, as in the results repository's files). Other
  tasks (``beir:…``, ``qmsum:val``, a sample ``NAME[N]``) have no LongEmbed counterpart and are left
  out, each named in :attr:`MtebWritten.skipped`. ragidx's own passkey and needle are generated the
  way LongEmbed describes (needle with ragidx's own facts) and its local QMSum merges two duplicate
  queries, so, as in ``ragidx eval compare``, they line up with the leaderboard's tasks without being
  byte-identical data; the ``ragidx`` block of each file names the data (``task_source``).
* **Splits**: passkey and needle are scored per context length, as MTEB's ``test_256`` …
  ``test_32768`` splits (the lengths run); the real tasks have one ``test`` split. Every entry is
  ``hf_subset: "default"``, ``languages: ["eng-Latn"]``.
* **Metrics**: fractions in [0, 1] as MTEB writes them (ragidx's records hold percentages), rounded
  to 6 decimals as MTEB's ``TaskResult.to_disk`` does; ``ndcg@10`` → ``ndcg_at_10`` (every ``name@k``
  likewise) and ``acc@1`` → ``precision_at_1`` (trec_eval's ``P_1``). MTEB's metrics ragidx does not
  compute (``map_at_*``, ``nauc_*``, …) are absent; MTEB requires only ``main_score``.
* **main_score**: per split, the metric MTEB's task metadata names: ``ndcg_at_1`` for passkey and
  needle, ``ndcg_at_10`` for the others; the task's score is the mean over its splits, in MTEB and
  in ``results.json`` alike.
* **Where**: ``<model>`` is MTEB's folder name for the model (``org__name``; a local folder by its
  name) followed by the strategy and max length (each is a different embedding system, a row of its
  own), ``<revision>`` is ragidx's fingerprint of the weights (``-seed<N>`` added for a seed other
  than 0). Records of one strategy run at other lengths are merged first
  (:func:`~ragidx.evaluate.report.merge_lengths`).
* ``mteb_version`` is that of the files this format follows (``1.18.0``: MTEB's loaders need a
  version, and treat one before 1.11 as another format); ``kg_co2_emissions`` is ``null`` (not
  measured). A ``ragidx`` block (MTEB's loader ignores unknown keys) says what wrote the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragidx.errors import InputError
from ragidx.evaluate.report import EvalRecord, EvalResults, file_part, merge_lengths, task_column

MTEB_FORMAT_VERSION = "1.18.0"
LONGEMBED_REVISION = "6e346642246bfb4928c560ee08640dc84d074e8c"
LANGUAGES = ["eng-Latn"]
HF_SUBSET = "default"
DECIMALS = 6
MAX_NAME = 200  # longest folder name (file systems allow 255 bytes a name)


@dataclass(frozen=True)
class MtebTask:
    """A LongEmbed task as MTEB defines it."""

    name: str
    main_score: str
    per_length: bool  # splits test_<length> (else one "test" split)


TASKS: dict[str, MtebTask] = {
    "passkey": MtebTask("LEMBPasskeyRetrieval", "ndcg_at_1", True),
    "needle": MtebTask("LEMBNeedleRetrieval", "ndcg_at_1", True),
    "narrativeqa": MtebTask("LEMBNarrativeQARetrieval", "ndcg_at_10", False),
    "qmsum": MtebTask("LEMBQMSumRetrieval", "ndcg_at_10", False),
    "summ_screen_fd": MtebTask("LEMBSummScreenFDRetrieval", "ndcg_at_10", False),
    "2wikimqa": MtebTask("LEMBWikimQARetrieval", "ndcg_at_10", False),
}
RENAMED = {"acc@1": "precision_at_1"}


@dataclass
class MtebWritten:
    """What :func:`write_mteb` did: the files written, and the records left out with the reason."""

    files: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def mteb_task(record: EvalRecord) -> MtebTask | None:
    """The MTEB task ``record`` scores, or None for a task LongEmbed does not have."""
    return TASKS.get(task_column(record.task))


def metric_name(name: str) -> str:
    """MTEB's name for a ragidx metric: ``ndcg@10`` → ``ndcg_at_10``, ``acc@1`` → ``precision_at_1``."""
    if name in RENAMED:
        return RENAMED[name]
    base, at, k = name.partition("@")
    return f"{base}_at_{k}" if at else name


def mteb_result(record: EvalRecord, evaluation_time: float | None = None) -> dict[str, Any]:
    """``record`` as an MTEB result (the dict of one ``<Task>.json``); ``evaluation_time`` defaults to
    the record's wall time. Raises ValueError for a task without an MTEB counterpart, InputError for a
    record without MTEB's main score."""
    task = mteb_task(record)
    if task is None:
        raise ValueError(f"{record.task}: not a LongEmbed task, so MTEB has no result file for it")
    scores: dict[str, list[dict[str, Any]]] = {}
    for group in record.groups:
        if task.per_length:
            if group.length is None:
                raise InputError(
                    f"{record.task}: group {group.group!r} has no context length in results.json"
                )
            split = f"test_{group.length}"
        elif len(record.groups) != 1:
            raise InputError(f"{record.task}: {len(record.groups)} groups where MTEB has one test split")
        else:
            split = "test"
        entry: dict[str, Any] = {"hf_subset": HF_SUBSET, "languages": list(LANGUAGES)}
        for name, value in group.metrics.items():
            entry[metric_name(name)] = round(value / 100, DECIMALS)
        if task.main_score not in entry:
            raise InputError(
                f"{record.task} {record.strategy}: no {task.main_score} (MTEB's main score) in the "
                "record; run it again with --force"
            )
        entry["main_score"] = entry[task.main_score]
        scores[split] = [entry]
    return {
        "dataset_revision": LONGEMBED_REVISION,
        "task_name": task.name,
        "mteb_version": MTEB_FORMAT_VERSION,
        "scores": scores,
        "evaluation_time": record.timing.seconds if evaluation_time is None else evaluation_time,
        "kg_co2_emissions": None,
        "ragidx": {
            "version": record.ragidx_version,
            "task": record.task,
            "task_source": record.task_source,
            "model": record.model,
            "model_fingerprint": record.model_fingerprint,
            "strategy": record.strategy,
            "max_length": record.max_length,
            "seed": record.seed,
            "created": record.created,
        },
    }


def model_name(model: str) -> str:
    """MTEB's folder name for a model: ``intfloat/e5-base-v2`` → ``intfloat__e5-base-v2``; a local
    folder (``~/models/minilm``, ``./m``, ``/abs/m``) by its last part."""
    name = model.rstrip("/")
    if name.startswith(("/", "~", ".")) or "\\" in name or name.count("/") > 1:
        name = name.replace("\\", "/").rsplit("/", 1)[-1]
    return file_part(name.replace("/", "__"))


def result_path(record: EvalRecord) -> Path:
    """Where ``record``'s file goes under the ``mteb`` folder: ``<model>/<revision>/<Task>.json``."""
    task = mteb_task(record)
    if task is None:
        raise ValueError(f"{record.task}: not a LongEmbed task")
    system = f"{model_name(record.model)}__{file_part(record.strategy)}__{record.max_length or 'window'}"
    revision = record.model_fingerprint + (f"-seed{record.seed}" if record.seed else "")
    return Path(_short(system)) / _short(file_part(revision)) / f"{task.name}.json"


def _short(name: str) -> str:
    """``name`` cut to :data:`MAX_NAME` bytes, ending in a hash of the whole name when cut."""
    if len(name.encode()) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name.encode()[: MAX_NAME - 18].decode(errors='ignore')}__{digest}"


def write_mteb(results: EvalResults | Sequence[EvalRecord], folder: str | Path) -> MtebWritten:
    """Write one MTEB result file per LongEmbed record of ``results`` under ``folder`` (atomically:
    a reader never sees half a file); records of other tasks are listed in ``skipped``."""
    records = results.records if isinstance(results, EvalResults) else list(results)
    seconds: dict[tuple[Any, ...], float] = {}
    for record in records:  # a merged record took the time of all its parts
        seconds[record.key[:5]] = seconds.get(record.key[:5], 0.0) + record.timing.seconds
    written = MtebWritten()
    where: dict[Path, EvalRecord] = {}
    for record in merge_lengths(records):
        if mteb_task(record) is None:
            reason = f"{record.task}: not one of LongEmbed's tasks in MTEB ({', '.join(TASKS)})"
            if reason not in written.skipped:
                written.skipped.append(reason)
            continue
        relative = result_path(record)
        other = where.setdefault(relative, record)
        if other is not record:
            raise InputError(
                f"{relative}: both {other.model} {other.strategy} and {record.model} {record.strategy} "
                "map to this MTEB file; evaluate them into separate --out folders"
            )
        path = Path(folder) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        result = mteb_result(record, seconds[record.key[:5]])
        temporary.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(temporary, path)
        written.files.append(path)
    return written
