"""``ragidx train``: a pairs file and a folder of documents from the command line, TOML settings,
one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ragidx.cli import app

runner = CliRunner()


def _pairs(path: Path) -> Path:
    topics = ["bees", "rivers", "trains", "violins", "glaciers", "owls"]
    rows = [
        {"query": f"about {t}", "positive": f"{t} are described here. " * 4, "source": t} for t in topics * 2
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_train_on_a_pairs_file_then_ingest_with_the_model(tmp_path: Path, tiny_model: Path) -> None:
    out = tmp_path / "model"
    args = ["train", str(_pairs(tmp_path / "p.jsonl")), "-o", str(out), "-m", str(tiny_model)]
    result = runner.invoke(app, [*args, "--steps", "2", "--batch-size", "3", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["steps"] == 2 and summary["pairs"] == 12
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("bees and their honey")
    ingest = runner.invoke(app, ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(out), "-q"])
    assert ingest.exit_code == 0, ingest.output


def test_train_on_documents_with_a_toml_config(tmp_path: Path, tiny_model: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"{i}.txt").write_text(
            " ".join(f"Sentence {j} of document {i} says a thing." for j in range(10))
        )
    config = tmp_path / "train.toml"
    config.write_text(
        f'[train]\nmodel = "{tiny_model}"\nsteps = 1\nbatch_size = 4\npooling = "lmk"\ndevice = "cpu"\n'
    )
    result = runner.invoke(app, ["train", str(docs), "-o", str(tmp_path / "m"), "-c", str(config), "-q"])
    assert result.exit_code == 0, result.output
    assert "trained 1 steps on 32 pairs" in result.stdout
    assert json.loads((tmp_path / "m" / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "lmk"


def test_bad_settings_and_data_are_one_line_errors(tmp_path: Path, tiny_model: Path) -> None:
    pairs = _pairs(tmp_path / "p.jsonl")
    bad = runner.invoke(app, ["train", str(pairs), "-o", str(tmp_path / "m"), "--pooling", "max"])
    assert bad.exit_code == 2 and "error: pooling:" in bad.output
    missing = runner.invoke(
        app, ["train", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "m"), "-m", str(tiny_model)]
    )
    assert missing.exit_code != 0 and "nope.jsonl: no such file or folder" in missing.output
    (tmp_path / "broken.jsonl").write_text('{"query": "q", "positive": "p"}\n{"query": 3}\n')
    broken = runner.invoke(
        app,
        [
            "train",
            str(tmp_path / "broken.jsonl"),
            "-o",
            str(tmp_path / "m2"),
            "-m",
            str(tiny_model),
            "--device",
            "cpu",
        ],
    )
    assert broken.exit_code != 0 and "broken.jsonl:2:" in broken.output


def test_train_a_reranker_from_the_command_line(tmp_path: Path, tiny_model: Path) -> None:
    from sentence_transformers.cross_encoder import CrossEncoder

    out = tmp_path / "reranker"
    args = ["train", str(_pairs(tmp_path / "p.jsonl")), "-o", str(out), "-m", str(tiny_model)]
    result = runner.invoke(
        app,
        [*args, "--objective", "rerank", "--steps", "2", "--batch-size", "3", "--device", "cpu", "--json"],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["objective"] == "rerank" and summary["steps"] == 2 and summary["pairs"] == 12
    scores = CrossEncoder(str(out), device="cpu").predict([("about bees", "bees are described here.")])
    assert scores.shape == (1,)


def test_rerank_with_positions_or_lmk_is_one_line_error(tmp_path: Path, tiny_model: Path) -> None:
    pairs = _pairs(tmp_path / "p.jsonl")
    base = ["train", str(pairs), "-o", str(tmp_path / "m"), "-m", str(tiny_model), "--objective", "rerank"]
    for extra, named in ((["--positions", "pi"], "positions 'pi'"), (["--pooling", "lmk"], "pooling 'lmk'")):
        bad = runner.invoke(app, [*base, *extra])
        assert bad.exit_code == 2, bad.output
        lines = bad.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and "objective 'rerank'" in lines[0]
        assert named in lines[0]
    assert not (tmp_path / "m").exists()
