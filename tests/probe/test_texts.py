"""Texts from folders and JSONL, the generated filler, sentence splitting and the shuffled control."""

from __future__ import annotations

import json

import pytest

from ragidx.errors import InputError
from ragidx.probe.texts import (
    LOREM_WORDS,
    filler,
    join_sentences,
    load_texts,
    long_texts,
    shuffle_sentences,
    split_sentences,
)


def test_load_texts_from_a_folder_sorted_and_limited(tmp_path):
    for name in ("b.txt", "a.md", "c.txt"):
        (tmp_path / name).write_text(f"text of {name}")
    (tmp_path / "empty.txt").write_text("   ")
    texts = load_texts(tmp_path)
    assert [t.text_id for t in texts] == ["a.md", "b.txt", "c.txt"]
    assert texts[1].text == "text of b.txt"
    assert [t.text_id for t in load_texts(tmp_path, limit=2)] == ["a.md", "b.txt"]


def test_long_texts_keeps_texts_of_min_tokens_then_limits(tmp_path):
    for name, words in (("a.txt", 3), ("b.txt", 9), ("c.txt", 5), ("d.txt", 12)):
        (tmp_path / name).write_text(" ".join(["word"] * words))
    texts = load_texts(tmp_path)
    count = lambda text: len(text.split())  # noqa: E731
    assert [t.text_id for t in long_texts(texts, count, 5)] == ["b.txt", "c.txt", "d.txt"]
    assert [t.text_id for t in long_texts(texts, count, 5, limit=2)] == ["b.txt", "c.txt"]
    assert [t.text_id for t in long_texts(texts, count, 10)] == ["d.txt"]
    with pytest.raises(
        InputError, match=r"^src: no text has 13 tokens \(the longest, d.txt, has 12\); lower"
    ):
        long_texts(texts, count, 13, source="src")


def test_load_texts_from_jsonl(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": f"d{i}", "text": f"doc {i}"}) + "\n" for i in range(3)))
    assert [(t.text_id, t.text) for t in load_texts(path)] == [
        ("d0", "doc 0"),
        ("d1", "doc 1"),
        ("d2", "doc 2"),
    ]


def test_no_texts_is_an_error_naming_the_path(tmp_path):
    with pytest.raises(InputError, match=str(tmp_path)):
        load_texts(tmp_path)


def test_filler_is_deterministic_paragraphs_of_lorem_words():
    text = filler(500, seed=3)
    assert text == filler(500, seed=3) != filler(500, seed=4)
    words = text.replace(".", "").lower().split()
    assert len(words) == 500
    assert set(words) <= set(LOREM_WORDS)
    assert text.count("\n\n") >= 500 // (14 * 6)  # paragraphs of at most 6 sentences of at most 14 words


def test_sentences_split_at_periods_and_newlines():
    assert split_sentences("One two. Three\nfour five.  \n\nSix") == [
        "One two.",
        "Three",
        "four five.",
        "Six",
    ]
    assert join_sentences(["a.", "b", "c."]) == "a. b c."


def test_shuffle_reorders_sentences_and_nothing_else():
    sentences = [f"Sentence number {i}." for i in range(12)]
    order, mixed = shuffle_sentences(sentences, "seed")
    assert sorted(order) == list(range(12)) and order != list(range(12))
    assert mixed == [sentences[i] for i in order]
    assert sorted(mixed) == sorted(sentences)
    assert sorted(join_sentences(mixed)) == sorted(join_sentences(sentences))  # same characters
    assert split_sentences(join_sentences(mixed)) == mixed
    assert shuffle_sentences(sentences, "seed") == (order, mixed)
