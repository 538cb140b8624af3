"""Training data: pairs files, inverse-cloze pairs, mined negatives, batches."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragidx.errors import InputError
from ragidx.train.data import Pair, batches, cloze_pairs, mine_negatives, read_pairs


def test_read_pairs_accepts_negatives_and_sources(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    rows = [
        {"query": "q1", "positive": "p1", "negatives": ["n1", "n2"], "source": "a"},
        {"query": "q2", "positive": "p2", "negative": "n3"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert read_pairs(path) == [Pair("q1", "p1", ("n1", "n2"), "a"), Pair("q2", "p2", ("n3",), "")]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "pairs.jsonl:2: not a JSON object"),
        ('{"query": "q"}', 'pairs.jsonl:2: "positive" must be a non-empty string'),
        ('{"query": "", "positive": "p"}', 'pairs.jsonl:2: "query" must be'),
        ('{"query": "q", "positive": "p", "negatives": [1]}', '"negatives" must be a list of strings'),
    ],
)
def test_read_pairs_names_the_bad_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"query": "q", "positive": "p"}\n' + line + "\n")
    with pytest.raises(InputError, match=message):
        read_pairs(path)


def test_cloze_pairs_take_a_span_as_query_and_its_context_as_positive() -> None:
    text = " ".join(f"Sentence number {i} talks about topic {i}." for i in range(40))
    pairs = cloze_pairs([("doc", text)], per_document=20, seed=1)
    assert len(pairs) == 20 and {p.source for p in pairs} == {"doc"}
    removed = sum(p.query not in p.positive for p in pairs)
    assert removed >= 14  # the span is removed nine times in ten
    for p in pairs:
        assert p.query in text and len(p.positive.split()) <= 300 + 20
    assert pairs == cloze_pairs([("doc", text)], per_document=20, seed=1)  # seeded


def test_mined_negatives_come_from_other_sources_ranked_by_the_model() -> None:
    pairs = [Pair(f"q{i}", f"p{i}", (), source=f"s{i // 2}") for i in range(6)]
    vectors = {f"p{i}": np.eye(6)[i] for i in range(6)}
    # q0 is closest to p1 (same source: excluded), then p4, then p5
    queries = {"q0": [0.9, 0.8, 0.0, 0.0, 0.7, 0.6]}

    def embed(texts: list[str], role: str) -> np.ndarray:
        if role == "document":
            return np.stack([vectors[t] for t in texts])
        return np.stack([np.array(queries.get(t, np.eye(6)[int(t[1:])])) for t in texts])

    mined = mine_negatives(pairs, embed, count=1, skip=0)
    assert mined[0].negatives == ("p4",)
    assert all(
        p.negatives and p.negatives[0] not in (f"p{2 * (i // 2)}", f"p{2 * (i // 2) + 1}")
        for i, p in enumerate(mined)
    )
    assert mine_negatives(pairs, embed, count=1, skip=1)[0].negatives == ("p5",)


def test_batches_never_hold_two_examples_of_one_source() -> None:
    pairs = [Pair(f"q{i}", f"p{i}", (), source=f"s{i % 5}") for i in range(40)]
    epoch = list(batches(pairs, size=4, seed=3))
    assert epoch == list(batches(pairs, size=4, seed=3))
    assert epoch != list(batches(pairs, size=4, seed=4))
    for batch in epoch:
        assert len({pairs[i].source for i in batch}) == len(batch) >= 2
    assert sorted(i for b in epoch for i in b) == list(range(40))


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ['{"question": "q", "answer": "a"}'],
            'pairs.jsonl:1: neither a training pair .* found keys "question"',
        ),
        (["", '["q", "a"]'], "pairs.jsonl:2: neither a training pair .* found a JSON list"),
        (['{"text": "no id"}'], "pairs.jsonl:1: neither"),
        (['{"positive": "p"}'], 'pairs.jsonl:1: "query" must be a non-empty string'),
    ],
)
def test_a_jsonl_of_neither_pairs_nor_documents_names_the_file_and_line(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    """Issue 39, item 8: it said "0 documents gave 0 training pairs" instead."""
    from ragidx.train.config import TrainConfig
    from ragidx.train.trainer import load_examples  # torch

    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=message):
        load_examples(path, TrainConfig(model="unused", device="cpu"))


def test_a_jsonl_corpus_still_reads_as_documents(tmp_path: Path) -> None:
    from ragidx.train.data import jsonl_is_pairs

    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "d1", "text": "one"}\n')
    assert not jsonl_is_pairs(path)
    path.write_text('not json\n{"query": "q", "positive": "p"}\n')
    assert jsonl_is_pairs(path)  # read_pairs names line 1
