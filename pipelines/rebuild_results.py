"""Rebuild the run files of a results folder that are not in the repository.

Full TREC runs are large (an 8 MB file per QMSum strategy) and are regenerated instead of tracked:
each ``results/<folder>/results.json`` keeps every record (scores, parameters, the run file's name)
and the ``ragidx eval`` commands that produced them. This script finds the records whose
``run_file`` is missing, reruns only the recorded commands that name their task and strategy, each
into a temporary folder (so ``results.json`` and the tables stay exactly as committed), checks that
each rebuilt record scores what the committed record says, and copies the missing run files in.

    python pipelines/rebuild_results.py results/late-hybrid/minilm-l6 --dry-run
    python pipelines/rebuild_results.py results/late-hybrid/minilm-l6 [--data-dir ../shared/data]

Exit codes: 0 every missing run rebuilt and matching; 1 a command failed or a rebuilt score
differs from the committed one by more than ``--tolerance`` points (the run file is still copied,
next to the report line saying by how much); 2 bad arguments or no results.json.
The embedding cache (``~/.cache/ragidx/eval``) makes a rerun cost only what it lacks.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Runner = Callable[[list[str]], int]


@dataclass(frozen=True)
class Missing:
    """A committed record whose run file is not on disk."""

    task: str
    strategy: str
    key: tuple[Any, ...]
    score: float
    run_file: str
    model: str | None = None
    max_length: int | None = None
    lengths: tuple[int, ...] = ()  # the record's group lengths (synthetic tasks)


@dataclass
class Command:
    """One recorded ``ragidx eval`` command and the missing records it produces."""

    argv: list[str]
    produces: list[Missing] = field(default_factory=list)


def _options(argv: Sequence[str], name: str) -> list[str]:
    values: list[str] = []
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            values.append(argv[i + 1])
        elif arg.startswith(name + "="):
            values.append(arg.split("=", 1)[1])
    return values


def _key(record: dict[str, Any]) -> tuple[Any, ...]:
    return (
        record["task"],
        record.get("model_fingerprint"),
        record["strategy"],
        record.get("max_length"),
        record.get("seed", 0),
        tuple(g["group"] for g in record.get("groups", [])),
    )


def _strategy_in(strategy: str, argv: Sequence[str]) -> bool:
    if strategy in _options(argv, "--strategy"):
        return True
    selections = [value.split(",") for value in _options(argv, "--select")]
    if strategy.startswith("select:"):  # the cross-validated choice among a --select's candidates
        return strategy.removeprefix("select:").split("|") in selections
    return any(strategy in candidates for candidates in selections)  # each candidate's own record


def missing_runs(folder: Path) -> list[Missing]:
    """The records of ``folder/results.json`` whose run file (plain or gzipped) is absent."""
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    out: list[Missing] = []
    for record in results["records"]:
        run = folder / record["run_file"]
        if run.is_file() or run.with_name(run.name + ".gz").is_file():
            continue
        key = _key(record)
        lengths = tuple(int(g["length"]) for g in record.get("groups", []) if g.get("length") is not None)
        out.append(
            Missing(
                record["task"],
                record["strategy"],
                key,
                record["score"],
                record["run_file"],
                model=record.get("model"),
                max_length=record.get("max_length"),
                lengths=lengths,
            )
        )
    return out


def _produces(m: Missing, argv: Sequence[str]) -> bool:
    """Whether the command ``argv`` writes the record ``m``: its task (``passkey[30]`` is
    ``--task passkey --sample 30``), strategy, model, ``--max-length`` and ``--lengths``, where the
    command names them."""
    name, _, sample = m.task.partition("[")
    if name not in _options(argv, "--task") or not _strategy_in(m.strategy, argv):
        return False
    samples = _options(argv, "--sample")
    if (samples[-1] if samples else "") != sample.rstrip("]"):
        return False
    models = _options(argv, "--model")
    if models and m.model is not None and m.model not in models:  # one model, or a grid of them
        return False
    limits = _numbers(argv, "--max-length")  # one value, or several (a grid)
    if limits and m.max_length is not None and m.max_length not in limits:
        return False
    named = _numbers(argv, "--lengths")
    return not (named and m.lengths and not set(m.lengths) <= named)


def _numbers(argv: Sequence[str], name: str) -> set[int]:
    return {int(v) for value in _options(argv, name) for v in value.split(",") if v.strip().isdigit()}


def plan(folder: Path) -> tuple[list[Command], list[Missing]]:
    """The recorded commands to rerun (each with what it produces) and the runs no command names."""
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    missing = missing_runs(folder)
    commands: list[Command] = []
    covered: set[tuple[Any, ...]] = set()
    for line in results.get("commands", []):
        argv = shlex.split(line)
        if argv[:2] != ["ragidx", "eval"]:
            continue
        produces = [m for m in missing if m.key not in covered and _produces(m, argv)]
        if produces:
            commands.append(Command(argv, produces))
            covered.update(m.key for m in produces)
    return commands, [m for m in missing if m.key not in covered]


def _redirect(argv: list[str], out: Path, data_dir: str | None) -> list[str]:
    """``argv`` writing to ``out`` (and reading ``data_dir``), run by this Python's ragidx."""
    rest: list[str] = []
    skip = False
    for i, arg in enumerate(argv[1:], start=1):
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name == "--out" or (data_dir is not None and name == "--data-dir"):
            skip = "=" not in arg and i + 1 < len(argv)
            continue
        rest.append(arg)
    extra = ["--out", str(out)] + (["--data-dir", data_dir] if data_dir is not None else [])
    return [sys.executable, "-m", "ragidx", *rest, *extra]


