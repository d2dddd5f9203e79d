"""The old ``publish(topic, payload, qos=..., ...)`` form, deprecated for one release (CHANGELOG, "Changed").

A caller of our transports that still uses it gets a ``DeprecationWarning`` and the same PUBLISH as with an
``OutgoingMessage``; a transport of a user's own still written against it keeps working under the client, which
calls it in that form, also with a ``DeprecationWarning``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from sskv_mapping import OutgoingMessage
from sskv_mapping._transport.base import InboundMessage, MessageHandler, legacy_message, taking_messages
from sskv_mapping._transport.loopback import LoopbackBroker, LoopbackConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping._transport.stream import StreamConnection
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator import EmulatorCore, EmulatorServer
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.emulator.inprocess import InProcessStateStore
from tests._support.waiting import eventually

WAIT = 10.0
FIELDS: dict[str, Any] = {
    "qos": 1,
    "correlation_data": b"c" * 16,
    "response_topic": "t/old/response",
    "user_properties": [("k", "v"), ("k", "w")],
    "content_type": "application/octet-stream",
    "message_expiry": 30,
}


def _seen(message: InboundMessage) -> tuple[Any, ...]:
    return (
        message.topic,
        message.payload,
        message.correlation_data,
        message.response_topic,
        message.user_properties,
        message.content_type,
        message.message_expiry,
    )


def test_the_old_form_makes_the_same_message() -> None:
    with pytest.warns(DeprecationWarning, match="pass an OutgoingMessage"):
        old = legacy_message("t/a", (b"p",), dict(FIELDS))
    assert old == OutgoingMessage("t/a", b"p", **FIELDS)
    new = OutgoingMessage("t/a", b"p")
    assert legacy_message(new, (), {}) is new  # the current form: no warning, no copy


@pytest.mark.parametrize(
    ("message", "args", "fields"),
    [
        ("t/a", (), {}),  # no payload
        ("t/a", (b"p", b"q"), {}),  # two payloads
        ("t/a", (b"p",), {"retain": True}),  # not a field of a message
        (OutgoingMessage("t/a", b"p"), (), {"qos": 0}),  # a message and fields besides
    ],
)
def test_a_call_in_neither_form_is_a_type_error(message: Any, args: tuple[Any, ...], fields: dict[str, Any]) -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="OutgoingMessage"):
        legacy_message(message, args, fields)


async def test_the_loopback_takes_both_forms_alike() -> None:
    broker = LoopbackBroker()
    received: list[InboundMessage] = []
    sender = broker.connection(ConnectionSettings(client_id="sender"), lambda m: None)
    receiver = broker.connection(ConnectionSettings(client_id="receiver"), received.append)
    await sender.connect()
    await receiver.connect()
    await receiver.subscribe(["t/old/#"])
    sender.publish_nowait(OutgoingMessage("t/old/nowait", b"x", **FIELDS))
    with pytest.warns(DeprecationWarning):
        sender.publish_nowait("t/old/nowait", b"x", **FIELDS)
    await sender.publish(OutgoingMessage("t/old/wait", b"y", **FIELDS), timeout=WAIT)
    with pytest.warns(DeprecationWarning):
        await sender.publish("t/old/wait", b"y", timeout=WAIT, **FIELDS)
    await eventually(lambda: len(received) == 4)
    assert _seen(received[0]) == _seen(received[1]) and _seen(received[2]) == _seen(received[3])
    assert _seen(received[0])[:3] == ("t/old/nowait", b"x", b"c" * 16)


@pytest.mark.broker
async def test_the_stream_transport_takes_both_forms_alike(mosquitto: MosquittoBroker) -> None:
    received: list[InboundMessage] = []
    sender = StreamConnection(ConnectionSettings(mosquitto.host, mosquitto.port), lambda m: None)
    receiver = StreamConnection(ConnectionSettings(mosquitto.host, mosquitto.port), received.append)
    await sender.connect()
    await receiver.connect()
    try:
        await receiver.subscribe(["t/old/stream"])
        await sender.publish(OutgoingMessage("t/old/stream", b"new", **FIELDS), timeout=WAIT)
        with pytest.warns(DeprecationWarning):
            await sender.publish("t/old/stream", b"new", timeout=WAIT, **FIELDS)
        with pytest.warns(DeprecationWarning):
            sender.publish_nowait("t/old/stream", b"new", **FIELDS)
        await eventually(lambda: len(received) == 3)
        assert _seen(received[0]) == _seen(received[1]) == _seen(received[2])
    finally:
        await sender.close()
        await receiver.close()


class OldFormConnection:
    """A user's transport written against the old form: it publishes through a loopback connection."""

    def __init__(self, inner: LoopbackConnection, calls: list[str]) -> None:
        self._inner = inner
        self.calls = calls
        self.settings = inner.settings

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def publish(self, topic: str, payload: bytes, *, timeout: float = 10.0, **fields: Any) -> None:
        self.calls.append(topic)
        await self._inner.publish(OutgoingMessage(topic, payload, **fields), timeout=timeout)

    def publish_nowait(
        self, topic: str, payload: bytes, *, refusal: asyncio.Future[Any] | None = None, **fields: Any
    ) -> None:
        self.calls.append(topic)
        self._inner.publish_nowait(OutgoingMessage(topic, payload, **fields), refusal=refusal)


def test_a_current_connection_is_taken_as_it_is() -> None:
    conn = LoopbackBroker().connection(ConnectionSettings(), lambda m: None)
    assert taking_messages(conn) is conn


async def test_the_client_still_drives_a_connection_written_against_the_old_form() -> None:
    calls: list[str] = []
    async with InProcessStateStore() as store:
        base = store.broker.connection

        def old_factory(settings: ConnectionSettings, on_message: MessageHandler) -> Any:
            return OldFormConnection(base(settings, on_message), calls)

        factory: Callable[[ConnectionSettings, MessageHandler], Any] = old_factory
        with pytest.warns(DeprecationWarning, match="take an OutgoingMessage"):
            async with store.client(connection_factory=factory) as client:
                await client.set("k", b"v")
                entry = await client.get("k")
                assert entry is not None and entry.value == b"v"
    assert len(calls) == 2  # both requests went through the old form's publish_nowait


async def test_the_emulator_still_answers_through_a_connection_written_against_the_old_form() -> None:
    calls: list[str] = []
    broker = LoopbackBroker()

    def old_factory(settings: ConnectionSettings, on_message: MessageHandler) -> Any:
        return OldFormConnection(broker.connection(settings, on_message), calls)

    factory: Callable[[ConnectionSettings, MessageHandler], Any] = old_factory
    server = EmulatorServer(ConnectionSettings(client_id="sskv-emulator"), EmulatorCore(), connection_factory=factory)
    with pytest.warns(DeprecationWarning, match="take an OutgoingMessage"):
        task = asyncio.get_running_loop().create_task(server.run())
        await asyncio.wait_for(server.wait_ready(), WAIT)
    try:
        async with AsyncStateStoreClient(connection_factory=broker.connection) as client:
            await client.set("k", b"v")
            entry = await client.get("k")
            assert entry is not None and entry.value == b"v"
        assert len(calls) == 2  # both replies went out through the old form's publish_nowait
    finally:
        server.stop()
        await asyncio.wait_for(task, WAIT)
