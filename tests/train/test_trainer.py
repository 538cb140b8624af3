"""Training runs end to end on a tiny random model: output, resume, refusals, corpus pairs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ragidx.embed.config import EncoderConfig
from ragidx.embed.encoder import Encoder
from ragidx.errors import ConfigError
from ragidx.train.config import TrainConfig
from ragidx.train.trainer import train
from tests.train.interrupt import train_interrupted

TOPICS = [
    "bees",
    "honey",
    "rivers",
    "mountains",
    "trains",
    "violins",
    "glaciers",
    "volcanoes",
    "tulips",
    "comets",
    "owls",
    "deserts",
]


def _pairs(path: Path, n: int = 24) -> Path:
    rows = [
        {
            "query": f"tell me about {TOPICS[i % 12]}",
            "positive": f"All about {TOPICS[i % 12]}: {TOPICS[i % 12]} are described here in detail. " * 3,
            "source": f"doc{i % 12}",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(model: Path, **settings: object) -> TrainConfig:
    base: dict[str, object] = {
        "model": str(model),
        "device": "cpu",
        "steps": 4,
        "batch_size": 4,
        "checkpoint_every": 2,
    }
    return TrainConfig.model_validate({**base, **settings})


def test_a_run_writes_a_model_ragidx_and_sentence_transformers_load(tmp_path: Path, tiny_model: Path) -> None:
    result = train(_config(tiny_model), _pairs(tmp_path / "pairs.jsonl"), tmp_path / "out")
    assert result.steps == 4 and len(result.losses) == 4
    record = json.loads(result.record.read_text())
    assert record["steps"] == 4 and record["data"]["pairs"] == 24 and record["data"]["with_negatives"] == 24
    assert (tmp_path / "out" / "training" / "loss.png").is_file()
    assert not (tmp_path / "out" / "training" / "checkpoint").exists()
    trained = Encoder(EncoderConfig(model=str(tmp_path / "out"), device="cpu"))
    base = Encoder(EncoderConfig(model=str(tiny_model), device="cpu"))
    texts = ["bees make honey", "comets have tails"]
    after, before = trained.embed(texts)[0], base.embed(texts)[0]
    assert not np.allclose(after, before)  # it learned something
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tmp_path / "out"), device="cpu")
    assert np.allclose(st.encode(texts), after, atol=1e-5)


def test_training_runs_float32_where_auto_would_be_bfloat16(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The optimiser updates float32 weights even on an AMX CPU (dtype auto: bfloat16 there)."""
    from ragidx.train.trainer import _encoder_config

    monkeypatch.setenv("RAGIDX_CPU_BFLOAT16", "1")
    encoder = Encoder(_encoder_config(_config(tiny_model)))
    assert encoder.dtype == torch.float32 and next(encoder.model.parameters()).dtype == torch.float32


