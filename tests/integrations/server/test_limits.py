"""The server's bounds (issue 39, items 3 and 8): a body that is not UTF-8 JSON or nests too deep is a
422 saying where; types are strict; ``where`` globs are bounded and leave no process-wide cache;
a search over the work budget is refused with what would fit; searches run concurrently, a heavy
one apart from plain ones; past the time limit or beyond a full lane the answer is 503 with
Retry-After, and a filtered search stops at its deadline. Real uvicorn on 127.0.0.1, tiny model."""

from __future__ import annotations

import fnmatch
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragidx.integrations.server import LiveIndex
from ragidx.integrations.server import body as bodies
from ragidx.integrations.server.api import SearchRequest
from ragidx.integrations.server.lanes import Busy, Deadline, Lane, TimedOut
from ragidx.integrations.server.limits import (
    DENSE_COST,
    LIGHT_BODY_BYTES,
    MAX_GLOB_CHARS,
    MAX_GLOBS,
    MAX_JSON_DEPTH,
    MAX_WHERE_VALUES,
    LimitError,
    Limits,
    check_where,
    work,
)
from ragidx.integrations.server.live import Answer
from ragidx.search.options import SearchKwargs
from tests.integrations.server.test_server import Running, _build

pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    return _build(tmp_path_factory.mktemp("limits"), tiny_model)


@pytest.fixture(scope="module")
def served(index_dir: Path) -> Iterator[Running]:
    running = Running(LiveIndex(index_dir, reload_interval=0))
    yield running
    running.stop()


def _post(served: Running, content: bytes) -> httpx.Response:
    return served.client.post("/search", content=content, headers={"content-type": "application/json"})


# ----------------------------------------------------------------------------- bodies (item 8)
def test_a_body_that_is_not_utf8_is_a_422_naming_the_byte(served: Running) -> None:
    body = b'{"text": "caf\xe9 au lait"}'
    response = _post(served, body)
    assert response.status_code == 422
    assert response.json() == {
        "error": "request body: not UTF-8 at byte 13 (invalid continuation byte); send JSON encoded as UTF-8"
    }
    assert body[13:14] == b"\xe9"


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH, 100_000])
def test_json_nested_too_deep_is_a_422_naming_the_character(served: Running, levels: int) -> None:
    head = '{"text": "x", "where": {"a": '
    body = head + "[" * levels + "]" * levels + "}}"
    response = _post(served, body.encode())
    assert response.status_code == 422
    # the body's object and where's are levels 1 and 2: the (MAX - 1)th bracket goes too deep
    at = len(head) + MAX_JSON_DEPTH - 2
    assert response.json() == {
        "error": f"request body: JSON nested deeper than {MAX_JSON_DEPTH} levels at character {at}"
    }


def test_json_at_the_depth_limit_is_read(served: Running) -> None:
    levels = MAX_JSON_DEPTH - 1  # the body's object, then where's nested metadata keys
    body = '{"text": "x", "where": ' + '{"a": ' * levels + "1" + "}" * levels + "}"
    response = _post(served, body.encode())
    assert response.status_code == 200 and response.json()["results"] == []


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"text": "x", "lexical_weight": NaN}', "request body: not valid JSON (NaN is not a JSON value)"),
        (b'{"text": "x", "k": Infinity}', "request body: not valid JSON (Infinity is not a JSON value)"),
        (b'{"text": "x", "k": 1' + b"0" * 5000 + b"}", "request body: not valid JSON (Exceeds the limit"),
        (b'{"text": "\\ud800 x"}', "text: a lone surrogate \\ud800 is not a character"),
        (b'{"text": "x", "where": {"\\udfff": 1}}', "where: a lone surrogate \\udfff is not a character"),
        (b'{"text": "x"', "request body: not valid JSON at character 12 (line 1, column 13): Expecting"),
        (b"  ", 'request body: empty; send a JSON object such as {"text": "…"}'),
    ],
)
def test_bodies_json_cannot_carry_are_422(served: Running, body: bytes, error: str) -> None:
    response = _post(served, body)
    assert response.status_code == 422
    assert response.json()["error"].startswith(error), response.json()


