"""Reconnection: broker restarts, session take-overs, lost notifications repaired by the re-read."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from sskv_mapping import ConnectionLostError, KeyOperation, RequestTimeoutError, ServiceUnavailableError
from sskv_mapping._transport.base import Connection, InboundMessage, MessageHandler
from sskv_mapping._transport.factory import chosen_transport
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.errors import SessionLostError
from tests._support.waiting import StateWatcher, eventually

from .conftest import Stack

pytestmark = pytest.mark.broker


def unique(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def test_broker_restart_mid_traffic(stack: Stack, stack_url: tuple[str, int]) -> None:
    """Traffic runs while the broker restarts: no call hangs, every call ends in a value or a typed error,
    the watch resumes, and data written before the restart is still there (the emulator holds it)."""
    host, port = stack_url
    key = unique()
    async with (
        AsyncStateStoreClient(host, port, timeout=3) as a,
        AsyncStateStoreClient(host, port, timeout=3) as b,
    ):
        states = StateWatcher(a)
        await a.set(key, b"before")
        outcomes: dict[str, int] = {"ok": 0, "lost": 0, "timeout": 0}
        stop = asyncio.Event()
        progress = asyncio.Event()

        async def ok_count_above(n: int) -> None:
            async with asyncio.timeout(15):
                while outcomes["ok"] <= n:
                    progress.clear()
                    await progress.wait()

        async def traffic() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    await a.set(f"{key}-t", str(i).encode())
                    outcomes["ok"] += 1
                    progress.set()
                except ConnectionLostError:
                    outcomes["lost"] += 1
                except RequestTimeoutError:
                    outcomes["timeout"] += 1

        async with a.watch(key) as changes:
            runner = asyncio.ensure_future(traffic())
            await ok_count_above(20)  # traffic is really flowing before the fault
            await asyncio.to_thread(stack.broker.restart)
            await states.wait_for(ConnectionState.RECONNECTING)
            await states.wait_for(ConnectionState.CONNECTED)
            ok_at_reconnect = outcomes["ok"]
            # the emulator reconnects on its own; the first write after it may need a retry
            async with asyncio.timeout(15):
                while True:
                    try:
                        await b.set(key, b"after")
                        break
                    except (ConnectionLostError, RequestTimeoutError):
                        continue
            event = await changes.next(timeout=10)
            while event.synthetic:  # the re-read may report the pre-restart value first
                event = await changes.next(timeout=10)
            assert (event.op, event.value) == (KeyOperation.SET, b"after")
            await ok_count_above(ok_at_reconnect)
            stop.set()
            await asyncio.wait_for(runner, 10)  # no call hangs
        assert outcomes["ok"] > 20
        entry = await a.get(f"{key}-t")
        assert entry is not None
        assert len(a._sender.pending) == 0 and len(b._sender.pending) == 0


class DroppingConnection(PahoConnection):
    """An MQTT connection that can lose inbound notifications, as a flaky network would."""

    drop = False
    dropped: asyncio.Event

    def __init__(self, settings: ConnectionSettings, on_message: MessageHandler) -> None:
        def filtered(message: InboundMessage) -> None:
            if DroppingConnection.drop and "/command/notify/" in message.topic:
                DroppingConnection.dropped.set()
                return
            on_message(message)

        super().__init__(settings, filtered)


@pytest.fixture
async def dropping_client(broker_address: tuple[str, int]) -> AsyncIterator[AsyncStateStoreClient]:
    DroppingConnection.drop = False
    DroppingConnection.dropped = asyncio.Event()

    def factory(settings: ConnectionSettings, handler: MessageHandler) -> Connection:
        return DroppingConnection(settings, handler)

    async with AsyncStateStoreClient(*broker_address, connection_factory=factory) as c:
        yield c


async def test_lost_notification_is_repaired_by_the_reconnect_reread(
    dropping_client: AsyncStateStoreClient, other: AsyncStateStoreClient, broker_address: tuple[str, int]
) -> None:
    a = dropping_client
    key = unique()
    states = StateWatcher(a)
    async with a.watch(key) as changes:
        await other.set(key, b"v1")
        first = await changes.next(timeout=5)
        assert first.value == b"v1" and not first.synthetic
        DroppingConnection.drop = True
        await other.set(key, b"v2")
        await asyncio.wait_for(DroppingConnection.dropped.wait(), 5)  # v2's notification is gone
        DroppingConnection.drop = False
        # Knock the client off the broker: a second connection with the same client id takes its session.
        intruder = PahoConnection(
            ConnectionSettings(host=broker_address[0], port=broker_address[1], client_id=a.client_id), lambda m: None
        )
        await intruder.connect()
        await states.wait_for(ConnectionState.RECONNECTING)
        await intruder.close()
        await states.wait_for(ConnectionState.CONNECTED)
        repaired = await changes.next(timeout=10)
        assert repaired.synthetic and repaired.op is KeyOperation.SET and repaired.value == b"v2"
        # and the watch is live again afterwards
        await other.set(key, b"v3")
        live = await changes.next(timeout=10)
        assert live.value == b"v3" and not live.synthetic


async def test_in_flight_calls_fail_with_connection_lost_without_a_session(
    stack: Stack, stack_url: tuple[str, int]
) -> None:
    """session_expiry=0: nothing outlives the connection, so a call in flight at a drop fails at once."""
    host, port = stack_url
    settings = ConnectionSettings(host, port, session_expiry=0)
    async with AsyncStateStoreClient(settings=settings, timeout=5) as a:
        states = StateWatcher(a)
        stack.emulator.pause()  # requests now wait for an answer forever
        try:
            sent = a.requests_sent
            call = asyncio.ensure_future(a.get("k"))
            # in flight: handed to the connection before the kill (on uvloop the kill could win, and a call not
            # yet sent waits for the reconnect within its deadline, as it should)
            await eventually(lambda: a.requests_sent == sent + 1)
            await asyncio.to_thread(stack.broker.kill)
            with pytest.raises(ConnectionLostError):
                await asyncio.wait_for(call, 5)
            await states.wait_for(ConnectionState.RECONNECTING)
            assert len(a._sender.pending) == 0
        finally:
            stack.emulator.resume()


@pytest.mark.skipif(
    chosen_transport() != "stream", reason="paho cannot keep a call in flight across a drop: it fails at the drop"
)
async def test_a_lost_session_fails_only_the_calls_in_flight(stack: Stack, stack_url: tuple[str, int]) -> None:
    """The broker SIGKILLed and restarted (it loses every session): the call in flight fails with the typed
    unknown-outcome error, the counter and the state event say so, and the next call goes on."""
    host, port = stack_url
    async with AsyncStateStoreClient(host, port, timeout=20, backoff_max=0.2) as a:
        states = StateWatcher(a)
        stack.emulator.pause()  # the request stays unanswered
        try:
            sent = a.requests_sent
            call = asyncio.ensure_future(a.set(unique(), b"v"))
            # the SET handed to the connection before the kill: one not yet sent would go out after the restart,
            # before the emulator subscribes again, and be refused (no subscriber), not lost with the session
            await eventually(lambda: a.requests_sent == sent + 1)
            await asyncio.to_thread(stack.broker.kill)
            await states.wait_for(ConnectionState.RECONNECTING)
            assert not call.done()  # a drop alone fails nothing: the call waits within its deadline
            await asyncio.to_thread(stack.broker.start)
            with pytest.raises(SessionLostError):
                await asyncio.wait_for(call, 15)
            await states.wait_for(ConnectionState.CONNECTED)
        finally:
            stack.emulator.resume()
        assert a.sessions_lost == 1
        seen = states.seen
        assert seen.index(ConnectionState.SESSION_LOST) == len(seen) - 2  # then CONNECTED
        key = unique()
        async with asyncio.timeout(15):  # the emulator reconnects on its own: a call may find it away a moment
            while True:
                try:
                    await a.set(key, b"after")
                    break
                except ServiceUnavailableError:
                    continue
        entry = await a.get(key)
        assert entry is not None and entry.value == b"after"
