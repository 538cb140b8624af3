"""QMSum training pairs for ``ragidx train``: the **train** meetings only, never the val ones.

Each query is a gold answer (as in the LongEmbed-style split, whose query *text* is the summary),
and its positive is a ~180-word window of its own meeting (about 250 tokens):

* a specific query: the turns of its ``relevant_text_span`` with their neighbours, centred on the span;
* a general query (the whole meeting's summary): a seeded random window of the meeting.

``source`` is the meeting, so two queries of one meeting never share a batch. With ``--mine N`` the
given model mines N hard negatives per query among the other meetings' windows.

    python benchmarks/train/qmsum_pairs.py ../shared/data/qmsum/raw/train /tmp/qmsum-train.jsonl --mine 1
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

WORDS = 180  # about 250 MiniLM tokens: a positive fits --document-tokens 256


def turns(meeting: dict) -> list[str]:
    return [f"{t['speaker']}: {t['content']}" for t in meeting["meeting_transcripts"]]


def window(lines: list[str], lo: int, hi: int, budget: int = WORDS) -> str:
    """Turns ``lo … hi`` (inclusive) grown alternately left and right to about ``budget`` words,
    or cut from the span's start when the span alone is longer."""
    chosen = lines[lo : hi + 1]
    words = sum(len(t.split()) for t in chosen)
    left, right = lo - 1, hi + 1
    while words < budget and (left >= 0 or right < len(lines)):
        if right < len(lines):
            chosen.append(lines[right])
            words += len(lines[right].split())
            right += 1
        if left >= 0 and words < budget:
            chosen.insert(0, lines[left])
            words += len(lines[left].split())
            left -= 1
    return " ".join(" ".join(chosen).split()[:budget])


def pairs_of(path: Path, rng: random.Random, words: int = WORDS) -> list[dict]:
    meeting = json.loads(path.read_text(encoding="utf-8"))
    lines = turns(meeting)
    out = []
    for q in meeting["specific_query_list"]:
        spans = [(int(a), int(b)) for a, b in q["relevant_text_span"]]
        lo, hi = spans[0]
        out.append({"query": q["answer"], "positive": window(lines, lo, hi, words), "source": path.stem})
    for q in meeting["general_query_list"]:
        at = rng.randrange(len(lines))
        out.append({"query": q["answer"], "positive": window(lines, at, at, words), "source": path.stem})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train_dir", type=Path, help="QMSum raw train meetings (*.json)")
    parser.add_argument("out", type=Path, help="the pairs file to write (.jsonl)")
    parser.add_argument("--mine", type=int, default=0, help="hard negatives per query, mined with --model")
    parser.add_argument("--model", default="default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--words", type=int, default=WORDS, help="words per positive window")
    args = parser.parse_args()
    if args.train_dir.name != "train":
        parser.error("use the train meetings only: evaluation runs on the val meetings")
    rng = random.Random(args.seed)
    rows = [row for path in sorted(args.train_dir.glob("*.json")) for row in pairs_of(path, rng, args.words)]
    if args.mine:
        from ragidx.embed.config import EncoderConfig
        from ragidx.embed.encoder import Encoder
        from ragidx.train.data import Pair, mine_negatives

        encoder = Encoder(EncoderConfig(model=args.model, device="cpu"))
        mined = mine_negatives(
            [Pair(r["query"], r["positive"], (), r["source"]) for r in rows],
            lambda texts, role: encoder.embed(texts, role)[0],
            args.mine,
        )
        for row, pair in zip(rows, mined, strict=True):
            row["negatives"] = list(pair.negatives)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} pairs from {len({r['source'] for r in rows})} train meetings → {args.out}")


if __name__ == "__main__":
    main()
