"""AsyncStateStoreCache behaves like a cache backend — on the loopback store and over a real broker + emulator."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from sskv_mapping import (
    ClientStateError,
    ConfigurationError,
    EncodeError,
    FencingTokenRequiredError,
    HybridLogicalClock,
    KeyOperation,
)
from sskv_mapping._protocol.notifications import KeyEvent
from sskv_mapping.cache import LATENCY_BUCKETS, AsyncStateStoreCache
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.local_cache import CachedEntry
from tests._support.store_backend import StoreBackend
from tests._support.waiting import eventually

CacheFactory = Callable[..., Awaitable[AsyncStateStoreCache[Any]]]
Watch = Callable[[AsyncStateStoreClient, str | bytes], Awaitable[Any]]


async def data_key(cache: AsyncStateStoreCache[Any], key: str) -> bytes:
    return await cache.data_key(key)


# -- basics -------------------------------------------------------------------------------------------------


async def test_set_get_exists_delete(cache: AsyncStateStoreCache[Any]) -> None:
    assert await cache.get("a") is None and await cache.get("a", "dflt") == "dflt"
    assert not await cache.exists("a")
    await cache.set("a", {"n": [1, 2, None]})
    assert await cache.get("a") == {"n": [1, 2, None]} and await cache.exists("a")
    await cache.set("a", "replaced")
    assert await cache.get("a") == "replaced"
    assert await cache.delete("a") is True
    assert await cache.delete("a") is False
    assert await cache.get("a", 7) == 7 and not await cache.exists("a")


async def test_stored_none_is_a_value_not_a_miss(cache: AsyncStateStoreCache[Any]) -> None:
    await cache.set("n", None)
    assert await cache.get("n", "dflt") is None and await cache.exists("n")
    assert await cache.get("missing", "dflt") == "dflt"
    assert await cache.get_many(["n", "missing"]) == {"n": None}
    stats = cache.stats()
    assert (stats.hits, stats.misses) == (2, 2)


async def test_a_codec_by_name_and_unicode_keys(make_cache: CacheFactory) -> None:
    text = await make_cache(codec="str")
    await text.set("grüße/ключ", "wert ✓")
    assert await text.get("grüße/ключ") == "wert ✓"
    with pytest.raises(EncodeError):
        await text.set("k", 1)  # the str codec stores str only


async def test_bad_arguments_raise_typed_errors_before_anything_is_sent(cache: AsyncStateStoreCache[Any]) -> None:
    sent = cache.client.requests_sent
    for key in (1, b"bytes", "", "\ud800", None):
        with pytest.raises(ConfigurationError):
            await cache.set(key, 1)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):
            await cache.get(key)  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        await cache.set("k", object())
    with pytest.raises(EncodeError):
        await cache.add("k", float("nan"))  # JSON refuses NaN
    for ttl in (True, "5", float("nan"), float("inf"), 10**30):
        with pytest.raises(ConfigurationError):
            await cache.set("k", 1, ttl=ttl)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        await cache.get_many("abc")
    with pytest.raises(ConfigurationError):
        await cache.delete_many(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(EncodeError):
        await cache.set_many({"a": 1, "b": object(), "c": 3})
    with pytest.raises(ConfigurationError):
        await cache.incr("k", True)
    with pytest.raises(ConfigurationError):
        await cache.expire("k", "soon")  # type: ignore[arg-type]
    assert cache.client.requests_sent == sent
    assert await cache.get_many(["a", "c"]) == {}  # nothing of the refused batch was stored


async def test_constructor_refuses_bad_settings(store_backend: StoreBackend) -> None:
    client = await store_backend.async_client()
    kwargs: dict[str, Any]
    for kwargs in (
        {"namespace": "a/b"},
        {"namespace": ""},
        {"default_ttl": "300"},
        {"local_cache_size": -1},
        {"lock_lease": 0},
        {"lock_timeout": -1},
        {"max_fanout": 0},
        {"max_fanout": True},
        {"codec": "pickle"},  # pickle is never chosen by name: it runs code when loading
    ):
        with pytest.raises(ConfigurationError):
            AsyncStateStoreCache(client, **kwargs)


async def test_max_fanout_bounds_the_many_calls_and_they_still_do_all_their_work(make_cache: CacheFactory) -> None:
    cache = await make_cache(max_fanout=3)
    assert cache._core.max_fanout == 3
    many = {f"k{i}": i for i in range(10)}
    assert await cache.set_many(many, ttl=60) == []
    assert await cache.get_many(many) == many
    assert await cache.delete_many(many) == 10


async def test_the_injected_monotonic_clock_drives_the_local_cache_and_the_latencies(make_cache: CacheFactory) -> None:
    now = [100.0]
    cache = await make_cache(local_cache_size=4, monotonic=lambda: now[0])
    assert cache.local_cache is not None and cache.local_cache.deadline(5.0) == 105.0
    await cache.set("k", 1)
    latency = cache.stats().latency["set"]
    assert (latency.count, latency.total) == (1, 0.0)  # timed by a clock that stands still


# -- add --------------------------------------------------------------------------------------------------


async def test_add_stores_only_if_absent(cache: AsyncStateStoreCache[Any]) -> None:
    assert await cache.add("k", 1) is True
    assert await cache.add("k", 2) is False
    assert await cache.get("k") == 1
    await cache.delete("k")
    assert await cache.add("k", 3) is True and await cache.get("k") == 3


async def test_add_under_contention_across_two_caches_has_one_winner(make_cache: CacheFactory) -> None:
    a, b = await make_cache(), await make_cache()
    results = await asyncio.gather(*((a if i % 2 else b).add("race", f"v{i}") for i in range(20)))
    assert results.count(True) == 1
    winner = f"v{results.index(True)}"
    assert await a.get("race") == winner and await b.get("race") == winner


async def test_add_with_an_expire_now_ttl_reports_absence_and_keeps_nothing(cache: AsyncStateStoreCache[Any]) -> None:
    assert await cache.add("k", 1, ttl=0) is True
    assert not await cache.exists("k")
    await cache.set("k", "there")
    assert await cache.add("k", 2, ttl=0) is False
    assert await cache.get("k") == "there"


# -- TTLs -------------------------------------------------------------------------------------------------


async def test_a_ttl_expires_the_key(cache: AsyncStateStoreCache[Any], watch: Watch) -> None:
    notified = await watch(cache.client, await data_key(cache, "short"))
    await cache.set("short", "v", ttl=0.2)
    assert await cache.get("short") == "v"
    await notified.wait_for(KeyOperation.DELETE)
    assert await cache.get("short") is None and not await cache.exists("short")


async def test_default_ttl_applies_and_none_means_never(make_cache: CacheFactory, watch: Watch) -> None:
    cache = await make_cache(default_ttl=timedelta(milliseconds=200))
    assert cache.default_ttl == 0.2
    await cache.set("forever", "f", ttl=None)
    notified = await watch(cache.client, await data_key(cache, "default"))
    await cache.set("default", "d")
    await notified.wait_for(KeyOperation.DELETE)
    assert not await cache.exists("default")
    assert await cache.get("forever") == "f"


async def test_zero_or_negative_ttl_means_expire_now(cache: AsyncStateStoreCache[Any]) -> None:
    await cache.set("k", 1)
    await cache.set("k", 2, ttl=0)
    assert not await cache.exists("k")
    await cache.set("k", 1)
    await cache.set("k", 2, ttl=timedelta(seconds=-1))
    assert not await cache.exists("k")
    await cache.set_many({"a": 1, "b": 2})
    assert await cache.set_many({"a": 3, "b": 4}, ttl=-5) == []
    assert await cache.get_many(["a", "b"]) == {}
    assert cache.stats().deletes == 4


async def test_touch_removes_the_expiry(cache: AsyncStateStoreCache[Any], watch: Watch) -> None:
    # 'kept' expires before 'witness' unless touched; the emulator expires keys in deadline order, so
    # once 'witness' is gone, an untouched 'kept' would be gone too.
    await cache.set("kept", "k", ttl=0.5)
    await cache.set("witness", "w", ttl=0.5)
    notified = await watch(cache.client, await data_key(cache, "witness"))
    assert await cache.touch("kept", ttl=None) is True
    await notified.wait_for(KeyOperation.DELETE)
    assert await cache.get("kept") == "k"


async def test_touch_and_expire_set_a_new_expiry(make_cache: CacheFactory, watch: Watch) -> None:
    cache = await make_cache(default_ttl=0.2)
    await cache.set("a", "x", ttl=None)
    await cache.set("b", "y", ttl=None)
    notified_a = await watch(cache.client, await data_key(cache, "a"))
    notified_b = await watch(cache.client, await data_key(cache, "b"))
    assert await cache.touch("a") is True  # UNSET: the default TTL
    assert await cache.expire("b", 0.2) is True
    await notified_a.wait_for(KeyOperation.DELETE)
    await notified_b.wait_for(KeyOperation.DELETE)
    assert await cache.get_many(["a", "b"]) == {}


async def test_touch_and_expire_on_absent_keys_and_expire_now(cache: AsyncStateStoreCache[Any]) -> None:
    assert await cache.touch("nope") is False
    assert await cache.expire("nope", 10) is False
    assert await cache.expire("nope", 0) is False
    await cache.set("k", 1)
    assert await cache.expire("k", 0) is True
    assert not await cache.exists("k")
    await cache.set("k", 1)
    assert await cache.touch("k", ttl=-1) is True
    assert not await cache.exists("k")


def _after_read(
    cache: AsyncStateStoreCache[Any], monkeypatch: pytest.MonkeyPatch, then: Callable[[], Awaitable[Any]]
) -> None:
    """Make ``cache``'s next reads run ``then()`` right after the GET: a deterministic race."""
    real_read = cache._store.read

    async def read(key: str, *, fresh: bool = False) -> CachedEntry[Any]:
        entry = await real_read(key, fresh=fresh)
        await then()
        return entry

    monkeypatch.setattr(cache._store, "read", read)


