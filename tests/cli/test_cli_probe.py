"""``ragidx probe position|collapse`` through CliRunner: outputs, JSON, cache, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.probe.report import ProbeResults
from tests.conftest import long_text

runner = CliRunner()


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("texts")
    for i, words in enumerate((40, 90, 160)):
        (folder / f"t{i}.txt").write_text(long_text(words, seed=i))
    return folder


def _probe(model: Path, *args: str) -> list[str]:
    return ["probe", *args, "--model", str(model), "--device", "cpu", "--max-tokens", "120"]


@pytest.mark.slow
def test_position_writes_results_plots_and_the_headline(
    tmp_path: Path, tiny_model: Path, texts: Path
) -> None:
    out = tmp_path / "out"
    cache = tmp_path / "cache"
    args = _probe(tiny_model, "position", "--texts", str(texts), "--out", str(out), "--cache", str(cache))
    result = runner.invoke(app, [*args, "-s", "truncate", "-s", "extend:pi", "--limit", "2"])
    assert result.exit_code == 0, result.output
    assert "truncate: 20 % inserted at the beginning" in result.stdout and "drop" in result.stdout
    data = ProbeResults.model_validate_json((out / "results.json").read_text())
    assert data.probe == "position" and [s.strategy for s in data.strategies] == ["truncate", "extend:pi"]
    assert data.data.n_texts == 2 and data.parameters["max_tokens"] == 120
    assert data.figures == ["importance.png", "insertion.png", "removal.png"]
    for name in data.figures:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "results.md").read_text()
    assert (
        "probe position" in markdown
        and "| extend:pi |" in markdown
        and "![insertion](insertion.png)" in markdown
    )
    assert not list(out.glob(".*tmp*"))
    parts = len(list(cache.glob("part-*.parquet")))
    assert parts >= 2
    again = runner.invoke(app, [*args, "-s", "truncate", "--limit", "2", "--json"])
    assert again.exit_code == 0
    assert json.loads(again.stdout)["strategies"][0]["strategy"] == "truncate"
    assert len(list(cache.glob("part-*.parquet"))) == parts  # everything came from the cache


@pytest.mark.slow
def test_collapse_sweeps_tau(tmp_path: Path, tiny_model: Path, texts: Path) -> None:
    out = tmp_path / "out"
    args = _probe(tiny_model, "collapse", "--texts", str(texts), "--out", str(out))
    result = runner.invoke(app, [*args, "-s", "pcw", "--tau", "0.5,1.0", "--words", "river,stone", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (row,) = data["strategies"]
    assert row["strategy"] == "pcw" and [t["tau"] for t in row["taus"]] == [0.5, 1.0]
    assert [(b["lo"], b["hi"]) for b in row["taus"][0]["buckets"]] == [(0, 120)]
    assert row["repetition_n"] == [1, 2, 4, 8, 16, 32, 64]
    first, second = row["taus"]
    assert first["repetition"] != second["repetition"]  # τ changes the vectors
    assert (out / "collapse.png").is_file() and (out / "repetition.png").is_file()
    assert "gap (long − short)" in (out / "results.md").read_text()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["-s", "fancy"], 2, "strategy fancy: unknown part 'fancy'"),
        (["-s", "chunk"], 2, "one vector per text"),
        (["--tau", "2"], 2, "--tau 2: must be in (0, 1]"),
    ],
)
def test_position_bad_options(tmp_path: Path, tiny_model: Path, texts: Path, args, code, message) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app, [*_probe(tiny_model, "position", "--texts", str(texts), "--out", str(out)), *args]
    )
    assert result.exit_code == code
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr
    assert not out.exists()


def test_empty_folder_and_texts_too_short(tmp_path: Path, tiny_model: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(
        app, _probe(tiny_model, "position", "--texts", str(empty), "--out", str(tmp_path / "o"))
    )
    assert result.exit_code == 1 and f"error: {empty}: no texts found" in result.stderr
    assert result.stderr.strip().count("\n") == 0
    short = tmp_path / "short"
    short.mkdir()
    (short / "a.txt").write_text("Too short. To split.")
    for command in ("position", "collapse"):
        result = runner.invoke(
            app, _probe(tiny_model, command, "--texts", str(short), "--out", str(tmp_path / "o"))
        )
        assert result.exit_code == 1 and f"error: {short}: no " in result.stderr, result.output
        assert "longer texts" in result.stderr
        assert result.stderr.strip().count("\n") == 0
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_min_tokens_picks_the_long_texts_before_the_limit(
    tmp_path: Path, tiny_model: Path, texts: Path
) -> None:
    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder

    encoder = Encoder(EncoderConfig(model=str(tiny_model), device="cpu"))
    counts = {p.name: len(encoder.tokenize(p.read_text(), "document")) for p in sorted(texts.iterdir())}
    shortest = min(counts.values())
    assert sorted(counts.values())[1] > shortest  # t0 is the one text left out below
    position = _probe(tiny_model, "position", "--texts", str(texts), "--out", str(tmp_path / "p"))
    result = runner.invoke(
        app, [*position, "-s", "pcw", "--min-tokens", str(shortest + 1), "--limit", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["data"]["n_texts"] == 1 and data["parameters"]["min_tokens"] == shortest + 1
    assert data["data"]["text_ids"] == ["t1.txt"]  # t0 is too short, t1 comes first
    collapse = _probe(tiny_model, "collapse", "--texts", str(texts), "--out", str(tmp_path / "c"))
    result = runner.invoke(app, [*collapse, "--min-tokens", str(max(counts.values()) + 1)])
    assert result.exit_code == 1 and result.stderr.strip().count("\n") == 0
    assert f"no text has {max(counts.values()) + 1} tokens (the longest, t2.txt," in result.stderr
    assert not (tmp_path / "c").exists()


def test_collapse_bad_tau_and_words(tmp_path: Path, tiny_model: Path, texts: Path) -> None:
    base = _probe(tiny_model, "collapse", "--texts", str(texts), "--out", str(tmp_path / "o"))
    for extra, message in ((["--tau", "0.5,x"], "--tau 0.5,x"), (["--words", "dog"], "exactly two words")):
        result = runner.invoke(app, [*base, *extra])
        assert result.exit_code == 2 and message in result.stderr


def test_help_teaches() -> None:
    result = runner.invoke(app, ["probe", "--help"])
    assert result.exit_code == 0 and "position" in result.stdout and "collapse" in result.stdout
    assert "begin-vs-end drop" in runner.invoke(app, ["probe", "position", "--help"]).stdout


def test_missing_extras_are_named_before_any_work() -> None:
    from ragidx.errors import ConfigError
    from ragidx.probe.run import require_extras

    require_extras("matplotlib", "scipy")
    with pytest.raises(ConfigError, match=r"needs ragidx_no_such_module: pip install 'ragidx\[probe\]'"):
        require_extras("ragidx_no_such_module")
