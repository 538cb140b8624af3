"""Ablation texts are token-exact: sizes, positions and token counts."""

from __future__ import annotations

import pytest

from ragidx.probe.ablation import (
    INSERT_SIZES,
    POSITIONS,
    REMOVE_SIZES,
    ablations,
    insertion,
    removal,
    word_starts,
)
from ragidx.probe.texts import filler
from tests.conftest import long_text


@pytest.fixture(scope="module")
def document(tiny_encoder):
    text = long_text(120, seed=5)  # single-token words: every token starts a word or is a '.'
    return text, tiny_encoder.tokenize(text)


@pytest.fixture(scope="module")
def needle(tiny_encoder):
    text = filler(400)
    return text, tiny_encoder.tokenize(text)


@pytest.mark.parametrize("size", INSERT_SIZES)
@pytest.mark.parametrize("position", POSITIONS)
def test_insertion_puts_the_first_m_filler_tokens_at_the_word_start_nearest_the_position(
    tiny_encoder, document, needle, size, position
):
    text, tokens = document
    starts = word_starts(text, tokens)
    n = len(tokens)
    m = max(1, round(size * n))
    ablation = insertion(text, tokens, starts, needle[0], needle[1], size, position)
    at = min(starts, key=lambda s: (abs(s - position * n), s))
    altered = tiny_encoder.tokenize(ablation.text).ids
    assert ablation.changed_tokens == m
    assert altered == tokens.ids[:at] + needle[1].ids[:m] + tokens.ids[at:]


@pytest.mark.parametrize("size", REMOVE_SIZES)
@pytest.mark.parametrize("position", POSITIONS)
def test_removal_drops_a_contiguous_span_of_the_asked_size(tiny_encoder, document, size, position):
    text, tokens = document
    starts = word_starts(text, tokens)
    n = len(tokens)
    ablation = removal(text, tokens, starts, size, position)
    altered = tiny_encoder.tokenize(ablation.text).ids
    begin = min(starts[:-1], key=lambda s: (abs(s - position * (1 - size) * n), s))
    assert len(altered) == n - ablation.changed_tokens
    assert altered == tokens.ids[:begin] + tokens.ids[begin + ablation.changed_tokens :]
    # the span is the asked size up to the nearest word start (a '.' token is never a word start)
    assert abs(ablation.changed_tokens - round(size * n)) <= 1
    if position == 0:
        assert begin == 0
    if position == 1:
        assert begin + ablation.changed_tokens == n


def test_cuts_fall_on_word_starts_so_subword_pieces_stay_whole(tiny_encoder):
    text = "Unbelievably, tokenization splits extraordinarily uncommon words. " * 6
    tokens = tiny_encoder.tokenize(text)
    starts = word_starts(text, tokens)
    assert all(
        not tiny_encoder.tokenizer.convert_ids_to_tokens(tokens.ids[s]).startswith("##") for s in starts[:-1]
    )
    needle_text = filler(200)
    needle_tokens = tiny_encoder.tokenize(needle_text)
    for ablation in ablations(text, tokens, needle_text, needle_tokens):
        n_altered = len(tiny_encoder.tokenize(ablation.text))
        sign = 1 if ablation.kind == "insert" else -1
        assert n_altered == len(tokens) + sign * ablation.changed_tokens


def test_every_condition_once(document, needle):
    text, tokens = document
    conditions = [(a.kind, a.size, a.position) for a in ablations(text, tokens, needle[0], needle[1])]
    assert len(conditions) == len(set(conditions)) == 5 * 5 + 4 * 5


def test_insertion_needs_a_long_enough_filler(document, tiny_encoder):
    text, tokens = document
    short = filler(3)
    with pytest.raises(ValueError, match="filler"):
        insertion(text, tokens, word_starts(text, tokens), short, tiny_encoder.tokenize(short), 1.0, 0.5)
