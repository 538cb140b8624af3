"""Re-ingest cost and streaming memory: what a nightly ``ragidx ingest ./docs`` pays.

1. **Unchanged re-ingest vs first ingest** on the same folder, same process, same model: the first
   run embeds everything; the second finds every document unchanged (content sha256) and embeds
   nothing; a third run after one file changed embeds that file only. Prints each time and the
   ratios to the first ingest.
2. **Peak memory while ingesting one huge text file** (default 200 MB, generated from the corpus
   text): run in a child process whose peak RSS is read from ``getrusage``, next to a child that
   ingests a 1 MB file with the same settings (the baseline: Python, torch and the model). The
   huge file is streamed: read, decoded, hashed and tokenized block by block. Embedding all of its
   ~50M tokens would take hours on a CPU, so by default the benchmark cuts documents at
   ``--max-tokens`` (4096): every token is still read and counted, only the first 4096 are
   embedded, and the cut is recorded in the index (``n_tokens`` vs ``n_embedded``, shown by
   ``ragidx info --documents``) and printed here — never silent.

    python benchmarks/reingest.py                      # essays folder, 200 MB file
    python benchmarks/reingest.py --big-mb 20 --json   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
# the evaluation data beside the checkout (../shared/data), or $RAGIDX_EVAL_DATA, as for ragidx eval
DATA = Path(os.environ.get("RAGIDX_EVAL_DATA", ROOT.parent / "shared" / "data"))
ESSAYS = DATA / "paul_graham_essays" / "essays"

_CHILD = """
import json, resource, sys, time
from ragidx.config import RagidxConfig
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import ingest
started = time.perf_counter()
config = RagidxConfig().override(model={"device": "cpu"}, long_doc={"max_tokens": int(sys.argv[3])})
report = ingest(sys.argv[1], sys.argv[2], config)
store = Index.open(sys.argv[2]).store
doc = store.summaries()[0]
doc["streamed"] = bool(store.document(doc["doc_id"]).metadata.get("streamed"))
print(json.dumps({"seconds": time.perf_counter() - started, "peak_rss_mb": resource.getrusage(
    resource.RUSAGE_SELF).ru_maxrss / 1024, "document": doc}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=ESSAYS if ESSAYS.is_dir() else ROOT / "examples/docs")
    parser.add_argument("--limit", type=int, default=30, help="files of --docs to use (0: all)")
    parser.add_argument("--big-mb", type=int, default=200, help="size of the huge file (0: skip)")
    parser.add_argument("--max-tokens", type=int, default=4096, help="tokens embedded of the huge file")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        results["reingest"] = _reingest(args.docs, args.limit, tmp)
        if args.big_mb:
            results["big_file"] = _big_file(args.docs, args.big_mb, args.max_tokens, tmp)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    r = results["reingest"]
    print(f"re-ingest of {r['documents']} documents ({r['tokens']:,} tokens), model all-MiniLM-L6-v2, CPU")
    print(f"  first ingest        {r['first_s']:8.2f} s")
    print(f"  unchanged re-ingest {r['unchanged_s']:8.2f} s   {r['unchanged_ratio']:.3f} x the first")
    print(f"  one file changed    {r['one_changed_s']:8.2f} s   {r['one_changed_ratio']:.3f} x the first")
    if "big_file" in results:
        b = results["big_file"]
        doc = b["big"]["document"]
        print(
            f"huge file: {b['mb']} MB, {doc['n_tokens']:,} tokens read, {doc['n_embedded']:,} embedded "
            f"(cut at --max-tokens {args.max_tokens}: recorded, n_embedded < n_tokens), "
            f"mode {doc['embed_mode']}, streamed {doc['streamed']}"
        )
        print(f"  peak RSS, 1 MB file baseline {b['baseline']['peak_rss_mb']:8.0f} MB")
        print(
            f"  peak RSS, {b['mb']} MB file       {b['big']['peak_rss_mb']:8.0f} MB  "
            f"(+{b['big']['peak_rss_mb'] - b['baseline']['peak_rss_mb']:.0f} MB; "
            f"{b['big']['seconds']:.0f} s)"
        )


def _reingest(docs: Path, limit: int, tmp: Path) -> dict[str, object]:
    from ragidx.config import RagidxConfig
    from ragidx.ingestion.pipeline import ingest

    folder = tmp / "docs"
    folder.mkdir()
    files = sorted(p for p in docs.iterdir() if p.is_file())
    for path in files[:limit] if limit else files:
        shutil.copy(path, folder / path.name)
    config = RagidxConfig().override(model={"device": "cpu"})
    times = []
    reports = []
    for step in range(3):
        if step == 2:
            first = sorted(folder.iterdir())[0]
            first.write_text(first.read_text() + "\nOne more line.\n")
        started = time.perf_counter()
        reports.append(ingest(folder, tmp / "index", config))
        times.append(time.perf_counter() - started)
    assert reports[1].unchanged == reports[0].added and reports[1].added == 0
    assert reports[2].updated == 1
    return {
        "documents": reports[0].added,
        "tokens": reports[0].tokens,
        "first_s": times[0],
        "unchanged_s": times[1],
        "one_changed_s": times[2],
        "unchanged_ratio": times[1] / times[0],
        "one_changed_ratio": times[2] / times[0],
    }


def _big_file(docs: Path, mb: int, max_tokens: int, tmp: Path) -> dict[str, object]:
    corpus = "\n\n".join(p.read_text(errors="replace") for p in sorted(docs.iterdir()) if p.is_file())
    out: dict[str, object] = {"mb": mb}
    for name, size in (("baseline", 1), ("big", mb)):
        folder = tmp / name
        folder.mkdir()
        with open(folder / "huge.txt", "w", encoding="utf-8") as handle:
            written, copy = 0, 0
            while written < size << 20:
                block = f"\n\nCopy {copy}.\n\n{corpus}"
                handle.write(block)
                written += len(block.encode("utf-8"))
                copy += 1
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-c", _CHILD, str(folder), str(tmp / f"{name}-index"), str(max_tokens)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        out[name] = json.loads(done.stdout.strip().splitlines()[-1])
        (folder / "huge.txt").unlink()
    return out


if __name__ == "__main__":
    main()
