"""Scripts outside the package (``examples/``, ``benchmarks/``) loaded as modules, so that tests can
call their functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str) -> ModuleType:
    """The script at ``path`` run as a module named ``name`` (not added to ``sys.modules``). Its folder
    is first on ``sys.path`` while it runs, as with ``python path``, so it imports the modules beside
    it (``examples/_common.py``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module
