"""Watches never go backwards: the re-read after a reconnect is dropped when a newer notification came first.

After a reconnect the client registers the key again (KEYNOTIFY) and then re-reads it (GET); notifications flow
from the registration on, so a change made while the GET is out can be notified before the GET is answered. The
answer is then older than what the watcher has, and delivering it (issue 26: 54, then 53) would take the value
back. Here the order is forced on the in-process loopback: the GET's answer is held until the newer notification
was delivered. The same under real cuts on a real mosquitto is test_watch_order_relay.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sskv_mapping import KeyOperation
from sskv_mapping._protocol.commands import Get
from sskv_mapping._transport.base import InboundMessage, MessageHandler, OutgoingMessage
from sskv_mapping._transport.loopback import LoopbackBroker, LoopbackConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.testing import InProcessStore

KEY = "watched"
WAIT = 5.0


class Gate:
    """Holds back the answer to the next GET of ``KEY`` a client sends, until :meth:`release`."""

    def __init__(self, broker: LoopbackBroker) -> None:
        self.broker = broker
        self.connections: list[HeldConnection] = []
        self.armed = False
        self.corr: bytes | None = None
        self.held: list[tuple[HeldConnection, InboundMessage]] = []
        self.holding = asyncio.Event()

    def factory(self, settings: ConnectionSettings, on_message: MessageHandler) -> LoopbackConnection:
        conn = HeldConnection(self, settings, on_message)
        self.connections.append(conn)
        return conn

    def release(self) -> None:
        held, self.held = self.held, []
        for conn, message in held:
            conn.deliver_now(message)


class HeldConnection(LoopbackConnection):
    def __init__(self, gate: Gate, settings: ConnectionSettings, on_message: MessageHandler) -> None:
        super().__init__(gate.broker, settings, on_message)
        self.gate = gate

    def publish_nowait(self, message: OutgoingMessage | str, *args: Any, **kwargs: Any) -> None:
        gate = self.gate
        assert isinstance(message, OutgoingMessage)
        if gate.armed and message.payload == Get(KEY.encode()).encode():
            gate.armed = False
            gate.corr = message.correlation_data
        super().publish_nowait(message, *args, **kwargs)

    def _dispatch(self, message: InboundMessage) -> None:
        gate = self.gate
        if gate.corr is not None and message.correlation_data == gate.corr:
            gate.corr = None
            gate.held.append((self, message))
            gate.holding.set()
            return
        super()._dispatch(message)

    def deliver_now(self, message: InboundMessage) -> None:
        super()._dispatch(message)


@pytest.fixture
async def store() -> AsyncIterator[InProcessStore]:
    async with InProcessStore() as s:
        yield s


async def reconnect_with_the_reread_held(
    a: AsyncStateStoreClient, gate: Gate, store: InProcessStore, while_away: Any
) -> None:
    """Cut ``a`` off, run ``while_away()`` while it cannot come back, then let it reconnect; returns once its
    re-read of KEY was answered and that answer is held."""
    connected = asyncio.Event()
    remove = a.add_state_listener(lambda state: connected.set() if state is ConnectionState.CONNECTED else None)
    store.broker.refuse_connections = True
    gate.connections[-1].drop()
    await while_away()
    gate.armed = True
    store.broker.refuse_connections = False
    await asyncio.wait_for(connected.wait(), WAIT)
    remove()
    await asyncio.wait_for(gate.holding.wait(), WAIT)


@pytest.mark.parametrize(
    "missed",
    [
        pytest.param(lambda b: b.set(KEY, b"2"), id="a_reread_older_than_a_notification"),
        pytest.param(lambda b: b.delete(KEY), id="a_reread_of_an_absent_key_after_a_notification"),
    ],
)
async def test_a_stale_reread_is_not_delivered(store: InProcessStore, missed: Any) -> None:
    """A change missed while away (2, or a delete), re-read after a newer notification (3): not reported."""
    gate = Gate(store.broker)
    async with (
        store.async_client(connection_factory=gate.factory) as a,
        store.async_client() as b,
        a.watch(KEY) as changes,
    ):
        await b.set(KEY, b"1")
        assert (await changes.next(WAIT)).value == b"1"
        await reconnect_with_the_reread_held(a, gate, store, lambda: missed(b))
        await b.set(KEY, b"3")  # notified while the re-read's answer (2, or absent) waits
        assert (await changes.next(WAIT)).value == b"3"
        gate.release()  # the re-read answers: older than 3
        await b.set(KEY, b"4")
        event = await changes.next(WAIT)
        # not 2 first, and no DELETE of a key that holds 3
        assert (event.op, event.value, event.synthetic) == (KeyOperation.SET, b"4", False)
        assert a._watches.stale_catch_ups == 1


async def test_a_reread_newer_than_what_was_delivered_is_delivered(store: InProcessStore) -> None:
    """The other side of the rule: with no newer notification first, the change missed while away is reported."""
    gate = Gate(store.broker)
    async with (
        store.async_client(connection_factory=gate.factory) as a,
        store.async_client() as b,
        a.watch(KEY) as changes,
    ):
        await b.set(KEY, b"1")
        assert (await changes.next(WAIT)).value == b"1"
        await reconnect_with_the_reread_held(a, gate, store, lambda: b.set(KEY, b"2"))
        gate.release()
        event = await changes.next(WAIT)
        assert (event.value, event.synthetic) == (b"2", True)
        await b.set(KEY, b"3")
        assert (await changes.next(WAIT)).value == b"3"
        assert a._watches.stale_catch_ups == 0