def _subprocess(argv: list[str]) -> int:
    return subprocess.run(argv, check=False).returncode


def rebuild(
    folder: Path, *, data_dir: str | None = None, tolerance: float = 0.05, runner: Runner = _subprocess
) -> int:
    """Rerun the planned commands into temporary folders and copy back the missing runs."""
    commands, orphans = plan(folder)
    status = 0
    for orphan in orphans:
        print(f"no recorded command produces {orphan.run_file}: left missing", file=sys.stderr)
        status = 1
    for command in commands:
        with tempfile.TemporaryDirectory(prefix="ragidx-rebuild-") as tmp:
            out = Path(tmp)
            argv = _redirect(command.argv, out, data_dir)
            print("$", shlex.join(argv), file=sys.stderr)
            if runner(argv) != 0:
                print(f"command failed: {shlex.join(command.argv)}", file=sys.stderr)
                status = 1
                continue
            rebuilt = {_key(r): r for r in json.loads((out / "results.json").read_text())["records"]}
            for want in command.produces:
                got = rebuilt.get(want.key)
                source = out / want.run_file if got is None else out / got["run_file"]
                if got is None or not source.is_file():
                    print(f"{want.run_file}: the command did not write it", file=sys.stderr)
                    status = 1
                    continue
                target = folder / want.run_file
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
                delta = got["score"] - want.score
                verdict = "ok" if abs(delta) <= tolerance else f"DIFFERS by {delta:+.3f}"
                print(f"{want.run_file}: score {got['score']:.3f} (committed {want.score:.3f}) {verdict}")
                if abs(delta) > tolerance:
                    status = 1
    return status


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a results folder holding results.json")
    parser.add_argument("--data-dir", help="evaluation data (default: what each command names)")
    parser.add_argument("--tolerance", type=float, default=0.05, help="score points a rebuilt run may differ")
    parser.add_argument("--dry-run", action="store_true", help="list what would be rerun and stop")
    ns = parser.parse_args(args)
    if not (ns.folder / "results.json").is_file():
        print(f"error: {ns.folder}: no results.json here; name a folder under results/", file=sys.stderr)
        return 2
    if ns.dry_run:
        commands, orphans = plan(ns.folder)
        for command in commands:
            print(shlex.join(command.argv))
            for m in command.produces:
                print(f"    -> {m.run_file}")
        for orphan in orphans:
            print(f"(no recorded command) {orphan.run_file}")
        if not commands and not orphans:
            print("every run file is present")
        return 0
    return rebuild(ns.folder, data_dir=ns.data_dir, tolerance=ns.tolerance)


if __name__ == "__main__":
    sys.exit(main())
