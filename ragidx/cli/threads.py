"""CPU threads for queries: the ``--threads`` option of ``query`` and ``serve``, applied to torch and FAISS.

One short query is a few small matrix products: splitting it over every core buys little on an idle
machine and costs a lot on a busy one, where each extra thread waits for a core
(``benchmarks/serve.py`` measures it). Queries therefore run on
:data:`~ragidx.config.QUERY_THREADS` threads unless told otherwise; ``0`` keeps torch's own default.

The count goes into ``OMP_NUM_THREADS``, which torch and FAISS read when they start (so a lexical
query, which loads no model, still never imports torch); whichever is already imported is set
through ``torch.set_num_threads`` or ``faiss.omp_set_num_threads``.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from ragidx.config import QUERY_THREADS

Threads = Annotated[
    int | None,
    typer.Option(
        "--threads",
        min=0,
        envvar="RAGIDX_THREADS",
        help=f"CPU threads of torch and FAISS per query (default {QUERY_THREADS}: fastest for one short "
        "query on a busy machine; 0: torch's default, one per core).",
        show_default=False,
    ),
]


def apply_threads(threads: int | None) -> None:
    """Run torch and FAISS on ``threads`` CPU threads (None: :data:`QUERY_THREADS`; 0: leave their
    defaults). Process-wide: call it before the first query."""
    count = QUERY_THREADS if threads is None else threads
    if count == 0:
        return
    os.environ["OMP_NUM_THREADS"] = str(count)  # read by torch and FAISS when they start
    if "torch" in sys.modules:  # already started: set directly
        import torch

        torch.set_num_threads(count)
    if "faiss" in sys.modules:
        import faiss

        faiss.omp_set_num_threads(count)


def threads_in_use() -> int:
    """The CPU threads torch runs a query on (imports torch)."""
    import torch

    return int(torch.get_num_threads())
