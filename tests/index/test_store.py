"""Tests for ragidx.index.store: the Parquet documents/vectors store beside the FAISS index."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragidx.errors import IndexFormatError
from ragidx.index.store import DOCUMENT_SCHEMA, VECTOR_SCHEMA, DocumentRecord, Store, VectorRecord

META = {"author": "Zoë Ångström", "tags": ["été", "東京"], "nested": {"n": 1, "ok": True, "none": None}}


def _doc(
    doc_id: str, mode: str = "chunk", n_tokens: int = 100, n_vectors: int = 2, **extra: object
) -> DocumentRecord:
    fields: dict[str, object] = {
        "doc_id": doc_id,
        "source": f"docs/{doc_id}.md",
        "sha256": f"sha-{doc_id}",
        "title": f"Title {doc_id}",
        "text": f"text of {doc_id} — ünïcode",
        "n_tokens": n_tokens,
        "n_embedded": n_tokens - 10,
        "embed_mode": mode,
        "n_vectors": n_vectors,
        "metadata": {},
        "ingested_at": "2025-01-02T03:04:05+00:00",
    }
    fields.update(extra)
    return DocumentRecord(**fields)  # type: ignore[arg-type]


def _vecs(doc_id: str, vids: list[int]) -> list[VectorRecord]:
    return [
        VectorRecord(
            vid=v,
            doc_id=doc_id,
            ordinal=i,
            tok_start=10 * i,
            tok_end=10 * i + 16,
            char_start=50 * i,
            char_end=50 * i + 80,
        )
        for i, v in enumerate(vids)
    ]


def _filled() -> Store:
    store = Store.empty()
    store.add(_doc("a", "chunk", 100, 2, metadata=META), _vecs("a", [0, 1]))
    store.add(_doc("b", "whole", 20, 1), _vecs("b", [2]))
    store.add(_doc("c", "pcw", 3000, 1, title=None), _vecs("c", [3]))
    store.add(_doc("d", "chunk", 50, 3), _vecs("d", [4, 5, 6]))
    return store


def test_empty_store() -> None:
    store = Store.empty()
    assert (store.n_documents, store.n_vectors) == (0, 0)
    assert store.doc_ids() == []
    assert store.sha256("a") is None
    assert store.stats() == {"documents": 0, "vectors": 0, "tokens": 0, "tokens_embedded": 0, "by_mode": {}}


def test_add_counts_and_lookups() -> None:
    store = _filled()
    assert store.n_documents == 4
    assert store.n_vectors == 7
    assert store.doc_ids() == ["a", "b", "c", "d"]
    assert store.vids().tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert store.sha256("b") == "sha-b"
    assert store.sha256("missing") is None
    assert store.vector(5) == VectorRecord(
        vid=5, doc_id="d", ordinal=1, tok_start=10, tok_end=26, char_start=50, char_end=130
    )
    assert store.vector(np.int64(2)).doc_id == "b"


def test_document_round_trips_nested_non_ascii_metadata() -> None:
    store = _filled()
    assert store.document("a") == _doc("a", "chunk", 100, 2, metadata=META)
    assert store.document("a").metadata["tags"] == ["été", "東京"]
    assert store.document("c").title is None
    assert store.document("b").metadata == {}
    row = _doc("x", metadata={"é": 1}).to_row()
    assert row["metadata"] == '{"é": 1}'  # stored as readable JSON, not \\u escapes


def test_remove_returns_exactly_that_documents_vids() -> None:
    store = _filled()
    vids = store.remove({"d"})
    assert vids.dtype == np.int64
    assert sorted(vids.tolist()) == [4, 5, 6]
    assert store.n_documents == 3
    assert store.n_vectors == 4
    assert store.doc_ids() == ["a", "b", "c"]
    assert store.vids().tolist() == [0, 1, 2, 3]
    assert store.sha256("d") is None
    with pytest.raises(KeyError):
        store.vector(4)
    assert store.vector(3).doc_id == "c"


def test_remove_several_unknown_and_empty() -> None:
    store = _filled()
    assert sorted(store.remove({"a", "c", "zz"}).tolist()) == [0, 1, 3]
    assert store.doc_ids() == ["b", "d"]
    assert store.remove(set()).tolist() == []
    assert store.remove({"nope"}).tolist() == []
    assert store.n_vectors == 4


def test_remove_then_re_add_same_doc_is_an_update() -> None:
    store = _filled()
    old = store.remove({"b"})
    assert old.tolist() == [2]
    store.add(_doc("b", "chunk", 60, 2, sha256="sha-b2"), _vecs("b", [7, 8]))
    assert store.n_documents == 4
    assert store.doc_ids().count("b") == 1
    assert store.sha256("b") == "sha-b2"
    assert store.document("b").n_tokens == 60
    assert store.n_vectors == 8
    assert store.vector(8).doc_id == "b"
    with pytest.raises(KeyError):
        store.vector(2)
    assert sorted(store.remove({"b"}).tolist()) == [7, 8]


def test_remove_of_pending_add_is_applied() -> None:
    store = Store.empty()
    store.add(_doc("a"), _vecs("a", [10, 11]))
    assert sorted(store.remove({"a"}).tolist()) == [10, 11]
    assert (store.n_documents, store.n_vectors) == (0, 0)


def test_to_bytes_from_bytes_round_trip() -> None:
    store = _filled()
    documents, vectors = store.to_bytes()
    assert documents[:4] == b"PAR1" and vectors[:4] == b"PAR1"
    again = Store.from_bytes(documents, vectors, "idx")
    assert again.doc_ids() == store.doc_ids()
    assert again.vids().tolist() == store.vids().tolist()
    for doc_id in store.doc_ids():
        assert again.document(doc_id) == store.document(doc_id)
    for vid in store.vids():
        assert again.vector(vid) == store.vector(vid)
    assert again.stats() == store.stats()
    # a loaded store accepts further mutations
    again.add(_doc("e", "truncate", 900, 1), _vecs("e", [9]))
    assert again.remove({"a"}).tolist() == [0, 1]
    assert again.doc_ids() == ["b", "c", "d", "e"]


def test_empty_round_trip() -> None:
    again = Store.from_bytes(*Store.empty().to_bytes(), "idx")
    assert (again.n_documents, again.n_vectors) == (0, 0)


def test_stats_counts_modes_and_token_sums() -> None:
    store = _filled()
    assert store.stats() == {
        "documents": 4,
        "vectors": 7,
        "tokens": 100 + 20 + 3000 + 50,
        "tokens_embedded": 90 + 10 + 2990 + 40,
        "by_mode": {"chunk": 2, "pcw": 1, "whole": 1},
    }
    store.remove({"c"})
    assert store.stats()["by_mode"] == {"chunk": 2, "whole": 1}
    assert list(store.stats()["by_mode"]) == ["chunk", "whole"]  # sorted


@pytest.mark.parametrize(("documents", "vectors"), [(b"garbage", b"garbage"), (b"", b""), (None, b"junk")])
def test_from_bytes_garbage_raises(documents: bytes | None, vectors: bytes) -> None:
    if documents is None:  # valid documents table, corrupt vectors table
        documents = Store.empty().to_bytes()[0]
    with pytest.raises(IndexFormatError, match=r"^some/index: corrupt Parquet store"):
        Store.from_bytes(documents, vectors, "some/index")


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def test_from_bytes_other_schema_raises() -> None:
    good_docs, good_vecs = _filled().to_bytes()
    other = _parquet(pa.table({"doc_id": ["a"], "x": [1]}))
    with pytest.raises(IndexFormatError, match=r"^some/index: Parquet store has an unexpected schema"):
        Store.from_bytes(other, good_vecs, "some/index")
    with pytest.raises(IndexFormatError, match="unexpected schema"):
        Store.from_bytes(good_docs, other, "some/index")
    # same names, one type changed (vid as int32)
    fields = [pa.field(f.name, pa.int32() if f.name == "vid" else f.type) for f in VECTOR_SCHEMA]
    narrowed = _parquet(pa.schema(fields).empty_table())
    with pytest.raises(IndexFormatError, match="unexpected schema"):
        Store.from_bytes(good_docs, narrowed, "some/index")
    # the schemas the store writes are accepted
    assert Store.from_bytes(_parquet(DOCUMENT_SCHEMA.empty_table()), good_vecs, "x").n_vectors == 7


def test_replacing_documents_one_by_one_filters_the_tables_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ingest replaces changed documents one at a time (remove, then add): each step is O(1),
    the tables are filtered once at the next whole read (was: once per document, O(n²))."""
    import ragidx.index.store as store_module

    store = Store.empty()
    for i in range(200):
        store.add(_doc(f"d{i}"), _vecs(f"d{i}", [2 * i, 2 * i + 1]))
    assert store.n_documents == 200
    filters = [0]
    real_is_in = store_module.pc.is_in

    def counted(*args: object, **kwargs: object) -> object:
        filters[0] += 1
        return real_is_in(*args, **kwargs)

    monkeypatch.setattr(store_module.pc, "is_in", counted)
    for i in range(0, 200, 2):  # every other document changes
        assert store.remove({f"d{i}"}).tolist() == [2 * i, 2 * i + 1]
        store.add(_doc(f"d{i}", sha256=f"new-{i}"), _vecs(f"d{i}", [400 + i, 401 + i]))
        assert store.sha256(f"d{i}") == f"new-{i}" and store.document(f"d{i}").sha256 == f"new-{i}"
        assert store.document(f"d{i + 1}").sha256 == f"sha-d{i + 1}"
    assert store.remove({"d2"}).tolist() == [402, 403]  # a queued replacement, removed again
    assert filters[0] == 0
    unchanged, replaced = range(1, 200, 2), [i for i in range(0, 200, 2) if i != 2]
    assert store.doc_ids() == [f"d{i}" for i in [*unchanged, *replaced]]
    assert filters[0] == 2  # documents and vectors, filtered once
    assert store.document_vids("d4")[0].tolist() == [404, 405] and store.n_vectors == 398
