"""``POST /search/batch``: a real server over a tiny-model index; each query's answer is what
``/search`` answers for it, in order, in one model call; bad queries get their own error, bad
requests one line, and the server keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragidx.integrations.server import LiveIndex
from ragidx.integrations.server.api import MAX_TEXT_CHARS
from ragidx.integrations.server.batch import MAX_QUERIES
from ragidx.integrations.server.limits import Limits
from tests.integrations.server.test_server import Running, _build

pytest.importorskip("uvicorn")

QUERIES = ["alpha river", "winter harbor", "the of", "garden music", "Document long"]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    return _build(tmp_path_factory.mktemp("batch"), tiny_model)


@pytest.fixture(scope="module")
def served(index_dir: Path) -> Iterator[Running]:
    running = Running(LiveIndex(index_dir, reload_interval=0))
    yield running
    running.stop()


def _batch(served: Running, **body: Any) -> Any:
    return served.client.post("/search/batch", json=body)


def _without_times(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in answer.items() if key not in ("took_ms", "generation", "k", "per")}


@pytest.mark.parametrize(
    "options",
    [{}, {"k": 2, "mode": "dense"}, {"per": "chunk", "with_passage": True}, {"where": {"source": "*.txt"}}],
)
def test_each_answer_is_what_search_answers_in_order(served: Running, options: dict[str, Any]) -> None:
    reply = _batch(served, queries=QUERIES, **options)
    assert reply.status_code == 200, reply.text
    answers = reply.json()["answers"]
    assert [a["query"] for a in answers] == QUERIES
    for query, answer in zip(QUERIES, answers, strict=True):
        single = served.search(text=query, **options).json()
        assert _without_times(answer) == {
            "query": query,
            "mode": single["mode"],
            "notes": single["notes"],
            "results": single["results"],
        }
    if not options:  # hybrid by default; "the of" has no BM25 word: dense, with /search's note
        assert answers[2]["mode"] == "dense" and answers[2]["notes"]
        assert answers[0]["mode"] == "hybrid"


def test_one_model_call_for_the_whole_batch(served: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    encoder = served.live.current.index.encoder
    calls: list[int] = []
    embed = encoder.embed

    def counted(texts: list[str], *args: Any, **kwargs: Any) -> Any:
        calls.append(len(texts))
        return embed(texts, *args, **kwargs)

    monkeypatch.setattr(encoder, "embed", counted)
    queries = [f"alpha river {i}" for i in range(20)]
    assert _batch(served, queries=queries, mode="dense").status_code == 200
    assert calls == [20]


def test_a_hybrid_batch_makes_one_model_call_and_one_faiss_search(
    served: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = served.live.current.index
    calls: dict[str, list[int]] = {"embed": [], "nearest": []}
    embed, nearest = index.encoder.embed, index.nearest

    def embedded(texts: list[str], *args: Any, **kwargs: Any) -> Any:
        calls["embed"].append(len(texts))
        return embed(texts, *args, **kwargs)

    def searched(queries: Any, n: int, *args: Any, **kwargs: Any) -> Any:
        calls["nearest"].append(len(queries))
        return nearest(queries, n, *args, **kwargs)

    monkeypatch.setattr(index.encoder, "embed", embedded)
    monkeypatch.setattr(index, "nearest", searched)
    reply = _batch(served, queries=[f"alpha river {i}" for i in range(20)])  # hybrid by default
    assert reply.status_code == 200 and {a["mode"] for a in reply.json()["answers"]} == {"hybrid"}
    assert calls == {"embed": [20], "nearest": [20]}


def test_a_bad_query_gets_its_own_error_and_the_rest_are_answered(served: Running) -> None:
    long = "x" * (MAX_TEXT_CHARS + 1)
    reply = _batch(served, queries=["alpha", "  ", long, "beta"])
    assert reply.status_code == 200
    answers = reply.json()["answers"]
    assert answers[1] == {"query": "  ", "error": "queries.1: empty; send the search text"}
    assert answers[2]["error"].startswith("queries.2: 10,001 characters, over the limit of 10,000")
    assert answers[0]["results"] and answers[3]["results"]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"queries": []}, "queries: List should have at least 1 item after validation, not 0"),
        ({"queries": "alpha"}, "queries: Input should be a valid list"),
        ({"queries": ["a", 3]}, "queries.1: Input should be a valid string"),
        ({"queries": ["a"], "text": "a"}, "text: Extra inputs are not permitted"),
        ({"queries": ["a"], "k": 0}, "k: Input should be greater than or equal to 1"),
        ({"queries": ["a"] * (MAX_QUERIES + 1)}, f"queries: List should have at most {MAX_QUERIES} items"),
        ({"queries": ["a"], "where": {"year": {"$gt": []}}}, "where: year.$gt:"),
        ({}, "queries: Field required"),
    ],
)
def test_bad_requests_are_422_with_one_line(served: Running, body: Any, error: str) -> None:
    reply = _batch(served, **body)
    assert reply.status_code == 422
    message = reply.json()["error"]
    assert message.startswith(error) and "\n" not in message
    assert served.client.get("/health").json()["status"] == "ok"


def test_not_json_is_one_line(served: Running) -> None:
    reply = served.client.post("/search/batch", content=b"{oops")
    assert reply.status_code == 422 and reply.json()["error"].startswith("request body: not valid JSON")


def test_a_batch_costs_the_sum_of_its_queries(index_dir: Path) -> None:
    limits = Limits(timeout=30, work_budget=10, workers=1, heavy_workers=1, queue=4)
    running = Running(LiveIndex(index_dir, reload_interval=0), limits)
    try:
        assert (
            running.client.post("/search/batch", json={"queries": ["a", "b", "c"], "k": 3}).status_code == 200
        )
        refused = running.client.post("/search/batch", json={"queries": ["a", "b", "c", "d"], "k": 3})
        assert refused.status_code == 422
        assert refused.json()["error"] == (
            "queries: this batch is 12 work units (4 queries of up to 3), over the server's budget of 10; "
            "send at most 3 such queries a request, or ask less of each (k, sentences, with_text, where)"
        )
        assert running.client.get("/info").json()["limits"]["batch_queries"] == MAX_QUERIES
    finally:
        running.stop()


def test_a_reranking_server_reranks_its_batches_as_its_single_searches(
    index_dir: Path, tiny_cross_encoder: Path
) -> None:
    """`ragidx serve --rerank`: every batch answer is the reranked /search answer (scores, order,
    the preferred passage), and ``"rerank": false`` gives the first stage alone, as /search does."""

    def timeless(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**h, "rerank": {**h["rerank"], "ms": 0, "pairs": 0}} if "rerank" in h else h for h in results
        ]

    running = Running(LiveIndex(index_dir, reload_interval=0, rerank=f"{tiny_cross_encoder}:4"))
    try:
        queries = ["alpha river", "winter harbor"]
        for rerank in (True, False):
            reply = running.client.post("/search/batch", json={"queries": queries, "k": 3, "rerank": rerank})
            assert reply.status_code == 200, reply.text
            for query, answer in zip(queries, reply.json()["answers"], strict=True):
                single = running.search(text=query, k=3, rerank=rerank).json()["results"]
                assert timeless(answer["results"]) == timeless(single)
                assert all(("rerank" in h) is rerank for h in answer["results"])
    finally:
        running.stop()
