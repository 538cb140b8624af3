"""``ragidx eval``, ``eval grid`` and ``eval compare`` through Typer's CliRunner (tiny random model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.search.trec import read_run_file
from tests.conftest import write_qmsum

runner = CliRunner()


@pytest.fixture(scope="module")
def evaluated(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("eval") / "out"
    args = ["eval", "-t", "passkey", "-m", str(tiny_model), "-s", "truncate", "-s", "extend:pi"]
    args += ["--lengths", "256", "--max-length", "256", "--out", str(out), "--device", "cpu"]
    result = runner.invoke(app, [*args, "--cache-dir", str(out.parent / "cache"), "--json"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)["records"]
    assert [(r["task"], r["strategy"]) for r in records] == [
        ("passkey", "truncate"),
        ("passkey", "extend:pi"),
    ]
    return out


@pytest.mark.slow
def test_eval_writes_the_result_folder(evaluated: Path) -> None:
    assert {p.name for p in evaluated.iterdir()} == {"results.json", "results.md", "runs", "plots"}
    assert len(list((evaluated / "runs").glob("*.trec.gz"))) == 2
    records = json.loads((evaluated / "results.json").read_text())["records"]
    assert {r["hardware"]["dtype"] for r in records} == {"float32"}  # --dtype auto on the CPU


@pytest.mark.slow
def test_compare_shows_folders_and_the_paper_rows(evaluated: Path) -> None:
    result = runner.invoke(app, ["eval", "compare", str(evaluated), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r["scores"] for r in json.loads(result.stdout)["rows"]}
    assert set(rows["truncate"]) == {"passkey", "avg"}
    assert rows["[paper] E5-Base"] == {"passkey": 38.0, "avg": 38.0}
    table = runner.invoke(app, ["eval", "compare", str(evaluated), "--no-reference"])
    assert "extend:pi @256" in table.stdout and "[paper]" not in table.stdout


@pytest.mark.slow
def test_grid_file_resumes_the_same_folder(evaluated: Path, tiny_model: Path, tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text(
        f'models = ["{tiny_model}"]\nstrategies = ["truncate"]\ntasks = ["passkey"]\nlengths = [256]\n'
        f'out = "{evaluated}"\ncache_dir = "{evaluated.parent / "cache"}"\ndevice = "cpu"\n'
    )
    result = runner.invoke(app, ["eval", "grid", str(grid)])
    assert result.exit_code == 0, result.output
    assert "done earlier" in result.output
    assert len(json.loads((evaluated / "results.json").read_text())["records"]) == 2


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["eval", "--out", "x"], 2, "give at least one --task"),
        (["eval", "-t", "passkey"], 2, "give --out DIR"),
        (
            ["eval", "-t", "passkey", "-s", "chunk+pcw", "--out", "x"],
            2,
            "pcw beside chunk makes a hybrid document vector",
        ),
        (["eval", "-t", "passkey", "--max-length", "2k", "--out", "x"], 2, "'2k' is not a whole number"),
        (["eval", "compare", "no-such-folder"], 1, "no-such-folder: no results.json"),
        (["eval", "-t", "passkey", "--select", "chunk", "--out", "x"], 2, "select chunk: give at least two"),
        (["eval", "-t", "passkey", "--select", "chunk,chunk", "--out", "x"], 2, "at least two different"),
        (
            ["eval", "-t", "passkey", "--select", "chunk,fancy", "--out", "x"],
            2,
            "strategy fancy: unknown part",
        ),
        (
            ["eval", "-t", "passkey", "-s", "bm25:0.3", "--out", "x"],
            2,
            "strategy bm25:0.3: bm25:… fuses BM25 with a dense strategy",
        ),
        (["eval", "-t", "passkey", "-s", "chunk+bm25:2", "--out", "x"], 2, "+bm25:<w> with w (BM25's"),
        (["eval", "-t", "passkey", "-s", "bm25+chunk", "--out", "x"], 2, "append +bm25:<w|rrf|auto> to it"),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(
    args: list[str], code: int, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == code and message in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('strategies = ["nope"]', "strategy nope: unknown part"),
        ('selections = [["chunk:256"]]', "select chunk:256: give at least two different strategies"),
        ('selections = [["chunk:256", "nope"]]', "strategy nope: unknown part"),
        ("strategies = []", "give at least one strategy (or a selection of strategies)"),
        ('dtype = "float64"', "dtype: Input should be 'auto', 'float32', 'float16', 'bfloat16' or 'int8'"),
        ('backend = "tensorrt"', "backend: Input should be 'torch' or 'onnx'"),
    ],
)
def test_bad_grid_file_names_the_file(line: str, message: str, tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text(f'tasks = ["passkey"]\nout = "o"\n{line}\n')
    result = runner.invoke(app, ["eval", "grid", str(grid)])
    assert result.exit_code == 2 and f"{grid}: {message}" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_grid_file_with_several_mistakes_names_each_with_the_valid_keys(tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text('tasks = ["passkey"]\nout = "x"\nmodel = ["m"]\nstrategy = ["chunk"]\ndtype = "f32"\n')
    result = runner.invoke(app, ["eval", "grid", str(grid)])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 3 and all(line.startswith(f"error: {grid}: ") for line in lines), lines
    assert any("model: unknown key; valid keys: models, strategies," in line for line in lines)
    assert any(line.endswith("(did you mean 'models'?)") for line in lines)
    assert any(line.endswith("(did you mean 'strategies'?)") for line in lines)
    assert any("dtype: Input should be 'auto', 'float32'" in line for line in lines)


@pytest.mark.slow
def test_select_through_the_cli_and_a_grid_file(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "sel"
    args = ["eval", "-t", "passkey", "-m", str(tiny_model), "--select", "chunk:16:0, truncate"]
    args += ["--lengths", "256", "--max-length", "256", "--out", str(out), "--device", "cpu"]
    result = runner.invoke(app, [*args, "--cache-dir", str(tmp_path / "cache"), "--json"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)["records"]
    assert [r["strategy"] for r in records] == ["chunk:16:0", "truncate", "select:chunk:16:0|truncate"]
    selection = records[-1]["parameters"]["selection"]["256"]
    assert len(selection["fold_choices"]) == 5 and set(selection["fold_choices"]) <= {
        "chunk:16:0",
        "truncate",
    }
    grid = tmp_path / "grid.toml"
    grid.write_text(
        f'models = ["{tiny_model}"]\nstrategies = []\nselections = [["chunk:16:0", "truncate"]]\n'
        f'tasks = ["passkey"]\nlengths = [256]\nmax_lengths = [256]\nout = "{out}"\n'
        f'cache_dir = "{tmp_path / "cache"}"\ndevice = "cpu"\n'
    )
    runs = {r["strategy"]: read_run_file(out / r["run_file"]) for r in records}
    composed = runs.pop("select:chunk:16:0|truncate")
    assert len(composed) == 50 and all(len(hits) == 100 for hits in composed.values())
    for qid, hits in composed.items():  # each query ranked as one of the candidates ranked it
        assert any(list(hits.items()) == list(run[qid].items()) for run in runs.values())
    table = (out / "results.md").read_text()
    assert "\n| select:chunk:16:0\\|truncate @256 | " in table  # escaped: one cell
    again = runner.invoke(app, ["eval", "grid", str(grid)])
    assert again.exit_code == 0, again.output
    assert again.output.count("done earlier") == 3
    resumed = json.loads((out / "results.json").read_text())["records"]
    assert [r["created"] for r in resumed] == [r["created"] for r in records]  # nothing recomputed


def test_sample_through_the_cli_and_compare(tiny_model: Path, tmp_path: Path) -> None:
    """--sample N runs qmsum[N] (its own column), and compare titles it "QMSum, N docs"."""
    data = write_qmsum(tmp_path / "data", 6)
    out = tmp_path / "sampled"
    args = ["eval", "-t", "qmsum", "-m", str(tiny_model), "-s", "truncate", "--sample", "3", "--seed", "1"]
    args += ["--data-dir", str(data), "--max-length", "256", "--out", str(out), "--device", "cpu", "--json"]
    result = runner.invoke(app, [*args, "--no-cache"])
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)["records"]
    assert record["task"] == "qmsum[3]" and record["groups"][0]["n_docs"] == 3
    assert "sample of 3 of 6 documents, seed 1" in record["task_source"]
    table = runner.invoke(app, ["eval", "compare", str(out), "--no-reference"])
    assert table.exit_code == 0 and "QMSum, 3 docs" in table.stdout
    refused = runner.invoke(app, [*args[:-1], "--sample", "0"])
    assert refused.exit_code == 2 and "--sample" in refused.output


def test_format_mteb_writes_mteb_result_files_beside_results_json(tiny_model: Path, tmp_path: Path) -> None:
    """--format mteb (eval and eval grid): OUT/mteb/<model>/<revision>/<Task>.json, fractions; a task
    LongEmbed lacks (a sample) is named as left out; stdout keeps the JSON alone."""
    data = write_qmsum(tmp_path / "data", 4)
    out = tmp_path / "out"
    args = ["eval", "-t", "qmsum", "-t", "qmsum", "-m", str(tiny_model), "-s", "truncate", "--no-cache"]
    args += ["--data-dir", str(data), "--max-length", "256", "--out", str(out), "--device", "cpu"]
    result = runner.invoke(app, [*args, "--format", "mteb", "--json"])
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)["records"]
    (path,) = (out / "mteb").rglob("*.json")
    system = f"{tiny_model.name}__truncate__window"  # truncate: the model's own window
    fingerprint = record["model_fingerprint"]
    assert path.relative_to(out / "mteb").parts == (system, fingerprint, "LEMBQMSumRetrieval.json")
    written = json.loads(path.read_text())
    assert written["task_name"] == "LEMBQMSumRetrieval" and written["mteb_version"] == "1.18.0"
    (entry,) = written["scores"]["test"]
    assert entry["main_score"] == entry["ndcg_at_10"] == pytest.approx(record["score"] / 100, abs=1e-6)
    assert entry["hf_subset"] == "default" and entry["languages"] == ["eng-Latn"]
    assert f"MTEB files: 1 in {out / 'mteb'}" in result.stderr
    grid = tmp_path / "grid.toml"
    grid.write_text(
        f'models = ["{tiny_model}"]\nstrategies = ["truncate"]\ntasks = ["qmsum"]\nsample = 2\n'
        f'max_lengths = [256]\ndata_dir = "{data}"\nout = "{out}"\ndevice = "cpu"\n'
        f'cache_dir = "{tmp_path / "cache"}"\n'
    )
    again = runner.invoke(app, ["eval", "grid", str(grid), "--format", "mteb", "-q"])
    assert again.exit_code == 0, again.output
    assert "MTEB files: left out qmsum[2]: not one of LongEmbed's tasks" in again.stderr
    assert "MTEB files: 1 in" in again.stderr
    bad = runner.invoke(app, [*args, "--format", "csv"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert bad.exit_code == 2 and "'csv' is not one of 'ragidx', 'mteb'" in bad.output


def test_help_teaches_the_bm25_strategies() -> None:
    result = runner.invoke(app, ["eval", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    assert "'bm25': BM25 alone over whole documents" in text
    assert "'+bm25:<w|rrf|auto>'" in text and "chunk:256:0+best:2+bm25:auto" in text
    assert "--strategy bm25 --strategy chunk --strategy chunk+bm25:auto" in text  # the example


def test_eval_progress_names_whole_documents_and_keeps_install_hints_whole(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Progress lines print their text as it is (rich would take ``[eval]`` in the install hint for
    markup), and a record without a max length is not labelled ``@None``."""
    from ragidx.evaluate import plots

    def no_matplotlib(*_: object) -> None:
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(plots, "write_plots", no_matplotlib)
    args = ["eval", "-t", "passkey", "-m", str(tiny_model), "-s", "truncate", "--lengths", "256"]
    args += ["--out", str(tmp_path / "out"), "--no-cache", "--device", "cpu"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "pip install 'ragidx[eval]'" in result.stderr
    assert "passkey · truncate" in result.stderr and "@None" not in result.output
