"""Every command's --help: paragraphs rewrapped to the terminal, flags without a value type."""

from __future__ import annotations

import itertools

import pytest
import typer.core
import typer.main
from typer.testing import CliRunner

from ragidx.cli import app

runner = CliRunner()


def _commands() -> list[list[str]]:
    """The argument lists that reach every command and group (``[]``, ``["ingest"]``, …)."""
    found: list[list[str]] = []

    def walk(command: object, path: list[str]) -> None:
        found.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _commands()


def _help(path: list[str], columns: int) -> str:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_command_is_covered() -> None:
    names = {" ".join(p) for p in COMMANDS}
    assert names >= {"", "ingest", "query", "info", "verify", "delete", "eval", "eval grid"}


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "ragidx")
def test_help_shows_no_value_type_after_flags(path: list[str]) -> None:
    text = _help(path, 200)
    assert "<bool>" not in text
    assert "<list[" not in text.split("Options")[-1]  # a repeatable option shows one value's type
    assert "--help" in text


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "ragidx")
def test_help_paragraphs_fill_an_80_column_terminal(path: list[str]) -> None:
    """A line of the description followed by more of the same paragraph is nearly full: the text
    is rewrapped to the terminal, not broken where the docstring's source lines end."""
    text = _help(path, 80)
    description = text.split("╭")[0].splitlines()
    assert max(len(line) for line in description) <= 80
    lines = [line.strip() for line in description]
    for line, following in itertools.pairwise(lines):
        if line and following and not line.startswith("Usage:"):
            assert len(line) >= 60 or len(line) + 1 + len(following.split()[0]) > 78, (line, following)


def test_flags_still_parse_without_a_value() -> None:
    result = runner.invoke(app, ["delete", "--help"])
    assert result.exit_code == 0 and "--dry-run" in result.stdout


def test_help_is_tidied_on_a_typer_without_display_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """typer < 0.29 has no ``TyperOption.display_type``: every command crashed at start with an
    AttributeError (issue 40, typer 0.27.2 and click 8.5.0). There typer shows one value's type
    after a repeatable option by itself, and flags still show none."""

    def missing(self: object) -> None:
        raise AttributeError("display_type")

    monkeypatch.setattr(typer.core.TyperOption, "display_type", property(missing), raising=False)
    ingest = typer.main.get_command(app).commands["ingest"]
    params = {param.name: param for param in ingest.params}
    assert params["include"].multiple and params["include"].metavar is None
    assert params["prune"].is_flag and params["prune"].metavar == ""
