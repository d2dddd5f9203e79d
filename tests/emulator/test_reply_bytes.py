"""The emulator's replies, byte for byte, as its MQTT connection writes them: a GET's and a SET's PUBLISH (and a
SET's KEYNOTIFY notification, and a re-sent SET's second answer) are pinned, so a change that makes the request
path cheaper cannot change the wire. The server runs over a real :class:`StreamConnection` whose socket is a
recorder (fast unit test; tests/emulator/test_over_broker.py has the same server over mosquitto)."""

from __future__ import annotations

import asyncio

from sskv_mapping._protocol import headers
from sskv_mapping._protocol import mqtt_packets as packets
from sskv_mapping._protocol.commands import Get, KeyNotify, Set
from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.mqtt_publish import mqtt_str, publish_properties
from sskv_mapping._protocol.topics import REQUEST_TOPIC, response_topic
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping._transport.stream import StreamConnection
from sskv_mapping.emulator.core import EmulatorCore
from sskv_mapping.emulator.server import EmulatorServer
from sskv_mapping.errors import ResponseTooLargeError

NOW = 1_700_000_000_123
REQUESTER = "pinned-requester"


class RecordingTransport:
    """The socket side of an asyncio transport: what is written is kept, in order."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_extra_info(self, name: str) -> None:
        return None

    def is_closing(self) -> bool:
        return False


def _request(payload: bytes, packet_id: int, correlation: bytes, counter: int) -> bytes:
    """The PUBLISH the broker delivers for a client's request (the client's own properties, in its order)."""
    stamp = HybridLogicalClock(NOW, counter, REQUESTER)
    props = publish_properties(
        correlation, response_topic(REQUESTER), headers.request_properties(REQUESTER, stamp), None, 10
    )
    return packets.publish_packet(mqtt_str(REQUEST_TOPIC), payload, 1, packet_id, props)


async def _served(*requests: bytes, max_packet_size: int | None = None) -> list[bytes]:
    """Feed the requests to an emulator server on a recording connection; what it wrote for each."""
    loop = asyncio.get_running_loop()
    settings = ConnectionSettings("127.0.0.1", 1883, client_id="sskv-emulator")
    server = EmulatorServer(settings, EmulatorCore(now_ms=lambda: NOW))
    conn = StreamConnection(settings, server._on_message)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]  # a recording fake for the socket
    conn._closed = loop.create_future()
    conn._session.max_packet_size = max_packet_size  # as a broker's CONNACK would set it
    server._conn = conn
    out: list[bytes] = []
    for request in requests:
        before = len(transport.written)
        conn.data_received(request)
        out.append(b"".join(transport.written[before:]))
    return out


async def test_a_get_and_a_set_reply_are_the_pinned_bytes() -> None:
    set_reply, get_reply, absent_reply = await _served(
        _request(Set(b"key", b"value-16-bytes!!").encode(), 1, b"corr-set", 0),
        _request(Get(b"key").encode(), 2, b"corr-get", 1),
        _request(Get(b"absent").encode(), 3, b"corr-absent", 2),
    )
    assert set_reply.hex() == SET_REPLY
    assert get_reply.hex() == GET_REPLY
    assert absent_reply.hex() == ABSENT_REPLY


async def test_a_notification_and_a_resent_set_are_the_pinned_bytes() -> None:
    _, set_reply, copy_reply = await _served(
        _request(KeyNotify(b"key").encode(), 1, b"corr-watch", 0),
        _request(Set(b"key", b"v2").encode(), 2, b"corr-set", 1),
        _request(Set(b"key", b"v2").encode(), 3, b"corr-set", 1),  # the same request again (a re-send)
    )
    assert set_reply.hex() == SET_WITH_NOTIFICATION
    assert copy_reply.hex() == RESENT_SET_REPLY


async def test_a_reply_over_the_brokers_maximum_packet_size_becomes_the_too_large_error() -> None:
    # the replies' direct path (publish_encoded_nowait) refuses it as publish_nowait does: the requester is told
    big = b"v" * 1000
    set_reply, get_reply = await _served(
        _request(Set(b"key", big).encode(), 1, b"corr-set", 0),
        _request(Get(b"key").encode(), 2, b"corr-get", 1),
        max_packet_size=400,
    )
    assert set_reply.endswith(b"+OK\r\n" + packets.puback_packet(1))
    assert big not in get_reply
    assert ResponseTooLargeError.TEXT.encode() in get_reply and b"corr-get" in get_reply


# the wire bytes (hex) of the emulator's writes before the request path was made cheaper; a reply's PUBLISH is
# followed by the PUBACK of its request, a SET's by its notification first
SET_REPLY = (
    "32e401006c636c69656e74732f70696e6e65642d7265717565737465722f73657276696365732f737461746573746f72652f"
    "76312f46413941453335462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e"
    "766f6b652f726573706f6e736500016e0300186170706c69636174696f6e2f6f637465742d73747265616d090008636f7272"
    "2d7365742600065f5f7374617400033230302600095f5f70726f745665720003312e302600045f5f74730020303031373030"
    "3030303030303132333a30303030323a537461746553746f72652b4f4b0d0a40020001"
)
GET_REPLY = (
    "32f601006c636c69656e74732f70696e6e65642d7265717565737465722f73657276696365732f737461746573746f72652f"
    "76312f46413941453335462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e"
    "766f6b652f726573706f6e736500026e0300186170706c69636174696f6e2f6f637465742d73747265616d090008636f7272"
    "2d6765742600065f5f7374617400033230302600095f5f70726f745665720003312e302600045f5f74730020303031373030"
    "3030303030303132333a30303030323a537461746553746f72652431360d0a76616c75652d31362d627974657321210d0a40"
    "020002"
)
ABSENT_REPLY = (
    "32be01006c636c69656e74732f70696e6e65642d7265717565737465722f73657276696365732f737461746573746f72652f"
    "76312f46413941453335462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e"
    "766f6b652f726573706f6e73650003480300186170706c69636174696f6e2f6f637465742d73747265616d09000b636f7272"
    "2d616273656e742600065f5f7374617400033230302600095f5f70726f745665720003312e30242d310d0a40020003"
)
SET_WITH_NOTIFICATION = (
    "32e401006c636c69656e74732f70696e6e65642d7265717565737465722f73657276696365732f737461746573746f72652f"
    "76312f46413941453335462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e"
    "766f6b652f726573706f6e736500026e0300186170706c69636174696f6e2f6f637465742d73747265616d090008636f7272"
    "2d7365742600065f5f7374617400033230302600095f5f70726f745665720003312e302600045f5f74730020303031373030"
    "3030303030303132333a30303030333a537461746553746f72652b4f4b0d0a32cb010071636c69656e74732f737461746573"
    "746f72652f76312f46413941453335462d324636342d343743442d394246462d3038453242333241304645382f3730363936"
    "4536453635363432443732363537313735363537333734363537322f636f6d6d616e642f6e6f746966792f36423635373900"
    "03292600045f5f747300203030313730303030303030303132333a30303030333a537461746553746f72652a340d0a24360d"
    "0a4e4f544946590d0a24330d0a5345540d0a24350d0a56414c55450d0a24320d0a76320d0a40020002"
)
RESENT_SET_REPLY = (
    "32e401006c636c69656e74732f70696e6e65642d7265717565737465722f73657276696365732f737461746573746f72652f"
    "76312f46413941453335462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e"
    "766f6b652f726573706f6e736500046e0300186170706c69636174696f6e2f6f637465742d73747265616d090008636f7272"
    "2d7365742600065f5f7374617400033230302600095f5f70726f745665720003312e302600045f5f74730020303031373030"
    "3030303030303132333a30303030333a537461746553746f72652b4f4b0d0a40020003"
)
