"""What a process reads after a write is what the store holds: the local cache keeps the codec's decoding of the
stored bytes, never the caller's object (issue 37). A caller that changes its object after ``set`` changes nothing
read back, on the dict and the cache, blocking and async; the read is a hit (the write was kept)."""

from __future__ import annotations

import json
import threading
from typing import Any

from sskv_mapping.cache import AsyncStateStoreCache, StateStoreCache
from sskv_mapping.mapping import AsyncStateStoreDict
from tests._support.store_backend import StoreBackend
from tests.cache.conftest import CacheFactory, SyncCacheFactory
from tests.mapping.conftest import DictFactory


def _value() -> dict[str, Any]:
    return {"items": [1, 2], "name": "a"}


def _mutate(value: dict[str, Any]) -> None:
    value["items"].append(3)
    value["name"] = "changed"


def test_dict_keeps_a_decoded_value_not_the_callers(make_dict: DictFactory) -> None:
    d = make_dict(local_cache_size=100)
    d["k"] = "first"
    assert d["k"] == "first"  # read: the key is watched, so the next write is kept
    value = _value()
    d["k"] = value
    _mutate(value)
    client = d._async._store.client
    before = client.requests_sent
    assert d["k"] == _value()
    assert client.requests_sent == before  # a hit: the write was kept, as a copy


async def test_async_dict_keeps_a_decoded_value_not_the_callers(store_backend: StoreBackend, namespace: str) -> None:
    client = await store_backend.async_client()
    d: AsyncStateStoreDict[Any] = AsyncStateStoreDict(client, namespace=namespace, local_cache_size=100)
    try:
        await d.set("k", "first")
        assert await d.get("k") == "first"
        value = _value()
        await d.set("k", value)
        _mutate(value)
        before = client.requests_sent
        got = await d.get("k")
        assert got == _value()
        assert got is not value
        assert client.requests_sent == before
    finally:
        await d.close()


def test_cache_keeps_a_decoded_value_not_the_callers(make_sync_cache: SyncCacheFactory) -> None:
    c: StateStoreCache[Any] = make_sync_cache(local_cache_size=100)
    c.set("k", "first")
    assert c.get("k") == "first"
    value = _value()
    c.set("k", value)
    _mutate(value)
    before = c.client.async_client.requests_sent
    assert c.get("k") == _value()
    assert c.client.async_client.requests_sent == before


async def test_async_cache_keeps_a_decoded_value_not_the_callers(make_cache: CacheFactory) -> None:
    c: AsyncStateStoreCache[Any] = await make_cache(local_cache_size=100)
    await c.set("k", "first")
    assert await c.get("k") == "first"
    value = _value()
    await c.set("k", value)
    _mutate(value)
    before = c.client.requests_sent
    got = await c.get("k")
    assert got == _value()
    assert got is not value
    assert c.client.requests_sent == before


async def test_a_codec_that_reads_back_another_type_is_kept_as_it_reads_back(
    store_backend: StoreBackend, namespace: str
) -> None:
    """aiocache's case: the codec's ``loads`` gives another type than the value given to ``dumps``."""

    class Text:
        name = "text"

        def dumps(self, value: Any, /) -> bytes:
            return str(value).encode()

        def loads(self, data: bytes, /) -> Any:
            return data.decode()

    client = await store_backend.async_client()
    d: AsyncStateStoreDict[Any] = AsyncStateStoreDict(client, namespace=namespace, codec=Text(), local_cache_size=10)
    try:
        await d.set("n", 0)
        assert await d.get("n") == "0"
        await d.set("n", 42)
        before = client.requests_sent
        assert await d.get("n") == "42"  # what any other process reads, not the int given
        assert client.requests_sent == before
    finally:
        await d.close()


def test_a_blocking_write_is_decoded_in_the_callers_thread(make_dict: DictFactory) -> None:
    """The blocking faces encode in the caller's thread; the decoding a kept write needs is made there too, so the
    loop's thread (shared by every blocking client in the process) does no codec work for it."""
    decoded_in: list[str] = []

    class Recording:
        name = "recording"

        def dumps(self, value: Any, /) -> bytes:
            return json.dumps(value).encode()

        def loads(self, data: bytes, /) -> Any:
            decoded_in.append(threading.current_thread().name)
            return json.loads(data)

    d = make_dict(local_cache_size=10, codec=Recording())
    d["k"] = [1]
    assert d["k"] == [1]  # read: watched (decoded on the loop: a GET's answer)
    decoded_in.clear()
    value = [2]
    d["k"] = value
    value.append(3)
    assert d["k"] == [2]
    # decoded here, once; the loop decodes at most the write's own notification (when it overtakes the
    # acknowledgement, as before); the hit decoded nothing
    assert decoded_in.count(threading.current_thread().name) == 1
    assert len(decoded_in) <= 2