def test_a_surrogate_pair_is_a_character(served: Running) -> None:
    response = _post(served, b'{"text": "bees \\ud83d\\udc1d", "k": 1}')
    assert response.status_code == 200 and response.json()["query"] == "bees \U0001f41d"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"text": "x", "k": "5"}, "k: Input should be a valid integer"),
        ({"text": "x", "k": 5.0}, "k: Input should be a valid integer"),
        ({"text": "x", "k": True}, "k: Input should be a valid integer"),
        ({"text": "x", "with_text": 1}, "with_text: Input should be a valid boolean"),
        ({"text": "x", "with_passage": "yes"}, "with_passage: Input should be a valid boolean"),
        ({"text": 5}, "text: Input should be a valid string"),
        ({"text": "x", "best_chunks": "2"}, "best_chunks: Input should be a valid integer"),
    ],
)
def test_types_are_strict(served: Running, body: dict[str, Any], error: str) -> None:
    response = served.search(**body)
    assert response.status_code == 422
    assert response.json()["error"] == error and response.json()["detail"][0]["loc"][0] == "body"


def test_an_integer_weight_is_a_number(served: Running) -> None:
    assert served.search(text="alpha", lexical_weight=1).status_code == 200


def test_a_body_that_is_not_json_by_its_content_type(served: Running) -> None:
    response = served.client.post("/search", content=b'{"text": "x"}', headers={"content-type": "text/plain"})
    assert response.status_code == 422 and response.json() == {"error": bodies.JSON_CONTENT}
    bare = served.client.post("/search", content=b'{"text": "alpha", "k": 1}')  # no header: read as JSON
    assert bare.status_code == 200


# --------------------------------------------------------------------------- where (item 3)
def test_globs_are_bounded_and_leave_no_process_wide_cache(served: Running) -> None:
    before = fnmatch._compile_pattern.cache_info().currsize  # type: ignore[attr-defined]
    for i in range(40):  # unique long globs, as a client hoping to fill the server's memory
        glob = f"*{i}*" + "?" * (MAX_GLOB_CHARS - 10)
        assert served.search(text="alpha", where={"source": glob}).status_code == 200
    assert fnmatch._compile_pattern.cache_info().currsize == before  # type: ignore[attr-defined]
    too_long = served.search(text="alpha", where={"source": "*" * (MAX_GLOB_CHARS + 1)})
    assert too_long.status_code == 422
    assert too_long.json()["error"] == (
        f"where: Value error, a source glob of {MAX_GLOB_CHARS + 1:,} characters; at most {MAX_GLOB_CHARS:,}"
    )
    listed = served.search(text="alpha", where={"source": {"$in": ["a*", "b" * (MAX_GLOB_CHARS + 1)]}})
    assert listed.status_code == 422 and "source glob of" in listed.json()["error"]


def test_where_is_bounded_in_globs_and_values(served: Running) -> None:
    many_globs = {"$or": [{"source": f"*{i}*"} for i in range(MAX_GLOBS + 1)]}
    response = served.search(text="alpha", where=many_globs)
    assert response.status_code == 422
    assert response.json()["error"] == f"where: Value error, more than {MAX_GLOBS} source globs"
    many_values = {"$or": [{"n": i} for i in range(MAX_WHERE_VALUES)]}
    response = served.search(text="alpha", where=many_values)
    assert response.status_code == 422
    assert f"more than {MAX_WHERE_VALUES:,} keys and values" in response.json()["error"]


def test_check_where_counts_what_a_filter_checks() -> None:
    check_where({"source": ["a*"] * MAX_GLOBS, "doc_id": {"$in": ["x"] * 10_000}})
    with pytest.raises(LimitError, match="source globs"):
        check_where({"$and": [{"source": "a*"}, {"source": {"$in": ["b*"] * MAX_GLOBS}}]})
    check_where({"title": "x" * 10 * MAX_GLOB_CHARS})  # only source values are globs


# ------------------------------------------------------------------------------------- work
def _request(**fields: Any) -> SearchRequest:
    return SearchRequest.model_validate({"text": "x", **fields})


def test_work_counts_results_dense_sentences_text_and_filters() -> None:
    assert work(_request(k=10), documents=4, vectors=20).units == 4  # what the index holds
    assert work(_request(k=10, per="chunk"), documents=4, vectors=20).units == 10
    dense = work(_request(k=10, per="chunk", sentences="dense", with_text=True), documents=4, vectors=20)
    assert dense.units == 10 * (DENSE_COST + 1)
    auto = work(_request(k=10, per="chunk", sentences="auto"), documents=4, vectors=20)
    assert auto.units == 10 + DENSE_COST  # one budget of sentences, whatever k
    filtered = work(_request(k=3, where={"doc_id": {"$in": ["a"] * 999}}), documents=100_000, vectors=0)
    assert filtered.units == 3 + 10_021  # 1,001 keys and values checked on 10⁵ documents, and read
    globbed = work(_request(k=3, where={"source": "*" * 1000, "n": 1}), documents=0, vectors=0)
    assert globbed.units == 0 + 1 + 1  # 4 values read (0.04 units, rounded up), 1,000 glob characters


