"""``ragidx.search.filters``: one filter language, the same answers on every surface.

One table of conditions runs through the four surfaces that take a filter: ``ragidx query --where``
(the command-line spelling), the server's ``where``, LangChain's ``filter`` and the Python API's
``Index.search(where=…)`` (the JSON spelling). Each case asks for exactly as many results as
documents match, on a corpus where most documents match none of the conditions and rank above the
ones that do: a filter applied after the top-``k`` cut-off returns fewer. The expected ids come from
a plain reference over the same records, written out by hand per case.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ragidx.cli import app
from ragidx.errors import ConfigError
from ragidx.index.directory import Index
from ragidx.index.store import DocumentRecord
from ragidx.ingestion.pipeline import ingest
from ragidx.search.filters import Filter
from tests.conftest import tiny_config

QUERY = "granite quarry stone bridge"
FILLERS = 24  # documents that match no condition below and rank at the top for QUERY

RECORDS: list[dict[str, Any]] = [
    {"_id": "bees-2021", "title": "T", "text": "Bees dance.", "tags": ["bees", "ants"], "year": 2021},
    {"_id": "bees-2009", "text": "Hives in winter.", "tags": ["bees"], "year": 2009.0, "draft": True},
    {"_id": "ants-2015", "text": "Ant colonies.", "tags": ["ants"], "year": 2015, "author": {"name": "pg"}},
    {
        "_id": "wasps",
        "text": "Paper nests.",
        "tags": "wasps",
        "year": 2024,
        "code": "007",
        "date": "2024-05-01",
    },
    {"_id": "untagged", "text": "Nothing.", "year": "2020", "author": {"name": "rt"}, "date": "2023-12-31"},
    *(
        {"_id": f"filler-{i:02d}", "text": f"Granite quarry stone bridge number {i}.", "kind": "filler"}
        for i in range(FILLERS)
    ),
]
NOTES = {"notes/a.md": "# A\n\nBees and granite.", "notes/b.md": "# B\n\nAnts.", "c.txt": "Wasps."}
FILLER_IDS = {f"filler-{i:02d}" for i in range(FILLERS)}
NOT_FILLER = {"bees-2021", "bees-2009", "ants-2015", "wasps", "untagged", *NOTES}

# (name, --where specs, the JSON filter, the ids that match)
CASES: list[tuple[str, list[str], dict[str, Any], set[str]]] = [
    ("list membership", ["tags=bees"], {"tags": "bees"}, {"bees-2021", "bees-2009"}),
    ("a scalar value", ["tags=wasps"], {"tags": "wasps"}, {"wasps"}),
    ("title", ["title=T"], {"title": "T"}, {"bees-2021"}),
    ("numbers as numbers", ["year=2009"], {"year": 2009}, {"bees-2009"}),
    ("a number's other spelling", ["year=2009.00"], {"year": 2009.0}, {"bees-2009"}),
    ("a range", ["year>=2015"], {"year": {"$gte": 2015}}, {"bees-2021", "ants-2015", "wasps"}),
    (
        "two bounds",
        ["year>2009", "year<2024"],
        {"year": {"$gt": 2009, "$lt": 2024}},
        {"bees-2021", "ants-2015"},
    ),
    ("a text range", ["date>=2024-01-01"], {"date": {"$gte": "2024-01-01"}}, {"wasps"}),
    (
        "a text range, both ends",
        ["date>2023-06", "date<2024-01"],
        {"date": {"$gt": "2023-06", "$lt": "2024-01"}},
        {"untagged"},
    ),
    (
        "in",
        ["tags in (wasps, ants)"],
        {"tags": {"$in": ["wasps", "ants"]}},
        {"bees-2021", "ants-2015", "wasps"},
    ),
    (
        "not in",
        ["tags notin (bees, ants)", "kind!=filler"],
        {"tags": {"$nin": ["bees", "ants"]}, "kind": {"$ne": "filler"}},
        {"wasps", "untagged", *NOTES},
    ),
    (
        "not equal",
        ["tags!=bees", "kind!=filler"],
        {"tags": {"$ne": "bees"}, "kind": {"$ne": "filler"}},
        NOT_FILLER - {"bees-2021", "bees-2009"},
    ),
    ("doc_id", ["doc_id=ants-2015"], {"doc_id": "ants-2015"}, {"ants-2015"}),
    (
        "doc_id in",
        ["doc_id in (wasps, c.txt, nope)"],
        {"doc_id": {"$in": ["wasps", "c.txt", "nope"]}},
        {"wasps", "c.txt"},
    ),
    ("a source glob", ["source=notes/*.md"], {"source": "notes/*.md"}, {"notes/a.md", "notes/b.md"}),
    ("a source glob on the id", ["source=*.txt"], {"source": "*.txt"}, {"c.txt"}),
    ("a format", ["format=markdown"], {"format": "markdown"}, {"notes/a.md", "notes/b.md"}),
    ("nested metadata", ["author.name=pg"], {"author": {"name": "pg"}}, {"ants-2015"}),
    ("a boolean", ["draft=true"], {"draft": True}, {"bees-2009"}),
    ("a string of digits", ["code=007"], {"code": "007"}, {"wasps"}),
    ("several, ANDed", ["tags=bees", "year>=2010"], {"tags": "bees", "year": {"$gte": 2010}}, {"bees-2021"}),
    ("nothing matches", ["year=1999"], {"year": 1999}, set()),
]
IDS = [case[0] for case in CASES]


def _record(
    doc_id: str, metadata: dict[str, Any], title: str | None = None, source: str = ""
) -> DocumentRecord:
    return DocumentRecord(doc_id, source, "", title, "", 0, 0, "whole", 1, metadata)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    root = tmp_path_factory.mktemp("filters")
    docs = root / "docs"
    for name, text in NOTES.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text)
    (docs / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    ingest(docs, root / "ix", tiny_config(tiny_model))
    return root / "ix"


@pytest.fixture(scope="module")
def index(index_dir: Path) -> Index:
    return Index.open(index_dir)


@pytest.fixture(scope="module")
def server(index_dir: Path) -> Iterator[Any]:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from ragidx.integrations.server import LiveIndex, create_app

    with TestClient(create_app(LiveIndex(index_dir, reload_interval=0), threads=1)) as client:
        yield client


def _cli(index_dir: Path, specs: list[str], k: int) -> list[str]:
    where = [part for spec in specs for part in ("--where", spec)]
    result = CliRunner().invoke(app, ["query", QUERY, "-i", str(index_dir), "-k", str(k), "--json", *where])
    assert result.exit_code == 0, result.output
    return [hit["doc_id"] for hit in json.loads(result.stdout)]


def _server(client: Any, mapping: dict[str, Any], k: int) -> list[str]:
    response = client.post("/search", json={"text": QUERY, "k": k, "where": mapping})
    assert response.status_code == 200, response.text
    return [hit["doc_id"] for hit in response.json()["results"]]


def _langchain(index: Index, mapping: dict[str, Any], k: int) -> list[str]:
    pytest.importorskip("langchain_core")
    from ragidx.integrations.langchain import RagidxRetriever

    found = RagidxRetriever(index=index, k=k, filter=mapping, search_type="document").invoke(QUERY)
    return [str(document.id) for document in found]


def _python(index: Index, mapping: dict[str, Any], k: int) -> list[str]:
    return [hit.doc_id for hit in index.search(QUERY, k, where=mapping)]


@pytest.mark.parametrize(("name", "specs", "mapping", "expected"), CASES, ids=IDS)
def test_the_table_gives_the_same_documents_on_every_surface(
    name: str,
    specs: list[str],
    mapping: dict[str, Any],
    expected: set[str],
    index_dir: Path,
    index: Index,
    server: Any,
) -> None:
    k = max(len(expected), 1)  # exactly the matches: a filter after the top-k cut would lose some
    surfaces: dict[str, Callable[[], list[str]]] = {
        "ragidx query --where": lambda: _cli(index_dir, specs, k),
        "server where": lambda: _server(server, mapping, k),
        "LangChain filter": lambda: _langchain(index, mapping, k),
        "Index.search(where=…)": lambda: _python(index, mapping, k),
    }
    for surface, run in surfaces.items():
        found = run()
        assert len(found) == len(set(found)), (surface, found)
        assert set(found) == expected, (
            f"{name}: {surface} returned {sorted(found)}, expected {sorted(expected)}"
        )


def test_the_table_matches_a_reference_over_the_stored_records(index: Index) -> None:
    """The expected ids are what each filter accepts among the stored records (and not fillers:
    every case leaves them out), and the two spellings of a case accept the same records."""
    records = [index.document(doc_id) for doc_id in index.doc_ids()]
    assert {r.doc_id for r in records} == FILLER_IDS | NOT_FILLER
    for name, specs, mapping, expected in CASES:
        by_cli = {r.doc_id for r in records if Filter.parse_cli(specs).matches(r)}
        by_json = {r.doc_id for r in records if Filter.from_mapping(mapping).matches(r)}
        assert by_cli == by_json == expected, name


@pytest.mark.parametrize(
    "options", [{"mode": "dense"}, {"mode": "lexical"}, {"mode": "hybrid"}, {"mode": "dense", "per": "chunk"}]
)
def test_k_matches_come_back_in_every_mode(index: Index, options: dict[str, Any]) -> None:
    """The matching documents rank below every filler for the query; k of them still come back."""
    query = QUERY if options["mode"] != "lexical" else "granite dance hives colonies nests"
    unfiltered = [hit.doc_id for hit in index.search(QUERY, 5, mode="dense")]
    assert set(unfiltered) <= FILLER_IDS  # the matches are below the cut-off unfiltered
    where = {"kind": {"$ne": "filler"}, "format": "jsonl"}
    expected = {"bees-2021", "bees-2009", "ants-2015", "wasps", "untagged"}
    if options["mode"] == "lexical":  # BM25 returns documents holding a query word only
        expected = {"bees-2021", "bees-2009", "ants-2015", "wasps"}
    found = [hit.doc_id for hit in index.search(query, len(expected), where=where, **options)]
    assert set(found) == expected


def test_a_filter_is_a_predicate_and_callables_still_work(index: Index) -> None:
    bees = Filter.parse_cli(["tags=bees"])
    assert {h.doc_id for h in index.search(QUERY, 2, where=bees)} == {"bees-2021", "bees-2009"}
    pytest.importorskip("langchain_core")
    from ragidx.integrations.langchain import RagidxRetriever

    by_filter = RagidxRetriever(index=index, k=2, filter=bees).invoke(QUERY)
    assert {str(d.id) for d in by_filter} == {"bees-2021", "bees-2009"}
    odd = index.search(QUERY, 3, where=lambda record: record.doc_id.startswith("ants"))
    assert [h.doc_id for h in odd] == ["ants-2015"]
    assert not Filter.parse_cli([]) and Filter.from_mapping({}) == Filter()


@pytest.mark.parametrize(
    ("metadata", "mapping", "holds"),
    [
        ({"year": 2009}, {"year": True}, False),  # a boolean is not a number
        ({"flag": True}, {"flag": 1}, False),
        ({"year": "2009"}, {"year": 2009}, False),  # JSON values keep their types
        ({"x": None}, {"x": None}, True),
        ({}, {"x": None}, False),
        ({}, {"x": {"$exists": False}}, True),
        ({"x": 1}, {"x": {"$exists": True}}, True),
        ({"a.b": 1}, {"a.b": 1}, True),  # a key holding a dot is found first
        ({"a": {"b": {"c": 2}}}, {"a.b.c": 2}, True),
        ({"title": "meta"}, {"metadata.title": "meta"}, True),
        ({"tags": ["x", 3]}, {"tags": {"$gt": 2}}, True),
        ({"tags": []}, {"tags": {"$ne": "x"}}, True),
        ({"n": 5}, {"$or": [{"n": 1}, {"n": {"$gte": 5}}]}, True),
        ({"n": 5}, {"$or": [{"n": 1}, {"n": 2}], "m": {"$exists": False}}, False),
        ({"n": 5}, {"$and": [{"n": {"$gt": 1}}, {"n": {"$lt": 9}}]}, True),
    ],
)
def test_json_values_keep_their_types(metadata: dict[str, Any], mapping: dict[str, Any], holds: bool) -> None:
    assert Filter.from_mapping(mapping).matches(_record("d", metadata)) is holds


@pytest.mark.parametrize(
    ("spec", "metadata", "holds"),
    [
        ("year=2009", {"year": "2009"}, True),  # typed on a command line: text that spells a number
        ("year=2e3", {"year": 2000}, True),
        ("year=2009", {"year": 2009.5}, False),
        ("draft=false", {"draft": False}, True),
        ("note=null", {"note": None}, True),
        ("title=Life in (Paris)", {}, False),  # not an "in" list: the key holds "="
        ("year>=abc", {"year": 2009}, False),
        ("year>=2000", {"year": "2009"}, False),  # a number in a range: numbers only, as in JSON
        ("date>=2024-01-01", {"date": "2024-05-01"}, True),
    ],
)
def test_command_line_values_are_text_that_spells_a_value(
    spec: str, metadata: dict[str, Any], holds: bool
) -> None:
    assert Filter.parse_cli([spec]).matches(_record("d", metadata, title="Life")) is holds


def test_source_globs_and_exact_values() -> None:
    record = _record("a[1].md", {}, source="/home/me/docs/a[1].md")
    assert Filter.from_mapping({"source": "/home/me/docs/a[1].md"}).matches(record)  # exact, brackets too
    assert Filter.from_mapping({"source": "docs/*.md"}).matches(record)  # the path's last components
    assert not Filter.from_mapping({"source": "/docs/*.md"}).matches(record)  # anchored at the root
    assert not Filter.from_mapping({"source": "ocs/*.md"}).matches(record)  # whole components only
    assert Filter.from_mapping({"source": "a?1?.md"}).matches(record)  # the id
    assert not Filter.from_mapping({"source": {"$ne": "*.md"}}).matches(record)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"tags": ["a", "b"]}, 'where.tags: a list; for any of several values write {"$in": [...]}'),
        ({"year": {"$gt": None}}, "where.year.$gt: give a number or a string to compare with"),
        ({"year": {"$in": "2009"}}, 'where.year.$in: give a list of values, e.g. ["pdf", "html"]'),
        ({"year": {"$like": 1}}, "where.year.$like: unknown operator; use $eq, $ne, $in"),
        ({"$not": {}}, "where.$not: unknown operator; use $and or $or here"),
        ({"$or": []}, "where.$or: give a non-empty list of condition objects"),
        ({"a": {"$eq": 1, "b": 2}}, "where.a: mixes operators and nested keys"),
        ({"x": {"$exists": 1}}, "where.x.$exists: give true or false"),
        ({"x": float("nan")}, "where.x: nan is not a number a document can hold"),
    ],
)
def test_bad_json_filters_say_which_condition(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Filter.from_mapping(spec)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_bounds_on_json_filters() -> None:
    with pytest.raises(ConfigError, match=r"where.doc_id.\$in: 3 values, at most 2"):
        Filter.from_mapping({"doc_id": {"$in": ["a", "b", "c"]}}, max_values=2)
    deep: dict[str, Any] = {"x": 1}
    for _ in range(40):
        deep = {"$or": [deep]}
    with pytest.raises(ConfigError, match="nested deeper than 32 levels"):
        Filter.from_mapping(deep)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("format", "--where format: give key=value"),
        ("=pdf", "--where =pdf: give key=value"),
        ("year>", "--where year>: give a number or a text to compare year with"),
        ("tags in (a,,b)", "--where tags in (a,,b): an empty value in the list"),
    ],
)
def test_bad_command_line_conditions(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Filter.parse_cli([spec])
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_bad_filters_on_each_surface_are_one_line(index_dir: Path, index: Index, server: Any) -> None:
    cli = CliRunner().invoke(app, ["query", QUERY, "-i", str(index_dir), "--where", "year>"])
    assert (
        cli.exit_code == 2
        and cli.stderr.strip() == "error: --where year>: give a number or a text to compare year with"
    )
    response = server.post("/search", json={"text": QUERY, "where": {"tags": ["a"]}})
    assert response.status_code == 422
    assert response.json()["error"] == 'where: tags: a list; for any of several values write {"$in": [...]}'
    with pytest.raises(ConfigError, match=r"^where.year.\$gt: give a number"):
        index.search(QUERY, 3, where={"year": {"$gt": None}})
    pytest.importorskip("langchain_core")
    from ragidx.integrations.langchain import RagidxRetriever

    with pytest.raises(ConfigError, match=r"^filter.tags: a list"):
        RagidxRetriever(index=index, k=2, filter={"tags": ["a"]}).invoke(QUERY)
