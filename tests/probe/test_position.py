"""The positional-bias probe end to end on a tiny model, and its headline arithmetic."""

from __future__ import annotations

import pytest

from ragidx.embed.config import EncoderConfig
from ragidx.errors import InputError
from ragidx.probe.embedding import ProbeEncoder
from ragidx.probe.position import PositionSettings, drops, insert_base, probe_position, usable
from ragidx.probe.report import Condition
from ragidx.probe.texts import Text
from ragidx.strategy import parse
from tests.conftest import long_text


@pytest.fixture(scope="module")
def encoder(tiny_model):
    return ProbeEncoder(parse("pcw"), EncoderConfig(model=str(tiny_model), device="cpu"), 160)


@pytest.mark.slow
def test_probe_covers_every_condition_and_regresses_both_orders(encoder):
    texts = [Text(f"t{i}", long_text(200, seed=i)) for i in range(3)]
    seen: list[int] = []
    result = probe_position(encoder, texts, PositionSettings(), progress=seen.append)
    assert seen == [1, 1, 1]
    assert result.reach == 160 and result.insert_base_tokens == insert_base(encoder, PositionSettings()) == 80
    assert {(c.size, c.position) for c in result.insertion} == {
        (s, p) for s in (0.05, 0.1, 0.2, 0.5, 1.0) for p in (0, 0.25, 0.5, 0.75, 1)
    }
    assert len(result.removal) == 20
    for condition in result.insertion + result.removal:
        assert condition.n == 3
        assert -1 <= condition.mean <= 1.0001 and -1 <= condition.median <= 1.0001
    full = next(c for c in result.insertion if c.size == 1.0 and c.position == 0)
    assert full.mean_changed_tokens == 80  # the needle doubles the 80-token base text
    assert result.importance is not None and result.importance.n_docs == 3
    assert [b.bucket for b in result.importance.original] == [b.bucket for b in result.importance.shuffled]
    assert result.importance.original[-1].bucket == "all"
    assert result.importance.original[-1].n_sentences > 3 * 5


def test_drops_are_end_minus_begin_over_end():
    def cond(position: float, mean: float) -> Condition:
        return Condition(
            kind="insert", size=0.2, position=position, n=1, mean=mean, median=mean, mean_changed_tokens=1
        )

    (drop,) = drops([cond(0.0, 0.885), cond(0.5, 0.9), cond(1.0, 0.963)])
    assert drop.drop == pytest.approx((0.963 - 0.885) / 0.963)
    assert drops([cond(0.5, 0.9)]) == []


def test_texts_too_short_are_refused(encoder):
    with pytest.raises(InputError, match="20 tokens"):
        usable([Text("a", "Too short to cut into pieces.")], encoder, PositionSettings())
