"""FAISS settings (the ``[faiss]`` section of a config file, recorded in the manifest), without
importing faiss: config files, ``ragidx --help``, ``info`` and ``verify`` load this module only."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class FaissConfig(BaseModel):
    """How vectors are indexed and searched."""

    model_config = ConfigDict(extra="forbid")

    factory: str = Field("Flat", description="FAISS factory string, e.g. Flat, HNSW32, IVF256,Flat")
    gpu: Literal["auto", "never", "always"] = Field("auto", description="search on a GPU clone")
    search_params: str = Field("", description="FAISS search parameters, e.g. 'nprobe=32' or 'efSearch=128'")
    shards: int = Field(1, ge=1, description="split vectors over this many FAISS files (ragidx.index.shards)")

    @field_validator("factory")
    @classmethod
    def _strip_idmap(cls, value: str) -> str:
        value = re.sub(r"^IDMap2?,", "", value.strip())
        if not value:
            raise ValueError("empty FAISS factory string")
        return value
