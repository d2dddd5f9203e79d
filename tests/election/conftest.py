"""Election tests run on the in-process loopback store and on a real mosquitto + the emulator process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.inprocess import InProcessStateStore

ClientFactory = Callable[[], Awaitable[AsyncStateStoreClient]]


@pytest.fixture(params=["loopback", "broker"])
async def new_client(request: pytest.FixtureRequest) -> AsyncIterator[ClientFactory]:
    made: list[AsyncStateStoreClient] = []
    store = None
    if request.param == "broker":
        broker = request.getfixturevalue("mosquitto")
        request.getfixturevalue("emulator")
        request.applymarker(pytest.mark.broker)
        kwargs: dict[str, Any] = {"host": broker.host, "port": broker.port}
    else:
        store = InProcessStateStore()
        await store.start()
        kwargs = {"connection_factory": store.broker.connection}

    async def make() -> AsyncStateStoreClient:
        client = AsyncStateStoreClient(timeout=10, **kwargs)
        await client.connect()
        made.append(client)
        return client

    yield make
    for c in made:
        await c.close()
    if store is not None:
        await store.stop()
