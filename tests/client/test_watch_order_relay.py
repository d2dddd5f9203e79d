"""Watches never go backwards, over real cuts: a TCP relay in front of the real mosquitto resets the watching
client's connection again and again while another client sets the key back to back (a write every round trip,
under a millisecond here). The watch's values must be strictly increasing and end on the last value written
(issue 26 saw 54, then 53: the re-read's answer, resumed after a newer notification read in the same chunk, was
delivered after it; with the old ``_deliver`` this test failed 4 runs of 4). The forced, deterministic order is
test_watch_order.py."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import pytest

from sskv_mapping import ConnectionLostError, KeyEvent, KeyOperation, RequestTimeoutError
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.testing import FaultProxy

pytestmark = pytest.mark.broker

CUTS = 8
WAIT = 15.0


async def test_watch_values_strictly_increase_across_cuts(broker_address: tuple[str, int]) -> None:
    key = f"order-{uuid.uuid4().hex[:10]}"
    seen: list[int] = []
    deletes: list[KeyEvent] = []
    arrived = asyncio.Event()
    reconnected = asyncio.Event()

    def on_event(event: KeyEvent) -> None:
        if event.op is KeyOperation.DELETE or event.value is None:
            deletes.append(event)
        else:
            seen.append(int(event.value))
        arrived.set()

    async def next_events(count: int) -> None:
        target = len(seen) + count
        async with asyncio.timeout(WAIT):
            while len(seen) < target:
                arrived.clear()
                await arrived.wait()

    async with (
        FaultProxy(broker_address) as relay,
        AsyncStateStoreClient(relay.host, relay.port, timeout=3) as watcher,
        AsyncStateStoreClient(*broker_address, timeout=3) as writer,
    ):
        watcher.add_state_listener(lambda s: reconnected.set() if s is ConnectionState.CONNECTED else None)
        attempted = 0
        stop = asyncio.Event()

        async def write() -> None:
            nonlocal attempted
            while not stop.is_set():
                attempted += 1
                try:
                    await writer.set(key, str(attempted).encode())
                except (ConnectionLostError, RequestTimeoutError):
                    continue  # not behind the relay, so unlikely; the next write carries a higher value anyway

        await writer.set(key, b"0")
        sub = await watcher.subscribe_key(key, on_event)
        runner = asyncio.ensure_future(write())
        try:
            for _ in range(CUTS):
                await next_events(5)  # the watch is live (notifications arrive) before each cut
                reconnected.clear()
                relay.cut(0.2)
                async with asyncio.timeout(WAIT):
                    await reconnected.wait()
            await next_events(5)
        finally:
            stop.set()
            await asyncio.wait_for(runner, WAIT)
        last = attempted + 1  # one last write that surely landed: the watch must end on it
        await writer.set(key, str(last).encode())
        async with asyncio.timeout(WAIT):  # the watch ends on the last value written
            while not seen or seen[-1] != last:
                arrived.clear()
                await arrived.wait()
        await sub.close()
    assert relay.stats.cuts == CUTS and watcher._keeper.reconnects >= CUTS
    assert deletes == []
    backwards = [(a, b) for a, b in itertools.pairwise(seen) if b <= a]
    assert backwards == [], f"the watch went backwards or repeated: {backwards[:10]}"
    assert seen[-1] == last
