"""One contract, two implementations: every cache test takes ``store_backend`` (tests/conftest.py), so it runs on
the in-process loopback store (fast) and on a real mosquitto + the emulator process (real).

Async tests get ``make_cache`` (a :class:`AsyncStateStoreCache` on a new async client on the test's own loop).
Blocking tests get ``make_sync_cache`` (a :class:`StateStoreCache` on a new blocking client, on the background loop
thread). Either client comes from ``store_backend``, which closes it at teardown.

``namespace`` and ``store_backend`` are suite-wide (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from sskv_mapping.cache import AsyncStateStoreCache, StateStoreCache
from sskv_mapping.client import AsyncStateStoreClient
from tests._support.store_backend import StoreBackend
from tests._support.waiting import Notified

CacheFactory = Callable[..., Awaitable[AsyncStateStoreCache[Any]]]
SyncCacheFactory = Callable[..., StateStoreCache[Any]]


@pytest.fixture
async def make_cache(store_backend: StoreBackend, namespace: str) -> AsyncIterator[CacheFactory]:
    """``await make_cache(**kw)``: a new, opened AsyncStateStoreCache on a new client, same namespace unless given."""
    made: list[AsyncStateStoreCache[Any]] = []

    async def make(**kwargs: Any) -> AsyncStateStoreCache[Any]:
        kwargs.setdefault("namespace", namespace)
        cache: AsyncStateStoreCache[Any] = AsyncStateStoreCache(await store_backend.async_client(), **kwargs)
        await cache.open()
        made.append(cache)
        return cache

    yield make
    for c in made:
        await c.close()


@pytest.fixture
async def cache(make_cache: CacheFactory) -> AsyncStateStoreCache[Any]:
    return await make_cache()


@pytest.fixture
def watch() -> Callable[[AsyncStateStoreClient, str | bytes], Awaitable[Notified]]:
    """``await watch(client, data_key)``: a :class:`Notified` registered (KEYNOTIFY confirmed) for the key."""

    async def start(client: AsyncStateStoreClient, data_key: str | bytes) -> Notified:
        notified = Notified()
        await client.subscribe_key(data_key, notified)
        return notified

    return start


# -- blocking ---------------------------------------------------------------------------------------------


@pytest.fixture
def make_sync_cache(store_backend: StoreBackend, namespace: str) -> Iterator[SyncCacheFactory]:
    """``make_sync_cache(**kw)``: a new StateStoreCache on a new blocking client, same namespace unless given."""
    made: list[StateStoreCache[Any]] = []

    def make(**kwargs: Any) -> StateStoreCache[Any]:
        kwargs.setdefault("namespace", namespace)
        cache: StateStoreCache[Any] = StateStoreCache(store_backend.client(), **kwargs)
        made.append(cache)
        return cache

    yield make
    for c in made:
        c.close()
