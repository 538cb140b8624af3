"""benchmarks/gpu/run.py, the one-shot GPU benchmark: it refuses to run without CUDA (one line,
exit 2), and its ``--device cpu --quick`` mode runs every section end to end (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert "section | case" in done.stdout  # the table
    data = json.loads(out.read_text(encoding="utf-8"))
    sections = data["sections"]
    assert set(sections) == {"encode", "extension", "search", "train"}
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
