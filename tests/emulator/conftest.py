"""The emulator tests' raw MQTT clients (:class:`~tests._support.miniclient.MiniClient`) on the session broker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.miniclient import MiniClient
from tests._support.procs import EmulatorProcess

Connect = Callable[..., Awaitable[MiniClient]]


@pytest.fixture
async def connect(mosquitto: MosquittoBroker, emulator: EmulatorProcess) -> AsyncIterator[Connect]:
    """Make MiniClients on the session broker (served by the session emulator); closed afterwards."""
    made: list[MiniClient] = []

    async def make(client_id: str | None = None) -> MiniClient:
        c = await MiniClient(mosquitto.host, mosquitto.port, client_id).connect()
        made.append(c)
        return c

    yield make
    for c in made:
        await c.close()
