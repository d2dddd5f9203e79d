"""The cache's names deprecated by the renaming step (issue 29), kept one release: each warns, at its caller's line,
and still does what its new name does. Delete this file with the names.

* ``max_in_flight=`` on the cache is ``max_fanout=`` (a client's ``max_in_flight=`` bounds all its requests);
* ``clock=`` on the cache is ``monotonic=`` (a client's is ``wall_clock_ms=``);
* ``peek``, ``encoded``, ``resolve_ttl``, ``counters`` and ``single_flight`` served only the blocking twin, which
  now shares the cache's private core instead.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from sskv_mapping import UNSET, ConfigurationError
from sskv_mapping.cache import AsyncStateStoreCache, StateStoreCache
from tests._support.store_backend import StoreBackend

from .conftest import CacheFactory


def _warned_here(record: pytest.WarningsRecorder, *names: str) -> None:
    """Exactly one DeprecationWarning per name, each naming it and pointing at this file (the caller's line)."""
    deprecations = [w for w in record if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == len(names), [str(w.message) for w in deprecations]
    for warning, name in zip(deprecations, names, strict=True):
        assert name in str(warning.message)
        assert warning.filename == __file__


async def test_max_in_flight_is_max_fanout(store_backend: StoreBackend, namespace: str) -> None:
    client = await store_backend.async_client()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new name warns nothing
        new = AsyncStateStoreCache(client, namespace=namespace, max_fanout=3)
    with pytest.warns(DeprecationWarning) as record:
        old = AsyncStateStoreCache(client, namespace=namespace, max_in_flight=3)
    _warned_here(record, "max_fanout=")
    assert old._core.max_fanout == new._core.max_fanout == 3
    assert AsyncStateStoreCache(client, namespace=namespace)._core.max_fanout == 256
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigurationError, match="max_fanout"):
        AsyncStateStoreCache(client, namespace=namespace, max_in_flight=0)  # checked as the new name is
    async with old:  # a fan-out under the old name's bound still does its work
        many = {f"k{i}": i for i in range(10)}
        assert await old.set_many(many, ttl=60) == []
        assert await old.get_many(many) == many
        assert await old.delete_many(many) == 10


async def test_clock_is_monotonic(store_backend: StoreBackend, namespace: str) -> None:
    client = await store_backend.async_client()
    now = [100.0]
    new = AsyncStateStoreCache(client, namespace=namespace, local_cache_size=4, monotonic=lambda: now[0])
    with pytest.warns(DeprecationWarning) as record:
        old = AsyncStateStoreCache(client, namespace=namespace, local_cache_size=4, clock=lambda: now[0])
    _warned_here(record, "monotonic=")
    for cache in (new, old):  # the local cache and the latencies read the injected clock
        assert cache.local_cache is not None and cache.local_cache.deadline(5.0) == 105.0
        async with cache:
            await cache.set("k", 1)
        assert cache.stats().latency["set"].total == 0.0  # a clock that stands still
    assert new.stats().latency["set"].count == old.stats().latency["set"].count == 1


def test_the_blocking_twin_takes_the_new_names_and_warns_for_the_old(
    store_backend: StoreBackend, namespace: str
) -> None:
    now = [50.0]
    with pytest.warns(DeprecationWarning) as record:
        old = StateStoreCache(
            store_backend.client(), namespace=namespace, local_cache_size=4, max_in_flight=2, clock=lambda: now[0]
        )
    _warned_here(record, "max_fanout=", "monotonic=")  # once each, at this line: not again from the async twin
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = StateStoreCache(
            store_backend.client(), namespace=namespace, local_cache_size=4, max_fanout=2, monotonic=lambda: now[0]
        )
    try:
        for cache in (old, new):
            assert cache.async_cache._core.max_fanout == 2
            assert cache.local_cache is not None and cache.local_cache.deadline(1.0) == 51.0
        old.set_many({"a": 1, "b": 2})
        assert new.get_many(["a", "b"]) == {"a": 1, "b": 2}
    finally:
        old.close()
        new.close()


async def test_the_twin_only_members_warn_and_still_work(make_cache: CacheFactory) -> None:
    cache: AsyncStateStoreCache[Any] = await make_cache(local_cache_size=8, default_ttl=60)
    with pytest.warns(DeprecationWarning) as record:
        encoded = cache.encoded("k", {"a": 1})
    _warned_here(record, "encoded()")
    await cache.set("k", encoded)  # what the blocking twin did with it: still stores the value
    assert await cache.get("k") == {"a": 1}

    with pytest.warns(DeprecationWarning) as record:
        hit = cache.peek("k")  # cached by the read above
        miss = cache.peek("never-read")
    _warned_here(record, "peek()", "peek()")
    assert hit is not None and hit.value == {"a": 1}
    assert miss is None

    with pytest.warns(DeprecationWarning) as record:
        resolved = [cache.resolve_ttl(UNSET), cache.resolve_ttl(None), cache.resolve_ttl(5)]
    _warned_here(record, "resolve_ttl()", "resolve_ttl()", "resolve_ttl()")
    assert resolved == [60.0, None, 5.0]

    with pytest.warns(DeprecationWarning) as record:
        counters = cache.counters
        flight = cache.single_flight
    _warned_here(record, "counters", "single_flight")
    assert (counters.hits, counters.sets) == (cache.stats().hits, cache.stats().sets) == (1, 1)
    assert flight is cache._core.flight
    assert await cache.get_or_set("built", lambda: "once") == "once"  # the flights it handed out still serve
