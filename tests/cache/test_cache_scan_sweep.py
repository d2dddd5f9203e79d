"""A TTL-less cache write where the service answers SCAN is one SET, no ledger; a clear's sweep finds such entries
by a SCAN of the retired generation's prefix. On a service without SCAN the ledger keeps doing it. Either way, TTL-less
writes racing clears in another client leave nothing behind (in-process store, with and without SCAN).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.testing import InProcessStore


@pytest.fixture(params=[True, False], ids=["scan", "no-scan"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[InProcessStore]:
    async with InProcessStore(scan=request.param) as s:
        yield s


async def test_a_ttl_less_write_is_one_set_where_scan_answers(store: InProcessStore) -> None:
    namespace = f"cs{uuid.uuid4().hex[:8]}"
    async with (
        store.async_client(timeout=10) as client,
        AsyncStateStoreCache[Any](client, namespace=namespace) as cache,
    ):
        await cache.set("warm", 0, ttl=None)  # the generation known, SCAN asked once
        before = client.requests_sent
        await cache.set("one", 1, ttl=None)
        cost = client.requests_sent - before
        scan = client.supports_scan is True  # asked by the first TTL-less write
        ledgers = [k async for k in client.scan(f"{namespace}#persist*")] if scan else []
        if scan:
            assert cost <= 2  # the SET, and the key's watch beside it
            assert ledgers == []
        else:
            assert cost > 2  # the ledger shard's lock, read and write first
        await cache.clear()
        await cache.sweep()
        assert await client.get(f"{namespace}#g.{cache.generation}/one") is None


async def test_ttl_less_writes_racing_clears_leave_nothing_behind(store: InProcessStore) -> None:
    namespace = f"cs{uuid.uuid4().hex[:8]}"
    async with (
        store.async_client(timeout=10) as a,
        store.async_client(timeout=10) as b,
        AsyncStateStoreCache[Any](a, namespace=namespace) as cache,
        AsyncStateStoreCache[Any](b, namespace=namespace) as writer,
    ):
        generations = {cache.generation}

        async def write_many() -> None:
            for i in range(60):
                await writer.set(f"k{i}", i, ttl=None)

        async def clear_a_few() -> None:
            for _ in range(3):
                generations.add((await cache._generation.bump()).gen)
                await asyncio.sleep(0)

        await asyncio.gather(write_many(), clear_a_few())
        await cache.clear()
        generations.add(cache.generation)
        await cache.sweep()
        await writer.sweep()
        places = [f"{namespace}#g.{gen}/k{i}" for gen in generations for i in range(60)]
        leaked: list[Any] = [k for k in places if await a.get(k) is not None]
        assert leaked == []