@pytest.fixture(scope="module")
def budgeted(index_dir: Path) -> Iterator[Running]:
    limits = Limits(timeout=30, work_budget=5, workers=2, heavy_workers=1, queue=8)
    running = Running(LiveIndex(index_dir, reload_interval=0), limits)
    yield running
    running.stop()


def test_a_search_over_the_work_budget_is_refused_with_what_fits(budgeted: Running) -> None:
    heavy = budgeted.search(text="alpha", k=10, per="chunk", mode="dense", sentences="dense", with_text=True)
    assert heavy.status_code == 422
    vectors = budgeted.client.get("/info").json()["vectors"]
    results = min(10, vectors)
    assert heavy.json()["error"] == (
        f"k: this search is {results * (DENSE_COST + 1):,} work units ({results} results × "
        f"{DENSE_COST + 1} (sentences dense, with_text)), over the server's budget of 5; ask for "
        "sentences lexical, or no text"
    )
    assert heavy.json()["detail"][0]["type"] == "work_budget"
    assert vectors >= 5
    wide = budgeted.search(text="alpha", k=10, per="chunk", mode="dense", with_text=True)
    assert wide.status_code == 422 and wide.json()["error"].endswith("ask for k ≤ 2, or no text")
    fits = budgeted.search(text="alpha", k=5, per="chunk", mode="dense")
    assert fits.status_code == 200 and len(fits.json()["results"]) == 5


def test_info_reports_every_limit(budgeted: Running) -> None:
    limits = budgeted.client.get("/info").json()["limits"]
    assert limits["work_budget"] == 5 and limits["timeout"] == 30 and limits["queue"] == 8
    assert limits["workers"] == 2 and limits["heavy_workers"] == 1
    assert limits["glob_chars"] == MAX_GLOB_CHARS and limits["json_depth"] == MAX_JSON_DEPTH
    assert limits["dense_cost"] == DENSE_COST and limits["k"] == 1000 and limits["body_bytes"] == 1 << 20


# -------------------------------------------------------------------------- lanes and time
class SlowLive(LiveIndex):
    """Searches for ``sleep S`` take S seconds, or until :attr:`release` is set (a long model pass:
    nothing stops it); ``filter`` runs the where filter until it stops the search. Everything else
    searches as usual."""

    stopped: list[float]
    release: threading.Event

    def search(self, text: str, k: int, options: SearchKwargs) -> Answer:
        if text.startswith("sleep"):
            self.release.wait(float(text.split()[1]))
        elif text == "filter":
            where = options["where"]
            assert callable(where)
            record = self.current.index.document("a.txt")
            try:
                while True:
                    where(record)
            finally:
                self.stopped.append(time.monotonic())
        return super().search(text, k, options)


LIMIT = 1.0  # the slow server's time limit, seconds
HEAVY = {"text": "sleep 30", "k": 1, "sentences": "dense"}  # 100 work units: the heavy lane


@pytest.fixture(scope="module")
def slow_live(index_dir: Path) -> SlowLive:
    live = SlowLive(index_dir, reload_interval=0)
    live.stopped, live.release = [], threading.Event()
    return live


@pytest.fixture()
def slow(slow_live: SlowLive) -> Iterator[Running]:
    """A server of its own (fresh lanes) over the one slow index."""
    slow_live.stopped.clear()
    slow_live.release.clear()
    running = Running(slow_live, Limits(timeout=LIMIT, work_budget=2000, workers=2, heavy_workers=1, queue=1))
    yield running
    slow_live.release.set()  # the sleeping searches end; stopping waits for them
    running.stop()


def _timed(running: Running, **body: Any) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    with httpx.Client(base_url=running.url, timeout=30) as client:
        response = client.post("/search", json=body)
    return response, time.monotonic() - start


def test_past_the_time_limit_is_a_503_and_plain_searches_go_on(slow: Running) -> None:
    with ThreadPoolExecutor(4) as pool:
        late = pool.submit(_timed, slow, **HEAVY)
        time.sleep(0.1)
        plain = [pool.submit(_timed, slow, text="alpha river stone", k=1) for _ in range(3)]
        response, took = late.result()
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert response.json()["error"].startswith(
            f"the search took over {LIMIT:g} s (the server's time limit)"
        )
        assert LIMIT - 0.1 < took < LIMIT + 2  # answered at the limit, not when the search ends (30 s)
        for future in plain:  # the heavy search holds its own lane only
            answer, seconds = future.result()
            assert answer.status_code == 200 and seconds < LIMIT, (answer.text, seconds)


