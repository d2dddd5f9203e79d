"""Our own limits, as the broker sees them: CONNECT declares our Receive Maximum and Maximum Packet Size (from
ConnectionSettings), and an inbound packet over our limit drops the connection as soon as its header is read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from sskv_mapping._protocol import mqtt_packets as packets
from sskv_mapping._protocol.mqtt_publish import InboundMessage, OutgoingMessage, mqtt_str, varint
from sskv_mapping._transport.loopback import LoopbackBroker
from sskv_mapping._transport.settings import MAX_PACKET_SIZE, ConnectionSettings
from sskv_mapping._transport.stream import StreamConnection
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import ConfigurationError, ConnectionLostError, ValueTooLargeError
from tests._support.procs import start_emulator

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
async def fake_broker() -> AsyncIterator[Callable[[Handler], Awaitable[int]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> int:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        port: int = server.sockets[0].getsockname()[1]
        return port

    yield start
    for server in servers:
        server.close()


async def _read_connect(reader: asyncio.StreamReader) -> dict[int, object]:
    first = await reader.readexactly(2)
    length, shift, byte = first[1] & 0x7F, 7, first[1]
    while byte & 0x80:
        byte = (await reader.readexactly(1))[0]
        length |= (byte & 0x7F) << shift
        shift += 7
    body = await reader.readexactly(length)
    props, _ = packets._properties(body, 10)  # after "MQTT", version, flags, keepalive
    return props


async def test_connect_declares_receive_maximum_and_maximum_packet_size(
    fake_broker: Callable[[Handler], Awaitable[int]],
) -> None:
    declared: list[dict[int, object]] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        declared.append(await _read_connect(reader))
        writer.write(b"\x20\x03\x00\x00\x00")
        await reader.read()

    port = await fake_broker(accept)
    for settings, expected in (
        # no limit configured: no Maximum Packet Size at all (absent means the protocol's; a strict broker refuses
        # the protocol's ceiling as a value)
        (ConnectionSettings("127.0.0.1", port), (256, None)),
        (ConnectionSettings("127.0.0.1", port, receive_maximum=17, max_inbound_packet_size=4096), (17, 4096)),
    ):
        conn = StreamConnection(settings, lambda m: None)
        await conn.connect()
        await conn.close()
        assert (declared[-1][0x21], declared[-1].get(0x27)) == expected


def test_settings_refuse_limits_out_of_range() -> None:
    for bad in (0, 65536, -1, True, 2.5):
        with pytest.raises(ConfigurationError, match="receive_maximum"):
            ConnectionSettings(receive_maximum=bad)  # type: ignore[arg-type]
    for bad in (0, 1023, MAX_PACKET_SIZE + 1, False, 4096.0):
        with pytest.raises(ConfigurationError, match="max_inbound_packet_size"):
            ConnectionSettings(max_inbound_packet_size=bad)  # type: ignore[arg-type]


async def test_an_inbound_packet_over_our_limit_drops_the_connection_at_its_header(
    fake_broker: Callable[[Handler], Awaitable[int]],
) -> None:
    """The broker announces a 1 MiB PUBLISH to a client that declared 4 KiB, and sends only its header: the
    client drops the connection at once, without waiting for (or buffering) the body."""
    body_sent = asyncio.Event()

    async def oversend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_connect(reader)
        writer.write(b"\x20\x03\x00\x00\x00")
        await reader.read(1024)  # the client's first publish: it has its CONNACK
        writer.write(b"\x30" + varint(1 << 20))  # a PUBLISH of 1 MiB announced; its body never comes
        await writer.drain()
        await reader.read()  # until the client closes
        body_sent.set()

    port = await fake_broker(oversend)
    conn = StreamConnection(ConnectionSettings("127.0.0.1", port, max_inbound_packet_size=4096), lambda m: None)
    await conn.connect()
    conn.publish_nowait(OutgoingMessage("t/hello", b"x", qos=0))
    with pytest.raises(ConnectionLostError, match="over the limit"):
        async with asyncio.timeout(10):
            await conn.wait_closed()
    assert conn._session.splitter.pending <= 8  # the header only
    async with asyncio.timeout(10):
        await body_sent.wait()  # the fake broker saw the connection closed
    await conn.close()


# -- the broker's limit: its CONNACK Maximum Packet Size caps what we send ---------------------------------------

BROKER_LIMIT = 10_000


@pytest.fixture(scope="module")
def small_broker() -> Iterator[MosquittoBroker]:
    """A mosquitto that takes packets of 10,000 bytes at most (and says so in CONNACK), with an emulator."""
    broker = MosquittoBroker(extra_config=[f"max_packet_size {BROKER_LIMIT}"])
    with broker, start_emulator(broker.host, broker.port):
        yield broker


async def test_a_publish_over_the_brokers_limit_fails_locally_and_the_connection_stays(
    small_broker: MosquittoBroker,
) -> None:
    received: list[InboundMessage] = []
    arrived = asyncio.Event()

    def on_message(message: InboundMessage) -> None:
        received.append(message)
        arrived.set()

    settings = ConnectionSettings(small_broker.host, small_broker.port)
    sender = StreamConnection(settings, lambda m: None)
    receiver = StreamConnection(settings.replace(client_id=settings.client_id + "r"), on_message)
    await sender.connect()
    await receiver.connect()
    try:
        assert sender.max_packet_size == BROKER_LIMIT
        await receiver.subscribe(["t/limit"])
        fits = b"x" * (BROKER_LIMIT - 100)
        too_big = b"x" * BROKER_LIMIT
        expected = len(packets.publish_packet(mqtt_str("t/limit"), too_big, 1, 1, b"\x00"))
        with pytest.raises(ValueTooLargeError) as raised:
            await sender.publish(OutgoingMessage("t/limit", too_big))
        assert (raised.value.size, raised.value.limit) == (expected, BROKER_LIMIT)
        with pytest.raises(ValueTooLargeError):
            sender.publish_nowait(OutgoingMessage("t/limit", too_big, qos=0))
        await sender.publish(OutgoingMessage("t/limit", fits))  # the same connection goes on
        async with asyncio.timeout(10):
            await arrived.wait()
        assert [m.payload for m in received] == [fits] and sender.connected
    finally:
        await sender.close()
        await receiver.close()


async def test_a_set_over_the_brokers_limit_raises_while_a_concurrent_get_succeeds(
    small_broker: MosquittoBroker,
) -> None:
    async with AsyncStateStoreClient(small_broker.host, small_broker.port, timeout=20) as client:
        await client.set("small-limit-key", b"small")
        get = asyncio.create_task(client.get("small-limit-key"))
        with pytest.raises(ValueTooLargeError) as raised:
            await client.set("small-limit-big", b"v" * BROKER_LIMIT)
        assert raised.value.limit == BROKER_LIMIT and raised.value.size > BROKER_LIMIT
        entry = await get
        assert entry is not None and entry.value == b"small"
        assert await client.get("small-limit-big") is None  # nothing was written
        assert client.reconnects == 0 and client.state is ConnectionState.CONNECTED


async def test_the_loopback_enforces_a_brokers_limit_the_same_way() -> None:
    broker = LoopbackBroker()
    conn = broker.connection(ConnectionSettings(), lambda m: None)
    await conn.connect()
    assert conn.max_packet_size is None
    await conn.publish(OutgoingMessage("t/limit", b"x" * 100_000))  # no limit by default
    broker.max_packet_size = BROKER_LIMIT
    expected = len(packets.publish_packet(mqtt_str("t/limit"), b"x" * BROKER_LIMIT, 1, 1, b"\x00"))
    with pytest.raises(ValueTooLargeError) as raised:
        conn.publish_nowait(OutgoingMessage("t/limit", b"x" * BROKER_LIMIT))
    assert (raised.value.size, raised.value.limit) == (expected, BROKER_LIMIT)
    with pytest.raises(ValueTooLargeError):
        await conn.publish(OutgoingMessage("t/limit", b"x" * BROKER_LIMIT))
    await conn.publish(OutgoingMessage("t/limit", b"x" * (BROKER_LIMIT - 100)))
    assert conn.connected
    await conn.close()
