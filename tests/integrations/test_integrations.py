"""Integrations are optional: the library and the CLI never import their frameworks."""

from __future__ import annotations

import subprocess
import sys


def test_ragidx_and_its_cli_import_without_langchain() -> None:
    code = (
        "import sys, ragidx.index, ragidx.ingestion, ragidx.retriever, ragidx.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('langchain_core', 'langchain')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
