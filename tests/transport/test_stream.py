"""The stream transport (``_transport/stream.py``) and the packet codec under it (``_protocol/mqtt_packets.py``).

The codec: a byte stream cut anywhere still yields exactly the packets that were written, and anything malformed
is a ``MalformedPacketError`` (never another exception). The transport, against a real mosquitto: round trips,
many packets in one read, PUBACK reason codes reaching the publisher, the broker's Receive Maximum honoured
under a burst, and a keepalive that notices a broker gone silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sskv_mapping._protocol import mqtt_packets as packets
from sskv_mapping._protocol.mqtt_publish import (
    InboundMessage,
    MalformedPacketError,
    OutgoingMessage,
    decode_publish,
    mqtt_str,
    publish_properties,
    varint,
)
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping._transport.stream import StreamConnection
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import BrokerConnectError, ConnectionLostError, ServiceUnavailableError
from tests._support.waiting import eventually

# -- the codec ------------------------------------------------------------------------------------------------

bodies = st.binary(min_size=0, max_size=300)
packet_lists = st.lists(st.tuples(st.sampled_from([0x30, 0x32, 0x40, 0x90, 0xB0, 0xD0, 0xE0]), bodies), max_size=12)


def _wire(items: list[tuple[int, bytes]]) -> bytes:
    return b"".join(bytes((first,)) + varint(len(body)) + body for first, body in items)


@settings(max_examples=300, deadline=None)
@given(items=packet_lists, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=8))
def test_the_splitter_returns_what_was_written_however_the_stream_is_cut(
    items: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    wire = _wire(items)
    points = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})
    splitter = packets.PacketSplitter()
    got: list[tuple[int, bytes]] = []
    for start, end in itertools.pairwise(points):
        got += splitter.feed(wire[start:end])
    assert got == items
    assert splitter.pending == 0


def test_a_long_packet_across_many_reads() -> None:
    body = bytes(range(256)) * 600  # a three-byte Remaining Length
    wire = _wire([(0x30, body), (0x40, b"\x00\x01")])
    splitter = packets.PacketSplitter()
    got = []
    for i in range(0, len(wire), 1000):
        got += splitter.feed(wire[i : i + 1000])
    assert got == [(0x30, body), (0x40, b"\x00\x01")]


@pytest.mark.parametrize(
    "wire",
    [b"\x30\xff\xff\xff\xff\x01", b"\x30\x80\x80\x80\x80\x80"],
    ids=["five-byte length", "endless length"],
)
def test_a_remaining_length_over_four_bytes_is_malformed(wire: bytes) -> None:
    with pytest.raises(MalformedPacketError):
        packets.PacketSplitter().feed(wire)


def test_a_packet_over_the_limit_is_refused_before_it_is_read() -> None:
    with pytest.raises(MalformedPacketError, match="over the limit"):
        packets.PacketSplitter(max_size=100).feed(b"\x30\xe8\x07")  # 1,000 bytes announced


@settings(max_examples=500, deadline=None)
@given(body=st.binary(max_size=64))
def test_decoders_raise_only_malformed_packet_errors(body: bytes) -> None:
    for decode in (packets.decode_connack, packets.decode_ack, packets.decode_suback, packets.decode_disconnect):
        with contextlib.suppress(MalformedPacketError):
            decode(body)


def test_connack_properties_and_reason_names() -> None:
    props = b"\x21\x00\x14" + b"\x27\x00\x01\x00\x00" + b"\x1f" + mqtt_str("hello")
    connack = packets.decode_connack(b"\x00\x00" + varint(len(props)) + props)
    assert connack.properties == {0x21: 20, 0x27: 65536, 0x1F: "hello"}
    assert packets.reason_name(0x87) == "Not authorized"
    assert packets.reason_name(0x8C) == "Bad authentication method"


def test_publish_packet_round_trips_through_the_decoder() -> None:
    props = publish_properties(b"c" * 16, "r/t", [("__ts", "1:2:n")], "application/octet-stream", 10)
    wire = packets.publish_packet(mqtt_str("a/b"), b"payload", 1, 7, props)
    [(first, body)] = packets.PacketSplitter().feed(wire)
    message, packet_id = decode_publish(first, body)
    assert (message.topic, message.payload, message.correlation_data, packet_id) == ("a/b", b"payload", b"c" * 16, 7)
    assert message.user_properties == (("__ts", "1:2:n"),)


# -- the transport, on a real broker ------------------------------------------------------------------------------

Pair = tuple[StreamConnection, StreamConnection, list[InboundMessage]]


@pytest.fixture(params=["tuned", "untuned"])
async def pair(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[StreamConnection, StreamConnection, list[InboundMessage]]]:
    """Two connections on the session broker, and on the one on its default settings (no set_tcp_nodelay)."""
    mosquitto: MosquittoBroker = request.getfixturevalue(
        "mosquitto" if request.param == "tuned" else "untuned_mosquitto"
    )
    request.applymarker(pytest.mark.broker)
    received: list[InboundMessage] = []
    sender = StreamConnection(ConnectionSettings(mosquitto.host, mosquitto.port), lambda m: None)
    receiver = StreamConnection(ConnectionSettings(mosquitto.host, mosquitto.port), received.append)
    await sender.connect()
    await receiver.connect()
    try:
        yield sender, receiver, received
    finally:
        await sender.close()
        await receiver.close()


async def test_round_trip_with_properties(
    pair: Pair,
) -> None:
    sender, receiver, received = pair
    await receiver.subscribe(["t/stream/props"])
    await sender.publish(
        OutgoingMessage(
            "t/stream/props",
            b"\x00\r\nbinary",
            correlation_data=b"x" * 16,
            response_topic="t/resp",
            user_properties=[("k", "v"), ("k", "w")],
            content_type="application/octet-stream",
            message_expiry=5,
        )
    )
    await eventually(lambda: bool(received))
    [m] = received
    assert (m.topic, m.payload, m.correlation_data, m.response_topic) == (
        "t/stream/props",
        b"\x00\r\nbinary",
        b"x" * 16,
        "t/resp",
    )
    assert m.user_properties == (("k", "v"), ("k", "w"))
    assert (m.qos, m.content_type) == (1, "application/octet-stream")


async def test_a_burst_arrives_whole_and_in_order(
    pair: Pair,
) -> None:
    sender, receiver, received = pair
    await receiver.subscribe(["t/stream/burst"])
    for i in range(2000):  # far beyond the broker's Receive Maximum: the rest wait for PUBACKs
        sender.publish_nowait(OutgoingMessage("t/stream/burst", i.to_bytes(4, "big")))
    session = sender._session
    assert len(session.inflight) <= session.send_quota
    assert session.queued  # mosquitto's Receive Maximum (20 by default) held the rest back
    await eventually(lambda: len(received) == 2000)
    assert [int.from_bytes(m.payload, "big") for m in received] == list(range(2000))
    await eventually(lambda: not session.inflight and not session.queued)


async def test_a_publish_nobody_subscribed_to_fails_its_refusal_future(
    pair: Pair,
) -> None:
    sender, _, _ = pair
    refusal: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    sender.publish_nowait(OutgoingMessage("t/stream/nobody-listens", b"x"), refusal=refusal)
    with pytest.raises(ServiceUnavailableError):
        await asyncio.wait_for(refusal, 10)
    await sender.publish(OutgoingMessage("t/stream/nobody-listens", b"y"))  # a plain publish is still acknowledged


async def test_a_silent_broker_is_noticed_by_keepalive() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)  # the CONNECT
        writer.write(b"\x20\x03\x00\x00\x00")  # CONNACK, then nothing ever again
        # read (the PINGREQs) until the client closes: a handler that returned would let its writer be collected,
        # which closes the connection (seen on 3.13) -- a broker that hangs up, not a silent one
        while await reader.read(1 << 20):
            pass

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = StreamConnection(ConnectionSettings("127.0.0.1", port, keepalive=1), lambda m: None)
    try:
        await conn.connect()
        with pytest.raises(ConnectionLostError, match="PINGRESP"):
            async with asyncio.timeout(10):
                await conn.wait_closed()
    finally:
        await conn.close()
        server.close()


async def test_refused_connect_names_the_reason() -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.write(b"\x20\x03\x00\x87\x00")  # CONNACK: Not authorized

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(BrokerConnectError, match="Not authorized"):
            await StreamConnection(ConnectionSettings("127.0.0.1", port), lambda m: None).connect()
    finally:
        server.close()
