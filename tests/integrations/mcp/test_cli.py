"""``ragidx mcp``: the command started as an MCP host starts it (a subprocess spoken to over stdio by
the SDK's own client), and its refusals at start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from ragidx.cli.app import app
from tests.integrations.mcp.test_server import _build

mcp = pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    return _build(tmp_path_factory.mktemp("mcp-cli"), tiny_model)


@pytest.mark.slow  # a subprocess that imports torch: seconds
def test_stdio_as_a_host_starts_it(index_dir: Path, tmp_path: Path) -> None:
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ragidx", "mcp", "--index", str(index_dir), "--reload-interval", "0"],
        env=dict(os.environ),
        cwd=str(tmp_path),
    )

    async def talk() -> tuple[Any, Any, Any]:
        async with Client(command) as client:
            tools = await client.list_tools()
            bad = await client.call_tool("search", {"query": "beta", "k": 0})
            good = await client.call_tool("search", {"query": "beta garden music", "k": 2})
            return tools, bad, good

    tools, bad, good = anyio.run(talk)
    assert {tool.name for tool in tools.tools} == {"search", "fetch_document", "index_info"}
    assert bad.is_error and bad.content[0].text == (
        "Error executing tool search: k: Input should be greater than or equal to 1"
    )
    assert json.loads(good.content[0].text)["passages"][0]["doc_id"] == "b.txt"


@pytest.mark.slow  # a subprocess that imports torch: seconds
def test_streamable_http(index_dir: Path, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "ragidx", "mcp", "-i", str(index_dir), "--transport", "http", "--port", "0"]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert " at http://127.0.0.1:" in line, line + process.stderr.read()
        url = line.split(" at ")[1].strip()

        async def talk() -> tuple[Any, Any]:
            async with Client(url) as client:
                bad = await client.call_tool("fetch_document", {"doc_id": "nope"})
                good = await client.call_tool("fetch_document", {"doc_id": "a.txt"})
                return bad, good

        bad, good = anyio.run(talk)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert bad.is_error and "doc_id 'nope': no such document" in bad.content[0].text
    assert json.loads(good.content[0].text)["text"] == "alpha river stone"


def test_a_missing_index_is_one_line_before_serving(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["mcp", "--index", str(tmp_path / "nowhere")])
    assert result.exit_code != 0
    assert result.output.count("error: ") == 1 and "nowhere" in result.output, result.output


def test_two_indexes_with_one_name_are_refused(index_dir: Path, tmp_path: Path) -> None:
    twin = tmp_path / "other" / "ix"
    twin.parent.mkdir()
    twin.symlink_to(index_dir)
    result = CliRunner().invoke(app, ["mcp", "--index", str(index_dir), "--index", str(twin)])
    assert result.exit_code == 2 and "same name 'ix'" in result.output, result.output
