"""``InProcessStore`` on the test's own event loop (``async with``): the real clock unless given a fake one, async
clients wired straight to the loopback broker, and the emulator's parts in reach."""

from __future__ import annotations

import pytest

from sskv_mapping import KeyOperation
from sskv_mapping._protocol.hlc import system_clock_ms
from sskv_mapping.errors import QuotaExceededError
from sskv_mapping.testing import FakeClock, InProcessStore
from tests._support.waiting import eventually


async def test_without_a_clock_it_reads_the_real_clock_and_has_no_fake_one() -> None:
    before = system_clock_ms()
    async with InProcessStore(max_keys=1) as store, store.async_client() as client:
        written = await client.set("k", b"v")
        assert written.version is not None and before <= written.version.wall_ms <= system_clock_ms()
        assert store.core.keys() == [b"k"]
        with pytest.raises(QuotaExceededError):  # the store's options reach the emulator core
            await client.set("other", b"v")
        with pytest.raises(RuntimeError, match="real clock"):
            store.advance(1.0)
        with pytest.raises(RuntimeError, match="async_client"):
            store.client  # noqa: B018  # a blocking client would block the loop the store answers on


async def test_a_fake_clock_moves_the_store_and_its_clients_and_expiry_follows() -> None:
    clock = FakeClock(wall_ms=1_000_000_000_000)
    async with InProcessStore(clock=clock) as store, store.async_client() as client:
        assert store.clock is clock
        ops: list[KeyOperation] = []
        await client.subscribe_key("k", lambda event: ops.append(event.op))
        written = await client.set("k", b"v", ttl=3600.0)
        assert written.version is not None and written.version.wall_ms == 1_000_000_000_000
        store.advance(3599.999)
        assert (await client.get("k")) is not None
        store.advance(0.001)  # the expiry timer slept for an hour of real time: the advance wakes it
        await eventually(lambda: ops == [KeyOperation.SET, KeyOperation.DELETE])
        assert store.core.entry(b"k") is None


async def test_it_starts_once_and_stops_on_leaving() -> None:
    store = InProcessStore()
    with pytest.raises(RuntimeError, match="not started"):
        store.async_client()
    async with store:
        with pytest.raises(RuntimeError, match="already started"):
            await store.astart()
    with pytest.raises(RuntimeError, match="not started"):
        store.async_client()
