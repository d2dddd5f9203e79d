"""The dict's sharded key index, on the loopback store and over a real mosquitto + the emulator process.

* an insert rewrites one small shard (one notification of one shard, whatever the namespace holds);
* a fresh process's ``len()`` and ``keys()`` read the index shards, never the data keys;
* expiry recorded in the shard entry: an expired key leaves the listing once its data is gone;
* a namespace with the single-object index (format 1: one ``ns#index`` object) is migrated on first open -- once,
  even when two processes open it at the same moment -- and refused if a format-1 writer recreates its old index
  afterwards.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from sskv_mapping._protocol.notifications import KeyEvent, KeyOperation
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.errors import ConfigurationError
from sskv_mapping.lock import AsyncLeasedLock
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
    assert len(asked) <= DEFAULT_SHARDS + 3  # the meta, used-shards and old-index keys, then the shards


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


async def _write_format1_namespace(client: AsyncStateStoreClient, namespace: str, keys: dict[str, int]) -> None:
    """What a format-1 writer leaves in the store: data keys and one index object written under its lock."""
    lock = AsyncLeasedLock(client, f"{namespace}#index-lock", lease=5)
    await lock.acquire(timeout=10)
    index = {k: 1_700_000_000_000 + n for n, k in enumerate(keys)}
    await lock.set(f"{namespace}#index", json.dumps(index).encode())
    await lock.release()
    for k, v in keys.items():
        await client.set(f"{namespace}/{k}", json.dumps(v).encode())


async def test_a_format_1_namespace_is_migrated_once_by_two_processes_opening_it(
    store_backend: StoreBackend, namespace: str
) -> None:
    old = {f"old{i}": i for i in range(150)}
    await _write_format1_namespace(await store_backend.async_client(), namespace, old)
    a: AsyncStateStoreDict[int] = AsyncStateStoreDict(
        await store_backend.async_client(), namespace=namespace, listing="index"
    )
    b: AsyncStateStoreDict[int] = AsyncStateStoreDict(
        await store_backend.async_client(), namespace=namespace, listing="index"
    )
    await asyncio.gather(a.open(), b.open())
    try:
        assert await a.copy() == old and await b.copy() == old
        assert await a.client.get(f"{namespace}#index") is None  # the old index is gone
        await a.set("new", 1)
        assert await b.len() == 151
    finally:
        await a.close()
        await b.close()


async def test_a_format_1_writer_after_the_migration_is_refused_loudly(
    store_backend: StoreBackend, namespace: str
) -> None:
    client = await store_backend.async_client()
    await _write_format1_namespace(client, namespace, {"a": 1})
    async with AsyncStateStoreDict[int](client, namespace=namespace, listing="index") as d:
        assert await d.keys() == ["a"]
    await _write_format1_namespace(client, namespace, {"b": 2})  # an old process still running
    late: AsyncStateStoreDict[int] = AsyncStateStoreDict(
        await store_backend.async_client(), namespace=namespace, listing="index"
    )
    with pytest.raises(ConfigurationError, match=r"single-object index \(format 1\)"):
        await late.open()
