"""benchmarks/gpu/run.py, the one-shot GPU benchmark: it refuses to run without CUDA (one line,
exit 2), and its ``--device cpu --quick`` mode runs every section end to end (slow); the ``cli``
section's bookkeeping (commands it cannot run, the table) without running it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu" / "run.py"


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=timeout,
    )


def test_without_cuda_it_exits_2_with_one_clear_line(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    # a carry folder that does not exist: nothing to unpack, the CUDA check comes first
    done = _run(["--carry", str(tmp_path / "no-carry"), "--out", str(out)], timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        "no GPU: torch.cuda.is_available() is False; this benchmark needs one CUDA device "
        "(see benchmarks/gpu/README.md)"
    ]
    assert done.stdout == ""
    assert not out.exists()


def test_unknown_section_is_a_usage_error(tmp_path: Path) -> None:
    done = _run(["--sections", "encode,nope"], timeout=60)
    assert done.returncode == 2
    assert "unknown sections: nope" in done.stderr


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and value > 0


@pytest.mark.slow
def test_quick_cpu_run_fills_every_section(tmp_path: Path) -> None:
    """Every section runs on the CPU at tiny sizes with the environment's packages and ragidx's
    default MiniLM (no carry folder), and the JSON holds numbers for each of them."""
    out = tmp_path / "gpu.json"
    done = _run(
        ["--device", "cpu", "--quick", "--carry", str(tmp_path / "no-carry"), "--out", str(out)],
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert re.search(r"^section +\| case ", done.stdout, re.MULTILINE)  # the table
    data = json.loads(out.read_text(encoding="utf-8"))
    sections = data["sections"]
    assert set(sections) == {"encode", "extension", "search", "train", "cli", "pipeline", "host_cpu"}
    assert {name: s["status"] for name, s in sections.items()} == dict.fromkeys(sections, "ok")
    assert data["env"]["quick"] is True and data["env"]["device"] == "cpu"

    scenarios = sections["encode"]["result"]["scenarios"]
    assert set(scenarios) == {"mixed", "full_windows"}
    for scenario in scenarios.values():
        for key in ("tokens", "ragidx_tokens_per_s", "st_tokens_per_s", "ratio_ragidx_over_st"):
            assert _positive(scenario[key]), (key, scenario)
        assert scenario["token_counts_match_st"] is True
        assert scenario["min_cosine"] > 0.999  # float32 on the CPU: the same vectors

    train = sections["train"]["result"]["rows"]
    assert [r["mode"] for r in train] == ["mean", "lmk variable g", "positions pi 4096"]
    for row in train:
        assert "error" not in row and row["finite"] and _positive(row["tokens_per_s"]), row

    rows = sections["extension"]["result"]["rows"]
    assert not [r for r in rows if "error" in r]
    methods = {(r["model"].split()[0], r["method"].split()[0], "tau" in r) for r in rows}
    assert methods == {
        ("MiniLM", "none", False), ("MiniLM", "pi", False), ("MiniLM", "gp", False),
        ("MiniLM", "rp", False), ("MiniLM", "pi", True),
        ("Gemma3", "none", False), ("Gemma3", "pi", False), ("Gemma3", "ntk", False),
        ("Gemma3", "gp", False), ("Gemma3", "selfextend", False), ("Gemma3", "pi", True),
    }  # fmt: skip
    for row in rows:
        assert _positive(row["median_s"]) and _positive(row["tokens_per_s"]) and row["finite"], row
        expected = row["native_window"] if row["method"].startswith("none") else 2048
        assert row["tokens"] == expected, row

    search = sections["search"]["result"]
    assert len(search["cases"]) == 2
    for case in search["cases"]:
        assert "error" not in case, case
        assert _positive(case["reference"]["median_s"])
        assert case["torch"]["float32"]["recall_up_to_ties"] == 1.0
        assert _positive(case["torch"]["float32"]["queries_per_s"])

    cli = sections["cli"]["result"]["rows"]
    assert len(cli) == 15 and not [r for r in cli if "error" in r], [r for r in cli if "error" in r]
    commands = {r["argv"][1] for r in cli}
    assert commands == {"ingest", "query", "info", "verify", "delete", "eval", "probe", "train", "serve"}
    assert all(r["exit_code"] == 0 for r in cli)
    assert all("--device" in r["argv"] for r in cli if r["argv"][1] not in ("info", "verify", "delete"))
    assert cli[-1]["hits"] > 0 and cli[-1]["health"] == "ok"  # serve answered over HTTP

    pipeline = sections["pipeline"]["result"]
    for key in ("ingest_tokens_per_s", "encoder_alone_tokens_per_s", "embed_only_tokens_per_s"):
        assert _positive(pipeline[key]), (key, pipeline)
    assert pipeline["tokens_embedded"] == pipeline["encoder_tokens"]  # the same work on both sides

    host = sections["host_cpu"]["result"]
    systems = [r["system"] for r in host["rows"]]
    expected = ["ragidx-float32", "ragidx-auto", "ragidx-auto-unfused", "st-float32"]
    assert systems == expected + (["st-bfloat16"] if host["native_bfloat16"] else [])
    for row in host["rows"]:
        assert _positive(row["tokens_per_s"]) and _positive(row["ratio_over_peer"]), row
        assert row["min_cosine_to_float32"] > 0.99, row  # bfloat16 rows within the CPU default's bar
    assert [r["ratio_over_peer"] for r in host["rows"] if r["system"] == host["peer"]] == [1.0]


def _script() -> ModuleType:
    return load_script(SCRIPT, "gpu_run")


def test_a_command_whose_packages_are_missing_is_recorded_as_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _script()
    assert run._missing("json", "no_such_module_ragidx") == ["no_such_module_ragidx"]
    monkeypatch.setitem(run.CLI_NEEDS, "ingest", ("no_such_module_ragidx",))
    row = run._cli_case(SimpleNamespace(), "ingest", ["ingest", "docs", "-i", "ix"], None, set())
    assert row["error"].startswith("not run: needs no_such_module_ragidx")
    later = run._cli_case(SimpleNamespace(), "query", ["query", "q", "-i", "ix"], "ix", {"ix"})
    assert later["error"] == "not run: the ingest that builds its index failed"


def test_cli_and_pipeline_rows_in_the_table() -> None:
    run = _script()
    cli = {"rows": [
        {"command": "ingest chunk", "seconds": 1.5, "exit_code": 0, "last_line": "ingested 7"},
        {"command": "serve", "seconds": 9.0, "exit_code": 0, "health": "ok", "search_s": 0.03, "hits": 3},
        {"command": "query", "error": "not run: the ingest that builds its index failed"},
    ]}  # fmt: skip
    rows = run._cli_rows(cli)
    assert [r[1] for r in rows] == ["ingest chunk", "serve", "query"]
    assert rows[0][6] == "exit 0; ingested 7" and "3 hits" in rows[1][6] and rows[2][6].startswith("not run")
    pipeline = {
        "documents": 4, "tokens_embedded": 1000, "model_load_s": 0.5, "ingest_seconds": [2.0],
        "ingest_tokens_per_s": 500.0, "encoder_alone_seconds": [1.0], "encoder_alone_tokens_per_s": 1000.0,
        "embed_only_seconds": [0.8], "embed_only_tokens_per_s": 1250.0, "encoder_share_of_ingest": 0.5,
        "ingest_over_encoder": 2.0,
    }  # fmt: skip
    rows = run._pipeline_rows(pipeline)
    assert [r[1].split(" tok ")[1] for r in rows] == ["ragidx.ingest", "encoder alone", "embed only"]
    assert rows[1][5] == "2.00x" and rows[1][6] == "encoder alone 50% of ingest"
