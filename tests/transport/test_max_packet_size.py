"""The broker's Maximum Packet Size (CONNACK property 0x27) caps what a connection sends, on both transports:
a PUBLISH whose encoded packet is over it raises ValueTooLargeError (size and limit named) before anything is
sent, and the connection stays up. Against a mosquitto started with ``max_packet_size``.

The stream transport's check is a minimal one added with the settings work; the stream transport's own limits
work replaces it (same interface: ``max_packet_size``, ``ValueTooLargeError``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sskv_mapping._protocol.mqtt_publish import InboundMessage, OutgoingMessage, mqtt_str, publish_properties, varint
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping._transport.stream import StreamConnection
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import ConfigurationError, ValueTooLargeError

pytestmark = pytest.mark.broker

LIMIT = 2000
WAIT = 10.0
TRANSPORTS = pytest.mark.parametrize("transport", [PahoConnection, StreamConnection], ids=["paho", "stream"])


@pytest.fixture(scope="module")
def small() -> Iterator[MosquittoBroker]:
    with MosquittoBroker(extra_config=[f"max_packet_size {LIMIT}"]) as broker:
        yield broker


def packet_size(topic: str, payload: bytes, **props: Any) -> int:
    packed = publish_properties(
        props.get("correlation_data"),
        props.get("response_topic"),
        props.get("user_properties", ()),
        props.get("content_type"),
        props.get("message_expiry"),
    )
    remaining = len(mqtt_str(topic)) + 2 + len(packed) + len(payload)
    return 1 + len(varint(remaining)) + remaining


@TRANSPORTS
async def test_a_publish_over_the_limit_is_refused_locally_and_the_connection_stays(
    small: MosquittoBroker, transport: type[Any]
) -> None:
    received: list[InboundMessage] = []
    arrived = asyncio.Event()

    def on_message(message: InboundMessage) -> None:
        received.append(message)
        arrived.set()

    settings = ConnectionSettings(small.host, small.port, client_id=f"mps-{uuid.uuid4().hex[:8]}")
    conn = transport(settings, on_message)
    await conn.connect()
    try:
        assert conn.max_packet_size == LIMIT
        topic = f"test/mps/{uuid.uuid4().hex}"
        await conn.subscribe([topic])
        props: dict[str, Any] = {"correlation_data": b"c" * 16, "user_properties": [("k", "v")]}
        n = LIMIT - packet_size(topic, b"", **props)
        while packet_size(topic, b"x" * n, **props) > LIMIT:  # the remaining length's varint grew a byte
            n -= 1
        exactly = b"x" * n  # the whole packet at the limit: allowed
        over = exactly + b"x"
        assert packet_size(topic, exactly, **props) == LIMIT
        for call in (conn.publish_nowait, conn.publish):
            with pytest.raises(ValueTooLargeError) as caught:
                result = call(OutgoingMessage(topic, over, **props))
                if asyncio.iscoroutine(result):
                    await result
            assert (caught.value.size, caught.value.limit) == (LIMIT + 1, LIMIT)
            assert isinstance(caught.value, ConfigurationError) and conn.connected
        await conn.publish(OutgoingMessage(topic, exactly, **props))
        async with asyncio.timeout(WAIT):
            await arrived.wait()
        assert [m.payload for m in received] == [exactly]  # the refused ones never left
        assert conn.connected
    finally:
        await conn.close()


@TRANSPORTS
async def test_no_limit_stated_means_none(mosquitto: MosquittoBroker, transport: type[Any]) -> None:
    conn = transport(ConnectionSettings(mosquitto.host, mosquitto.port), lambda m: None)
    assert conn.max_packet_size is None  # before CONNACK
    await conn.connect()
    try:
        assert conn.max_packet_size is None  # mosquitto states none by default
    finally:
        await conn.close()