async def test_touch_leaves_a_value_changed_meanwhile_alone(
    make_cache: CacheFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = await make_cache(), await make_cache()
    await a.set("k", "old", ttl=None)
    _after_read(a, monkeypatch, lambda: b.set("k", "new", ttl=None))
    assert await a.touch("k", 60) is False
    monkeypatch.undo()
    assert await a.get("k") == "new"


async def test_touch_does_not_bring_back_a_key_deleted_meanwhile(
    make_cache: CacheFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = await make_cache(), await make_cache()
    await a.set("k", "stale", ttl=None)
    _after_read(a, monkeypatch, lambda: b.delete("k"))
    # SET NEX applies to an absent key too: without the guard this would re-create the deleted entry
    assert await a.touch("k", 60) is False
    monkeypatch.undo()
    assert not await a.exists("k") and not await b.exists("k")


# -- many -------------------------------------------------------------------------------------------------


async def test_get_many_set_many_delete_many(cache: AsyncStateStoreCache[Any]) -> None:
    assert await cache.set_many({"a": 1, "b": [2], "c": None}) == []
    assert await cache.get_many(["a", "b", "c", "zz", "a"]) == {"a": 1, "b": [2], "c": None}
    assert await cache.get_many([]) == {}
    assert await cache.delete_many(["a", "c", "zz"]) == 2
    assert await cache.get_many(["a", "b", "c"]) == {"b": [2]}
    many = {f"k{i}": i for i in range(300)}  # more than max_fanout
    assert await cache.set_many(many, ttl=60) == []
    assert await cache.get_many(many) == many
    assert await cache.delete_many(many) == 300


async def test_set_many_reports_the_keys_the_service_refused(
    cache: AsyncStateStoreCache[Any], store_backend: StoreBackend
) -> None:
    # someone else's lock protects 'guarded' with a token newer than any we can get for a while
    other = await store_backend.async_client()
    future_token = HybridLogicalClock(int(time.time() * 1000) + 50_000, 0, "someone-else")
    await other.set(await data_key(cache, "guarded"), b'"theirs"', fencing_token=future_token)
    failed = await cache.set_many({"a": 1, "guarded": 2, "b": 3})
    assert failed == ["guarded"]
    assert await cache.get_many(["a", "guarded", "b"]) == {"a": 1, "guarded": "theirs", "b": 3}
    assert cache.stats().sets == 2


# -- clear ------------------------------------------------------------------------------------------------


async def test_clear_empties_its_namespace_only(make_cache: CacheFactory, namespace: str) -> None:
    mine, again = await make_cache(), await make_cache()
    other = await make_cache(namespace=namespace + "x")
    await mine.set_many({"a": 1, "b": 2})
    await again.set("c", 3)
    await other.set("a", "other namespace")
    before = mine.generation
    await mine.clear()
    assert mine.generation != before
    # another client follows by notification, which is not ordered with the clear's own reply (the clear no longer
    # waits for its lock's release): wait for it, with a deadline
    await eventually(lambda: again.generation == mine.generation)
    assert await mine.get_many(["a", "b", "c"]) == {} and await again.get_many(["a", "b", "c"]) == {}
    assert await other.get("a") == "other namespace"
    await mine.clear()  # clearing an empty namespace is fine
    await mine.set("d", 4)
    await mine.clear()
    assert not await mine.exists("d")


async def test_clear_costs_the_same_whatever_the_namespace_holds(make_cache: CacheFactory) -> None:
    cache = await make_cache()
    client = cache.client
    sent: list[int] = []
    original = client.get

    async def counting_get(*args: Any, **kwargs: Any) -> Any:
        sent.append(1)
        return await original(*args, **kwargs)

    cache.client.get = counting_get  # type: ignore[method-assign]  # a spy in its place
    await cache.clear()
    await cache.sweep()
    empty = len(sent)
    await cache.set_many({f"k{i}": i for i in range(300)})
    sent.clear()
    await cache.clear()
    await cache.sweep()
    # the generation key and the (empty) ledger shards: never a read per key of the namespace
    assert len(sent) == empty


async def test_clear_leaves_no_ttl_less_entry_behind(make_cache: CacheFactory) -> None:
    cache = await make_cache()
    await cache.set("forever", "f", ttl=None)
    await cache.add("added-forever", "a", ttl=None)
    await cache.set("counter", 1, ttl=None)
    await cache.incr("counter")  # fenced by its lock's token: the sweep must still delete it
    await cache.set("brief", "b", ttl=60)
    await cache.expire("brief", None)  # became TTL-less by a renewal
    old = [await cache.data_key(k) for k in ("forever", "added-forever", "counter", "brief")]
    await cache.clear()
    await cache.sweep()  # waits for the sweep the clear started
    for key in old:
        assert await cache.client.get(key) is None, key
    state = await cache._generation.refresh()
    assert state.retired == ()  # nothing left to sweep


# -- get_or_set -------------------------------------------------------------------------------------------


async def test_get_or_set_returns_what_is_there_without_computing(cache: AsyncStateStoreCache[Any]) -> None:
    def boom() -> Any:
        raise AssertionError("computed although the key exists")

    await cache.set("k", "cached")
    await cache.set("none", None)
    assert await cache.get_or_set("k", boom) == "cached"
    assert await cache.get_or_set("none", boom) is None


async def test_get_or_set_computes_plain_sync_and_async_defaults(
    cache: AsyncStateStoreCache[Any], watch: Watch
) -> None:
    async def load() -> dict[str, int]:
        return {"loaded": 1}

    assert await cache.get_or_set("plain", 5) == 5
    assert await cache.get_or_set("sync", lambda: [1, 2]) == [1, 2]
    assert await cache.get_or_set("async", load) == {"loaded": 1}
    assert await cache.get_many(["plain", "sync", "async"]) == {"plain": 5, "sync": [1, 2], "async": {"loaded": 1}}
    notified = await watch(cache.client, await data_key(cache, "brief"))
    assert await cache.get_or_set("brief", "b", ttl=0.2) == "b"
    await notified.wait_for(KeyOperation.DELETE)
    assert await cache.get_or_set("now", "n", ttl=0) == "n"  # expire now: returned, not stored
    assert not await cache.exists("now")


async def test_get_or_set_computes_once_across_two_caches_and_twenty_callers(make_cache: CacheFactory) -> None:
    a, b = await make_cache(), await make_cache()
    calls = 0
    computing = asyncio.Event()
    release = asyncio.Event()

    async def compute() -> dict[str, int]:
        nonlocal calls
        calls += 1
        computing.set()
        await release.wait()
        return {"answer": 42}

    callers = [asyncio.create_task((a if i % 2 else b).get_or_set("hot", compute, ttl=60)) for i in range(20)]
    async with asyncio.timeout(10):
        await computing.wait()
    # both caches have a caller in flight for the key: one computing, the other waiting on the store lock
    await eventually(lambda: "hot" in a._core.flight._flights and "hot" in b._core.flight._flights)
    release.set()
    results = await asyncio.gather(*callers)
    assert results == [{"answer": 42}] * 20
    assert calls == 1
    assert await a.get("hot") == {"answer": 42}
    assert a.stats().misses + b.stats().misses == 20
    assert not a._core.flight._flights and not b._core.flight._flights


async def test_get_or_set_failure_reaches_the_waiters_and_the_next_call_retries(
    cache: AsyncStateStoreCache[Any],
) -> None:
    started = asyncio.Event()
    fail = asyncio.Event()

    async def broken() -> int:
        started.set()
        await fail.wait()
        raise RuntimeError("backend down")

    leader = asyncio.create_task(cache.get_or_set("k", broken))
    await started.wait()
    follower = asyncio.create_task(cache.get_or_set("k", lambda: "not called"))
    await eventually(lambda: cache.stats().misses == 2)  # the follower joined the flight
    fail.set()
    for task in (leader, follower):
        with pytest.raises(RuntimeError, match="backend down"):
            await task
    assert not await cache.exists("k")
    assert await cache.get_or_set("k", lambda: "second try") == "second try"  # the lock was released


async def test_a_cancelled_leader_hands_over_to_a_waiter(cache: AsyncStateStoreCache[Any]) -> None:
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.Event().wait()  # until cancelled
        return "never"

    leader = asyncio.create_task(cache.get_or_set("k", slow))
    await started.wait()
    follower = asyncio.create_task(cache.get_or_set("k", lambda: "from the follower"))
    await eventually(lambda: cache.stats().misses == 2)
    leader.cancel()
    assert await follower == "from the follower"
    assert leader.cancelled()
    assert await cache.get("k") == "from the follower"


# -- incr / decr ------------------------------------------------------------------------------------------


async def test_incr_and_decr(cache: AsyncStateStoreCache[Any]) -> None:
    with pytest.raises(ValueError, match="not found"):
        await cache.incr("missing")
    await cache.set("n", 10)
    assert await cache.incr("n") == 11
    assert await cache.incr("n", 5) == 16
    assert await cache.decr("n", 6) == 10
    assert await cache.decr("n") == 9
    assert await cache.get("n") == 9
    await cache.set("f", 1.5)
    assert await cache.incr("f", 2) == 3.5
    for value in ("text", True, [1]):
        await cache.set("bad", value)
        with pytest.raises(TypeError):
            await cache.incr("bad")


async def test_incr_is_exact_under_concurrency_across_two_caches(make_cache: CacheFactory) -> None:
    a, b = await make_cache(), await make_cache()
    await a.set("counter", 1000, ttl=None)
    results = await asyncio.gather(*((a if i % 2 else b).incr("counter") for i in range(100)))
    assert sorted(results) == list(range(1001, 1101))  # every caller saw a distinct count
    assert await a.get("counter") == 1100 and await b.get("counter") == 1100


async def test_incr_fences_the_key_and_the_cache_keeps_writing_it(
    cache: AsyncStateStoreCache[Any], store_backend: StoreBackend
) -> None:
    await cache.set("n", 1)
    assert await cache.incr("n") == 2
    plain = await store_backend.async_client()
    with pytest.raises(FencingTokenRequiredError):  # the incr's write carried the lock's token
        await plain.set(await data_key(cache, "n"), b"0")
    await cache.set("n", 40)  # retried under the key's lock, with its token
    assert await cache.incr("n", 2) == 42
    assert await cache.add("n", 0) is False
    assert await cache.touch("n", 60) is True
    assert await cache.get("n") == 42
    assert await cache.delete("n") is True
    assert await cache.add("n", 0) is True  # deleting dropped the fence


# -- stats, lifecycle ---------------------------------------------------------------------------------------


async def test_stats_count_hits_misses_sets_deletes_and_latency(cache: AsyncStateStoreCache[Any]) -> None:
    await cache.set("a", 1)
    await cache.set_many({"b": 2, "c": 3})
    assert await cache.add("a", 9) is False
    assert await cache.add("d", 4) is True
    await cache.get("a")
    await cache.get("zz")
    await cache.get_many(["a", "b", "yy"])
    await cache.delete("a")
    await cache.delete("a")
    await cache.delete_many(["b", "c", "xx"])
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.sets, stats.deletes) == (3, 2, 4, 3)
    assert stats.hit_ratio == pytest.approx(0.6)
    assert {op: lat.count for op, lat in stats.latency.items()} == {
        "set": 1,
        "set_many": 1,
        "add": 2,
        "get": 2,
        "get_many": 1,
        "delete": 2,
        "delete_many": 1,
    }
    for lat in stats.latency.values():
        assert sum(lat.buckets) == lat.count and len(lat.buckets) == len(LATENCY_BUCKETS) + 1
        assert 0 <= lat.mean <= lat.max <= lat.total
    assert stats.local is None


async def test_a_local_cache_serves_hits_without_a_round_trip_and_follows_other_writers(
    make_cache: CacheFactory, watch: Watch
) -> None:
    reader = await make_cache(local_cache_size=100)
    writer = await make_cache()
    await writer.set("k", "v1")
    assert await reader.get("k") == "v1"
    sent = reader.client.requests_sent
    assert await reader.get("k") == "v1" and await reader.exists("k")
    assert reader.client.requests_sent == sent
    changed = asyncio.Event()

    def on_event(event: KeyEvent) -> None:
        if event.value == b'"v2"':
            changed.set()

    # registered after the cache's own watch of the key, so it runs after the cache applied the event
    await reader.client.subscribe_key(await data_key(reader, "k"), on_event)
    await writer.set("k", "v2")
    async with asyncio.timeout(5):
        await changed.wait()
    assert await reader.get("k") == "v2"
    assert reader.client.requests_sent == sent  # our watch shared the cache's KEYNOTIFY registration
    local = reader.stats().local
    assert local is not None and local.hits >= 3


async def test_context_manager_and_close(store_backend: StoreBackend) -> None:
    client = await store_backend.async_client()
    cache: AsyncStateStoreCache[int] = AsyncStateStoreCache(client, namespace="lifecycle")
    async with cache:
        await cache.set("k", 1)
        assert await cache.get("k") == 1
        assert repr(cache).startswith("<AsyncStateStoreCache namespace='lifecycle'")
        stored = await cache.data_key("k")
    with pytest.raises(ClientStateError):
        await cache.get("k")
    await cache.close()  # twice is fine
    assert (await client.get(stored)) is not None  # the client was not ours to close


async def test_connect_makes_and_closes_its_own_client(broker_address: tuple[str, int], namespace: str) -> None:
    host, port = broker_address
    cache = await AsyncStateStoreCache.connect(f"mqtt://{host}:{port}", namespace=namespace)
    async with cache:
        await cache.set("k", "v")
        assert await cache.get("k") == "v"
        await cache.clear()
    with pytest.raises(ClientStateError):
        await cache.client.get("anything")
