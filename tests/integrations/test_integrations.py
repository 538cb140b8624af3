"""Integrations are optional: nothing outside ``ragidx.integrations`` imports their frameworks."""

from __future__ import annotations

import ast
from pathlib import Path

import ragidx

FRAMEWORKS = {"langchain", "langchain_core", "langchain_tests", "llama_index"}


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_library_and_the_cli_never_import_langchain() -> None:
    package = Path(ragidx.__file__).parent
    modules = [p for p in package.rglob("*.py") if "integrations" not in p.relative_to(package).parts]
    assert len(modules) > 20
    offenders = {str(p.relative_to(package)): _imported_roots(p) & FRAMEWORKS for p in modules}
    assert {name: found for name, found in offenders.items() if found} == {}
    inside = _imported_roots(package / "integrations" / "langchain" / "vectorstore.py")
    assert "langchain_core" in inside  # the check does see imports


def test_what_the_integrations_share_imports_no_framework() -> None:
    """``ragidx.integrations._shared`` serves LangChain and LlamaIndex alike: it needs neither."""
    shared = Path(ragidx.__file__).parent / "integrations" / "_shared.py"
    assert _imported_roots(shared) & FRAMEWORKS == set()
