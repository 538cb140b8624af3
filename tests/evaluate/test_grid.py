"""Tests for ragidx.evaluate.grid: the grid's settings, the run-file names, no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ragidx.evaluate.grid import MAX_STEM, EvalGrid, run_file
from ragidx.evaluate.runner import run_grid
from ragidx.evaluate.tasks import Task, TaskGroup
from tests.evaluate.grids import tiny_grid


def test_grid_selections_drop_repeated_candidates_and_refuse_fewer_than_two(tmp_path: Path) -> None:
    from ragidx.errors import ConfigError

    settings = {"tasks": ["passkey"], "out": str(tmp_path), "strategies": []}
    grid = EvalGrid(**settings, selections=[["chunk:256:0", "pcw", "chunk:256:0"], ["pcw", "truncate"]])
    assert grid.selections == [["chunk:256:0", "pcw"], ["pcw", "truncate"]]
    with pytest.raises(ConfigError, match="select pcw,pcw: give at least two different strategies"):
        EvalGrid(**settings, selections=[["pcw", "pcw"]])
    with pytest.raises(ConfigError, match="strategy chunk:x"):
        EvalGrid(**settings, selections=[["pcw", "chunk:x"]])


@pytest.mark.parametrize("grid", sorted((Path(__file__).resolve().parents[2] / "pipelines").glob("*.toml")))
def test_shipped_pipeline_grids_are_valid(grid: Path) -> None:
    """Every grid in pipelines/ loads: known keys, strategies that parse, at least one task."""
    import tomllib

    loaded = EvalGrid(**tomllib.loads(grid.read_text(encoding="utf-8")))
    assert loaded.tasks and loaded.strategies and loaded.out.startswith("results/")


def test_run_file_names_carry_the_lengths_and_stay_short_enough(tmp_path: Path) -> None:
    def group(n: int | None) -> TaskGroup:
        return TaskGroup(str(n), {}, {}, {}, n)

    synthetic = Task("passkey", "synthetic", [group(256), group(512), group(1024)], "x")
    real = Task("qmsum", "real", [group(None)], "x")
    path = run_file(tmp_path, synthetic, "chunk:256:0", None, "default")
    assert path == tmp_path / "runs/passkey__chunk-256-0__window__default__256-512-1024.trec.gz"
    assert run_file(tmp_path, real, "chunk:256:0", 4096, "default").name == (
        "qmsum__chunk-256-0__4096__default.trec.gz"  # one group: the name it always had
    )
    specs = [f"late:{n}:0+extend:pi+hybrid:auto" for n in (64, 128, 256, 512, 1024, 2048, 4096, 8192)]
    long = [
        run_file(tmp_path, synthetic, "select:" + "|".join(specs[:k]), 4096, "~/models/" + "m" * 60)
        for k in (7, 8)
    ]
    assert all(len(p.name.encode()) <= MAX_STEM + len(".trec.gz") for p in long)
    assert long[0] != long[1] and long[0].name.startswith("passkey__select-late-64-0")
    for path in long:  # a file system takes the name (and the temporary one beside it)
        path.with_name(f".{path.name}.tmp").write_text("x")
        path.write_text("x")


@pytest.mark.slow
def test_runs_at_other_lengths_keep_their_own_run_files(tiny_model: Path, tmp_path: Path) -> None:
    first = run_grid(tiny_grid(tiny_model, tmp_path, ["chunk"], lengths=[256]), command="a")
    second = run_grid(tiny_grid(tiny_model, tmp_path, ["chunk"], lengths=[512]), command="b")
    files = [r.run_file for r in second.records]
    assert files == [first.records[0].run_file, files[1]] and files[0] != files[1]
    assert all((tmp_path / "out" / f).is_file() for f in files)


def test_the_grid_imports_no_torch() -> None:
    """``ragidx eval`` validates a grid (TOML or options) before anything heavy loads."""
    code = "import sys, ragidx.evaluate.grid; print('torch' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"
