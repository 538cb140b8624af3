"""Options shared by several commands (index directory, config file, device, JSON output, hybrid fusion)."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from ragidx.errors import ConfigError
from ragidx.strategy import parse_fusion

DEFAULT_INDEX = os.environ.get("RAGIDX_INDEX", ".ragidx/index")

IndexDir = Annotated[
    Path,
    typer.Option("--index", "-i", help="Index directory (env RAGIDX_INDEX).", show_default=True),
]
ConfigFile = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML settings file, e.g. configs/default.toml; flags override it."),
]
Device = Annotated[str | None, typer.Option("--device", help="auto | cpu | cuda | cuda:N (default auto).")]


class DType(StrEnum):
    """Weights and activations of the encoder (``EncoderConfig.dtype``)."""

    auto = "auto"
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    int8 = "int8"  # backend onnx only


class BackendName(StrEnum):
    """What runs the encoder (``EncoderConfig.backend``)."""

    torch = "torch"
    onnx = "onnx"


Json = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
Hybrid = Annotated[
    str | None,
    typer.Option(
        "--hybrid",
        help="Fuse a document-level vector with the best chunk: 'rrf' (reciprocal-rank fusion, no "
        "parameter) or a weight w in [0, 1] (score = w · document cosine + (1 − w) · best chunk "
        "cosine; pick w with `ragidx eval … hybrid:auto`).",
        show_default=False,
    ),
]


BestChunks = Annotated[
    int | None,
    typer.Option(
        "--best-chunks",
        min=1,
        help="chunk, late: a document scores as the mean cosine of its N best chunks instead of its "
        "best one (1: max-sim). Scoring only: nothing is re-embedded.",
        show_default=False,
    ),
]

RerankSpec = Annotated[
    str | None,
    typer.Option(
        "--rerank",
        help="Re-score the first stage's top N documents (default 50, at least -k) with a cross-encoder, "
        "each on its best passages: MODEL[:N], MODEL a folder (ragidx train --objective rerank makes one) "
        "or a hub id.",
        show_default=False,
    ),
]


def hybrid_fields(value: str) -> dict[str, Any]:
    """``--hybrid rrf|<w>`` as :class:`~ragidx.embed.config.HybridConfig` fields (a one-line
    :class:`ConfigError` for anything else, ``auto`` included: it is tuned by ``ragidx eval``)."""
    try:
        parsed = parse_fusion(value)
    except ValueError:
        raise ConfigError(
            f"--hybrid {value}: use rrf or a weight w in [0, 1] (w · document cosine + (1 − w) · best "
            "chunk cosine)"
        ) from None
    if parsed["fusion"] == "auto":
        raise ConfigError(AUTO_REFUSED.format(what=f"--hybrid {value}"))
    return parsed


AUTO_REFUSED = (
    "{what}: the weight is chosen by cross-validation in `ragidx eval … --strategy <spec>+hybrid:auto`, "
    "whose results.json records it under parameters.hybrid_tuning; ingest with hybrid:<that w> "
    "(or hybrid:rrf)"
)
