"""The dict's listing modes (``listing="scan" | "index" | "auto"``), on the in-process store and over mosquitto +
the emulator process:

* a namespace written in ``index`` mode lists exactly its keys in ``scan`` mode (the index keys are not data keys),
  and a ``scan`` dict on it keeps the index current, so an ``index`` dict still lists what it writes;
* a namespace with glob characters in its name lists exactly itself (not ``ns1`` next to ``ns*``);
* ``auto`` takes SCAN where the service answers it, the index where it does not (an older service);
* a ``scan`` dict's new key is one request; an unknown mode is refused before anything is sent.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.errors import ConfigurationError
from sskv_mapping.mapping import AsyncStateStoreDict
from sskv_mapping.mapping._listing import ListingMode, NamespaceListing
from sskv_mapping.testing import InProcessStore
from tests._support.store_backend import StoreBackend


@pytest.fixture
async def old_service() -> AsyncIterator[AsyncStateStoreClient]:
    async with InProcessStore(scan=False) as store, store.async_client(timeout=10) as client:
        yield client


def _dict(client: AsyncStateStoreClient, namespace: str, listing: ListingMode) -> AsyncStateStoreDict[Any]:
    return AsyncStateStoreDict(client, namespace=namespace, listing=listing)


async def test_index_and_scan_dicts_agree_on_one_namespace(store_backend: StoreBackend) -> None:
    namespace = f"lm{uuid.uuid4().hex[:8]}"
    async with _dict(await store_backend.async_client(), namespace, "index") as indexed:
        await indexed.update({f"k{i}": i for i in range(50)})
        async with _dict(await store_backend.async_client(), namespace, "scan") as scanned:
            assert sorted(await scanned.keys()) == sorted(f"k{i}" for i in range(50))  # no '#index' key
            assert await scanned.len() == 50
            await scanned.set("from-scan", 1)  # the namespace has an index: kept current
            del_key = "k7"
            await scanned.delitem(del_key)
            assert isinstance(scanned._store.index, NamespaceListing) and scanned._store.index.mode == "scan"
        async with _dict(await store_backend.async_client(), namespace, "index") as late:
            keys = set(await late.keys())
            assert "from-scan" in keys and "k7" not in keys and len(keys) == 50


async def test_a_namespace_with_glob_characters_lists_exactly_itself(store_backend: StoreBackend) -> None:
    base = f"g{uuid.uuid4().hex[:6]}"
    client = await store_backend.async_client()
    async with _dict(client, f"{base}[1]*?", "scan") as globby, _dict(client, f"{base}1x", "scan") as plain:
        await globby.set("a", 1)
        await plain.set("b", 2)
        assert await globby.keys() == ["a"]
        assert await plain.keys() == ["b"]
        await globby.clear()
        assert await plain.keys() == ["b"]


async def test_auto_takes_scan_where_the_service_answers_it(store_backend: StoreBackend) -> None:
    client = await store_backend.async_client()
    async with _dict(client, f"au{uuid.uuid4().hex[:8]}", "auto") as d:
        await d.set("x", 1)
        assert isinstance(d._store.index, NamespaceListing) and d._store.index.mode == "scan"
        before = client.requests_sent
        await d.set("y", 2)  # a new key: one SET (and its watch beside it)
        assert client.requests_sent - before <= 2
        assert sorted(await d.keys()) == ["x", "y"]


async def test_auto_takes_the_index_on_a_service_without_scan(old_service: AsyncStateStoreClient) -> None:
    async with _dict(old_service, f"au{uuid.uuid4().hex[:8]}", "auto") as d:
        await d.update({"a": 1, "b": 2})
        assert isinstance(d._store.index, NamespaceListing) and d._store.index.mode == "index"
        assert sorted(await d.keys()) == ["a", "b"]
        assert await d.popitem() in {("a", 1), ("b", 2)}
        assert await d.len() == 1


async def test_an_unknown_listing_mode_is_refused(old_service: AsyncStateStoreClient) -> None:
    sent = old_service.requests_sent
    with pytest.raises(ConfigurationError, match="listing"):
        _dict(old_service, "ns", "sometimes")  # type: ignore[arg-type]  # no such mode: refused at run time
    assert old_service.requests_sent == sent


async def test_index_mode_on_a_namespace_written_in_scan_mode_is_refused(store_backend: StoreBackend) -> None:
    """Its index would list none of the keys (len() 0, clear() leaving them): a typed error at open, nothing written."""
    namespace = f"sc{uuid.uuid4().hex[:8]}"
    writer = await store_backend.async_client()
    async with _dict(writer, namespace, "scan") as scanned:
        await scanned.update({"a": 1, "b": 2, "c": 3})
    reader = await store_backend.async_client()
    indexed = _dict(reader, namespace, "index")
    with pytest.raises(ConfigurationError, match="no stored index"):
        await indexed.open()
    with pytest.raises(ConfigurationError, match="listing='scan'"):
        await indexed.len()  # without open(): refused at the first operation that lists
    with pytest.raises(ConfigurationError, match="no stored index"):
        await indexed.set("d", 4)  # and before a write would put a key no index lists
    await indexed.close()
    assert await reader.get(f"{namespace}/d") is None
    assert await reader.get(f"{namespace}#index-meta") is None  # no index half-made either
    async with _dict(reader, namespace, "auto") as auto:
        assert await auto.len() == 3
        await auto.clear()
    # an empty namespace opens in index mode, and one with its index does again
    async with _dict(reader, namespace, "index") as fresh:
        await fresh.set("x", 1)
    async with _dict(writer, namespace, "index") as again:
        assert await again.keys() == ["x"]
