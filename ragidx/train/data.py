"""Training examples: (query, positive, negatives) triples, from a pairs file or from a raw corpus.

* :func:`read_pairs` — a JSONL file, one object a line: ``{"query": …, "positive": …,
  "negatives": [...]}`` (``negative`` as one string is accepted too; ``source`` optionally names the
  document a positive comes from, so that two examples from one document never share a batch, where
  each would be the other's false negative).
* :func:`cloze_pairs` — pairs from documents with no labels, inverse-cloze style (Lee et al. 2019):
  a span of one to three sentences is the query; the text around it is the positive, with the span
  removed nine times in ten (so the model learns more than word overlap) and left in otherwise.
* :func:`mine_negatives` — hard negatives with the current model: for each query, positives of
  *other* sources that the model ranks highest (skipping the very top ``skip``, which are often
  unlabelled positives).
* :func:`batches` — the order of one epoch: seeded, and no two examples of one source in a batch.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragidx.embed.config import Role
from ragidx.errors import InputError


@dataclass(frozen=True)
class Pair:
    """One training example."""

    query: str
    positive: str
    negatives: tuple[str, ...] = ()
    source: str = ""  # the document the positive comes from ("" = its own)


def read_pairs(path: Path) -> list[Pair]:
    """Read a JSONL pairs file; a bad line is an :class:`InputError` naming the file and line."""
    pairs: list[Pair] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the pairs file ({exc})") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{where}: not a JSON object ({exc.args[0]})") from exc
        if not isinstance(record, dict):
            raise InputError(f"{where}: expected a JSON object with query and positive")
        query, positive = record.get("query"), record.get("positive")
        if not isinstance(query, str) or not query.strip():
            raise InputError(f'{where}: "query" must be a non-empty string')
        if not isinstance(positive, str) or not positive.strip():
            raise InputError(f'{where}: "positive" must be a non-empty string')
        negatives = record.get("negatives", record.get("negative", []))
        negatives = [negatives] if isinstance(negatives, str) else negatives
        if not isinstance(negatives, list) or not all(isinstance(n, str) for n in negatives):
            raise InputError(f'{where}: "negatives" must be a list of strings')
        source = record.get("source", "")
        pairs.append(Pair(query, positive, tuple(negatives), str(source) if source is not None else ""))
    if not pairs:
        raise InputError(f"{path}: no pairs (expected JSONL lines with query and positive)")
    return pairs


def jsonl_is_pairs(path: Path) -> bool:
    """Whether a ``.jsonl`` file is a pairs file (its first record has ``query`` or ``positive``;
    :func:`read_pairs` then checks every line) rather than a corpus of documents (BEIR: ``_id`` and
    ``text``) to make inverse-cloze pairs from. A first record that is neither is an
    :class:`InputError` naming the file and line (before, it read as a corpus of no documents)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    return _pairs_record(line, f"{path}:{number}")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the pairs file ({exc})") from exc
    return True  # no record: read_pairs says so


def _pairs_record(line: str, where: str) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return True  # read_pairs says what is wrong with the line
    if isinstance(record, dict) and ("query" in record or "positive" in record):
        return True
    if isinstance(record, dict) and "text" in record and ("_id" in record or "id" in record):
        return False
    found = (
        f"keys {', '.join(json.dumps(key) for key in list(record)[:5])}"
        if isinstance(record, dict) and record
        else f"a JSON {type(record).__name__}"
    )
    raise InputError(
        f'{where}: neither a training pair ({{"query": …, "positive": …}}) nor a document '
        f'({{"_id": …, "text": …}}); found {found}: write one pair or one document per line'
    )


_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+[\"')\]]*|\n|$)")


def sentences(text: str) -> list[str]:
    """The text's sentences (a light English splitter: ends at . ! ? or a line break)."""
    return [s.strip() for s in _SENTENCE.findall(text) if len(s.split()) >= 3]


def cloze_pairs(
    documents: Sequence[tuple[str, str]],
    per_document: int,
    seed: int,
    context_words: int = 300,
    remove_prob: float = 0.9,
) -> list[Pair]:
    """Inverse-cloze pairs: ``per_document`` queries per document (see the module docstring).

    ``documents`` are ``(doc_id, text)``; the positive is about ``context_words`` words around the
    span, so it fits a training window and still holds the span's context.
    """
    rng = random.Random(seed)
    pairs: list[Pair] = []
    for doc_id, text in documents:
        found = sentences(text)
        if len(found) < 4:
            continue
        for _ in range(per_document):
            size = rng.randint(1, 3)
            at = rng.randrange(0, len(found) - size + 1)
            query = " ".join(found[at : at + size])
            before, after = _words_around(found, at, size, context_words, rng)
            middle = [] if rng.random() < remove_prob else [query]
            positive = " ".join([*before, *middle, *after]).strip()
            if positive:
                pairs.append(Pair(query, positive, (), source=doc_id))
    return pairs


def _words_around(
    found: list[str], at: int, size: int, budget: int, rng: random.Random
) -> tuple[list[str], list[str]]:
    """Sentences before and after ``found[at : at + size]``, about ``budget`` words in all, split
    at a random point so the span is not always in the middle."""
    share = rng.random()
    before: list[str] = []
    words = 0
    i = at - 1
    while i >= 0 and words < budget * share:
        before.insert(0, found[i])
        words += len(found[i].split())
        i -= 1
    after: list[str] = []
    j = at + size
    while j < len(found) and words < budget:
        after.append(found[j])
        words += len(found[j].split())
        j += 1
    return before, after


def mine_negatives(
    pairs: list[Pair],
    embed: Callable[[list[str], Role], np.ndarray],
    count: int,
    skip: int = 1,
) -> list[Pair]:
    """Add ``count`` hard negatives to each pair from the other pairs' positives (other sources)."""
    if count <= 0 or len(pairs) < 2:
        return pairs
    positives = sorted({p.positive for p in pairs})
    index = {text: i for i, text in enumerate(positives)}
    source_of = {p.positive: p.source or f"#{i}" for i, p in enumerate(pairs)}
    doc_vectors = embed(positives, "document")
    query_vectors = embed([p.query for p in pairs], "query")
    scores = query_vectors @ doc_vectors.T
    mined: list[Pair] = []
    for i, pair in enumerate(pairs):
        own = pair.source or source_of[pair.positive]
        ranked = np.argsort(-scores[i], kind="stable")
        chosen: list[str] = []
        passed = 0
        for j in ranked:
            text = positives[int(j)]
            if int(j) == index[pair.positive] or source_of[text] == own:
                continue
            if passed < skip:
                passed += 1
                continue
            chosen.append(text)
            if len(chosen) == count:
                break
        negatives = (*pair.negatives, *chosen)[: max(count, len(pair.negatives))]
        mined.append(Pair(pair.query, pair.positive, negatives, pair.source))
    return mined


def batches(pairs: Sequence[Pair], size: int, seed: int) -> Iterator[list[int]]:
    """One epoch: indices of ``pairs`` in seeded order, cut into batches of ``size`` in which no
    two examples share a source (a pair without a source is its own). A last short batch is dropped
    when it would hold fewer than two examples (in-batch negatives need two)."""
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    waiting = order
    while waiting:
        batch: list[int] = []
        seen: set[str] = set()
        rest: list[int] = []
        for i in waiting:
            key = pairs[i].source or f"#{i}"
            if len(batch) < size and key not in seen:
                batch.append(i)
                seen.add(key)
            else:
                rest.append(i)
        if len(batch) < 2:
            return
        yield batch
        waiting = rest
