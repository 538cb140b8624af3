"""pipelines/rebuild_results.py: which commands a folder with missing runs reruns, and the copy back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.pipelines.scripts import load_script

rebuild_results = load_script("rebuild_results")


def _record(task: str, strategy: str, score: float) -> dict[str, Any]:
    name = strategy.replace(":", "-").replace("+", "_").replace("|", "_")
    return {
        "task": task,
        "model_fingerprint": "f",
        "strategy": strategy,
        "max_length": None,
        "seed": 0,
        "groups": [{"group": "all"}],
        "score": score,
        "run_file": f"runs/{task}__{name}.trec",
    }


COMMANDS = [
    "ragidx eval --task qmsum --strategy chunk:256:0 --strategy late:256 --out results/x -q",
    "ragidx eval --task passkey --select chunk:128:0,chunk:256:0 --data-dir ../shared/data --out results/x",
]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    records = [
        _record("qmsum", "chunk:256:0", 50.0),
        _record("qmsum", "late:256", 40.0),
        _record("passkey", "select:chunk:128:0|chunk:256:0", 70.0),
        _record("passkey", "chunk:128:0", 68.0),  # a --select candidate's own record
        _record("needle", "pcw", 30.0),
    ]
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "qmsum__late-256.trec.gz").write_bytes(b"kept")  # gzipped counts as present
    (tmp_path / "results.json").write_text(json.dumps({"records": records, "commands": COMMANDS}))
    return tmp_path


def test_plan_reruns_only_commands_naming_a_missing_run(folder: Path) -> None:
    commands, orphans = rebuild_results.plan(folder)
    assert [c.argv[3] for c in commands] == ["qmsum", "passkey"]
    assert [m.strategy for m in commands[0].produces] == ["chunk:256:0"]
    assert [m.strategy for m in commands[1].produces] == ["select:chunk:128:0|chunk:256:0", "chunk:128:0"]
    assert [o.task for o in orphans] == ["needle"]


def test_rebuild_copies_the_runs_and_checks_scores(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[list[str]] = []

    def fake_eval(argv: list[str]) -> int:
        seen.append(argv)
        out = Path(argv[argv.index("--out") + 1])
        assert "results/x" not in argv  # the committed folder is never the output
        task = argv[argv.index("--task") + 1]
        score = {"qmsum": 50.01, "passkey": 69.0}[task]  # passkey drifts by a point
        strategy = "chunk:256:0" if task == "qmsum" else "select:chunk:128:0|chunk:256:0"
        record = _record(task, strategy, score)
        (out / "runs").mkdir(parents=True)
        (out / record["run_file"]).write_text(f"{task} run\n")
        (out / "results.json").write_text(json.dumps({"records": [record], "commands": []}))
        return 0

    status = rebuild_results.rebuild(folder, data_dir="/data", runner=fake_eval)
    assert status == 1  # the orphan, the drifting score, and a candidate the fake did not write
    assert (folder / "runs" / "qmsum__chunk-256-0.trec").read_text() == "qmsum run\n"
    assert (folder / "runs" / "passkey__select-chunk-128-0_chunk-256-0.trec").is_file()
    assert seen[1][seen[1].index("--data-dir") + 1] == "/data" and seen[1].count("--data-dir") == 1
    printed = capsys.readouterr().out
    assert "qmsum__chunk-256-0.trec: score 50.010 (committed 50.000) ok" in printed
    assert "DIFFERS by -1.000" in printed
    # the committed results.json is untouched
    assert len(json.loads((folder / "results.json").read_text())["records"]) == 5


def test_dry_run_changes_nothing(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rebuild_results.main([str(folder), "--dry-run"]) == 0
    assert "-> runs/qmsum__chunk-256-0.trec" in capsys.readouterr().out
    assert not (folder / "runs" / "qmsum__chunk-256-0.trec").exists()


def test_a_folder_without_results_is_refused(tmp_path: Path) -> None:
    assert rebuild_results.main([str(tmp_path)]) == 2


def test_a_record_is_matched_to_the_command_of_its_sample_model_and_lengths(tmp_path: Path) -> None:
    """Two commands name the same task and strategy: ``passkey[30]`` at 8,192 tokens of one model is
    planned from the command with ``--sample 30``, that model and those lengths, not the first."""

    def record(model: str, length: int) -> dict[str, Any]:
        return {
            **_record("passkey[30]", "pcw", 20.0),
            "model": model,
            "model_fingerprint": model,
            "max_length": length,
            "groups": [{"group": str(length), "length": length}],
            "run_file": f"runs/passkey_30__pcw__{length}__{model[-2:]}.trec.gz",
        }

    commands = [
        "ragidx eval --task passkey --lengths 8192 --max-length 8192 --model m/a1 --strategy pcw",
        "ragidx eval --task passkey --lengths 8192 --max-length 8192 --sample 30 --model m/a1 --strategy pcw",
        "ragidx eval --task passkey --lengths 16384 --max-length 16384 --sample 30 --model m/a1 "
        "--strategy pcw",
        "ragidx eval --task passkey --lengths 16384 --max-length 16384 --sample 30 --model m/b2 --model m/c3 "
        "--strategy pcw",
    ]
    records = [record("m/a1", 8192), record("m/a1", 16384), record("m/c3", 16384), record("m/z9", 16384)]
    (tmp_path / "results.json").write_text(json.dumps({"records": records, "commands": commands}))
    planned, orphans = rebuild_results.plan(tmp_path)
    assert [(c.argv.index("--sample") > 0, [m.run_file for m in c.produces]) for c in planned] == [
        (True, ["runs/passkey_30__pcw__8192__a1.trec.gz"]),
        (True, ["runs/passkey_30__pcw__16384__a1.trec.gz"]),
        (True, ["runs/passkey_30__pcw__16384__c3.trec.gz"]),
    ]
    assert [m.run_file for m in orphans] == ["runs/passkey_30__pcw__16384__z9.trec.gz"]
