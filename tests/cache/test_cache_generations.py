"""Namespace generations over a real mosquitto + the emulator process: clear() seen by another process
(its local cache included), by a process that was away while it happened, and TTL-less entries never leaked.

The other process is a real one (``_cache_worker.py``), talked to over stdin/stdout; no sleeps stand in for
synchronisation: the worker reads until the cleared key is gone (bounded), and the disconnected client is
waited on through its connection-state events.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sskv_mapping._transport.base import Connection, InboundMessage, MessageHandler
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker

pytestmark = pytest.mark.broker

WORKER = Path(__file__).resolve().with_name("_cache_worker.py")
WAIT = 10.0


class Worker:
    def __init__(self, broker: MosquittoBroker, namespace: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), broker.host, str(broker.port), namespace],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.read() == {"ready": True}

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            assert self.proc.stderr is not None
            pytest.fail(f"the worker exited: {self.proc.stderr.read()[-3000:]}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def call(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call_quit()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)

    def call_quit(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
        self.proc.stdin.close()


@pytest.fixture
def worker(mosquitto: MosquittoBroker, emulator: object, namespace: str) -> Iterator[Worker]:
    w = Worker(mosquitto, namespace)
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
async def cache(
    mosquitto: MosquittoBroker, emulator: object, namespace: str
) -> AsyncIterator[AsyncStateStoreCache[Any]]:
    async with (
        AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=5) as client,
        AsyncStateStoreCache[Any](client, namespace=namespace) as cache,
    ):
        yield cache


async def test_another_process_stops_serving_cleared_values_local_cache_included(
    cache: AsyncStateStoreCache[Any], worker: Worker
) -> None:
    await cache.set("ttl-less", "a", ttl=None)
    await cache.set("expiring", "b", ttl=60)
    for key, value in (("ttl-less", "a"), ("expiring", "b")):
        assert worker.call(op="get", key=key)["value"] == value
        hit = worker.call(op="get", key=key)
        assert hit["value"] == value and hit["local_hits"] >= 1  # served from its local cache now
    assert worker.call(op="get", key="ttl-less")["generation"] == cache.generation
    old_keys = [await cache.data_key(k) for k in ("ttl-less", "expiring")]

    await cache.clear()
    for key in ("ttl-less", "expiring"):
        assert await asyncio.to_thread(worker.call, op="wait_gone", key=key, timeout=WAIT) == {"gone": True}
    assert worker.call(op="get", key="ttl-less")["generation"] == cache.generation

    await cache.sweep()
    assert await cache.client.get(old_keys[0]) is None  # the TTL-less entry was deleted, not orphaned
    if cache.client.supports_scan is False:  # the ledger's sweep leaves the expiring one to age out by its TTL
        assert await cache.client.get(old_keys[1]) is not None
    # (a sweep by SCAN finds every entry of the retired generation, and cannot tell which expire: it deletes both)

    await cache.set("after", "c")  # the namespace works on in the new generation, for both
    assert worker.call(op="get", key="after")["value"] == "c"


class DropGeneration:
    """Swallows the notifications of the generation key while ``on``: the client misses a clear."""

    def __init__(self) -> None:
        self.on = False
        self.dropped = asyncio.Event()

    def factory(self, settings: ConnectionSettings, handler: MessageHandler) -> Connection:
        gen_suffix = b"#gen".hex().upper()

        def deliver(message: InboundMessage) -> None:
            if self.on and message.topic.endswith(gen_suffix):
                self.dropped.set()
                return
            handler(message)

        return PahoConnection(settings, deliver)


async def test_a_process_away_during_a_clear_follows_it_when_back(
    mosquitto: MosquittoBroker, emulator: object, namespace: str, cache: AsyncStateStoreCache[Any]
) -> None:
    switch = DropGeneration()
    async with (
        AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=5, connection_factory=switch.factory) as client,
        AsyncStateStoreCache[Any](client, namespace=namespace, local_cache_size=10) as away,
    ):
        await cache.set("k", "before")
        assert await away.get("k") == "before"
        switch.on = True
        await cache.clear()
        await asyncio.wait_for(switch.dropped.wait(), WAIT)
        assert away.generation != cache.generation  # it missed the clear: the fault is real
        switch.on = False

        # it goes away and comes back (a session take-over by another connection with its client id)
        states: asyncio.Queue[ConnectionState] = asyncio.Queue()
        client.add_state_listener(states.put_nowait)
        intruder = PahoConnection(
            ConnectionSettings(host=mosquitto.host, port=mosquitto.port, client_id=client.client_id), lambda m: None
        )
        await intruder.connect()
        while await asyncio.wait_for(states.get(), WAIT) is not ConnectionState.RECONNECTING:
            pass
        await intruder.close()
        while await asyncio.wait_for(states.get(), WAIT) is not ConnectionState.CONNECTED:
            pass
        # whether or not the watch of the generation is restored yet, a read goes by the current generation
        assert await away.get("k") is None
        assert away.generation == cache.generation


async def test_ttl_less_writes_racing_a_clear_in_another_client_leave_nothing_behind(
    mosquitto: MosquittoBroker, emulator: object, namespace: str, cache: AsyncStateStoreCache[Any]
) -> None:
    async with (
        AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=5) as client,
        AsyncStateStoreCache[Any](client, namespace=namespace) as writer,
    ):
        generations = {cache.generation}

        async def write_many() -> None:
            for i in range(60):
                await writer.set(f"k{i}", i, ttl=None)

        async def clear_a_few() -> None:
            for _ in range(3):
                generations.add((await cache._generation.bump()).gen)

        await asyncio.gather(write_many(), clear_a_few())
        assert len(generations) == 4
        await cache.clear()
        generations.add(cache.generation)
        await cache.sweep()
        await writer.sweep()
        # every place any of the writes could have gone, in every generation the namespace had
        places = [f"{namespace}#g.{gen}/k{i}" for gen in generations for i in range(60)]
        leaked = [k for k in places if await cache.client.get(k) is not None]
        assert leaked == []
