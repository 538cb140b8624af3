"""``ragidx.integrations.mcp``: the server asked through the MCP SDK's own client, in process, over
tiny-model indexes: the tools and their schemas, search as ``Index.search`` answers it, documents
and spans, index info, the resources, and bad arguments answered with a one-line tool error while
the server keeps serving."""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from ragidx.errors import ConfigError
from ragidx.index.directory import Index
from ragidx.ingestion.pipeline import ingest
from ragidx.integrations.server.api import MAX_K
from ragidx.integrations.server.live import LiveIndex
from ragidx.search.options import MODES, PER
from tests.conftest import long_text, tiny_config

mcp = pytest.importorskip("mcp")
from mcp import Client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from ragidx.integrations.mcp import create_server  # noqa: E402
from ragidx.integrations.mcp.server import MAX_FETCH_CHARS  # noqa: E402

T = TypeVar("T")

DOCS = {
    "a.txt": "alpha river stone",
    "b.txt": "beta garden music",
    "notes/c.html": "<html><body><p>gamma winter harbor</p></body></html>",
}


def _build(root: Path, model: Path, lexical: bool = True) -> Path:
    docs = root / "docs"
    for name, text in DOCS.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text)
    (docs / "long.txt").write_text("Document long. " + long_text(300, seed=7))
    config = tiny_config(model)
    if not lexical:
        config = config.override(lexical={"enabled": False})
    ingest(docs, root / "ix", config)
    return root / "ix"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """Read-only: four documents (one chunked, one in a folder) with BM25."""
    return _build(tmp_path_factory.mktemp("mcp"), tiny_model)


@pytest.fixture(scope="module")
def live(index_dir: Path) -> LiveIndex:
    return LiveIndex(index_dir, reload_interval=0)


@pytest.fixture(scope="module")
def server(live: LiveIndex) -> Any:
    return create_server([live])


def _session(server: Any, talk: Callable[[Client], Awaitable[T]]) -> T:
    """``talk`` to ``server`` through the SDK's client, connected in process."""

    async def main() -> T:
        async with Client(server) as client:
            return await talk(client)

    return anyio.run(main)


def _call(server: Any, tool: str, **arguments: Any) -> Any:
    return _session(server, lambda client: client.call_tool(tool, arguments))


def _json(result: Any) -> Any:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


# --------------------------------------------------------------------------------- tools
def test_tools_are_listed_read_only_with_their_bounds(server: Any) -> None:
    tools = {tool.name: tool for tool in _session(server, lambda c: c.list_tools()).tools}
    assert set(tools) == {"search", "fetch_document", "index_info"}
    for tool in tools.values():
        assert tool.annotations.read_only_hint and not tool.annotations.destructive_hint
        assert tool.description
    schema = tools["search"].input_schema
    assert schema["required"] == ["query"]
    assert schema["properties"]["k"]["minimum"] == 1 and schema["properties"]["k"]["maximum"] == MAX_K
    modes = next(part for part in schema["properties"]["mode"]["anyOf"] if "enum" in part)["enum"]
    assert tuple(modes) == MODES  # the options' own Literal, not a restated list
    assert tuple(schema["properties"]["per"]["enum"]) == PER
    assert {"doc_id", "char_start", "char_end", "index"} == set(
        tools["fetch_document"].input_schema["properties"]
    )


def test_search_answers_what_the_python_api_answers(server: Any, index_dir: Path) -> None:
    body = _json(_call(server, "search", query="beta garden music", k=3, mode="dense"))
    index = Index.open(index_dir)
    expected = index.search("beta garden music", k=3, mode="dense")
    assert [p["doc_id"] for p in body["passages"]] == [r.doc_id for r in expected]
    assert [p["score"] for p in body["passages"]] == pytest.approx([r.score for r in expected], abs=1e-6)
    assert body["passages"][0]["doc_id"] == "b.txt" and body["mode"] == "dense" and body["index"] == "ix"
    for hit, result in zip(body["passages"], expected, strict=True):
        assert hit["source"] == result.source and hit["rank"] == result.rank
        span = hit["span"]
        assert index.document(hit["doc_id"]).text[span["char_start"] : span["char_end"]] == hit["passage"]
        assert hit["passage"] == result.passage and "text" not in hit


