"""What each dict operation costs, in requests sent (``client.requests_sent``), not time: at 10 keys and at 10,000,
in both listing modes. Every operation that touches one key costs the same whatever the namespace holds; the
listing operations cost what their mode says (the README's table): nothing on a warm index, pages of a SCAN.

The namespace is filled and measured on the in-process store (the same emulator core as the real one; an honest
count of requests, fast to fill). ``popitem`` emptying a 1,000-key dict is counted there in both modes and over
mosquitto + the emulator process in index mode.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import pytest

from sskv_mapping._namespace.key_locks import drain_owned
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.emulator.scan import DEFAULT_SCAN_PAGE_SIZE
from sskv_mapping.mapping import AsyncStateStoreDict
from sskv_mapping.mapping._listing import ListingMode
from sskv_mapping.testing import InProcessStore

MODES = ["scan", "index"]
#: the most requests one single-key operation may take (a new key in index mode, on a shard not yet used: list
#: the shard as used, lock and rewrite it, watch and SET the data key)
ONE_KEY_BOUND = 14


@pytest.fixture
async def store() -> AsyncIterator[InProcessStore]:
    async with InProcessStore() as s:
        yield s


async def _filled(store: InProcessStore, listing: ListingMode, n: int) -> str:
    namespace = f"c{uuid.uuid4().hex[:10]}"
    async with (
        store.async_client(timeout=30) as client,
        AsyncStateStoreDict[int](client, namespace=namespace, local_cache_size=0, listing=listing) as d,
    ):
        await d.update({f"k{i}": i for i in range(n)})
    return namespace


async def _costs(client: AsyncStateStoreClient, d: AsyncStateStoreDict[int]) -> dict[str, int]:
    """Requests per operation; each single-key operation is done on three keys and its dearest is kept."""
    out: dict[str, int] = {}

    async def count(name: str, op: Callable[[], Awaitable[Any]]) -> None:
        # the locks an operation takes are released in the background (or kept a moment): its count includes
        # those releases, drained before the next operation starts
        await drain_owned(client)
        before = client.requests_sent
        await op()
        await drain_owned(client)
        out[name] = max(out.get(name, 0), client.requests_sent - before)

    for j in range(3):
        await count("contains (present)", partial(d.contains, f"k{j}"))
        await count("contains (absent)", partial(d.contains, f"absent{j}"))
        await count("get", partial(d.get, f"k{j + 3}"))
        await count("set (existing key)", partial(d.set, f"k{j + 6}", -1))
        await count("set (new key)", partial(d.set, f"new{j}", 1))
        await count("setdefault (new key)", partial(d.setdefault, f"dflt{j}", 2))
        await count("setdefault (existing key)", partial(d.setdefault, f"k{j}", 2))
        await count("update (2 new keys)", partial(d.update, {f"u{j}a": 1, f"u{j}b": 2}))
        await count("pop", partial(d.pop, f"new{j}"))
        await count("delitem", partial(d.delitem, f"dflt{j}"))
        await count("popitem", d.popitem)
    await count("len", d.len)
    await count("keys", d.keys)
    return out


@pytest.mark.parametrize("listing", MODES)
async def test_a_single_key_operation_costs_the_same_at_10_and_10k_keys(
    store: InProcessStore, listing: ListingMode
) -> None:
    costs: dict[int, dict[str, int]] = {}
    for n in (10, 10_000):
        namespace = await _filled(store, listing, n)
        async with (
            store.async_client(timeout=30) as client,
            AsyncStateStoreDict[int](client, namespace=namespace, listing=listing) as d,
        ):
            assert await d.len() == n  # warm: the listing is known (index) / the mode decided (scan)
            costs[n] = await _costs(client, d)
    small, big = costs[10], costs[10_000]
    for op in small:
        if op in ("len", "keys"):
            continue
        # +1: a SCAN (scan mode's popitem) may take one more page before it finds a key, whatever the size
        assert big[op] <= small[op] + 1, (op, small[op], big[op])
        assert big[op] <= ONE_KEY_BOUND, (op, big[op])
    if listing == "index":  # a warm index answers from what its notifications keep: no request
        assert big["len"] == 0 and big["keys"] == 0
    else:  # SCAN pages, each of up to the emulator's default page size
        assert small["len"] == 1 and big["len"] <= 10_000 // DEFAULT_SCAN_PAGE_SIZE + 2


async def _empty_with_popitem(client: AsyncStateStoreClient, d: AsyncStateStoreDict[int], n: int) -> list[int]:
    per_call: list[int] = []
    popped: set[str] = set()
    for _ in range(n):
        await drain_owned(client)  # each call counted with the lock releases it causes, not its predecessor's
        before = client.requests_sent
        key, _value = await d.popitem()
        await drain_owned(client)
        per_call.append(client.requests_sent - before)
        popped.add(key)
    assert len(popped) == n
    with pytest.raises(KeyError):
        await d.popitem()
    return per_call


@pytest.mark.parametrize("listing", MODES)
async def test_emptying_a_1000_key_dict_with_popitem_costs_a_constant_per_call(
    store: InProcessStore, listing: ListingMode
) -> None:
    namespace = await _filled(store, listing, 1_000)
    async with (
        store.async_client(timeout=30) as client,
        AsyncStateStoreDict[int](client, namespace=namespace, listing=listing) as d,
    ):
        per_call = await _empty_with_popitem(client, d, 1_000)
        assert await d.len() == 0
    # not the whole listing per call (1,000 keys over hundreds of shards): a few requests, whatever is left
    assert max(per_call) <= ONE_KEY_BOUND, max(per_call)
    assert sum(per_call) <= 10 * 1_000


async def test_popitem_over_the_real_broker_costs_a_constant_per_call(
    mosquitto: MosquittoBroker, emulator: object
) -> None:
    namespace = f"c{uuid.uuid4().hex[:10]}"
    client = AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=10)
    await client.connect()
    try:
        d: AsyncStateStoreDict[int] = AsyncStateStoreDict(client, namespace=namespace, listing="index")
        async with d:
            await d.update({f"k{i}": i for i in range(300)})
            per_call = await _empty_with_popitem(client, d, 300)
    finally:
        await client.close()
    assert max(per_call) <= ONE_KEY_BOUND, max(per_call)
