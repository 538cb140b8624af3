"""The layout's promise, checked: dependencies point down the pipeline.

Every module's import-time imports (module level, outside ``if TYPE_CHECKING:``) are read from its
source. A stage may import itself and the stages before it (read → embed → index → search →
evaluate; see docs/architecture.md), never one after it, so the data of an ingest or a query flows
down without coming back.

Imports inside functions run when the function does. Most are the same stage or one before it (the
CLI's heavy imports, kept out of ``ragidx --help``); an upward one is allowed only where
:data:`CALL_TIME` lists it, with its reason: ``Index.search``'s hand-over to the search stage is the
one search entry point, so no other module reaches past it into the stage above.
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

# The upward imports allowed inside a function: (module, function) → the parts it may import there.
CALL_TIME: dict[tuple[str, str], set[str]] = {
    # the search entry points users call on an index (Index.open(dir).search(...)): they hand over to
    # ragidx.search, which reads the index only through its public reading API
    ("ragidx.index.directory", "Index.search_many"): {"search"},
    ("ragidx.index.directory", "Index.search_by_vectors"): {"search"},
    ("ragidx.index.directory", "Index.search_mode"): {"search"},
    # ragidx serve: the server (FastAPI, uvicorn) loads only when the command runs
    ("ragidx.cli.serve", "serve_command"): {"integrations"},
    # ragidx mcp: the MCP server (the mcp SDK) loads only when the command runs
    ("ragidx.cli.mcp", "mcp_command"): {"integrations"},
    # ragidx verify --repair: documents that lost their vectors are embedded again through the ingest
    # path (the index's model and long-document policy), loaded only when some need it
    ("ragidx.index.verify", "_embed_again"): {"ingestion"},
}


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


def _call_time_imports(tree: ast.Module) -> list[tuple[str, str]]:
    """(function, module) for each import inside a function body (``Class.method`` for a method;
    imports under ``if TYPE_CHECKING:`` are left out: they never run)."""
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, scope: str, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(ast.Module(body=[other], type_ignores=[]), scope, inside)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{scope}.{child.name}" if scope else child.name
                visit(child, name, inside or not isinstance(child, ast.ClassDef))
            elif inside and isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((scope, child.module))
            elif inside and isinstance(child, ast.Import):
                found.extend((scope, alias.name) for alias in child.names)
            else:
                visit(child, scope, inside)

    visit(tree, "", False)
    return [(scope, name) for scope, name in found if name == "ragidx" or name.startswith("ragidx.")]


MODULES = sorted(PACKAGE.rglob("*.py"))


# The modules whose imports are checked: all but the shared ones, which every part may import.
CHECKED = [path for path in MODULES if _part(_module_name(path)) not in SHARED]


def _checked(path: Path) -> tuple[str, str, set[str], ast.Module]:
    """For a module of :data:`CHECKED`: its name, its part, the parts it may import (itself, the
    stages before it and the shared modules) and its parsed source."""
    module = _module_name(path)
    part = _part(module)
    return module, part, ALLOWED[part] | {part} | SHARED, ast.parse(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_pipeline(path: Path) -> None:
    module, part, allowed, tree = _checked(path)
    upward = [name for name in _import_time_imports(tree) if _part(name) not in allowed]
    assert not upward, f"{module} ({part}) imports {upward} at import time; allowed: {sorted(allowed)}"


def test_every_module_belongs_to_a_known_part() -> None:
    parts = {_part(_module_name(path)) for path in MODULES}
    assert parts <= set(ALLOWED) | SHARED, parts - set(ALLOWED) - SHARED


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_call_time_imports_point_down_unless_listed(path: Path) -> None:
    module, part, allowed, tree = _checked(path)
    upward = [
        f"{function}: {name}"
        for function, name in _call_time_imports(tree)
        if _part(name) not in allowed | CALL_TIME.get((module, function), set())
    ]
    assert not upward, (
        f"{module} ({part}) imports {upward} at call time, upward; go through the stage's entry point "
        "(Index.search…) or list it with its reason in CALL_TIME"
    )


def test_every_listed_call_time_import_is_still_there() -> None:
    """A CALL_TIME entry that no longer matches an import is stale: remove it."""
    seen: set[tuple[str, str, str]] = set()
    for path in MODULES:
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        seen.update((module, function, _part(name)) for function, name in _call_time_imports(tree))
    listed = {(module, function, part) for (module, function), parts in CALL_TIME.items() for part in parts}
    assert listed <= seen, listed - seen


def test_call_time_imports_are_found() -> None:
    """The reader sees imports in methods and nested functions, and skips TYPE_CHECKING blocks."""
    source = """
import ragidx.read
def top():
    import ragidx.evaluate
    if TYPE_CHECKING:
        import ragidx.probe
    else:
        from ragidx.train import x
class Index:
    def search(self):
        def inner():
            from ragidx.search.retriever import Retriever
"""
    assert _call_time_imports(ast.parse(source)) == [
        ("top", "ragidx.evaluate"),
        ("top", "ragidx.train"),
        ("Index.search.inner", "ragidx.search.retriever"),
    ]


ENTRY_POINTS = {"ragidx.index.directory"}  # Index.search, search_many, search_by_vectors, search_mode


def test_searches_go_through_the_index_entry_points() -> None:
    """The CLI, the server, LangChain and the evaluation search through ``Index.search…``: only the
    search stage itself and the index's entry points hold a ``Retriever``."""
    direct = []
    for path in MODULES:
        module = _module_name(path)
        if _part(module) == "search" or module in ENTRY_POINTS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "ragidx.search.retriever":
                direct.extend(module for alias in node.names if alias.name == "Retriever")
    assert not direct, (
        f"{sorted(set(direct))} use Retriever directly; call Index.search / search_many / search_by_vectors"
    )
