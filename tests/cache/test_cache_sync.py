"""StateStoreCache: the blocking twin, on the background loop thread — loopback and real broker."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sskv_mapping import ConfigurationError, KeyOperation
from sskv_mapping._protocol.notifications import KeyEvent
from sskv_mapping.cache import StateStoreCache

SyncCacheFactory = Callable[..., StateStoreCache[Any]]


def test_blocking_operations(make_sync_cache: SyncCacheFactory) -> None:
    with make_sync_cache() as cache:
        cache.set("a", {"x": 1})
        cache.set("n", None)
        assert cache.get("a") == {"x": 1} and cache.get("n", "dflt") is None and cache.get("zz", 5) == 5
        assert cache.exists("a") and not cache.exists("zz")
        assert cache.add("a", 2) is False and cache.add("b", 2) is True
        assert cache.set_many({"c": 3, "d": 4}) == []
        assert cache.get_many(["a", "b", "c", "zz"]) == {"a": {"x": 1}, "b": 2, "c": 3}
        assert cache.incr("b", 10) == 12 and cache.decr("b") == 11
        assert cache.touch("c", 60) is True and cache.expire("zz", 5) is False
        assert cache.delete("a") is True and cache.delete_many(["c", "d", "zz"]) == 2
        assert cache.clear() is None  # type: ignore[func-returns-value]  # the twin returns what the face returns
        assert cache.get_many(["a", "b", "c", "d", "n"]) == {}
        stats = cache.stats()
        assert stats.sets == 7 and stats.latency["get"].count == 3  # set x2, add, set_many x2, incr, decr
        with pytest.raises(ConfigurationError):
            cache.set("", 1)
        with pytest.raises(ValueError, match="not found"):
            cache.incr("missing")


def test_get_or_set_runs_the_callable_in_the_calling_thread(make_sync_cache: SyncCacheFactory) -> None:
    cache = make_sync_cache()
    ran_in: list[int] = []

    def compute() -> str:
        ran_in.append(threading.get_ident())
        return "computed"

    async def compute_async() -> str:
        return "async computed"

    assert cache.get_or_set("k", compute) == "computed"
    assert ran_in == [threading.get_ident()]
    assert cache.get_or_set("k", compute) == "computed" and len(ran_in) == 1
    assert cache.get_or_set("a", compute_async) == "async computed"
    with pytest.raises(ZeroDivisionError):
        cache.get_or_set("z", lambda: 1 / 0)
    assert cache.get_or_set("z", "after the failure") == "after the failure"


def test_get_or_set_computes_once_across_threads_and_two_caches(make_sync_cache: SyncCacheFactory) -> None:
    caches = [make_sync_cache(), make_sync_cache()]
    calls = 0
    calls_lock = threading.Lock()
    computing = threading.Event()
    release = threading.Event()

    def compute() -> int:
        nonlocal calls
        with calls_lock:
            calls += 1
        computing.set()
        assert release.wait(10)
        return 7

    with ThreadPoolExecutor(max_workers=12) as pool:
        futures = [pool.submit(caches[i % 2].get_or_set, "hot", compute, 60) for i in range(12)]
        assert computing.wait(10)
        release.set()
        results = [f.result(timeout=30) for f in futures]
    assert results == [7] * 12 and calls == 1


def test_local_cache_hits_stay_in_the_calling_thread(make_sync_cache: SyncCacheFactory) -> None:
    reader = make_sync_cache(local_cache_size=100)
    writer = make_sync_cache()
    writer.set("k", "v1")
    assert reader.get("k") == "v1"
    sent = reader.client.async_client.requests_sent
    assert reader.get("k") == "v1" and reader.exists("k") and reader.get_or_set("k", "unused") == "v1"
    assert reader.client.async_client.requests_sent == sent
    changed = threading.Event()

    def on_event(event: KeyEvent) -> None:  # runs on the loop thread, after the cache applied the event
        if event.op is KeyOperation.SET and event.value == b'"v2"':
            changed.set()

    reader.client.subscribe_key(reader.data_key("k"), on_event)
    writer.set("k", "v2")
    assert changed.wait(5)
    assert reader.get("k") == "v2"
    assert reader.client.async_client.requests_sent == sent
    assert reader.stats().hits == 4


def test_the_blocking_twin_passes_max_fanout_and_monotonic_on(make_sync_cache: SyncCacheFactory) -> None:
    now = [50.0]
    with make_sync_cache(local_cache_size=4, max_fanout=2, monotonic=lambda: now[0]) as cache:
        assert cache.async_cache._core.max_fanout == 2
        assert cache.local_cache is not None and cache.local_cache.deadline(1.0) == 51.0
        assert cache.set_many({"a": 1, "b": 2, "c": 3}) == []
        assert cache.get_many(["a", "b", "c"]) == {"a": 1, "b": 2, "c": 3}
