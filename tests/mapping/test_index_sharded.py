"""The dict's sharded key index, on the loopback store and over a real mosquitto + the emulator process.

* an insert rewrites one small shard (one notification of one shard, whatever the namespace holds);
* a fresh process's ``len()`` and ``keys()`` read the index shards, never the data keys;
* expiry recorded in the shard entry: an expired key leaves the listing once its data is gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sskv_mapping._protocol.notifications import KeyEvent, KeyOperation
from sskv_mapping.mapping import AsyncStateStoreDict
from sskv_mapping.mapping._index import DEFAULT_SHARDS
from sskv_mapping.mapping._listing import NamespaceListing
from tests._support.store_backend import StoreBackend


class Sizes:
    """Every notification of the namespace's index shards: which shard, how many bytes."""

    def __init__(self) -> None:
        self.events: list[tuple[bytes, int]] = []
        self.changed = asyncio.Event()

    def sink(self, key: bytes) -> Callable[[KeyEvent], None]:
        def on(event: KeyEvent) -> None:
            if event.op is KeyOperation.SET and not event.synthetic:
                self.events.append((key, len(event.value or b"")))
                self.changed.set()

        return on


async def test_an_insert_rewrites_and_broadcasts_one_small_shard(store_backend: StoreBackend, namespace: str) -> None:
    writer = await store_backend.async_client()
    d: AsyncStateStoreDict[int] = AsyncStateStoreDict(writer, namespace=namespace, local_cache_size=0, listing="index")
    async with d:
        await d.update({f"k{i:05d}": i for i in range(2_000)})
        index = d._store.index
        assert isinstance(index, NamespaceListing) and index.shards == DEFAULT_SHARDS
        watcher = await store_backend.async_client()
        sizes = Sizes()
        for i in range(index.shards):
            await watcher.subscribe_key(index.shard_key(i), sizes.sink(index.shard_key(i)))
        await d.set("one-more", 1)
        await asyncio.wait_for(sizes.changed.wait(), 10)
        await watcher.get(f"{namespace}#barrier")  # any other notification of that insert has arrived now
        assert len(sizes.events) == 1  # one shard, not the index
        _, size = sizes.events[0]
        assert size < 2_000 * 20 / index.shards * 4  # ~8 entries of ~20 bytes, not 2,000


async def test_a_fresh_len_reads_the_shards_not_the_data(store_backend: StoreBackend, namespace: str) -> None:
    async with AsyncStateStoreDict[int](
        await store_backend.async_client(), namespace=namespace, local_cache_size=0, listing="index"
    ) as d:
        await d.update({f"k{i}": i for i in range(300)})
    reader = await store_backend.async_client()
    asked: list[bytes] = []
    original = reader.get

    async def spy(key: Any, **kwargs: Any) -> Any:
        asked.append(key if isinstance(key, bytes) else str(key).encode())
        return await original(key, **kwargs)

    reader.get = spy  # type: ignore[method-assign]  # a spy in its place
    async with AsyncStateStoreDict[int](reader, namespace=namespace, listing="index") as fresh:
        assert await fresh.len() == 300
        assert sorted(await fresh.keys()) == sorted(f"k{i}" for i in range(300))
    data_reads = [k for k in asked if k.startswith(f"{namespace}/".encode())]
    assert data_reads == []
    assert len(asked) <= DEFAULT_SHARDS + 2  # the meta and used-shards keys, then the shards


async def test_an_expired_key_leaves_the_listing(store_backend: StoreBackend, namespace: str) -> None:
    client = await store_backend.async_client()
    async with AsyncStateStoreDict[int](client, namespace=namespace, listing="index") as d:
        await d.set("stays", 1)
        gone = asyncio.Event()
        await client.subscribe_key(f"{namespace}/brief", lambda e: gone.set() if e.op is KeyOperation.DELETE else None)
        await d.set("brief", 2, ttl=0.2)
        assert sorted(await d.keys()) == ["brief", "stays"]
        await asyncio.wait_for(gone.wait(), 10)
        assert await d.keys() == ["stays"] and await d.len() == 1
        await d.set("renewed", 3, ttl=0.2)
        await d.set("renewed", 4)  # now without expiry: listed as such
        assert d._store.index is not None
        entry = (await d._store.index.listing())["renewed"]
        assert entry.expires_ms is None
