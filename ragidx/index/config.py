"""Index settings, without importing faiss or numpy: the FAISS section (``[index]`` in a config
file) and the lexical section (``[lexical]``), both recorded in the manifest. Config files,
``ragidx --help``, ``info`` and ``verify`` load this module only."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class FaissConfig(BaseModel):
    """How vectors are indexed and searched."""

    model_config = ConfigDict(extra="forbid")

    factory: str = Field("Flat", description="FAISS factory string, e.g. Flat, HNSW32, IVF256,Flat")
    gpu: Literal["auto", "never", "always"] = Field(
        "auto",
        description="search on a GPU: faiss-gpu's clone, else torch on CUDA for Flat indexes "
        "(ragidx.index.backend); never: faiss on the CPU; always: fail without a GPU path",
    )
    gpu_dtype: Literal["float32", "float16"] = Field(
        "float32",
        exclude_if=lambda value: value == "float32",  # manifests read and write as before
        description="torch GPU search of a Flat index: float32 (FAISS Flat's results) or float16 "
        "(half the GPU memory, faster; recall in benchmarks/README.md)",
    )
    search_params: str = Field("", description="FAISS search parameters, e.g. 'nprobe=32' or 'efSearch=128'")
    shards: int = Field(1, ge=1, description="split vectors over this many FAISS files (ragidx.index.shards)")

    @field_validator("factory")
    @classmethod
    def _strip_idmap(cls, value: str) -> str:
        value = re.sub(r"^IDMap2?,", "", value.strip())
        if not value:
            raise ValueError("empty FAISS factory string")
        return value


class LexicalConfig(BaseModel):
    """The lexical (BM25) index built beside the vectors, and how its scores fuse with them."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="build a BM25 index at ingest (false: dense only)")
    stemmer: str = Field(
        "english", description="Snowball stemmer (PyStemmer: english, german, french, …) or none"
    )
    stopwords: Literal["english", "none"] = Field(
        "english", description="Lucene's 33 English stop words, or none"
    )
    lowercase: bool = True
    passage_terms: int = Field(
        256,
        ge=0,
        description="also score passages of this many terms (half-overlapping): a document's lexical "
        "score is its BM25 plus its best passage's; 0: whole documents only (classic BM25)",
    )
    k1: float = Field(1.5, gt=0, description="BM25 term-frequency saturation")
    b: float = Field(0.75, ge=0, le=1, description="BM25 length normalisation")
    fusion: Literal["weighted", "rrf"] = Field(
        "weighted", description="hybrid search: weighted sum of z-normalised scores, or RRF"
    )
    weight: float = Field(0.7, ge=0, le=1, description="hybrid search: the lexical score's weight (weighted)")
    rrf_k: int = Field(60, ge=1, description="RRF constant k: score = Σ 1 / (k + rank)")
    tuned_on: str | None = Field(None, description="where the weight was chosen")
