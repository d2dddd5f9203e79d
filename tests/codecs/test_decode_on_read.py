"""What a face's ``get`` does with stored bytes its codec cannot decode: a :class:`DecodeError` naming the key and
the codec, never a miss or the default -- on the read path without a local cache (the built-in codecs decode small
values in place there) and with one, for the dict and the cache, on the loopback and over mosquitto + the emulator.
"""

from __future__ import annotations

import pytest

from sskv_mapping import AsyncStateStoreCache, AsyncStateStoreDict, DecodeError
from tests._support.store_backend import StoreBackend

NOT_JSON = b"{oops"


@pytest.mark.parametrize("local_cache_size", [0, 100])
async def test_a_dict_get_of_undecodable_bytes_raises_naming_the_key(
    store_backend: StoreBackend, namespace: str, local_cache_size: int
) -> None:
    client = await store_backend.async_client()
    d: AsyncStateStoreDict[object] = await AsyncStateStoreDict(
        client, namespace=namespace, local_cache_size=local_cache_size
    ).open()
    try:
        await d.set("good", {"n": 1})
        await client.set(d._store.data_key("bad"), NOT_JSON)  # written by someone with another codec
        for read in (lambda: d.get("bad", "default"), lambda: d.getitem("bad")):
            with pytest.raises(DecodeError, match=r"'bad'.*'json'"):
                await read()
        assert await d.get("good") == {"n": 1}  # the next read is served as before
    finally:
        await d.close()


@pytest.mark.parametrize("local_cache_size", [0, 100])
async def test_a_cache_get_of_undecodable_bytes_raises_and_is_counted_once(
    store_backend: StoreBackend, namespace: str, local_cache_size: int
) -> None:
    client = await store_backend.async_client()
    c: AsyncStateStoreCache[object] = AsyncStateStoreCache(
        client, namespace=namespace, codec="json", local_cache_size=local_cache_size
    )
    try:
        await c.set("good", [1, 2])
        await client.set(c._store.data_key("bad"), NOT_JSON)
        with pytest.raises(DecodeError, match=r"'bad'.*'json'"):
            await c.get("bad", "default")
        assert await c.get("good") == [1, 2]
        assert await c.get("absent", "default") == "default"
        stats = c.stats()
        assert (stats.hits, stats.misses) == (1, 1)  # the failed read is neither
        assert stats.latency["get"].count == 3  # but its time is observed
    finally:
        await c.close()
