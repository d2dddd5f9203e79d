"""The store keys the dict and the cache write, pinned as bytes: data a release wrote must read the same after.

Every key a request names is taken from the emulator's request tap, so this sees what went to the service, not
what a helper says it would build. The expected keys are literals written down from the code as it was.
"""

from __future__ import annotations

import json

from sskv_mapping import AsyncStateStoreCache, AsyncStateStoreDict
from sskv_mapping._protocol.commands import parse_command
from sskv_mapping.emulator.core import CoreResult
from sskv_mapping.testing import InProcessStore


def _tapped(store: InProcessStore) -> set[bytes]:
    seen: set[bytes] = set()

    def tap(client_id: str | None, request: bytes | None, result: CoreResult, traceparent: str | None) -> None:
        if request is not None:
            key = getattr(parse_command(request), "key", None)
            if key is not None:
                seen.add(key)

    store.server.tap = tap
    return seen


async def test_a_dict_with_a_stored_index_writes_these_keys() -> None:
    async with InProcessStore() as store, store.async_client() as c:
        seen = _tapped(store)
        d: AsyncStateStoreDict[int] = AsyncStateStoreDict(c, namespace="pin", listing="index")
        await d.set("a/b#c", 1)
        await d.set("ü", 2)
        assert sorted(await d.keys()) == ["a/b#c", "ü"]
        await d.close()
    assert seen == {
        b"pin/a/b#c",
        "pin/ü".encode(),
        b"pin#index-meta",
        b"pin#index-used",
        b"pin#index-used-lock",
        b"pin#index/029c",  # shard 0x29c of 1024 holds "a/b#c"
        b"pin#index-lock/029c",
        b"pin#index/0337",  # and 0x337 holds "\u00fc"
        b"pin#index-lock/0337",
    }


async def test_a_cache_writes_these_keys() -> None:
    # a service without SCAN: entries without a TTL are listed in the generation's ledger
    async with InProcessStore(scan=False) as store, store.async_client() as c:
        seen = _tapped(store)
        cache: AsyncStateStoreCache[int] = AsyncStateStoreCache(c, namespace="web")
        await cache.set("k/1#x", 1, ttl=None)
        await cache.set("n", 1, ttl=None)
        assert await cache.incr("n") == 2
        assert await cache.get_or_set("g", lambda: 5, ttl=30) == 5
        entry = await c.get(b"web#gen")
        assert entry is not None
        gen = json.loads(entry.value)["gen"]
        await cache.close()
    expected = {
        "web#gen",
        "web#gen-lock",
        f"web#g.{gen}/k/1#x",
        f"web#g.{gen}/n",
        f"web#g.{gen}/g",
        "web#lock/n",
        "web#gos-lock/g",
        f"web#persist/{gen}/0b",  # ledger shard 0x0b of 16 lists "k/1#x" and "n" (set without a TTL)
        f"web#persist-lock/{gen}/0b",
    }
    assert seen == {k.encode() for k in expected}


async def test_keys_written_in_the_pinned_layout_read_back() -> None:
    # what an earlier release left in the store: the faces must find it where it was put
    async with InProcessStore() as store, store.async_client() as c:
        await c.set(b"pin/a/b#c", b"1")
        await c.set(b"web#gen", b'{"gen":"0123456789ab","retired":[]}')
        await c.set("web#g.0123456789ab/k/ü".encode(), b"7")
        d: AsyncStateStoreDict[int] = AsyncStateStoreDict(c, namespace="pin", listing="scan")
        cache: AsyncStateStoreCache[int] = AsyncStateStoreCache(c, namespace="web")
        try:
            assert await d.get("a/b#c") == 1
            assert await d.keys() == ["a/b#c"]
            assert await cache.get("k/ü") == 7
            assert await cache.data_key("k/ü") == "web#g.0123456789ab/k/ü".encode()
        finally:
            await d.close()
            await cache.close()
