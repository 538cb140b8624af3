"""The layout's promise, checked: dependencies point down the pipeline.

Every module's import-time imports (module level, outside ``if TYPE_CHECKING:``) are read from its
source. A stage may import itself and the stages before it (read → embed → index → search →
evaluate; see docs/architecture.md), never one after it, so the data of an ingest or a query flows
down without coming back. Imports inside functions (the CLI's heavy imports, ``Index.search``'s
hand-over to the search stage) are run-time choices and are not import-time dependencies.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ragidx"

# What each part may import at import time, besides itself and the shared bottom (errors, faults,
# the package root's __version__). ``config`` is ragidx/config.py and ragidx/strategy.py: the
# composed settings of every stage, torch-free.
ALLOWED: dict[str, set[str]] = {
    "read": set(),
    "embed": set(),
    "index": {"embed"},
    "config": {"read", "embed", "index"},
    "ingestion": {"read", "embed", "index", "config"},
    "search": {"embed", "index"},
    "evaluate": {"read", "embed", "index", "search", "config"},
    "probe": {"read", "embed", "index", "search", "evaluate", "config"},
    "train": {"read", "embed"},  # ragidx train: fine-tunes what embed loads, from what read reads
    "integrations": {"read", "embed", "index", "ingestion", "search", "config"},
    "cli": {"read", "embed", "index", "ingestion", "search", "evaluate", "probe", "train", "config"},
}
SHARED = {"errors", "faults", "_deprecated", ""}  # "" is ``from ragidx import __version__``


def _part(module: str) -> str:
    """``ragidx.embed.encoder`` → ``embed``; ``ragidx.config`` / ``ragidx.strategy`` → ``config``."""
    name = module.split(".")[1] if module.count(".") else ""
    return {"config": "config", "strategy": "config", "__main__": "cli"}.get(name, name)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_time_imports(tree: ast.Module) -> list[str]:
    """Imports that run when the module is imported: module level, not under TYPE_CHECKING."""
    found: list[str] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for block in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(node, block, []):
                        visit(child.body if isinstance(child, ast.ExceptHandler) else [child])
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append(node.module)
            elif isinstance(node, ast.Import):
                found.extend(alias.name for alias in node.names)

    visit(tree.body)
    return [name for name in found if name == "ragidx" or name.startswith("ragidx.")]


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_pipeline(path: Path) -> None:
    module = _module_name(path)
    part = _part(module)
    if part in SHARED:
        return
    allowed = ALLOWED[part] | {part} | SHARED
    tree = ast.parse(path.read_text(encoding="utf-8"))
    upward = [name for name in _import_time_imports(tree) if _part(name) not in allowed]
    assert not upward, f"{module} ({part}) imports {upward} at import time; allowed: {sorted(allowed)}"


def test_every_module_belongs_to_a_known_part() -> None:
    parts = {_part(_module_name(path)) for path in MODULES}
    assert parts <= set(ALLOWED) | SHARED, parts - set(ALLOWED) - SHARED
