"""The Parquet embedding cache: write, reload per model, refuse damaged parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragidx.embed.cache import EmbeddingCache, make_key
from ragidx.errors import InputError


def test_vectors_survive_a_reload_per_model(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    chunks = np.arange(12, dtype=np.float32).reshape(3, 4)
    cache.put("k1", chunks, model="m1", strategy="chunk", kind="document", sha256="s")
    cache.put("k2", chunks[:1], model="m2", strategy="pcw", kind="document", sha256="s")
    part = cache.flush()
    assert part is not None and part.parent == tmp_path and cache.flush() is None
    assert not list(tmp_path.glob(".*tmp"))

    again = EmbeddingCache(tmp_path)
    again.load("m1")
    np.testing.assert_array_equal(again.get("k1"), chunks)  # chunk order kept
    assert again.get("k2") is None  # another model's rows are not loaded
    assert (again.hits, again.misses) == (1, 1)


def test_memory_only_cache_writes_nothing(tmp_path: Path) -> None:
    cache = EmbeddingCache(None)
    cache.put("k", np.ones((1, 2)), model="m", strategy="s", kind="query", sha256="x")
    assert cache.flush() is None and cache.get("k") is not None


def test_a_damaged_part_is_named(tmp_path: Path) -> None:
    (tmp_path / "part-0-bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match="part-0-bad.parquet: unreadable cache part"):
        EmbeddingCache(tmp_path).load("m")


def test_keys_are_stable_and_order_free() -> None:
    assert make_key(a=1, b=[1, 2]) == make_key(b=[1, 2], a=1) != make_key(a=2, b=[1, 2])


def test_a_key_two_runs_both_wrote_loads_as_one_vector_per_ordinal(tmp_path: Path) -> None:
    # Two evaluations sharing the cache both miss a text, both embed it and both flush it.
    written: dict[str, float] = {}
    for value in (1.0, 2.0):
        cache = EmbeddingCache(tmp_path)
        cache.put("q", np.full((1, 4), value), model="m", strategy="query", kind="query", sha256="s")
        cache.put("c", np.full((3, 4), value), model="m", strategy="chunk", kind="window", sha256="s")
        part = cache.flush()
        assert part is not None
        written[part.name] = value
    again = EmbeddingCache(tmp_path)
    again.load("m")
    newest = written[max(written)]  # parts are read in name order, the last one wins
    np.testing.assert_array_equal(again.get("q"), np.full((1, 4), newest))
    np.testing.assert_array_equal(again.get("c"), np.full((3, 4), newest))
