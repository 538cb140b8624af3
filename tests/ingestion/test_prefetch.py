"""The ingest's threads: the prefetch producer (reading, hashing, batched tokenizing) and the
embedding thread give the same index as the sequential path, resume as it does, pass errors on,
and leave no thread behind."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragidx import faults
from ragidx.embed.encoder import Encoder, Tokens
from ragidx.index.directory import Index
from ragidx.ingestion import pipeline
from ragidx.ingestion.pipeline import ingest
from ragidx.ingestion.prefetch import Prefetch, Prepared
from ragidx.read.document import Document, Skipped
from tests.conftest import long_text, tiny_config, write_docs


def _documents(n: int, words: int = 40) -> list[Document]:
    return [Document(f"d{i}", f"Document {i}. " + long_text(words, seed=i), f"d{i}.txt") for i in range(n)]


def _threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def _run(prefetch: Prefetch) -> list[Prepared]:
    with prefetch as prepared:
        return list(prepared)


def test_tokenize_many_is_the_tokenizers_own_output_never_truncated(
    tiny_encoder: Encoder, tiny_st_model: Path
) -> None:
    """Batched tokenizing (the Rust tokenizer called directly) gives what transformers gives, with
    the prompt split off, and never the 128-token truncation of all-MiniLM-L6-v2's tokenizer.json."""
    from ragidx.embed.config import EncoderConfig

    text = "Café owners say: " + long_text(400)
    prompted = Encoder(EncoderConfig(model=str(tiny_st_model), device="cpu"))
    for encoder in (tiny_encoder, prompted):
        prompt = encoder.prompts["document"]
        whole = encoder.tokenizer(prompt + text, add_special_tokens=False, return_offsets_mapping=True)
        first, second = encoder.tokenize_many([text, "A short one."])
        assert first.prompt_ids + first.ids == whole["input_ids"] and len(first.ids) > 128
        shift = len(prompt)
        offsets = [(max(s - shift, 0), max(e - shift, 0)) for s, e in whole["offset_mapping"]]
        assert first.offsets == offsets[len(first.prompt_ids) :]
        assert text[slice(*first.offsets[0])] == "café" or text[slice(*first.offsets[0])] == "Café"
        assert second == encoder.tokenize("A short one.")
    assert prompted.prompts["document"] and prompted.tokenize_many([text])[0].prompt_ids


def test_items_come_in_reading_order_tokenized_in_groups_as_one_call_per_text(tiny_encoder: Encoder) -> None:
    documents = _documents(30)
    items: list[Document | Skipped] = [*documents[:10], Skipped("bad.pdf", "unreadable"), *documents[10:]]
    calls: list[int] = []

    def tokenize(texts: list[str]) -> list[Tokens]:
        calls.append(sum(map(len, texts)))
        return tiny_encoder.tokenize_many(texts)

    before = _threads()
    got = _run(
        Prefetch(
            items, lambda d: f"sha-{d.doc_id}", tokenize, lambda d, sha: d.doc_id != "d3", group_chars=2000
        )
    )
    assert _threads() == before
    assert [p.item for p in got] == items
    assert [p.digest for p in got] == [None if isinstance(i, Skipped) else f"sha-{i.doc_id}" for i in items]
    for prepared in got:
        if isinstance(prepared.item, Document) and prepared.item.doc_id != "d3":
            assert prepared.tokens == tiny_encoder.tokenize(prepared.item.text)  # ids, offsets, prompt
        else:
            assert prepared.tokens is None  # not wanted: the caller tokenizes it if it must
    assert len(calls) > 3 and max(calls) < 2000 + max(len(d.text) for d in documents)


def test_an_error_while_reading_is_raised_after_the_items_read_before_it(tiny_encoder: Encoder) -> None:
    def items() -> Iterator[Document]:
        yield from _documents(5)
        raise OSError("disk gone")

    got: list[Prepared] = []
    before = _threads()
    prefetch = Prefetch(items(), lambda d: "x", tiny_encoder.tokenize_many, lambda d, s: True)
    with pytest.raises(OSError, match="disk gone"), prefetch as prepared:
        for item in prepared:
            got.append(item)
    assert [p.item.doc_id for p in got if isinstance(p.item, Document)] == [f"d{i}" for i in range(5)]
    assert _threads() == before


