"""``ragidx ingest`` through Typer's CliRunner: summary, JSON, exit codes, error lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.index.directory import Index
from tests.conftest import long_text

runner = CliRunner()


def _docs(root: Path) -> Path:
    root.mkdir()
    (root / "a.txt").write_text("Bees dance to share where flowers are.")
    (root / "b.md").write_text(long_text(200))
    return root


def test_ingest_prints_a_summary(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    result = runner.invoke(
        app, ["ingest", str(docs), "--index", str(tmp_path / "ix"), "--model", str(tiny_model)]
    )
    assert result.exit_code == 0, result.output
    assert "2 added, 0 updated, 0 unchanged, 0 removed, 0 skipped" in result.stdout
    assert "1 chunk, 1 whole" in result.stdout
    assert "tokens/s" in result.stdout


def test_ingest_json_and_flags(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    args = [
        "ingest",
        str(docs),
        "-i",
        str(tmp_path / "ix"),
        "-m",
        str(tiny_model),
        "--long-doc",
        "pcw",
        "--faiss-factory",
        "HNSW16",
        "--exclude",
        "a.txt",
        "--json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["added"] == 1 and report["by_mode"] == {"pcw": 1} and report["vectors"] == 1
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["faiss"]["factory"] == "HNSW16" and manifest["long_doc"]["policy"] == "pcw"


def test_config_file_and_flag_override(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[model]\nmodel = "{tiny_model}"\n[long_doc]\npolicy = "truncate"\n')
    result = runner.invoke(app, ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-c", str(cfg), "--json"])
    assert json.loads(result.stdout)["by_mode"] == {"truncate": 1, "whole": 1}
    result = runner.invoke(
        app,
        ["ingest", str(docs), "-i", str(tmp_path / "ix2"), "-c", str(cfg), "--long-doc", "chunk", "--json"],
    )
    assert json.loads(result.stdout)["by_mode"] == {"chunk": 1, "whole": 1}


def test_skipped_files_warn_and_exit_3(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    (docs / "bad.txt").write_bytes(b"\x00\x00binary")
    result = runner.invoke(app, ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tiny_model)])
    assert result.exit_code == 3
    assert "warning:" in result.stderr and "bad.txt" in result.stderr and "binary" in result.stderr
    assert (tmp_path / "ix" / "manifest.json").is_file()


def test_errors_are_one_line_with_non_zero_exit(tmp_path: Path, tiny_model: Path) -> None:
    missing = runner.invoke(app, ["ingest", str(tmp_path / "nope"), "-i", str(tmp_path / "ix")])
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error: ") and "nope: no such file or directory" in missing.stderr
    assert "Traceback" not in missing.output

    docs = _docs(tmp_path / "docs")
    bad_model = runner.invoke(
        app, ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tmp_path / "nomodel")]
    )
    assert bad_model.exit_code == 2 and "no such model folder" in bad_model.stderr  # invalid settings
    assert not (tmp_path / "ix").exists()

    bad_cfg = tmp_path / "bad.toml"
    bad_cfg.write_text("[long_doc]\npolicy = 'sideways'\n")
    result = runner.invoke(app, ["ingest", str(docs), "-c", str(bad_cfg)])
    assert result.exit_code == 2 and "bad.toml: long_doc.policy" in result.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--debug", "ingest", str(tmp_path / "nope")])
    assert result.exit_code == 1 and result.exception is not None
    assert type(result.exception).__name__ == "InputError"


def test_help_teaches(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ingest", "--help"])
    assert result.exit_code == 0
    for text in ("--long-doc", "pcw", "--faiss-factory", "Exit status"):
        assert text in result.stdout
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.startswith("ragidx ")


def test_prune_and_strict_flags(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    base = ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tiny_model)]
    assert runner.invoke(app, base).exit_code == 0
    (docs / "a.txt").unlink()
    (docs / "bad.txt").write_bytes(b"\x00binary")
    strict = runner.invoke(app, [*base, "--prune", "--strict"])
    assert strict.exit_code == 1 and "under --strict" in strict.stderr and "bad.txt" in strict.stderr
    pruned = runner.invoke(app, [*base, "--prune"])
    assert pruned.exit_code == 3, pruned.output
    assert "0 added, 0 updated, 1 unchanged, 1 removed, 1 skipped" in pruned.stdout


@pytest.mark.slow
def test_hostile_folder_warns_once_per_file_and_ingests_the_rest(
    tmp_path: Path, tiny_model: Path, monkeypatch
) -> None:
    from ragidx.cli.console import one_line
    from ragidx.index.directory import Index
    from ragidx.read import pdf
    from tests.hostile import hostile_folder

    monkeypatch.setattr(pdf, "PDF_PAGE_CONTENT_LIMIT", 1 << 20)
    expected = hostile_folder(tmp_path / "docs")
    args = ["ingest", str(tmp_path / "docs"), "-i", str(tmp_path / "ix"), "-m", str(tiny_model)]
    strict = runner.invoke(app, [*args, "--strict"])
    assert strict.exit_code == 1 and "under --strict" in strict.stderr
    assert not (tmp_path / "ix" / "manifest.json").exists()
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == len(result.stderr.splitlines())  # every line is a whole warning
    for name, outcome in expected.items():
        if outcome != "ok":
            _kind, _, text = outcome.partition(":")
            assert any(one_line(name) in w and text in w for w in warnings), (name, warnings)
    assert sum("corpus.jsonl:" in w for w in warnings) == 3  # bad JSON, duplicate id, missing id
    ingested = Index.open(tmp_path / "ix").store.doc_ids()
    good = [name for name, outcome in expected.items() if outcome == "ok" and name != "corpus.jsonl"]
    assert sorted(ingested) == sorted([*good, "mixed.txt", "j1"])


def test_ingest_engine_ray_reports_what_a_local_ingest_reports(
    local_ray: None, tmp_path: Path, tiny_model: Path
) -> None:
    docs = _docs(tmp_path / "docs")
    (docs / "bad.txt").write_bytes(b"\x00\x01binary\x00" * 32)
    common = ["--model", str(tiny_model), "--json"]
    local = runner.invoke(app, ["ingest", str(docs), "-i", str(tmp_path / "local"), *common])
    distributed = runner.invoke(
        app, ["ingest", str(docs), "-i", str(tmp_path / "ray"), "--engine", "ray", "--workers", "1", *common]
    )
    assert local.exit_code == distributed.exit_code == 3, distributed.output  # committed, one skipped
    a, b = json.loads(local.stdout), json.loads(distributed.stdout)
    assert (b["engine"], b["workers"]) == ("ray", 1)
    for key in ("added", "skipped", "by_mode", "tokens", "vectors"):
        assert a[key] == b[key]


def test_ray_options_need_the_ray_engine(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    result = runner.invoke(app, ["ingest", str(docs), "-i", str(tmp_path / "ix"), "--workers", "2"])
    assert result.exit_code == 2
    assert "need --engine ray" in result.output
    assert not (tmp_path / "ix").exists()


def test_ray_job_failure_is_one_line_and_commits_nothing(
    local_ray: None, tmp_path: Path, tiny_model: Path
) -> None:
    docs = _docs(tmp_path / "docs")
    ix = str(tmp_path / "ix")
    assert runner.invoke(app, ["ingest", str(docs), "-i", ix, "--model", str(tiny_model)]).exit_code == 0
    (docs / "c.txt").write_text("A new document the workers cannot embed.")
    # the index exists, so only the Ray actors load the model, and that model folder is missing
    missing = str(tmp_path / "no-such-model")
    args = ["ingest", str(docs), "-i", ix, "--engine", "ray", "--workers", "1", "--model", missing]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "the Ray job failed (ModelPathError: " in error[0], result.stderr[-2000:]
    assert "no-such-model" in error[0] and "re-run to resume" in error[0]
    assert len(Index.open(ix)) == 2  # nothing committed


# ------------------------------------------------------------------------ late, budget, hybrid, --strategy
def _squeezed(text: str) -> str:
    """Output without spaces and table borders (rich folds long cells over several lines)."""
    return "".join(ch for ch in text if not ch.isspace() and ch not in "│┃|")


def _vectors_per_doc(index: Index) -> dict[str, list[int]]:
    return {d: index.store.document_vids(d)[1].tolist() for d in index.store.doc_ids()}


def test_ingest_long_doc_late_with_a_budget(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    args = ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tiny_model), "--json"]
    result = runner.invoke(
        app, [*args, "--long-doc", "late", "--chunk-size", "16", "--overlap", "0", "--vectors-per-doc", "3"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["by_mode"] == {"late": 1, "whole": 1} and report["vectors"] == 4
    index = Index.open(tmp_path / "ix")
    assert _vectors_per_doc(index) == {"a.txt": [0], "b.md": [0, 1, 2]}
    long_doc = index.manifest.long_doc
    assert (long_doc.policy, long_doc.chunk_size, long_doc.vectors_per_doc) == ("late", 16, 3)


def test_ingest_hybrid_flags_record_the_fusion(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    args = ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tiny_model), "-q"]
    flags = ["--chunk-size", "16", "--overlap", "4", "--hybrid", "0.3", "--hybrid-tuned-on", "qmsum dev"]
    result = runner.invoke(app, [*args, *flags])
    assert result.exit_code == 0, result.output
    index = Index.open(tmp_path / "ix")
    assert index.hybrid and _vectors_per_doc(index)["a.txt"] == [-1, 0]
    hybrid = index.manifest.long_doc.hybrid
    assert hybrid is not None
    assert (hybrid.document, hybrid.fusion, hybrid.weight, hybrid.tuned_on) == (
        "pcw",
        "weighted",
        0.3,
        "qmsum dev",
    )
    info = runner.invoke(app, ["info", str(tmp_path / "ix")])
    expected = (
        "hybrid: document vector from pcw, fused weighted, document weight 0.3 (weight tuned on qmsum dev)"
    )
    assert _squeezed(expected) in _squeezed(info.stdout)


def test_ingest_strategy_spec(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    args = ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tiny_model), "--json"]
    result = runner.invoke(app, [*args, "--strategy", "late:16+extend:pi+hybrid:rrf", "--max-tokens", "128"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["by_mode"] == {"late+extend:pi": 1, "whole": 1}
    index = Index.open(tmp_path / "ix")
    long_doc = index.manifest.long_doc
    assert long_doc.policy == "late" and long_doc.chunk_size == 16 and long_doc.max_tokens is None
    assert long_doc.extension.method == "pi" and long_doc.extension.target_length == 128
    assert long_doc.hybrid is not None and long_doc.hybrid.document == "pass"
    assert index.hybrid and _vectors_per_doc(index)["b.md"][:2] == [-1, 0]
    info = runner.invoke(app, ["info", str(tmp_path / "ix")])
    text = _squeezed(info.stdout)
    assert (
        _squeezed("late (late chunks of 16 tokens, overlap 0), hybrid: document vector from pass, fused rrf")
        in text
    )
    assert _squeezed("extension (pi to 128 tokens") in text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--strategy", "late+chunk"], "at most one of chunk/late"),
        (["--strategy", "bogus:3"], "unknown part 'bogus:3'"),
        (["--strategy", "late+hybrid:auto"], "parameters.hybrid_tuning"),
        (["--strategy", "late:16", "--long-doc", "chunk"], "not also --long-doc"),
        (["--strategy", "late+extend:pi"], "add --max-tokens N"),
        (["--strategy", "late", "--hybrid-tuned-on", "dev"], "needs a hybrid:… part"),
        (["--hybrid", "1.5"], "--hybrid 1.5: use rrf or a weight w in [0, 1]"),
        (["--hybrid", "auto"], "--hybrid auto: the weight is chosen by cross-validation"),
        (["--long-doc", "pcw", "--hybrid", "rrf"], "hybrid and best_chunks apply to the chunk and late"),
        (["--long-doc", "chunk", "--hybrid", "rrf", "--hybrid-document", "pass"], "needs the late policy"),
        (["--hybrid-document", "pcw"], "need --hybrid rrf|<w>"),
        (["--vectors-per-doc", "0"], "--vectors-per-doc"),
    ],
)
def test_bad_long_doc_settings_are_one_line_and_exit_2(
    tmp_path: Path, tiny_model: Path, flags: list[str], message: str
) -> None:
    docs = _docs(tmp_path / "docs")
    result = runner.invoke(
        app, ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tiny_model), *flags]
    )
    assert result.exit_code == 2, result.output
    assert _squeezed(message) in _squeezed(result.output)
    if "error:" in result.output:
        assert len([line for line in result.output.splitlines() if line.strip()]) == 1
    assert not (tmp_path / "ix").exists()


# ------------------------------------------------------------------------ no silent cuts, missing files
def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


def test_an_ingest_that_cuts_documents_says_so_in_one_line(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    (docs / "c.md").write_text(long_text(400, seed=3))
    base = ["ingest", str(docs), "-m", str(tiny_model)]
    truncated = runner.invoke(app, [*base, "-i", str(tmp_path / "truncate"), "--long-doc", "truncate"])
    assert truncated.exit_code == 0, truncated.output
    (line,) = _warnings(truncated.stderr)
    tokens = {d["doc_id"]: d for d in Index.open(tmp_path / "truncate").summaries()}["c.md"]
    assert "2 documents embedded in part, not whole" in line
    assert f"largest cut: c.md, {tokens['n_embedded']:,} of {tokens['n_tokens']:,} tokens embedded" in line
    assert "--long-doc truncate embeds the first window only" in line and "--long-doc chunk" in line

    extend = ["--long-doc", "extend", "--method", "pi", "--target-length", "128"]
    extended = runner.invoke(app, [*base, "-i", str(tmp_path / "extend"), *extend])
    assert extended.exit_code == 0, extended.output
    (line,) = _warnings(extended.stderr)
    assert "extend:pi reads one pass of at most 128 tokens (target_length)" in line
    assert "a longer one compresses every document's positions" in line  # why it is not the default
    assert "ingest into a new index with --long-doc chunk" in line
    assert "--target-length N (up to 32768) to read longer documents whole" in line
    # with s per document a longer target compresses nothing shorter: no trade-off to name
    per_document = ["--strategy", "extend:pi+scale:doc", "--max-tokens", "128"]
    scaled = runner.invoke(app, [*base, "-i", str(tmp_path / "per-document"), *per_document])
    assert scaled.exit_code == 0, scaled.output
    (line,) = _warnings(scaled.stderr)
    assert "extend:pi reads one pass of at most 128 tokens (target_length); ingest into a new" in line
    assert "compresses" not in line and "--target-length N (up to 32768)" in line

    whole = runner.invoke(app, [*base, "-i", str(tmp_path / "chunk"), "--json"])
    assert whole.exit_code == 0 and _warnings(whole.stderr) == []  # chunking cuts nothing
    assert json.loads(whole.stdout)["cut"] == 0


@pytest.mark.parametrize(
    ("long_doc", "expected"),
    [
        ({"policy": "chunk", "max_tokens": 100}, "max_tokens = 100 cuts documents to their first 100 tokens"),
        ({"policy": "pcw", "max_tokens": 100}, "without --max-tokens (or with a larger one)"),
        (
            {"policy": "extend", "extension": {"method": "ntk", "target_length": 32768}},
            "extend:ntk reads one pass of at most 32,768 tokens (target_length), the longest ragidx supports",
        ),
        (
            {"policy": "extend", "max_tokens": 1000, "extension": {"method": "pi", "target_length": 4096}},
            "max_tokens = 1,000 cuts documents",
        ),
    ],
)
def test_the_cut_warning_names_the_setting_that_avoids_it(long_doc: dict, expected: str) -> None:
    from ragidx.cli.ingest import cut_warning
    from ragidx.embed.config import LongDocConfig
    from ragidx.ingestion.pipeline import IngestReport

    report = IngestReport(index="ix")
    for doc_id, tokens, embedded in (("a", 500, 100), ("big", 90_000, 32_766), ("b", 50, 50)):
        report.count_cut(doc_id, tokens, embedded)
    line = cut_warning(report, LongDocConfig.model_validate(long_doc))
    assert line.startswith("2 documents embedded in part, not whole (largest cut: big, 32,766 of 90,000")
    assert expected in line


def test_reingest_without_prune_names_documents_whose_file_is_gone(tmp_path: Path, tiny_model: Path) -> None:
    docs = _docs(tmp_path / "docs")
    for i in range(4):
        (docs / f"extra-{i}.txt").write_text(f"Extra document number {i}.")
    base = ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tiny_model)]
    assert runner.invoke(app, base).exit_code == 0
    (docs / "a.txt").unlink()
    kept = runner.invoke(app, base)
    assert kept.exit_code == 0, kept.output
    assert "0 removed" in kept.stdout
    (line,) = _warnings(kept.stderr)
    assert f"1 indexed document under {docs} no longer has its file (or JSONL record) (a.txt)" in line
    assert "ingest with --prune to remove it" in line
    for i in range(4):
        (docs / f"extra-{i}.txt").unlink()
    several = runner.invoke(app, [*base, "--json"])
    assert json.loads(several.stdout)["missing"] == ["a.txt", *(f"extra-{i}.txt" for i in range(4))]
    (line,) = _warnings(several.stderr)
    assert "5 indexed documents under" in line and "(a.txt, extra-0.txt, extra-1.txt, …)" in line
    assert "to remove them" in line
    pruned = runner.invoke(app, [*base, "--prune"])
    assert pruned.exit_code == 0 and "5 removed" in pruned.stdout and _warnings(pruned.stderr) == []


def test_the_read_bar_is_full_once_every_document_is_read(tmp_path: Path, tiny_model: Path) -> None:
    import io

    from rich.console import Console
    from rich.progress import Progress as RichBar

    from ragidx.cli.ingest import _Progress
    from ragidx.ingestion.pipeline import ingest
    from tests.conftest import tiny_config

    bar = RichBar(console=Console(file=io.StringIO()))
    progress = _Progress(bar)
    ingest(_docs(tmp_path / "docs"), tmp_path / "ix", tiny_config(tiny_model), progress=progress)
    read, embedded = bar.tasks
    assert (read.total, read.completed, read.finished) == (2, 2, True)  # not 2/?
    assert embedded.finished


def test_the_summary_counts_workers_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    from ragidx.cli.ingest import _summary
    from ragidx.ingestion.pipeline import IngestReport

    for workers, words in ((1, "ray engine, 1 worker)"), (3, "ray engine, 3 workers)")):
        _summary(IngestReport(index="ix", engine="ray", workers=workers))
        assert words in capsys.readouterr().out


def test_quiet_ray_keeps_ray_info_logging_off_the_console(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging
    import os

    pytest.importorskip("ray.data")
    from ragidx.cli.ingest import quiet_ray

    monkeypatch.delenv("RAY_LOGGER_LEVEL", raising=False)
    monkeypatch.delenv("RAY_DATA_DISABLE_PROGRESS_BARS", raising=False)
    quiet_ray()
    assert os.environ["RAY_LOGGER_LEVEL"] == "warning" and os.environ["RAY_DATA_DISABLE_PROGRESS_BARS"] == "1"
    console = [
        h
        for h in logging.getLogger("ray.data").handlers
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
    ]
    assert console and all(h.level == logging.WARNING for h in console)

    def shown(level: int, message: str) -> bool:
        record = logging.LogRecord("ray.data", level, __file__, 1, message, None, None)
        return all(h.level <= level and h.filter(record) for h in console)

    assert not shown(logging.INFO, "Starting execution of Dataset dataset_1")
    assert not shown(logging.WARNING, "Progress bars disabled. To enable, set …")  # ragidx draws its own
    assert shown(logging.WARNING, "Cluster resources are not enough to run any task")


@pytest.mark.parametrize(("dtype", "shown"), [(None, "float32"), ("bfloat16", "bfloat16")])
def test_info_shows_the_precision_of_the_vectors(
    tmp_path: Path, tiny_model: Path, dtype: str | None, shown: str
) -> None:
    """ragidx info says what precision the document vectors were computed in (the manifest's
    encoder.precision, absent for float32), so a user can see why two indexes of one model differ."""
    docs = _docs(tmp_path / "docs")
    config = tmp_path / "settings.toml"
    config.write_text(f'[model]\ndtype = "{dtype}"\n' if dtype else "", encoding="utf-8")
    args = ["ingest", str(docs), "-i", str(tmp_path / "ix"), "-m", str(tiny_model), "-q", "-c", str(config)]
    assert (result := runner.invoke(app, args)).exit_code == 0, result.output
    info = runner.invoke(app, ["info", str(tmp_path / "ix")])
    assert info.exit_code == 0, info.output
    assert _squeezed(f"precision{shown}") in _squeezed(info.stdout)
