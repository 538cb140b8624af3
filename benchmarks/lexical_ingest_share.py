"""The lexical index's share of an ingest: ingest the 49 Paul Graham essays with the default model
and the default settings (BM25 on), timing the BM25 work (analysis, merge, serialisation) inside it.

    python benchmarks/lexical_ingest_share.py        # prints: ingest N s, ... lexical ... = P %
"""

import time, tempfile, pathlib
import ragidx.index.directory as d
from ragidx import ingest, RagidxConfig

spent = [0.0]
orig = d.analyse


def timed(*a, **k):
    t = time.perf_counter()
    r = orig(*a, **k)
    spent[0] += time.perf_counter() - t
    return r


d.analyse = timed
orig_bytes = d.LexicalIndex.to_bytes


def tb(self):
    t = time.perf_counter()
    r = orig_bytes(self)
    spent[0] += time.perf_counter() - t
    return r


d.LexicalIndex.to_bytes = tb
with tempfile.TemporaryDirectory() as tmp:
    t = time.perf_counter()
    rep = ingest(
        str(pathlib.Path(__file__).resolve().parents[2] / "shared/data/paul_graham_essays/essays"),
        pathlib.Path(tmp) / "ix",
        RagidxConfig(),
    )
    total = time.perf_counter() - t
print(
    f"ingest {total:.1f} s, {rep.tokens} tokens, lexical (analyse + merge + serialise) {spent[0]:.2f} s = {100 * spent[0] / total:.2f} %"
)