def test_leaving_early_stops_the_producer_and_it_reads_only_a_bounded_way_ahead(
    tiny_encoder: Encoder,
) -> None:
    read: list[int] = []

    def items() -> Iterator[Document]:
        for i in range(10_000):
            read.append(i)
            yield Document(f"d{i}", f"text {i}", f"d{i}.txt")

    before = _threads()
    with Prefetch(
        items(), lambda d: "x", tiny_encoder.tokenize_many, lambda d, s: True, group_chars=100
    ) as got:
        first = next(got)
        threading.Event().wait(0.3)  # the producer fills its queue, then waits
        assert len(read) < 200  # a few groups of about 100 characters, not the whole walk
    assert first.item.doc_id == "d0"  # type: ignore[union-attr]
    assert _threads() == before and len(read) < 200


def _index_contents(directory: Path) -> tuple[list[dict[str, Any]], list[Any], np.ndarray]:
    """Every document record (but when it was ingested), every vector's record and the vectors,
    in vector id order."""
    index = Index.open(directory)
    documents = [asdict(index.store.document(d)) | {"ingested_at": ""} for d in index.store.doc_ids()]
    vids = index.store.vids()
    rows = [index.store.vector(v) for v in vids]
    return documents, rows, index.vectors_of(list(vids))


class _InPlace:
    """The sequential path: the walk read, hashed and tokenized one document at a time in the
    calling thread (stands in for :class:`Prefetch`)."""

    def __init__(self, items: Iterable[Document | Skipped], digest: Callable[[Document], str], *_: object):
        self.items, self.digest = items, digest

    def __enter__(self) -> Iterator[Prepared]:
        return (Prepared(i) if isinstance(i, Skipped) else Prepared(i, self.digest(i)) for i in self.items)

    def __exit__(self, *exc: object) -> None:
        pass


class _Now:
    """An executor that runs each job when it is submitted (the sequential path's embedding)."""

    def __init__(self, *_: object, **__: object):
        pass

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args))
        return future

    def shutdown(self, **_: object) -> None:
        pass


@pytest.mark.parametrize(
    "long_doc",
    [{"policy": "chunk", "overlap": 8}, {"policy": "late"}, {"policy": "pcw"}],
    ids=["chunk", "late", "pcw"],
)
def test_threaded_ingest_equals_the_sequential_path_and_resumes_the_same(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch, long_doc: dict[str, Any]
) -> None:
    docs = write_docs(tmp_path / "docs", 12, words=90)
    (docs / "empty.txt").write_text("")  # skipped, in its place
    (docs / "twin.txt").write_text((docs / "doc-03.txt").read_text())  # same text, another id
    config = tiny_config(tiny_model, long_doc, batch_tokens=300)  # several batches
    before = _threads()
    threaded = ingest(docs, tmp_path / "threaded", config)
    assert _threads() == before  # no prefetch or embedding thread survives ingest()

    with monkeypatch.context() as sequential:
        sequential.setattr(pipeline, "Prefetch", _InPlace)
        sequential.setattr(pipeline, "ThreadPoolExecutor", _Now)
        reference = ingest(docs, tmp_path / "sequential", config)

    assert threaded.to_dict() | {"index": "", "seconds": 0, "embed_seconds": 0, "tokens_per_second": 0} == (
        reference.to_dict() | {"index": "", "seconds": 0, "embed_seconds": 0, "tokens_per_second": 0}
    )
    want = _index_contents(tmp_path / "sequential")
    got = _index_contents(tmp_path / "threaded")
    assert got[0] == want[0] and got[1] == want[1]
    np.testing.assert_array_equal(got[2], want[2])  # bit for bit

    # killed after its third batch was checkpointed, while the next one was being embedded
    batches: list[int] = []

    def kill() -> None:
        batches.append(1)
        if len(batches) == 3:
            raise RuntimeError("killed")

    with faults.hook("after-batch", kill), pytest.raises(RuntimeError, match="killed"):
        ingest(docs, tmp_path / "resumed", config)
    assert _threads() == before
    resumed = ingest(docs, tmp_path / "resumed", config)
    assert resumed.resumed >= 3 and resumed.added == reference.added
    again = _index_contents(tmp_path / "resumed")
    assert again[0] == want[0] and again[1] == want[1]
    np.testing.assert_array_equal(again[2], want[2])
    assert _threads() == before


