"""A subset of the dict and cache contracts on a mosquitto on its default settings, as an install runs it
(``MosquittoBroker(default_settings=True)``: no ``set_tcp_nodelay``, so Nagle on the broker's side) with its own
emulator.

The full contracts run on the tuned session broker (tests/mapping, tests/cache); here the same behaviour over
the untuned broker: the request path (tests/transport/test_stream.py and tests/client/test_client_broker.py run
there too) and the faces on top of it, including a second instance seeing a change (KEYNOTIFY through the
untuned broker) and the index a new dict key writes. Speed is the benchmarks' (``bench_untuned_broker.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.client import AsyncStateStoreClient, StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import StateStoreDict

pytestmark = pytest.mark.broker


@pytest.fixture
def untuned_dicts(untuned_broker_address: tuple[str, int]) -> Iterator[tuple[StateStoreDict[Any], StateStoreDict[Any]]]:
    """Two dicts on one namespace, each on its own client, over the untuned broker."""
    namespace = f"untuned{uuid.uuid4().hex[:10]}"
    clients = [StateStoreClient(*untuned_broker_address) for _ in range(2)]
    dicts: list[StateStoreDict[Any]] = []
    try:
        for c in clients:
            c.connect()
            dicts.append(StateStoreDict(c, namespace=namespace))
        yield dicts[0], dicts[1]
    finally:
        for d in dicts:
            d.close()
        for c in clients:
            c.close()


@pytest.fixture
async def untuned_cache(untuned_broker_address: tuple[str, int]) -> AsyncIterator[AsyncStateStoreCache[Any]]:
    async with AsyncStateStoreClient(*untuned_broker_address) as client:
        cache: AsyncStateStoreCache[Any] = AsyncStateStoreCache(client, namespace=f"untuned{uuid.uuid4().hex[:10]}")
        await cache.open()
        try:
            yield cache
        finally:
            await cache.close()


def test_dict_set_get_delete_on_an_untuned_broker(
    untuned_dicts: tuple[StateStoreDict[Any], StateStoreDict[Any]],
) -> None:
    d, other = untuned_dicts
    d["a"] = 1  # a new key: data and index entry
    d["b"] = {"nested": [1, 2, None]}
    assert d["a"] == 1 and d["b"] == {"nested": [1, 2, None]}
    d["a"] = 2  # an existing key
    assert d["a"] == 2 and other["a"] == 2
    assert sorted(other) == ["a", "b"] and len(other) == 2
    del d["a"]
    with pytest.raises(KeyError):
        d["a"]
    with pytest.raises(KeyError):
        other["a"]
    assert sorted(d) == ["b"]
    d["n"] = None
    assert "n" in other and other["n"] is None and other.get("m", "default") == "default"


def test_many_writes_on_an_untuned_broker_all_land(
    untuned_dicts: tuple[StateStoreDict[Any], StateStoreDict[Any]],
) -> None:
    d, other = untuned_dicts
    for i in range(50):
        d[f"k{i % 5}"] = i
    assert {k: other[k] for k in sorted(other)} == {f"k{j}": 45 + j for j in range(5)}


async def test_cache_set_get_exists_delete_add_on_an_untuned_broker(untuned_cache: AsyncStateStoreCache[Any]) -> None:
    cache = untuned_cache
    assert await cache.get("a") is None and not await cache.exists("a")
    await cache.set("a", {"n": [1, 2, None]})
    assert await cache.get("a") == {"n": [1, 2, None]} and await cache.exists("a")
    await cache.set("a", "replaced")
    assert await cache.get("a") == "replaced"
    assert await cache.delete("a") is True and await cache.delete("a") is False
    assert await cache.add("k", 1) is True and await cache.add("k", 2) is False
    assert await cache.get("k") == 1


def test_the_default_settings_set_nothing_an_install_does_not() -> None:
    broker = MosquittoBroker(default_settings=True, extra_config=["max_packet_size 1000"])
    settings = [line.split()[0] for line in broker.config_text().splitlines() if line and not line.startswith("#")]
    # listener, anonymous access, and the emulator's connection log (a topic, plus a file to see it start)
    assert [s for s in settings if s not in ("user",)] == [
        "listener",
        "allow_anonymous",
        "log_dest",
        "log_dest",
        "max_packet_size",
    ]
    assert "default-settings" in repr(broker)
