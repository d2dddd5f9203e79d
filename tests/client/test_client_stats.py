"""``stats()``: a frozen snapshot of the client's counters on both twins, driven by real requests and a real
reconnect (a relay in front of the session's mosquitto cuts the connection)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from sskv_mapping import ClientStats
from sskv_mapping.client import AsyncStateStoreClient, StateStoreClient
from sskv_mapping.testing import FaultProxy
from tests._support.waiting import eventually, eventually_sync

pytestmark = pytest.mark.broker

FIELDS = [field.name for field in dataclasses.fields(ClientStats)]


def _as_properties(client: AsyncStateStoreClient) -> dict[str, int]:
    """The same counters read one by one, through the client's properties."""
    return {name: getattr(client, name) for name in FIELDS}


async def test_stats_counts_requests_and_a_reconnect(broker_address: tuple[str, int]) -> None:
    key = f"stats-{uuid.uuid4().hex[:10]}"
    async with FaultProxy(broker_address) as relay, AsyncStateStoreClient(relay.host, relay.port, timeout=5) as client:
        before = client.stats()
        assert isinstance(before, ClientStats) and before.reconnects == 0
        await client.set(key, b"v")
        assert await client.get(key) is not None
        after = client.stats()
        assert after.requests_sent == before.requests_sent + 2
        assert before.requests_sent == client.stats().requests_sent - 2  # a snapshot: it did not move
        with pytest.raises(dataclasses.FrozenInstanceError):
            after.requests_sent = 0  # type: ignore[misc]

        assert relay.cut(0.2) >= 1
        await eventually(lambda: client.stats().reconnects == 1, timeout=15)
        await client.wait_connected(15)
        assert await client.get(key) is not None  # requests go on after the reconnect, counted
        stats = client.stats()
        assert stats.reconnects == 1 and stats.requests_sent >= after.requests_sent + 1
        assert dataclasses.asdict(stats) == _as_properties(client)
        await client.delete(key)


def test_the_blocking_twin_reads_the_same_counters(broker_address: tuple[str, int]) -> None:
    key = f"stats-{uuid.uuid4().hex[:10]}"
    with FaultProxy(broker_address) as relay, StateStoreClient(relay.host, relay.port, timeout=5) as client:
        before = client.stats()
        client.set(key, b"v")
        assert client.get(key) is not None
        assert client.stats().requests_sent == before.requests_sent + 2
        assert relay.cut(0.2) >= 1
        eventually_sync(lambda: client.stats().reconnects == 1, timeout=15)
        client.wait_connected(15)
        client.delete(key)
        stats = client.stats()
        assert stats.reconnects == 1
        assert stats == client.async_client.stats()
