"""Fixtures for the API-boundary tests: a client under test and a second client that watches its keys.

The session broker and emulator process serve both (fixtures ``mosquitto`` and ``emulator``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from sskv_mapping import KeyOperation
from sskv_mapping.client import AsyncKeyWatch, AsyncStateStoreClient, Entry
from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.procs import EmulatorProcess

EVENT_TIMEOUT = 5.0


@pytest.fixture
async def client(mosquitto: MosquittoBroker, emulator: EmulatorProcess) -> AsyncIterator[AsyncStateStoreClient]:
    async with AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=5) as c:
        yield c


@pytest.fixture
async def observer(mosquitto: MosquittoBroker, emulator: EmulatorProcess) -> AsyncIterator[AsyncStateStoreClient]:
    """A second client: it sees the store from outside the client under test."""
    async with AsyncStateStoreClient(mosquitto.host, mosquitto.port, timeout=5) as c:
        yield c


class Guard:
    """A key with a known value, watched by the observer, to prove a refused call changed nothing.

    ``await guard.check()`` asserts: the client under test sent no request since the guard was armed, the
    stored value and version are what they were, and — after a marker write — the marker is the very first
    change the observer's watch reports (so the refused call wrote nothing, not even half of something).
    """

    def __init__(
        self, client: AsyncStateStoreClient, observer: AsyncStateStoreClient, key: bytes | None = None
    ) -> None:
        self.client = client
        self.observer = observer
        self.key = key if key is not None else f"guard-{uuid.uuid4().hex[:12]}".encode()
        self.value = b"original"
        self.entry: Entry | None = None
        self.watch: AsyncKeyWatch | None = None
        self.sent = 0

    async def arm(self) -> Guard:
        await self.client.set(self.key, self.value)
        self.entry = await self.observer.get(self.key)
        assert self.entry is not None and self.entry.value == self.value
        self.watch = await self.observer.watch(self.key).start()
        self.sent = self.client.requests_sent
        return self

    def nothing_sent(self) -> None:
        assert self.client.requests_sent == self.sent, "a refused call sent a request"

    async def check(self) -> None:
        self.nothing_sent()
        assert self.watch is not None
        assert await self.observer.get(self.key) == self.entry, "the stored value or version changed"
        marker = f"marker-{uuid.uuid4().hex[:8]}".encode()
        await self.observer.set(self.key, marker)
        event = await self.watch.next(EVENT_TIMEOUT)
        assert (event.op, event.value) == (KeyOperation.SET, marker), f"an unexpected change came first: {event}"
        # re-arm for the next refused call
        await self.observer.set(self.key, self.value)
        event = await self.watch.next(EVENT_TIMEOUT)
        assert event.value == self.value
        self.entry = await self.observer.get(self.key)
        self.sent = self.client.requests_sent

    async def close(self) -> None:
        if self.watch is not None:
            await self.watch.aclose()


@pytest.fixture
async def guard(client: AsyncStateStoreClient, observer: AsyncStateStoreClient) -> AsyncIterator[Guard]:
    """A guard on a fresh key of its own."""
    g = await Guard(client, observer).arm()
    try:
        yield g
    finally:
        await g.close()


@pytest.fixture
async def guard_on(
    client: AsyncStateStoreClient, observer: AsyncStateStoreClient
) -> AsyncIterator[Callable[[bytes], Awaitable[Guard]]]:
    """``await guard_on(key)``: a guard on a given key (e.g. what a refused key would have been coerced to)."""
    guards: list[Guard] = []

    async def make(key: bytes) -> Guard:
        guards.append(g := Guard(client, observer, key))
        return await g.arm()

    try:
        yield make
    finally:
        for g in guards:
            await g.close()
