"""The texts a probe reads: documents from a folder or JSONL, the generated filler, and sentences.

* :func:`load_texts` — every document under a folder (any format of :mod:`ragidx.read.formats`) or in
  a BEIR-style JSONL file, through the ingestion loader (:func:`ragidx.read.walk.iter_documents`);
  :func:`long_texts` keeps those of at least N model tokens (a long-context strategy needs texts
  longer than the window to have anything to extend);
* :func:`filler` — the irrelevant "needle" of the insertion ablation: a Lorem-Ipsum-like text,
  paragraph formatted, generated deterministically from a fixed seed (so results are repeatable);
* :func:`split_sentences`, :func:`join_sentences`, :func:`shuffle_sentences` — sentences split at
  periods and newlines (the PB paper's rule), the one way they are put back together, and a seeded
  shuffle (so the control differs from the original in sentence order only).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ragidx.errors import InputError
from ragidx.read.formats import suffix_list
from ragidx.read.walk import Document, iter_documents

_LOREM = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
    "et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip "
    "ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse cillum eu fugiat "
    "nulla pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui officia deserunt "
    "mollit anim id est laborum curabitur pretium tincidunt lacus nulla gravida orci a odio nullam "
    "varius turpis et commodo pharetra est eros bibendum elit nec luctus magna felis sollicitudin mauris"
)
LOREM_WORDS = tuple(_LOREM.split())
_SENTENCE_BREAK = re.compile(r"(?<=\.)|\n")


@dataclass(frozen=True)
class Text:
    """One input text and where it came from."""

    text_id: str
    text: str


def load_texts(path: str | Path, limit: int | None = None) -> list[Text]:
    """The non-empty documents under ``path`` (sorted by id; the first ``limit``). Raises
    :class:`InputError` when there are none."""
    found: list[Text] = []
    for item in iter_documents(path):
        if isinstance(item, Document) and item.text.strip():
            found.append(Text(item.doc_id, "".join(item.pieces())))
    if not found:
        raise InputError(
            f"{path}: no texts found; give a folder of {suffix_list('/')} files or a JSONL file "
            'with one {"_id", "text"} object per line'
        )
    found.sort(key=lambda t: t.text_id)
    return found[:limit] if limit else found


def long_texts(
    texts: list[Text],
    count: Callable[[str], int],
    min_tokens: int,
    limit: int | None = None,
    source: str = "texts",
) -> list[Text]:
    """The texts of at least ``min_tokens`` tokens (``count`` gives a text's), in order, the first
    ``limit`` of them. Raises :class:`InputError` naming the longest text when none is that long."""
    lengths = {t.text_id: count(t.text) for t in texts}
    kept = [t for t in texts if lengths[t.text_id] >= min_tokens]
    if not kept:
        longest = max(lengths.items(), key=lambda item: item[1])
        raise InputError(
            f"{source}: no text has {min_tokens} tokens (the longest, {longest[0]}, has {longest[1]}); "
            "lower --min-tokens or give longer texts"
        )
    return kept[:limit] if limit else kept


def filler(n_words: int, seed: int = 0) -> str:
    """A Lorem-Ipsum-like text of ``n_words`` words: sentences of 6–14 words, paragraphs of 3–6
    sentences separated by blank lines; the same for the same arguments."""
    rng = random.Random(seed)
    paragraphs: list[str] = []
    sentences: list[str] = []
    words = 0
    per_paragraph = rng.randint(3, 6)
    while words < n_words:
        size = min(rng.randint(6, 14), n_words - words)
        body = " ".join(rng.choice(LOREM_WORDS) for _ in range(size))
        sentences.append(body[0].upper() + body[1:] + ".")
        words += size
        if len(sentences) == per_paragraph:
            paragraphs.append(" ".join(sentences))
            sentences, per_paragraph = [], rng.randint(3, 6)
    if sentences:
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def split_sentences(text: str) -> list[str]:
    """Sentences split after every period and at newlines, stripped, empty ones dropped."""
    return [s.strip() for s in _SENTENCE_BREAK.split(text) if s.strip()]


def join_sentences(sentences: list[str]) -> str:
    """Sentences as one text, separated by single spaces."""
    return " ".join(sentences)


def shuffle_sentences(sentences: list[str], seed: str | int) -> tuple[list[int], list[str]]:
    """A seeded permutation of ``sentences``: the order (original indices) and the sentences in it."""
    order = list(range(len(sentences)))
    random.Random(seed).shuffle(order)
    return order, [sentences[i] for i in order]
