"""Tests that need a manifest a writer got wrong (counts off, a file unlisted) change it here:
the edit is re-signed with the manifest's checksum, as a buggy writer would have written it, so
what the test reaches is the check after the checksum (see ``ragidx.index.manifest``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragidx.index.manifest import CHECKSUM_KEY, MANIFEST_NAME, manifest_checksum


def edit_manifest(directory: Path, change: Callable[[dict[str, Any]], object]) -> None:
    """Apply ``change`` to the manifest's JSON object in place and write it back, re-signed."""
    path = directory / MANIFEST_NAME
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw.pop(CHECKSUM_KEY, None)
    change(raw)
    raw[CHECKSUM_KEY] = manifest_checksum(raw)
    path.write_text(json.dumps(raw, indent=2), encoding="utf-8")