def test_search_defaults_to_hybrid_ranks_chunks_and_filters(server: Any) -> None:
    default = _json(_call(server, "search", query="gamma winter harbor"))
    assert default["mode"] == "hybrid" and default["passages"][0]["doc_id"] == "notes/c.html"
    assert len(default["passages"]) == 4  # k=5, four documents
    chunks = _json(_call(server, "search", query="Sentence 12 says", k=3, mode="dense", per="chunk"))
    assert chunks["per"] == "chunk" and len(chunks["passages"]) == 3
    assert all(p["doc_id"] == "long.txt" and p["chunk"] is not None for p in chunks["passages"])
    only = _json(_call(server, "search", query="river", filters={"source": "*/notes/*"}))
    assert [p["doc_id"] for p in only["passages"]] == ["notes/c.html"]
    some = _json(_call(server, "search", query="river", filters={"doc_id": {"$in": ["a.txt", "b.txt"]}}))
    assert {p["doc_id"] for p in some["passages"]} == {"a.txt", "b.txt"}


def test_fetch_document_whole_or_a_span(server: Any, index_dir: Path) -> None:
    text = Index.open(index_dir).document("long.txt").text
    whole = _json(_call(server, "fetch_document", doc_id="long.txt"))
    assert whole["text"] == text and whole["length"] == len(text) and whole["source"].endswith("long.txt")
    assert whole["span"] == {"char_start": 0, "char_end": len(text)}
    part = _json(_call(server, "fetch_document", doc_id="long.txt", char_start=15, char_end=60))
    assert part["text"] == text[15:60] and part["span"] == {"char_start": 15, "char_end": 60}
    tail = _json(_call(server, "fetch_document", doc_id="long.txt", char_start=len(text) - 5))
    assert tail["text"] == text[-5:]
    nested = _json(_call(server, "fetch_document", doc_id="notes/c.html"))
    assert nested["text"].strip() == "gamma winter harbor"


def test_index_info(server: Any, index_dir: Path) -> None:
    info = _json(_call(server, "index_info"))
    assert info["index"] == "ix" and info["directory"] == str(index_dir) and info["served"] == ["ix"]
    assert info["documents"] == 4 and info["vectors"] > 4 and info["generation"] == 1
    assert info["modes"] == list(MODES) and info["default_mode"] == "hybrid" and info["lexical"]
    assert info["limits"]["k"] == MAX_K and info["limits"]["fetch_chars"] == MAX_FETCH_CHARS


# --------------------------------------------------------------------------------- resources
def test_documents_as_resources(server: Any, index_dir: Path) -> None:
    async def talk(client: Client) -> tuple[Any, Any, Any, Any]:
        listed = await client.list_resources()
        templates = await client.list_resource_templates()
        listing = await client.read_resource("ragidx://ix/documents")
        rows = json.loads(listing.contents[0].text)
        nested = next(row for row in rows if row["doc_id"] == "notes/c.html")
        document = await client.read_resource(nested["uri"])
        return listed, templates, rows, document

    listed, templates, rows, document = _session(server, talk)
    assert [str(r.uri) for r in listed.resources] == ["ragidx://ix/documents"]
    assert [t.uri_template for t in templates.resource_templates] == ["ragidx://{index}/documents/{+doc_id}"]
    assert sorted(row["doc_id"] for row in rows) == ["a.txt", "b.txt", "long.txt", "notes/c.html"]
    assert document.contents[0].text == Index.open(index_dir).document("notes/c.html").text


def test_an_unknown_document_resource_is_refused(server: Any) -> None:
    async def talk(client: Client) -> list[str]:
        errors = []
        for uri in ("ragidx://ix/documents/nope.txt", "ragidx://elsewhere/documents/a.txt"):
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            errors.append(str(caught.value))
        errors.append((await client.read_resource("ragidx://ix/documents/a.txt")).contents[0].text)
        return errors

    missing, elsewhere, served = _session(server, talk)
    assert "doc_id 'nope.txt': no such document" in missing and "\n" not in missing
    assert "index 'elsewhere': not served here" in elsewhere and "\n" not in elsewhere
    assert served == "alpha river stone"


