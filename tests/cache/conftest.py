"""One contract, two implementations: every cache test runs on the in-process loopback store (fast) and on
a real mosquitto + the emulator process (real).

Async tests get ``make_cache`` (a :class:`AsyncStateStoreCache` on a new client on the test's own loop; the
loopback store is started per test on that loop). Blocking tests get ``make_sync_cache`` (a
:class:`StateStoreCache` on the background loop thread, where a module-wide loopback store runs).

``namespace`` and ``loopback_store`` are suite-wide (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from sskv_mapping._protocol.notifications import KeyEvent, KeyOperation
from sskv_mapping.cache import AsyncStateStoreCache, StateStoreCache
from sskv_mapping.client import AsyncStateStoreClient, StateStoreClient
from sskv_mapping.emulator.inprocess import InProcessStateStore

CacheFactory = Callable[..., Awaitable[AsyncStateStoreCache[Any]]]
SyncCacheFactory = Callable[..., StateStoreCache[Any]]


def _broker_kwargs(request: pytest.FixtureRequest) -> dict[str, Any]:
    broker = request.getfixturevalue("mosquitto")
    request.getfixturevalue("emulator")
    request.applymarker(pytest.mark.broker)
    return {"host": broker.host, "port": broker.port}


@pytest.fixture(params=["loopback", "broker"])
def backend(request: pytest.FixtureRequest) -> str:
    """Which implementation of the store the test runs on."""
    if request.param == "broker":
        request.getfixturevalue("broker_kwargs")
    return str(request.param)


@pytest.fixture
def broker_kwargs(request: pytest.FixtureRequest) -> dict[str, Any]:
    return _broker_kwargs(request)


@pytest.fixture
async def client_kwargs(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any]]:
    """Arguments for an AsyncStateStoreClient on the test's loop."""
    if backend == "broker":
        yield request.getfixturevalue("broker_kwargs")
        return
    async with InProcessStateStore() as store:
        yield {"connection_factory": store.broker.connection}


@pytest.fixture
async def make_client(client_kwargs: dict[str, Any]) -> AsyncIterator[Callable[[], Awaitable[AsyncStateStoreClient]]]:
    made: list[AsyncStateStoreClient] = []

    async def make() -> AsyncStateStoreClient:
        client = AsyncStateStoreClient(**client_kwargs)
        await client.connect()
        made.append(client)
        return client

    yield make
    for c in made:
        await c.close()


@pytest.fixture
async def make_cache(
    make_client: Callable[[], Awaitable[AsyncStateStoreClient]], namespace: str
) -> AsyncIterator[CacheFactory]:
    """``await make_cache(**kw)``: a new, opened AsyncStateStoreCache on a new client, same namespace unless given."""
    made: list[AsyncStateStoreCache[Any]] = []

    async def make(**kwargs: Any) -> AsyncStateStoreCache[Any]:
        kwargs.setdefault("namespace", namespace)
        cache: AsyncStateStoreCache[Any] = AsyncStateStoreCache(await make_client(), **kwargs)
        await cache.open()
        made.append(cache)
        return cache

    yield make
    for c in made:
        await c.close()


@pytest.fixture
async def cache(make_cache: CacheFactory) -> AsyncStateStoreCache[Any]:
    return await make_cache()


class Notified:
    """Waits for a key's notifications (``client.subscribe_key``), e.g. the DELETE of an expiry."""

    def __init__(self) -> None:
        self.events: list[KeyEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: KeyEvent) -> None:
        self.events.append(event)
        self._changed.set()

    async def wait_for(self, op: KeyOperation, timeout: float = 5.0) -> KeyEvent:
        async with asyncio.timeout(timeout):
            while True:
                for event in self.events:
                    if event.op is op:
                        return event
                self._changed.clear()
                await self._changed.wait()


@pytest.fixture
def watch() -> Callable[[AsyncStateStoreClient, str], Awaitable[Notified]]:
    """``await watch(client, data_key)``: a :class:`Notified` registered (KEYNOTIFY confirmed) for the key."""

    async def start(client: AsyncStateStoreClient, data_key: str) -> Notified:
        notified = Notified()
        await client.subscribe_key(data_key, notified)
        return notified

    return start


# -- blocking ---------------------------------------------------------------------------------------------


@pytest.fixture(params=["loopback", "broker"])
def sync_backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Client arguments for one implementation, for clients living on the background loop thread."""
    if request.param == "loopback":
        store: InProcessStateStore = request.getfixturevalue("loopback_store")
        return {"connection_factory": store.broker.connection}
    return _broker_kwargs(request)


@pytest.fixture
def make_sync_cache(sync_backend: dict[str, Any], namespace: str) -> Iterator[SyncCacheFactory]:
    made: list[StateStoreCache[Any]] = []
    clients: list[StateStoreClient] = []

    def make(**kwargs: Any) -> StateStoreCache[Any]:
        kwargs.setdefault("namespace", namespace)
        client = StateStoreClient(**sync_backend)
        client.connect()
        clients.append(client)
        cache: StateStoreCache[Any] = StateStoreCache(client, **kwargs)
        made.append(cache)
        return cache

    yield make
    for c in made:
        c.close()
    for client in clients:
        client.close()
