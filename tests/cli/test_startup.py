"""The command line starts without torch: ``--help`` of every command, ``info`` and ``verify``.

One subprocess runs every step in turn (``python -m ragidx`` as ``runpy`` runs it, with its own
``sys.argv``) and records, after each step, which heavy packages that step newly imported; each
step is then its own test. A step that imports torch fails here; find the chain with
``python -X importtime -m ragidx … 2>&1 | grep -B5 torch`` or ``python benchmarks/startup.py``.
Once a step has imported torch, later steps cannot be told apart: fix the first failure first.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from ragidx.cli.app import app

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "index-0.1" / "chunk"
FORBIDDEN = ("torch", "transformers")

_STEPS = r"""
import json, runpy, sys

forbidden, steps, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
loaded = lambda: {name.split(".")[0] for name in sys.modules} & set(forbidden)
results = {}
for label, step in steps:
    before, code = loaded(), 0
    try:
        if step[0] == "import":
            import ragidx
        elif step[0] == "config":
            from ragidx.config import RagidxConfig
            RagidxConfig.load(step[1])
        else:
            sys.argv = ["ragidx", *step]
            runpy.run_module("ragidx", run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    results[label] = {"exit": code, "imported": sorted(loaded() - before)}
with open(out, "w") as handle:
    json.dump(results, handle)
"""


def _command_paths() -> list[list[str]]:
    """Every command and sub-command the app registers (``eval grid``, ``probe position``, …)."""

    def walk(command: object, path: list[str]) -> list[list[str]]:
        subs = getattr(command, "commands", {})
        return [path] + [p for name, sub in sorted(subs.items()) for p in walk(sub, [*path, name])]

    return walk(typer.main.get_command(app), [])


def _steps(index: Path) -> list[tuple[str, list[str]]]:
    helps = [(" ".join(["ragidx", *path, "--help"]), [*path, "--help"]) for path in _command_paths()]
    return [
        ("import ragidx", ["import"]),
        *helps,
        ("ragidx info INDEX", ["info", str(index)]),
        ("ragidx verify INDEX", ["verify", str(index)]),
        ('RagidxConfig.load("configs/default.toml")', ["config", str(ROOT / "configs" / "default.toml")]),
    ]


STEP_LABELS = [label for label, _ in _steps(Path("INDEX"))]


@pytest.fixture(scope="module")
def startup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("startup")
    index = Path(shutil.copytree(FIXTURE, tmp / "index"))
    out = tmp / "steps.json"
    argv = [sys.executable, "-c", _STEPS, json.dumps(FORBIDDEN), json.dumps(_steps(index)), str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, timeout=120, check=False)
    assert done.returncode == 0 and out.is_file(), done.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("step", STEP_LABELS)
def test_starts_without_torch(startup: dict[str, dict], step: str) -> None:
    result = startup[step]
    assert result["exit"] == 0, f"{step}: exit status {result['exit']}"
    assert result["imported"] == [], f"{step} imports {', '.join(result['imported'])}"


def test_every_command_is_checked() -> None:
    assert {"ragidx ingest --help", "ragidx query --help", "ragidx eval grid --help"} <= set(STEP_LABELS)
    assert len(STEP_LABELS) == len(set(STEP_LABELS)) >= 15