# --------------------------------------------------------------------------------- bad input
BAD = [
    ("search", {"query": "river", "k": 0}, "k: "),
    ("search", {"query": "river", "k": MAX_K + 1}, "k: "),
    ("search", {"query": ""}, "query: "),
    ("search", {"query": "river", "mode": "fuzzy"}, "mode"),
    ("search", {"query": "river", "filters": {"year": {"$gt": [1]}}}, "filters: year.$gt"),
    ("search", {"query": "river", "filters": {"$or": "x"}}, "filters: "),
    ("search", {"query": "river", "filter": {"doc_id": "a.txt"}}, "unknown argument 'filter'"),
    ("search", {"query": "river", "index": "/etc"}, "index '/etc': not served here"),
    ("search", {"query": "river", "index": "other"}, "index 'other': not served here"),
    ("fetch_document", {"doc_id": "missing.txt"}, "doc_id 'missing.txt': no such document"),
    ("fetch_document", {"doc_id": "a.txt", "char_start": 5, "char_end": 2}, "not a span of 'a.txt'"),
    ("fetch_document", {"doc_id": "a.txt", "char_end": 10**6}, "not a span of 'a.txt'"),
    ("fetch_document", {"doc_id": "a.txt", "char_start": -1}, "char_start: "),
    ("index_info", {"index": "../ix"}, "not served here"),
]


@pytest.mark.parametrize(("tool", "arguments", "says"), BAD, ids=[f"{t}-{a}" for t, a, _ in BAD])
def test_bad_arguments_are_one_line_tool_errors_and_the_server_keeps_serving(
    server: Any, tool: str, arguments: dict[str, Any], says: str
) -> None:
    async def talk(client: Client) -> tuple[Any, Any]:
        bad = await client.call_tool(tool, arguments)
        good = await client.call_tool("search", {"query": "beta garden music", "k": 1})
        return bad, good

    bad, good = _session(server, talk)
    assert bad.is_error
    message = bad.content[0].text
    assert says in message, message
    assert "\n" not in message and message.startswith(f"Error executing tool {tool}: ")
    assert _json(good)["passages"][0]["doc_id"] == "b.txt"


def test_a_mode_the_index_cannot_run_is_a_tool_error(tmp_path: Path, tiny_model: Path) -> None:
    server = create_server([LiveIndex(_build(tmp_path, tiny_model, lexical=False), reload_interval=0)])
    info = _json(_call(server, "index_info"))
    assert info["modes"] == ["dense"] and not info["lexical"]
    refused = _call(server, "search", query="river", mode="lexical")
    assert refused.is_error and "\n" not in refused.content[0].text and "lexical" in refused.content[0].text


def test_a_long_document_is_read_in_spans(
    server: Any, live: LiveIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ragidx.integrations.mcp.server.MAX_FETCH_CHARS", 20)
    refused = _call(server, "fetch_document", doc_id="long.txt")
    assert refused.is_error and "ask fetch_document for spans" in refused.content[0].text
    assert (
        _json(_call(server, "fetch_document", doc_id="long.txt", char_end=20))["text"]
        == (live.current.index.document("long.txt").text[:20])
    )


# --------------------------------------------------------------------------------- several indexes
def test_several_indexes_by_name_or_path_and_nothing_else(index_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "second"
    shutil.copytree(index_dir, other)
    server = create_server([LiveIndex(index_dir, reload_interval=0), LiveIndex(other, reload_interval=0)])
    assert _json(_call(server, "index_info"))["served"] == ["ix", "second"]
    assert _json(_call(server, "index_info", index="second"))["directory"] == str(other)
    by_path = _json(_call(server, "search", query="beta garden music", k=1, index=str(other)))
    assert by_path["index"] == "second" and by_path["passages"][0]["doc_id"] == "b.txt"
    outside = tmp_path / "third"
    shutil.copytree(index_dir, outside)  # a real index, but not named at start-up
    refused = _call(server, "search", query="beta", index=str(outside))
    assert refused.is_error and "not served here" in refused.content[0].text


def test_two_indexes_with_one_name_are_refused(index_dir: Path, tmp_path: Path) -> None:
    twin = tmp_path / "ix"
    shutil.copytree(index_dir, twin)
    with pytest.raises(ConfigError, match="same name 'ix'"):
        create_server([LiveIndex(index_dir, reload_interval=0), LiveIndex(twin, reload_interval=0)])
