"""Scenario c: notifications dropped or duplicated on the wire, over a real mosquitto + the emulator process.

The reader's connection is a real MQTT connection with a fault switch at its inbound boundary (where a
flaky network or a broker redelivery would act): it can swallow notifications, or deliver each one twice
and replay the previous one after it (a late QoS 1 redelivery). The reader keeps a dict with a local cache
kept current by KEYNOTIFY; a writer process-equivalent (another client) changes the key.

* **drop**: the cache misses the change (shown, so the fault is real), then the reader is knocked off the
  broker (a session take-over); after its reconnect and re-read the cache never serves the older value again;
* **duplicate**: duplicates and late replays are harmless — the cache never goes back to an older version,
  it ends on the last write, and a watcher receives each change once, in order.

Knob: ``SSKV_FAULTS_NOTIFY_ROUNDS`` (default 8 rounds of each).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sskv_mapping import KeyEvent
from sskv_mapping._transport.base import Connection, InboundMessage, MessageHandler
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import AsyncStateStoreDict
from tests._support.waiting import eventually

from .conftest import FaultRow, env_int, recovery_text

pytestmark = [pytest.mark.faults, pytest.mark.broker]

NOTIFY = "/command/notify/"
WAIT = 10.0


class FaultSwitch:
    """What the faulty connections do with inbound notifications now, and what they did."""

    def __init__(self) -> None:
        self.mode = "pass"  # "pass", "drop" or "duplicate"
        self.dropped = 0
        self.duplicated = 0
        self.replayed = 0
        self.dropped_event = asyncio.Event()
        self._previous: InboundMessage | None = None

    def filter(self, message: InboundMessage, deliver: MessageHandler) -> None:
        if NOTIFY not in message.topic or self.mode == "pass":
            deliver(message)
            return
        if self.mode == "drop":
            self.dropped += 1
            self.dropped_event.set()
            return
        deliver(message)
        deliver(message)  # the same PUBLISH again
        self.duplicated += 1
        previous, self._previous = self._previous, message
        if previous is not None and previous.topic == message.topic:
            deliver(previous)  # an older change arriving after a newer one
            self.replayed += 1


def faulty_factory(switch: FaultSwitch) -> Any:
    def factory(settings: ConnectionSettings, handler: MessageHandler) -> Connection:
        return PahoConnection(settings, lambda message: switch.filter(message, handler))

    return factory


class Reconnects:
    def __init__(self, client: AsyncStateStoreClient) -> None:
        self.connected = asyncio.Event()
        self.reconnecting = asyncio.Event()
        client.add_state_listener(self._on)

    def _on(self, state: ConnectionState) -> None:
        if state is ConnectionState.RECONNECTING:
            self.reconnecting.set()
        elif state is ConnectionState.CONNECTED:
            self.connected.set()


async def knock_off(broker: MosquittoBroker, client: AsyncStateStoreClient, watcher: Reconnects) -> None:
    """A second connection with the client's id takes its session: the client drops and reconnects."""
    watcher.connected.clear()
    watcher.reconnecting.clear()
    intruder = PahoConnection(
        ConnectionSettings(host=broker.host, port=broker.port, client_id=client.client_id), lambda m: None
    )
    await intruder.connect()
    await asyncio.wait_for(watcher.reconnecting.wait(), WAIT)
    await intruder.close()
    await asyncio.wait_for(watcher.connected.wait(), WAIT)


@pytest.fixture
async def pair(mosquitto: MosquittoBroker, emulator: object) -> AsyncIterator[tuple[Any, ...]]:
    switch = FaultSwitch()
    namespace = f"notifyfault{uuid.uuid4().hex[:8]}"
    async with (
        AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=5) as writer_client,
        AsyncStateStoreClient(
            mosquitto.host, mosquitto.port, timeout=5, connection_factory=faulty_factory(switch)
        ) as reader_client,
    ):
        writer: AsyncStateStoreDict[Any] = AsyncStateStoreDict(writer_client, namespace=namespace, local_cache_size=0)
        reader: AsyncStateStoreDict[Any] = AsyncStateStoreDict(reader_client, namespace=namespace)
        yield switch, writer, reader, reader_client
        await reader.close()
        await writer.close()


