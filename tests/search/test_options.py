"""Tests for ragidx.search.options: each search choice is defined once and every surface takes it.

The scan reads every module's source: a ``Literal[...]``, an enum, or a tuple, list or set of
strings equal to one of the choices (``per``, ``mode``, ``sentences``) anywhere but in
``ragidx/search/options.py`` is a restated list that a new value would miss.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import get_args

import pytest

from ragidx.search import options
from ragidx.search.options import Mode, Per, Sentences

PACKAGE = Path(__file__).resolve().parents[2] / "ragidx"
CHOICES = {"Per": Per, "Mode": Mode, "Sentences": Sentences}
# The same strings naming another thing: a hybrid index's two levels of vectors (not what is ranked).
OTHER_MEANINGS = {("index/directory.py", frozenset(get_args(Per)))}


def _strings(nodes: list[ast.expr]) -> frozenset[str] | None:
    """The strings of a literal collection's elements, when there are two or more and all are strings."""
    if len(nodes) < 2 or not all(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in nodes):
        return None
    return frozenset(str(n.value) for n in nodes if isinstance(n, ast.Constant))


def restated(source: str) -> list[tuple[int, frozenset[str]]]:
    """``(line, values)`` of every Literal, enum and literal collection of strings in ``source``."""
    found: list[tuple[int, frozenset[str]]] = []
    inside_literal: set[int] = set()  # the tuple of Literal["a", "b"]: counted once, as the Literal
    for node in ast.walk(ast.parse(source)):
        values: frozenset[str] | None = None
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).split(".")[-1] == "Literal":
            inner = node.slice
            inside_literal.add(id(inner))
            values = _strings(list(inner.elts) if isinstance(inner, ast.Tuple) else [inner])
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and id(node) not in inside_literal:
            values = _strings(list(node.elts))
        elif isinstance(node, ast.ClassDef) and any("Enum" in ast.unparse(base) for base in node.bases):
            members = [s.value for s in node.body if isinstance(s, ast.Assign) and len(s.targets) == 1]
            values = _strings(members)
        if values is not None:
            found.append((node.lineno, values))
    return sorted(found, key=lambda item: item[0])


def _modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "search" / "options.py"]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_restates_a_search_choice(path: Path) -> None:
    sets = {frozenset(get_args(kind)): name for name, kind in CHOICES.items()}
    hits = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {sorted(values)} restates {sets[values]}"
        for line, values in restated(path.read_text(encoding="utf-8"))
        if values in sets and (str(path.relative_to(PACKAGE)), values) not in OTHER_MEANINGS
    ]
    assert not hits, "use ragidx.search.options' type (or typing.get_args of it):\n" + "\n".join(hits)


def test_the_scan_sees_each_way_of_restating() -> None:
    source = inspect.cleandoc(
        """
        from enum import StrEnum
        from typing import Literal
        A = Literal["chunk", "document"]
        class B(StrEnum):
            dense = "dense"
            lexical = "lexical"
            hybrid = "hybrid"
        def f(x):
            return x in ("auto", "dense", "lexical")
        C = Literal["document"]  # one value is not a list
        D = ("document", "chunk", "passage")  # another choice
        """
    )
    sets = {frozenset(get_args(kind)) for kind in CHOICES.values()}
    assert [line for line, values in restated(source) if values in sets] == [3, 4, 9]


def test_value_lists_are_the_types_args() -> None:
    assert options.PER == get_args(Per) == ("document", "chunk")
    assert options.MODES == get_args(Mode) == ("dense", "lexical", "hybrid")
    assert options.SENTENCES == get_args(Sentences) == ("dense", "lexical", "auto")


def test_every_surface_offers_every_value() -> None:
    """The server's request, the LangChain retriever and the CLI take each value of each choice."""
    pytest.importorskip("fastapi")
    pytest.importorskip("langchain_core")
    from ragidx.integrations.langchain.retriever import RagidxRetriever
    from ragidx.integrations.server.api import SearchRequest

    for name, values in (("mode", options.MODES), ("per", options.PER), ("sentences", options.SENTENCES)):
        for value in values:
            assert getattr(SearchRequest.model_validate({"text": "q", name: value}), name) == value
    fields = RagidxRetriever.model_fields
    assert fields["mode"].annotation == Mode | None
    assert fields["sentences"].annotation == Sentences | None
    assert fields["lexical_weight"].annotation == options.LexicalWeight | None


def test_the_cli_offers_every_value() -> None:
    from typer.testing import CliRunner

    from ragidx.cli.app import app

    help_text = CliRunner().invoke(app, ["query", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"}).output
    for values in (options.MODES, options.PER, options.SENTENCES):
        assert "|".join(values) in help_text.replace(" ", "")
