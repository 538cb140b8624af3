"""The Parquet vector cache: round trip, atomic parts, an unreadable part named."""

from __future__ import annotations

import numpy as np
import pytest

from ragidx.errors import InputError
from ragidx.probe.cache import VectorCache, vector_key


def test_round_trip_through_part_files(tmp_path):
    cache = VectorCache(tmp_path / "c")
    key = vector_key(model="m", text="t")
    assert cache.get(key) is None
    cache.put(key, np.arange(3, dtype=np.float32))
    cache.flush()
    cache.flush()  # nothing new: no empty part
    assert len(list((tmp_path / "c").glob("part-*.parquet"))) == 1
    again = VectorCache(tmp_path / "c")
    np.testing.assert_array_equal(again.get(key), [0, 1, 2])
    assert (again.hits, again.misses) == (1, 0)
    assert vector_key(a=1, b=2) == vector_key(b=2, a=1) != vector_key(a=1, b=3)


def test_memory_only_cache_writes_nothing(tmp_path):
    cache = VectorCache(None)
    cache.put("k", np.ones(2))
    cache.flush()
    assert cache.get("k") is not None and not list(tmp_path.iterdir())


def test_unreadable_part_is_named(tmp_path):
    (tmp_path / "part-bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match="part-bad.parquet: unreadable cache part"):
        VectorCache(tmp_path)
