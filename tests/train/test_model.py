"""The trainable module: the windows and pooling ragidx embeds with, differentiable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ragidx.embed.config import EncoderConfig
from ragidx.embed.encoder import Encoder
from ragidx.train.config import TrainConfig
from ragidx.train.model import TrainableEncoder


def _trainable(model: Path, **settings: object) -> TrainableEncoder:
    config = TrainConfig(model=str(model), device="cpu", **settings)  # type: ignore[arg-type]
    lmk = config.pooling == "lmk"
    encoder = Encoder(
        EncoderConfig(
            model=str(model),
            device="cpu",
            pooling=(config.pooling,),
            landmark_every=config.granularities()[0] if lmk else None,
        )
    )
    return TrainableEncoder(encoder, config).eval()


def test_lmk_landmarks_and_pooling_match_a_hand_computed_example(tiny_model: Path) -> None:
    trainable = _trainable(tiny_model, pooling="lmk", landmark_every=4)
    tokenizer = trainable.encoder.tokenizer
    words = "one two three four five six seven eight nine ten"
    content = tokenizer(words, add_special_tokens=False)["input_ids"]
    assert len(content) == 10
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    # Algorithm 1: [CLS] z1 [LMK] z2 [LMK] z3 [LMK] with g = 4, the last LMK in place of [SEP]
    expected = [cls, *content[:4], sep, *content[4:8], sep, *content[8:], sep]
    features = trainable.tokenize([words], "document")
    assert features["input_ids"][0].tolist() == expected
    with torch.no_grad():
        hidden = trainable.transformer(input_ids=torch.tensor([expected])).last_hidden_state[0]
        by_hand = torch.nn.functional.normalize(hidden[[5, 10, 13]].mean(dim=0), dim=-1)
        pooled = trainable(features)["sentence_embedding"][0]
    assert torch.allclose(pooled, by_hand, atol=1e-6)
    # and ragidx's inference path gives the same vector (trained as it is used)
    assert np.allclose(trainable.encoder.embed([words], "document")[0][0], by_hand.numpy(), atol=1e-6)


def test_variable_granularity_changes_the_landmarks_per_batch(tiny_model: Path) -> None:
    trainable = _trainable(tiny_model, pooling="lmk", landmark_every="variable")
    sep = trainable.encoder.tokenizer.sep_token_id
    text = " ".join(["word"] * 200)
    counts = []
    for g in (16, 32):  # the tiny window holds about 60 content tokens
        trainable.set_granularity(g)
        ids = trainable.tokenize([text])["input_ids"][0]
        counts.append(int((ids == sep).sum()))
    assert counts[0] > counts[1] >= 2


def test_mean_pooling_forward_equals_inference_and_has_gradients(tiny_model: Path) -> None:
    trainable = _trainable(tiny_model, pooling="mean")
    texts = ["a first text", "a second, somewhat longer text than the first"]
    features = trainable.tokenize(texts, "document")
    with torch.no_grad():
        vectors = trainable(features)["sentence_embedding"]
    assert np.allclose(vectors.numpy(), trainable.encoder.embed(texts, "document")[0], atol=1e-6)
    trainable.train()
    trainable(trainable.tokenize(texts))["sentence_embedding"].sum().backward()
    assert all(p.grad is not None for p in trainable.trainable())


def test_pose_starts_keep_every_row_inside_the_target_window(tiny_model: Path) -> None:
    trainable = _trainable(tiny_model, positions="pi", target_length=256)
    assert trainable.table is not None and trainable.trainable() == [trainable.table.learned]
    starts = []
    for _ in range(20):
        features = trainable.tokenize(["some words to embed here"] * 4)
        lengths = features["attention_mask"].sum(dim=1)
        assert bool(((features["position_start"] + lengths) <= 256).all())
        starts += features["position_start"].tolist()
    assert max(starts) > 128 and min(starts) < 64  # spread over the whole window
