"""The lexical index's share of an ingest: ingest the 49 Paul Graham essays with the default model
and the default settings (BM25 on), timing the BM25 work (analysis, merge, serialisation) inside
the same run, so both numbers see the same machine load.

    python benchmarks/lexical_ingest_share.py --data ../shared/data
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ragidx.index.directory as directory
from ragidx import RagidxConfig, ingest


def _timed(function: Callable[..., Any], spent: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    args = parser.parse_args()
    spent = [0.0]
    directory.analyse = _timed(directory.analyse, spent)  # type: ignore[assignment]
    lexical = directory.LexicalIndex
    lexical.to_bytes = _timed(lexical.to_bytes, spent)  # type: ignore[method-assign]  # flush + save
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        report = ingest(args.data / "paul_graham_essays" / "essays", Path(tmp) / "ix", RagidxConfig())
        total = time.perf_counter() - started
    print(
        f"ingest {total:.1f} s, {report.tokens:,} tokens; BM25 (analyse, merge, serialise) "
        f"{spent[0]:.2f} s = {100 * spent[0] / total:.2f} % of the ingest"
    )


if __name__ == "__main__":
    main()