def test_a_full_lane_is_a_503_at_once(slow: Running) -> None:
    with ThreadPoolExecutor(3) as pool:  # 1 heavy worker + 1 waiting: the third is refused
        answers = list(pool.map(lambda _: _timed(slow, **HEAVY), range(3)))
    busy = [(r, s) for r, s in answers if "busy" in r.json()["error"]]
    assert len(busy) == 1
    response, seconds = busy[0]
    assert response.status_code == 503 and response.headers["retry-after"] == "1" and seconds < LIMIT
    assert response.json()["error"] == (
        "busy: the heavy lane is full (1 running, 1 waiting); retry after 1 s"
    )


def test_a_large_body_is_read_in_its_own_lane(slow: Running) -> None:
    large = {"text": "alpha", "k": 1, "where": {"doc_id": {"$in": [f"{i:09d}.txt" for i in range(400)]}}}
    assert len(json.dumps(large)) > LIGHT_BODY_BYTES
    deep = b'{"text": "x", "where": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(_timed, slow, **HEAVY) for _ in range(2)]  # 1 running, 1 waiting
        time.sleep(0.2)
        for _ in range(3):  # neither waits for the full heavy lane
            answer, seconds = _timed(slow, **large)
            assert answer.status_code == 200 and answer.json()["results"] == [] and seconds < LIMIT
            refused = _post(slow, deep)
            assert refused.status_code == 422 and "nested deeper" in refused.json()["error"]
        assert [future.result()[0].status_code for future in running] == [503, 503]


def test_a_filtered_search_stops_at_its_deadline(slow: Running) -> None:
    live = slow.live
    assert isinstance(live, SlowLive)
    start = time.monotonic()
    response, took = _timed(slow, text="filter", k=1, where={"doc_id": "a.txt"})
    assert response.status_code == 503 and took < LIMIT + 2
    while not live.stopped and time.monotonic() < start + 10:  # without the deadline: never
        time.sleep(0.01)
    assert live.stopped and live.stopped[0] - start < LIMIT + 2


def test_lane_refuses_beyond_workers_and_queue() -> None:
    lane = Lane("test", workers=1, queue=1)
    release = threading.Event()
    try:
        first, second = lane.submit(release.wait, 5), lane.submit(release.wait, 5)
        with pytest.raises(Busy, match="test lane is full"):
            lane.submit(release.wait, 5)
        release.set()
        assert first.result(5) and second.result(5)
        assert lane.submit(lambda: 7).result(5) == 7  # slots given back
    finally:
        release.set()
        lane.shutdown()
    with pytest.raises(TimedOut):
        Deadline(0).check()


# ------------------------------------------------------------------------------ concurrency
def test_concurrent_searches_answer_as_sequential_ones(served: Running) -> None:
    kinds: list[dict[str, Any]] = [
        {"text": "alpha river stone", "k": 3},
        {"text": "beta garden music", "k": 4, "mode": "dense"},
        {"text": "gamma winter harbor", "k": 2, "mode": "lexical"},
        {"text": "Sentence 12 says", "k": 5, "mode": "dense", "per": "chunk", "with_passage": True},
        {"text": "orchestra symphony", "k": 2, "sentences": "dense"},
        {"text": "alpha beta", "k": 4, "where": {"source": "*.txt"}},
        {"text": "winter", "k": 3, "best_chunks": 2, "mode": "dense", "with_text": True},
        {"text": "the of and", "k": 2},  # no BM25 word: dense, with a note
    ]

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        response = served.client.post("/search", json=body)
        assert response.status_code == 200, response.text
        payload = response.json()
        payload.pop("took_ms")
        return dict(payload)

    expected = [answer(body) for body in kinds]
    assert expected[-1]["mode"] == "dense" and "no searchable word" in expected[-1]["notes"][0]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(answer, kinds * 6))
    assert got == expected * 6


def test_parse_unit() -> None:
    assert bodies.parse(b'{"a": [1, {"b": null}]}', 3) == {"a": [1, {"b": None}]}
    with pytest.raises(bodies.BodyError, match="nested deeper than 2 levels at character 7"):
        bodies.parse(b'{"a": [[1]]}', 2)
    assert bodies.parse(json.dumps({"s": "[[[[{{{{"}).encode(), 1) == {"s": "[[[[{{{{"}  # in a string
    assert bodies.is_json("application/json; charset=utf-8") and bodies.is_json("application/vnd.x+json")
    assert not bodies.is_json("text/plain") and bodies.is_json(None)
