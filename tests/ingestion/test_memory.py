"""Memory of ingesting a streamed file: bounded by blocks, not by the file (issue 29).

Each case runs an ingest in a fresh process, after a warm-up ingest that loads the model and runs
one whole embedding batch (so the model's working memory is already counted), and measures how far
the process's peak resident set grows. A streamed file (larger than ``stream_bytes``) is never held
whole: its growth stays under 10 read blocks (``STREAM_BLOCK``, 1 MiB) whatever its size, plus,
with BM25 on, the postings of its lexical index (what the index keeps; they are sorted and written
at the commit, about 3x their file's size at once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ragidx.read.document import STREAM_BLOCK
from tests.conftest import long_text

ROOT = Path(__file__).resolve().parents[2]

_PEAK = """
import json, resource, sys
from pathlib import Path
from ragidx.config import RagidxConfig
from ragidx.ingestion.pipeline import ingest
model, warm, docs, out, settings = sys.argv[1:6]
config = RagidxConfig().override(model={"model": model, "device": "cpu"}, **json.loads(settings))
ingest(warm, Path(out) / "warm", config)  # model loaded, a whole batch of windows run once
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ingest(docs, Path(out) / "ix", config)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def _growth(tmp_path: Path, model: Path, text: str, settings: dict) -> int:
    """Peak memory growth (bytes) of ingesting ``text`` as one file, in a fresh process."""
    warm, docs = tmp_path / "warm", tmp_path / "docs"
    warm.mkdir()
    docs.mkdir()
    (warm / "warm.txt").write_text(long_text(150_000, seed=9))  # over one batch: streamed too
    (docs / "big.txt").write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    args = [str(model), str(warm), str(docs), str(tmp_path), json.dumps(settings)]
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *args], env=env, capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[-1])


def _zipf_text(n_words: int, vocabulary: int = 50_000, seed: int = 8) -> str:
    """Words drawn by a Zipf law from a random vocabulary: a natural text's vocabulary growth."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=int(rng.integers(3, 10)))) for _ in range(vocabulary)]
    ranks = np.minimum(rng.zipf(1.2, size=n_words), vocabulary) - 1
    return " ".join(words[r] for r in ranks)


def test_a_streamed_file_grows_memory_by_less_than_ten_blocks(tmp_path: Path, tiny_model: Path) -> None:
    """A 16 MB file under PCW (one vector: nothing kept grows with the file) is read, hashed,
    tokenized, embedded and checkpointed block by block. Measured: +3.7 MiB; before, +20 MiB (a
    list entry per window for its plan, rows and spans, and 64K-character tokenizer pieces)."""
    text = long_text(2_500_000, seed=8)
    settings = {
        "long_doc": {"policy": "pcw"},
        "ingest": {"stream_bytes": 1 << 20},
        "lexical": {"enabled": False},
    }
    grew = _growth(tmp_path, tiny_model, text, settings)
    assert len(text) > 15 * STREAM_BLOCK
    assert grew < 10 * STREAM_BLOCK, f"grew by {grew / 2**20:.1f} MiB for a {len(text) / 2**20:.0f} MB file"


def test_a_streamed_files_bm25_costs_its_postings_not_its_text(tmp_path: Path, tiny_model: Path) -> None:
    """With BM25 on, the file's postings (documents and passages) are what grows: less than 10
    blocks plus 4x the lexical file. Measured on 4.4 MB of Zipf text: +25.6 MiB for a 5.3 MiB
    lexical file; before, +38 MiB (postings built as lists of Python ints, sorted by lexsort)."""
    settings = {"long_doc": {"policy": "truncate"}, "ingest": {"stream_bytes": 1 << 20}}
    grew = _growth(tmp_path, tiny_model, _zipf_text(600_000), settings)
    (lexical,) = (tmp_path / "ix").glob("lexical-*.npz")
    postings = lexical.stat().st_size
    assert grew < 10 * STREAM_BLOCK + 4 * postings, (
        f"grew by {grew / 2**20:.1f} MiB with a {postings / 2**20:.1f} MiB lexical file"
    )
