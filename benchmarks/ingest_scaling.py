"""Ingest time against the number of documents: is anything in the pipeline worse than linear?

For each size (default 5,000, 10,000 and 20,000 files, each doubling the last) the benchmark writes
that many tiny text files (one sentence of about a dozen words each) and times, in this process:

1. **first ingest** into a new index (every document added);
2. **changed re-ingest** after every file was rewritten (every document replaced: the store, BM25
   and FAISS each drop the old version and add the new one);
3. **unchanged re-ingest** (every document found unchanged by its content sha256).

It prints seconds, microseconds per document and, from the second size on, the ratio to the
previous size: about 2 per doubling is linear, about 4 quadratic. The model is a **tiny random
BERT** (2 layers, hidden size 32, the MiniLM tokenizer), built here, so the numbers measure the
pipeline (reading, hashing, tokenizing, planning, store, BM25, FAISS, commit) and not a real
model's compute; ``embed`` is the part spent in the model, run on one thread (less noise on a
shared machine).

    python benchmarks/ingest_scaling.py                        # 5k, 10k, 20k files
    python benchmarks/ingest_scaling.py --sizes 1000 2000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

WORDS = ["bees", "honey", "hive", "flower", "nectar", "queen", "worker", "drone", "wax", "comb"]


def tiny_model(folder: Path) -> Path:
    """A random 2-layer BERT (hidden 32) saved with the bundled MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from ragidx.embed.models import DEFAULT_MODEL, resolve_model

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL).transformer_path).save_pretrained(folder)
    return folder


def write_files(folder: Path, n: int, version: int) -> None:
    """``n`` one-sentence files (``version`` changes every one of them)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        words = " ".join(WORDS[(i * 7 + k * (version + 3)) % len(WORDS)] for k in range(10))
        (folder / f"doc-{i:06d}.txt").write_text(f"Document {i}, version {version}: {words}.")


def measure(n: int, root: Path, model: Path) -> dict[str, Any]:
    from ragidx import RagidxConfig, ingest

    config = RagidxConfig().override(model={"model": str(model), "device": "cpu"})
    docs, index = root / f"docs-{n}", root / f"index-{n}"
    write_files(docs, n, version=0)
    out: dict[str, Any] = {"documents": n}
    for run, version in (("first", None), ("changed", 1), ("unchanged", None)):
        if version is not None:
            write_files(docs, n, version)
        started = time.perf_counter()
        report = ingest(docs, index, config)
        seconds = time.perf_counter() - started
        done = {"first": report.added, "changed": report.updated, "unchanged": report.unchanged}[run]
        if done != n:
            raise RuntimeError(f"{run} ingest of {n} files: {report.to_dict()}")
        out[run] = {"seconds": round(seconds, 2), "embed_seconds": round(report.embed_seconds, 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 20000])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(Path(tmp) / "tiny-bert")
        for n in args.sizes:
            results.append(measure(n, Path(tmp), model))
            if not args.json:
                _print(results)
    if args.json:
        print(json.dumps(results, indent=2))


def _print(results: list[dict[str, Any]]) -> None:
    row, previous = results[-1], results[-2] if len(results) > 1 else None
    parts = [f"{row['documents']:>7,} files"]
    grown = f" for x{row['documents'] / previous['documents']:g} files" if previous else ""
    for run in ("first", "changed", "unchanged"):
        seconds = row[run]["seconds"]
        ratio = f" (x{seconds / previous[run]['seconds']:.2f}{grown})" if previous else ""
        per_doc = 1e6 * seconds / row["documents"]
        parts.append(
            f"{run} {seconds:7.1f} s{ratio}, {per_doc:5.0f} us/doc, embed {row[run]['embed_seconds']:.1f} s"
        )
    print(" | ".join(parts), flush=True)


if __name__ == "__main__":
    main()
