"""``objective = "rerank"``: a cross-encoder trained on a tiny random BERT — the loss falls on a
separable toy set, the saved folder scores in sentence-transformers' ``CrossEncoder`` exactly as the
trained module did, mini-batches give the whole batch's gradients, resume is exact, and settings of
the other objective are refused."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from ragidx.errors import ConfigError
from ragidx.train.config import TrainConfig
from ragidx.train.data import Pair
from ragidx.train.rerank import RerankStep, load_cross_encoder, save_cross_encoder, scores
from ragidx.train.trainer import _negative, train
from tests.train.interrupt import train_interrupted

TOPICS = ["bees", "rivers", "trains", "violins", "glaciers", "owls", "comets", "tulips"]


def _rows() -> list[dict[str, object]]:
    """Each query names its topic; the positive describes it, the negative says nothing about it."""
    return [
        {
            "query": f"tell me about {topic}",
            "positive": f"{topic} are described here in detail.",
            "negatives": ["the weather was cold that morning."],
            "source": topic,
        }
        for topic in TOPICS
    ]


def _pairs_file(path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows() * 2))
    return path


def _config(model: Path, **settings: object) -> TrainConfig:
    base: dict[str, object] = {
        "model": str(model),
        "objective": "rerank",
        "device": "cpu",
        "steps": 4,
        "batch_size": 4,
        "checkpoint_every": 2,
        "warmup_steps": 0,
    }
    return TrainConfig.model_validate({**base, **settings})


def _pairs() -> list[Pair]:
    return [
        Pair(str(r["query"]), str(r["positive"]), tuple(r["negatives"]), str(r["source"]))  # type: ignore[arg-type]
        for r in _rows()
    ]


def test_a_few_steps_separate_positives_from_negatives(tmp_path: Path, tiny_model: Path) -> None:
    from sentence_transformers.cross_encoder import CrossEncoder

    # the tiny model's large random weights need a large step to move in a few steps
    config = _config(tiny_model, steps=24, learning_rate=3e-2, checkpoint_every=100)
    result = train(config, _pairs_file(tmp_path / "pairs.jsonl"), tmp_path / "out")
    assert result.steps == 24
    record = json.loads(result.record.read_text())
    assert record["config"]["objective"] == "rerank" and record["config"]["rerank_loss"] == "bce"
    assert (tmp_path / "out" / "training" / "loss.png").is_file()
    assert not list((tmp_path / "out").rglob("*.bin")) and not list((tmp_path / "out").rglob("*.pkl"))
    pairs = _pairs()
    checked = [(p.query, p.positive) for p in pairs] + [(p.query, p.negatives[0]) for p in pairs]
    labels = torch.tensor([1.0] * len(pairs) + [0.0] * len(pairs))
    torch.manual_seed(config.seed)  # the run's untrained start: same seed, same new head
    untrained = load_cross_encoder(config).eval()
    trained = CrossEncoder(str(tmp_path / "out"), device="cpu")
    with torch.no_grad():
        before = torch.nn.functional.binary_cross_entropy_with_logits(scores(untrained, checked), labels)
    after_scores = torch.as_tensor(trained.predict(checked, activation_fn=torch.nn.Identity()))
    after = torch.nn.functional.binary_cross_entropy_with_logits(after_scores, labels)
    assert float(after) < 0.25 * float(before), (float(before), float(after))
    positive, negative = after_scores[: len(pairs)], after_scores[len(pairs) :]
    assert positive.min() > negative.max(), (positive, negative)


def test_the_saved_folder_predicts_what_the_trained_module_computes(tmp_path: Path, tiny_model: Path) -> None:
    from sentence_transformers.cross_encoder import CrossEncoder

    torch.manual_seed(0)
    config = _config(tiny_model, document_tokens=24, learning_rate=1e-3)
    model = load_cross_encoder(config)
    assert model.max_seq_length == 24
    step = RerankStep(model, config, _negative)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    pairs = _pairs()
    model.train()
    for i in range(2):
        optimizer.zero_grad()
        step(pairs[4 * i : 4 * i + 4], pairs, random.Random(i))
        optimizer.step()
    model.eval()
    long_passage = " ".join(f"word{i} about bees" for i in range(60))  # cut to 24 tokens, both sides
    checked = [(p.query, p.positive) for p in pairs] + [("bees?", long_passage), (long_passage, "bees")]
    with torch.no_grad():
        trained = torch.sigmoid(scores(model, checked)).numpy()
    save_cross_encoder(model, tmp_path / "out")
    loaded = CrossEncoder(str(tmp_path / "out"), device="cpu")
    assert loaded.max_seq_length == 24
    np.testing.assert_allclose(loaded.predict(checked), trained, atol=1e-6)
    logits = loaded.predict(checked, activation_fn=torch.nn.Identity())
    np.testing.assert_allclose(logits, torch.logit(torch.tensor(trained, dtype=torch.float64)), atol=1e-4)


def test_bce_in_mini_batches_gives_the_whole_batch_loss_and_gradients(tiny_model: Path) -> None:
    pairs = _pairs()
    batch = pairs[:4]
    results = []
    for mini in (None, 1):
        torch.manual_seed(0)
        config = _config(tiny_model, mini_batch_size=mini, negatives=2)
        model = load_cross_encoder(config)
        model.eval()  # no dropout: the two must agree exactly
        loss = RerankStep(model, config, _negative)(batch, pairs, random.Random(7))
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((loss, grads, model))
    (whole, whole_grads, model), (split, split_grads, _) = results
    assert split == pytest.approx(whole, rel=1e-5)
    assert whole_grads.keys() == split_grads.keys()
    for name in whole_grads:
        torch.testing.assert_close(split_grads[name], whole_grads[name], atol=1e-6, rtol=1e-4)
    # the reference: BCE with positives weighted by the negatives per query, on the model's logits
    rng = random.Random(7)
    negatives = [[_negative(p, k, pairs, rng) for p in batch] for k in range(2)]
    texts = [
        (p.query, t) for i, p in enumerate(batch) for t in (p.positive, negatives[0][i], negatives[1][i])
    ]
    labels = torch.tensor([1.0, 0.0, 0.0] * len(batch))
    with torch.no_grad():
        logits = scores(model, texts)
    by_hand = -(2 * labels * torch.nn.functional.logsigmoid(logits)).sum()
    by_hand += -((1 - labels) * torch.nn.functional.logsigmoid(-logits)).sum()
    assert whole == pytest.approx(float(by_hand) / len(texts), rel=1e-5)


def test_the_listwise_loss_trains_with_the_cached_variant(tmp_path: Path, tiny_model: Path) -> None:
    config = _config(tiny_model, rerank_loss="mnrl", mini_batch_size=2, negatives=1, steps=2)
    result = train(config, _pairs_file(tmp_path / "pairs.jsonl"), tmp_path / "out")
    assert result.steps == 2 and all(np.isfinite(result.losses))
    assert (tmp_path / "out" / "modules.json").is_file()


def test_resume_takes_exactly_the_steps_of_an_uninterrupted_run(tmp_path: Path, tiny_model: Path) -> None:
    pairs = _pairs_file(tmp_path / "pairs.jsonl")
    whole = train(_config(tiny_model), pairs, tmp_path / "whole")
    train_interrupted(_config(tiny_model), pairs, tmp_path / "cut")
    with pytest.raises(ConfigError, match="other settings"):
        train(_config(tiny_model, rerank_loss="mnrl"), pairs, tmp_path / "cut", resume=True)
    resumed = train(_config(tiny_model), pairs, tmp_path / "cut", resume=True)
    assert resumed.losses == pytest.approx(whole.losses, abs=1e-6)
    a = load_file(str(tmp_path / "whole" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"pooling": "lmk"}, "drop pooling 'lmk'"),
        ({"positions": "pi"}, "drop positions 'pi'"),
        ({"pooling": "cls", "landmark_every": 32}, "drop pooling 'cls', landmark_every 32"),
        ({"negatives": 0}, "needs negatives >= 1"),
        (
            {"objective": "embed", "rerank_loss": "mnrl"},
            "rerank_loss 'mnrl' is a setting of objective 'rerank'",
        ),
    ],
)
def test_settings_of_the_other_objective_are_refused(settings: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        _config(Path("m"), **settings)


def test_a_pair_longer_than_the_window_is_refused(tiny_model: Path) -> None:
    with pytest.raises(ConfigError, match="document_tokens 100: longer than .* window of 64 tokens"):
        load_cross_encoder(_config(tiny_model, document_tokens=100))