def test_an_lmk_model_is_loaded_with_its_landmarks(tmp_path: Path, tiny_model: Path) -> None:
    config = _config(tiny_model, pooling="lmk", landmark_every="variable")
    train(config, _pairs(tmp_path / "pairs.jsonl"), tmp_path / "out")
    pooling = json.loads((tmp_path / "out" / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode"] == "lmk" and pooling["landmark_every"] == 32
    encoder = Encoder(EncoderConfig(model=str(tmp_path / "out"), device="cpu"))
    assert encoder.pooling.selection == "lmk" and encoder.pooling.landmark_every == 32


def test_resume_takes_exactly_the_steps_of_an_uninterrupted_run(tmp_path: Path, tiny_model: Path) -> None:
    pairs = _pairs(tmp_path / "pairs.jsonl")
    whole = train(_config(tiny_model), pairs, tmp_path / "whole")
    train_interrupted(_config(tiny_model), pairs, tmp_path / "cut")
    assert (tmp_path / "cut" / "training" / "checkpoint" / "state.json").is_file()
    with pytest.raises(ConfigError, match="--resume"):
        train(_config(tiny_model), pairs, tmp_path / "cut")
    with pytest.raises(ConfigError, match="other settings"):
        train(_config(tiny_model, seed=5), pairs, tmp_path / "cut", resume=True)
    resumed = train(_config(tiny_model), pairs, tmp_path / "cut", resume=True)
    assert resumed.losses == pytest.approx(whole.losses, abs=1e-6)
    a = load_file(str(tmp_path / "whole" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_the_record_names_relative_data_as_given(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative data path stays relative in the record (a committed record names no machine's
    folders); an absolute one is recorded whole."""
    _pairs(tmp_path / "pairs.jsonl")
    monkeypatch.chdir(tmp_path)
    relative = train(_config(tiny_model, steps=1), Path("pairs.jsonl"), tmp_path / "out")
    assert json.loads(relative.record.read_text())["data"]["path"] == "pairs.jsonl"
    absolute = train(_config(tiny_model, steps=1), tmp_path / "pairs.jsonl", tmp_path / "out2")
    assert json.loads(absolute.record.read_text())["data"]["path"] == str(tmp_path / "pairs.jsonl")


def test_a_non_empty_output_is_refused_unless_overwritten(tmp_path: Path, tiny_model: Path) -> None:
    pairs = _pairs(tmp_path / "pairs.jsonl")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        train(_config(tiny_model), pairs, tmp_path / "out")
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"
    train(_config(tiny_model, steps=1), pairs, tmp_path / "out", overwrite=True)
    assert (tmp_path / "out" / "modules.json").is_file()


def test_a_folder_of_documents_trains_on_inverse_cloze_pairs(tmp_path: Path, tiny_model: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, topic in enumerate(TOPICS[:6]):
        sentences = [f"Fact {j} about {topic} is worth a sentence of its own." for j in range(12)]
        (docs / f"{i}.txt").write_text(" ".join(sentences))
    result = train(_config(tiny_model, steps=2), docs, tmp_path / "out")
    assert result.pairs == 6 * 8
    assert len(json.loads(result.record.read_text())["data"]["sha256"]) == 64  # of the pairs made


def test_resuming_on_a_folder_whose_documents_changed_is_refused(tmp_path: Path, tiny_model: Path) -> None:
    """A folder's checkpoint records the sha256 of the pairs made from it: a changed document is
    refused on --resume, as a changed pairs file is."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, topic in enumerate(TOPICS[:6]):
        (docs / f"{i}.txt").write_text(" ".join(f"Fact {j} about {topic} stands alone." for j in range(12)))
    train_interrupted(_config(tiny_model), docs, tmp_path / "cut")
    (docs / "0.txt").write_text(" ".join(f"Another fact {j} about owls stands alone." for j in range(12)))
    with pytest.raises(ConfigError, match="the training data changed"):
        train(_config(tiny_model), docs, tmp_path / "cut", resume=True)


def test_position_tuning_keeps_short_inputs_exact_end_to_end(tmp_path: Path, tiny_model: Path) -> None:
    # past the tokenizer's model_max_length (512), which the saved tokenizer must not keep
    config = _config(tiny_model, positions="pi", target_length=1024, learning_rate=0.05)
    train(config, _pairs(tmp_path / "pairs.jsonl"), tmp_path / "out")
    tuned = Encoder(EncoderConfig(model=str(tmp_path / "out"), device="cpu"))
    base = Encoder(EncoderConfig(model=str(tiny_model), device="cpu"))
    assert tuned.native_window == 1024
    texts = ["bees make honey", "a text of several more words than the other one"]
    assert np.array_equal(tuned.embed(texts)[0], base.embed(texts)[0])


def test_the_record_names_no_home_folder(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tiny_model.parent))
    result = train(_config(tiny_model, steps=1), _pairs(tmp_path / "pairs.jsonl"), tmp_path / "out")
    record = json.loads(result.record.read_text())
    assert record["model"] == record["config"]["model"] == f"~/{tiny_model.name}"