async def test_dropped_and_duplicated_notifications(
    mosquitto: MosquittoBroker, pair: tuple[Any, ...], fault_report: FaultRow
) -> None:
    switch, writer, reader, reader_client = pair
    rounds = env_int("SSKV_FAULTS_NOTIFY_ROUNDS", 8)
    reconnects = Reconnects(reader_client)
    fault_report.scenario = "c. notification dropped / duplicated"
    key = "k"

    # -- drop: the cache misses a change until the reconnect's re-read ----------------------------------------
    stale_before = 0
    stale_after = 0
    recoveries: list[float] = []
    reads_after = 0
    for i in range(rounds):
        old, new = f"old-{i}", f"new-{i}"
        await writer.set(key, old)
        await reader.getitem(key)  # caches the key (the value read, or the notification that follows)

        def cached(old: str = old) -> bool:
            return _cached_value(reader, key) == old

        await eventually(cached, WAIT)
        switch.dropped_event.clear()
        switch.mode = "drop"
        await writer.set(key, new)  # acknowledged: the store has ``new`` now
        await asyncio.wait_for(switch.dropped_event.wait(), WAIT)
        switch.mode = "pass"
        if await reader.getitem(key) == old:  # the fault is real: the cache did not hear of ``new``
            stale_before += 1
        started = time.monotonic()
        await knock_off(mosquitto, reader_client, reconnects)
        fresh = False
        for _ in range(20):  # every read after the reconnect: never the older value
            value = await reader.getitem(key)
            reads_after += 1
            if value == old:
                stale_after += 1
            elif value == new and not fresh:
                fresh = True
                recoveries.append(time.monotonic() - started)
    assert switch.dropped >= rounds
    assert stale_before == rounds, "a dropped notification should leave the cache stale until the re-read"
    assert stale_after == 0, f"{stale_after} reads served the older value after the reconnect"
    assert len(recoveries) == rounds

    # -- duplicate: redeliveries and late replays are harmless -------------------------------------------------
    events: list[KeyEvent] = []
    sub = await reader_client.subscribe_key(reader._store.data_key(key), events.append)
    duplicates_before = reader_client.duplicate_notifications
    switch.mode = "duplicate"
    backwards = 0
    last_seen_version = None
    writes = []
    for i in range(rounds):
        value = f"dup-{i}"
        result = await writer.set(key, value)
        writes.append((value, result))
        await eventually(lambda: len(events) >= len(writes), WAIT)
        entry = await reader.entry(key)
        if last_seen_version is not None and entry.version is not None and entry.version < last_seen_version:
            backwards += 1
        last_seen_version = entry.version
    switch.mode = "pass"
    await eventually(lambda: _cached_value(reader, key) == writes[-1][0], WAIT)
    await sub.close()
    assert switch.duplicated >= rounds and switch.replayed >= rounds - 1
    assert backwards == 0
    # the watcher got each change exactly once, in order, despite 2-3 deliveries of each
    assert [e.value for e in events] == [f'"dup-{i}"'.encode() for i in range(rounds)]
    assert [e.version for e in events] == [r for _, r in writes]
    suppressed = reader_client.duplicate_notifications - duplicates_before
    assert suppressed == switch.duplicated + switch.replayed

    fault_report.load = f"writer + cached reader, {rounds} drop rounds + {rounds} duplicate rounds"
    fault_report.faults = (
        f"{switch.dropped} notifications dropped, {switch.duplicated} duplicated, {switch.replayed} replayed late"
    )
    fault_report.writes_lost = "0"
    fault_report.stale_reads = f"{stale_after} of {reads_after} after the re-read ({stale_before} before it, expected)"
    fault_report.recovery = recovery_text(recoveries)
    fault_report.notes.append(
        f"duplicates: cache never went back (0 of {rounds}), watcher saw each change once "
        f"({suppressed} duplicate deliveries suppressed); median knock-off to fresh read "
        f"{statistics.median(recoveries):.3f}s"
    )


def _cached_value(d: AsyncStateStoreDict[Any], key: str) -> object:
    hit = d._core.hit(key)
    return None if hit is None else hit.value
