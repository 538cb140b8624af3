"""Options shared by several commands (index directory, config file, device, JSON output)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

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
Json = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