def test_an_error_in_the_embedding_thread_is_raised_by_ingest_and_nothing_is_committed(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = write_docs(tmp_path / "docs", 8, words=90)
    real = Encoder.embed_windows
    calls: list[int] = []

    def failing(self: Encoder, *args: Any, **kwargs: Any) -> np.ndarray:
        calls.append(1)
        if len(calls) == 2:
            raise MemoryError("out of device memory")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Encoder, "embed_windows", failing)
    before = _threads()
    with pytest.raises(MemoryError, match="out of device memory"):
        ingest(docs, tmp_path / "ix", tiny_config(tiny_model, batch_tokens=200))
    assert _threads() == before
    assert not Index.exists(tmp_path / "ix")


def test_ctrl_c_in_the_main_thread_stops_both_threads(tmp_path: Path, tiny_model: Path) -> None:
    docs = write_docs(tmp_path / "docs", 30, words=90)

    class Interrupting:
        """Progress that is interrupted (Ctrl-C) while the ingest is well under way."""

        def __init__(self) -> None:
            self.n = 0

        def planned(self, document: Document, n_tokens: int) -> None:
            self.n += 1
            if self.n == 12:
                raise KeyboardInterrupt

        def embedded(self, n_tokens: int) -> None:
            pass

        def skipped(self, item: Skipped) -> None:
            pass

    before = _threads()
    with pytest.raises(KeyboardInterrupt):
        ingest(docs, tmp_path / "ix", tiny_config(tiny_model, batch_tokens=300), progress=Interrupting())
    assert _threads() == before
    assert not Index.exists(tmp_path / "ix")
    assert ingest(docs, tmp_path / "ix", tiny_config(tiny_model, batch_tokens=300)).added == 30


def test_a_group_is_tokenized_while_the_next_one_is_read(tiny_encoder: Encoder) -> None:
    """Reading (Python) and tokenizing (Rust, without the GIL) overlap: the first group's
    tokenizing is still running when the producer reads the second group's first document."""
    documents = [
        Document(f"d{i}", f"Document {i:02d}. " + "river mill grain " * 20, f"d{i}.txt") for i in range(6)
    ]
    size = len(documents[0].text)  # all the same length: three documents a group
    second_read = threading.Event()
    overlapped: list[bool] = []

    def items() -> Iterator[Document]:
        for i, document in enumerate(documents):
            if i == 3:  # read after the first group was handed over
                second_read.set()
            yield document

    def tokenize(texts: list[str]) -> list[Tokens]:
        if not overlapped:  # the first group waits (a bounded time) for the next group to be read
            overlapped.append(second_read.wait(3))
        return tiny_encoder.tokenize_many(texts)

    got = _run(Prefetch(items(), lambda d: "x", tokenize, lambda d, s: True, group_chars=3 * size))
    assert overlapped == [True]
    assert [p.tokens for p in got] == [tiny_encoder.tokenize(d.text) for d in documents]


def test_a_batch_is_embedded_while_the_one_before_is_added(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedding thread never waits for the index: batch k is handed to it before batch k − 1
    is checkpointed and added (on a GPU the encoder would otherwise idle through every add)."""
    docs = write_docs(tmp_path / "docs", 12, words=90)
    config = tiny_config(tiny_model, {"policy": "chunk"}, batch_tokens=300)  # several batches
    in_flight_while_adding: list[bool] = []
    add = pipeline._Run.add

    def watched(self: Any, item: Any, text: Any = None) -> None:
        in_flight_while_adding.append(self.in_flight is not None)
        add(self, item, text)

    monkeypatch.setattr(pipeline._Run, "add", watched)
    report = ingest(docs, tmp_path / "index", config)
    assert report.added == 12 and len(in_flight_while_adding) == 12
    # every batch but the last is added while the next one is in the embedding thread
    last_batch = in_flight_while_adding.count(False)
    assert in_flight_while_adding == [True] * (12 - last_batch) + [False] * last_batch
    assert 1 <= last_batch < 12
