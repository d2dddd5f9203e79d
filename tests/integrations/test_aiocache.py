"""aiocache's public API on the state store backend, against mosquitto and the emulator process: ``Cache(...)``
get/set/add/delete/exists/increment/expire/multi_get/multi_set/clear/raw, ``OptimisticLock``, ``RedLock``,
``@cached``, ``@cached_stampede``, ``caches.set_config``, aiocache's TTL rules, and use from several event loops.

Expiry is observed through the key's KEYNOTIFY DELETE (the emulator expires keys on a timer), never by sleeping.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("aiocache")

from aiocache import Cache, cached, cached_stampede, caches
from aiocache.lock import OptimisticLock, OptimisticLockError, RedLock
from aiocache.serializers import PickleSerializer, StringSerializer

from sskv_mapping import AsyncStateStoreClient, ConnectionSettings, KeyOperation
from sskv_mapping.integrations.aiocache import StateStoreCache
from tests._support.waiting import Notified

CacheFactory = Callable[..., StateStoreCache]


@pytest.fixture
def sskv_namespace() -> str:
    return f"aio{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def make_cache(broker_url: str, sskv_namespace: str) -> AsyncIterator[CacheFactory]:
    made: list[StateStoreCache] = []

    def make(**kwargs: Any) -> StateStoreCache:
        kwargs.setdefault("sskv_namespace", sskv_namespace)
        cache = Cache(StateStoreCache, url=broker_url, **kwargs)
        assert isinstance(cache, StateStoreCache)
        made.append(cache)
        return cache

    yield make
    for cache in made:
        await cache.close()


@pytest.fixture
async def cache(make_cache: CacheFactory) -> StateStoreCache:
    return make_cache(namespace="main")


@pytest.fixture
async def watch(broker_url: str) -> AsyncIterator[Callable[[StateStoreCache, str], Awaitable[Notified]]]:
    """``await watch(cache, key)``: a registered watch on the store key holding ``key`` of ``cache``."""
    client = AsyncStateStoreClient(settings=ConnectionSettings.from_url(broker_url))
    await client.connect()

    async def start(cache: StateStoreCache, key: str) -> Notified:
        notified = Notified()
        await client.subscribe_key(await cache.store_key(key), notified)
        return notified

    yield start
    await client.close()


# -- basic operations -------------------------------------------------------------------------------------


async def test_get_set_with_the_default_json_serializer(cache: StateStoreCache) -> None:
    assert await cache.get("k") is None
    assert await cache.get("k", default="dflt") == "dflt"
    assert await cache.set("k", {"a": [1, 2]}) is True
    assert await cache.get("k") == {"a": [1, 2]}


async def test_add_raises_value_error_if_the_key_exists(cache: StateStoreCache) -> None:
    assert await cache.add("k", 1) is True
    with pytest.raises(ValueError, match="already exists"):
        await cache.add("k", 2)
    assert await cache.get("k") == 1


async def test_delete_and_exists(cache: StateStoreCache) -> None:
    assert await cache.exists("k") is False
    await cache.set("k", "v")
    assert await cache.exists("k") is True
    assert await cache.delete("k") == 1
    assert await cache.delete("k") == 0
    assert await cache.exists("k") is False


async def test_multi_get_and_multi_set(cache: StateStoreCache) -> None:
    assert await cache.multi_set([("a", 1), ("b", {"x": 2}), ("c", None)]) is True
    assert await cache.multi_get(["a", "missing", "b", "a"]) == [1, None, {"x": 2}, 1]


async def test_increment(cache: StateStoreCache) -> None:
    assert await cache.increment("n") == 1  # absent: starts at delta
    assert await cache.increment("n", 5) == 6
    assert await cache.increment("n", -10) == -4
    assert await cache.get("n") == -4
    await cache.set("text", "abc")
    with pytest.raises(TypeError):
        await cache.increment("text")


async def test_increment_is_exact_under_concurrency(make_cache: CacheFactory) -> None:
    a, b = make_cache(), make_cache()
    await asyncio.gather(*(c.increment("hits") for _ in range(10) for c in (a, b)))
    assert await a.get("hits") == 20


async def test_values_with_other_serializers(make_cache: CacheFactory) -> None:
    pickled = make_cache(serializer=PickleSerializer())
    await pickled.set("p", {1, 2, 3})
    assert await pickled.get("p") == {1, 2, 3}
    text = make_cache(serializer=StringSerializer())
    await text.set("s", 12)
    assert await text.get("s") == "12"
    assert await text.increment("s", 1) == 13
    assert await text.get("s") == "13"
    await text.set("zeros", "007")  # not a canonical integer: stays text
    assert await text.get("zeros") == "007"


async def test_a_value_that_is_not_serialized_is_refused(make_cache: CacheFactory) -> None:
    from aiocache.serializers import NullSerializer

    raw = make_cache(serializer=NullSerializer())
    with pytest.raises(Exception, match="serializer"):
        await raw.set("k", object())


async def test_namespaces_are_key_prefixes_and_clear_respects_them(make_cache: CacheFactory) -> None:
    main, other = make_cache(namespace="main"), make_cache(namespace="other")
    await main.set("k", "main")
    await other.set("k", "other")
    assert await main.get("k") == "main"
    assert await main.get("k", namespace="other") == "other"
    assert await main.clear(namespace="main") is True
    assert await main.get("k") is None
    assert await other.get("k") == "other"
    assert await main.clear() is True  # no namespace: the whole state store namespace
    assert await other.get("k") is None


async def test_clear_leaves_other_state_store_namespaces_alone(make_cache: CacheFactory) -> None:
    mine, theirs = make_cache(), make_cache(sskv_namespace=f"aio{uuid.uuid4().hex[:10]}")
    await mine.set("k", 1)
    await theirs.set("k", 2)
    await mine.clear()
    assert await mine.get("k") is None
    assert await theirs.get("k") == 2
    await theirs.clear()


async def test_raw_reaches_the_client(cache: StateStoreCache, sskv_namespace: str) -> None:
    await cache.set("k", "v")
    assert await cache.raw("get", await cache.store_key("k")) == '"v"'
    with pytest.raises(ValueError, match="raw commands"):
        await cache.raw("flushdb")


async def test_a_second_cache_sees_the_first_ones_writes(make_cache: CacheFactory) -> None:
    first, second = make_cache(namespace="shared"), make_cache(namespace="shared")
    await first.set("k", "from first")
    assert await second.get("k") == "from first"


async def test_close_then_use_again(cache: StateStoreCache) -> None:
    await cache.set("k", 1)
    await cache.close()
    assert await cache.get("k") == 1


async def test_caches_set_config_by_dotted_path(broker_url: str, sskv_namespace: str) -> None:
    # --8<-- [start:set_config]
    caches.set_config(
        {
            "default": {"cache": "aiocache.SimpleMemoryCache"},
            "sskv": {
                "cache": "sskv_mapping.integrations.aiocache.StateStoreCache",
                "url": broker_url,
                "sskv_namespace": sskv_namespace,
                "serializer": {"class": "aiocache.serializers.JsonSerializer"},
            },
        }
    )
    # --8<-- [end:set_config]
    try:
        cache = caches.get("sskv")
        assert isinstance(cache, StateStoreCache)
        await cache.set("k", [1])
        assert await cache.get("k") == [1]
        await cache.close()
    finally:
        caches.set_config({"default": {"cache": "aiocache.SimpleMemoryCache"}})


async def test_cache_from_url_once_registered(
    monkeypatch: pytest.MonkeyPatch, broker_url: str, sskv_namespace: str
) -> None:
    from aiocache import AIOCACHE_CACHES

    monkeypatch.setitem(AIOCACHE_CACHES, "sskv", StateStoreCache)
    cache = Cache.from_url(broker_url.replace("mqtt://", "sskv://") + f"/{sskv_namespace}")
    assert isinstance(cache, StateStoreCache)
    try:
        await cache.set("k", "via url")
        assert repr(cache) == f"StateStoreCache ({broker_url}, sskv_namespace={sskv_namespace!r})"
        assert await cache.get("k") == "via url"
    finally:
        await cache.clear()
        await cache.close()


def test_one_cache_used_from_several_event_loops(broker_url: str, sskv_namespace: str) -> None:
    cache = Cache(StateStoreCache, url=broker_url, sskv_namespace=sskv_namespace)
    asyncio.run(cache.set("k", "one loop"))
    assert asyncio.run(cache.get("k")) == "one loop"
    seen: list[Any] = []
    thread = threading.Thread(target=lambda: seen.append(asyncio.run(cache.get("k"))))
    thread.start()
    thread.join()
    assert seen == ["one loop"]
    asyncio.run(cache.close())


# -- TTLs: aiocache's convention --------------------------------------------------------------------------


async def test_a_ttl_expires_the_key(
    cache: StateStoreCache, watch: Callable[[StateStoreCache, str], Awaitable[Notified]]
) -> None:
    notified = await watch(cache, "short")
    await cache.set("short", "v", ttl=0.3)
    assert await cache.get("short") == "v"
    await notified.wait_for(KeyOperation.DELETE)
    assert await cache.get("short") is None


async def test_the_cache_ttl_is_the_default_and_zero_or_none_never_expire(
    make_cache: CacheFactory, watch: Callable[[StateStoreCache, str], Awaitable[Notified]]
) -> None:
    cache = make_cache(ttl=0.3)
    notified = await watch(cache, "witness")
    await cache.set("none", "v", ttl=None)
    await cache.set("zero", "v", ttl=0)
    await cache.set("witness", "w")  # the cache's ttl; the emulator expires in deadline order
    await notified.wait_for(KeyOperation.DELETE)
    assert await cache.multi_get(["none", "zero", "witness"]) == ["v", "v", None]


async def test_a_negative_ttl_expires_at_once(cache: StateStoreCache) -> None:
    await cache.set("k", "v")
    await cache.set("k", "v2", ttl=-1)
    assert await cache.exists("k") is False


async def test_expire(cache: StateStoreCache, watch: Callable[[StateStoreCache, str], Awaitable[Notified]]) -> None:
    assert await cache.expire("missing", 10) is False
    await cache.set("kept", "v", ttl=0.3)
    assert await cache.expire("kept", 0) is True  # 0 removes the expiry
    await cache.set("goes", "v")
    notified = await watch(cache, "goes")
    assert await cache.expire("goes", 0.3) is True
    await notified.wait_for(KeyOperation.DELETE)
    assert await cache.multi_get(["kept", "goes"]) == ["v", None]


async def test_add_and_multi_set_take_ttls(
    cache: StateStoreCache, watch: Callable[[StateStoreCache, str], Awaitable[Notified]]
) -> None:
    added, many = await watch(cache, "added"), await watch(cache, "m2")
    await cache.add("added", 1, ttl=0.3)
    await cache.multi_set([("m1", 1), ("m2", 2)], ttl=0.3)
    await added.wait_for(KeyOperation.DELETE)
    await many.wait_for(KeyOperation.DELETE)
    assert await cache.multi_get(["added", "m1", "m2"]) == [None, None, None]


# -- locks ------------------------------------------------------------------------------------------------


async def test_optimistic_lock(cache: StateStoreCache) -> None:
    await cache.set("doc", {"v": 1})
    async with OptimisticLock(cache, "doc") as lock:
        assert await lock.cas({"v": 2}) is True
    assert await cache.get("doc") == {"v": 2}

    async with OptimisticLock(cache, "doc") as lock:
        await cache.set("doc", {"v": "someone else"})
        with pytest.raises(OptimisticLockError):
            await lock.cas({"v": 3})
    assert await cache.get("doc") == {"v": "someone else"}

    async with OptimisticLock(cache, "fresh") as lock:  # no value when the lock started: no conflict
        assert await lock.cas("new") is True
    assert await cache.get("fresh") == "new"


async def test_redlock_releases_only_its_own_lock(cache: StateStoreCache) -> None:
    async with RedLock(cache, "job", lease=5):
        assert await cache.exists("job-lock") is True
    assert await cache.exists("job-lock") is False
    assert await cache._redlock_release("main:job-lock", "not-ours") == 0


# -- decorators -------------------------------------------------------------------------------------------


async def test_cached_decorator_stores_in_the_state_store(
    broker_url: str, sskv_namespace: str, make_cache: CacheFactory
) -> None:
    calls: list[int] = []

    # --8<-- [start:cached]
    @cached(cache=StateStoreCache, url=broker_url, sskv_namespace=sskv_namespace, namespace="fn", key="sq", ttl=60)
    async def square(x: int) -> int:
        calls.append(x)
        return x * x

    # --8<-- [end:cached]

    try:
        assert await square(4) == 16
        assert await square(4) == 16
        assert calls == [4]
        assert await make_cache(namespace="fn").get("sq") == 16  # another cache object sees it
    finally:
        await square.cache.close()


async def test_cached_stampede_computes_once(broker_url: str, sskv_namespace: str) -> None:
    calls: list[str] = []
    started, release = asyncio.Event(), asyncio.Event()

    @cached_stampede(cache=StateStoreCache, url=broker_url, sskv_namespace=sskv_namespace, lease=5, ttl=60)
    async def load(name: str) -> str:
        calls.append(name)
        started.set()
        await release.wait()
        return name.upper()

    try:
        first = asyncio.create_task(load("x"))
        await started.wait()  # the first caller holds the lock; the others queue behind it or find the value
        others = [asyncio.create_task(load("x")) for _ in range(3)]
        release.set()
        assert await asyncio.gather(first, *others) == ["X"] * 4
        assert calls == ["x"]
    finally:
        await load.cache.close()
