"""The exact bytes the client puts on the wire for each command, pinned, and what it makes of fixed answers.

A recording TCP relay between the client and a real mosquitto, a fake service answering each verb; the client's
clock and id fixed, so its request PUBLISHes are the same bytes on every run but the correlation data (masked).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import pytest

from sskv_mapping import HybridLogicalClock
from sskv_mapping._protocol import topics
from sskv_mapping._protocol.commands import SetCondition, VDeleteResult
from sskv_mapping._transport.base import InboundMessage
from sskv_mapping.client import AsyncStateStoreClient, SetResult
from sskv_mapping.client._client import Entry
from tests.client.test_misbehaving_responder import FakeService

pytestmark = pytest.mark.broker

CLIENT_ID = "sskv-wire"
WALL_MS = 1_700_000_000_000
#: the service's version on every answer: older than the client's clock, so merging it leaves the clock as it was
SERVICE_TS = "001690000000000:00007:StateStore"
ANSWERS = {
    b"GET": b"$3\r\nabc\r\n",
    b"SET": b"+OK\r\n",
    b"DEL": b":1\r\n",
    b"VDEL": b":-1\r\n",
    b"KEYNOTIFY": b"+OK\r\n",
}
MASK = bytes(16)


class RecordingRelay:
    """Relays a loopback port to the broker and keeps every byte the client sent, in order."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sent = bytearray()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> RecordingRelay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers += [writer, up_writer]
        for src, dst, record in ((reader, up_writer, True), (up_reader, writer, False)):
            task = asyncio.ensure_future(self._pump(src, dst, record))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, record: bool) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await src.read(65536):
                if record:
                    self.sent += data
                dst.write(data)
                await dst.drain()
        dst.close()


def packets(stream: bytes) -> list[bytes]:
    """Split an MQTT byte stream into whole packets (fixed header included)."""
    out, pos = [], 0
    while pos < len(stream):
        start, pos = pos, pos + 1
        length, shift = 0, 0
        while True:
            byte = stream[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        pos += length
        out.append(bytes(stream[start:pos]))
    assert pos == len(stream), "the recorded stream ends inside a packet"
    return out


def requests(stream: bytes) -> list[bytes]:
    """The request PUBLISH packets, the 16 bytes of correlation data of each replaced by zeros."""
    topic = topics.REQUEST_TOPIC.encode()
    out = []
    for packet in packets(stream):
        if packet[0] >> 4 != 3 or topic not in packet:
            continue
        at = packet.index(b"\x09\x00\x10")  # Correlation Data, two-byte length 16
        corr = packet[at + 3 : at + 19]
        assert len(corr) == 16 and corr != MASK
        out.append(packet[: at + 3] + MASK + packet[at + 19 :])
    return out


def _answer(msg: InboundMessage) -> list[tuple[bytes | None, tuple[bytes, Sequence[tuple[str, str]]]]]:
    verb = msg.payload.split(b"\r\n")[2]
    props = [("__stat", "200"), ("__protVer", "1.0"), ("__ts", SERVICE_TS)]
    return [(msg.correlation_data, (ANSWERS[verb], props))]


@pytest.fixture
async def wired(bare_broker_address: tuple[str, int]) -> AsyncIterator[tuple[AsyncStateStoreClient, RecordingRelay]]:
    service = FakeService(*bare_broker_address)
    service.behaviour = _answer
    await service.start()
    try:
        async with RecordingRelay(bare_broker_address) as relay:
            client = AsyncStateStoreClient(
                "127.0.0.1", relay.port, client_id=CLIENT_ID, wall_clock_ms=lambda: WALL_MS, reconnect=False
            )
            async with client:
                yield client, relay
    finally:
        await service.close()


async def test_requests_are_the_pinned_bytes(wired: tuple[AsyncStateStoreClient, RecordingRelay]) -> None:
    client, relay = wired
    got = [
        await client.get("key"),
        await client.set("key", b"value"),
        await client.set(
            "key",
            b"v2",
            condition=SetCondition.NX,
            ttl=1.5,
            fencing_token=HybridLogicalClock(WALL_MS - 5, 3, "lock-holder"),
            persist=True,
        ),
        await client.delete("key"),
        await client.vdelete("key", b"v2"),
    ]
    sub = await client.subscribe_key("watched", lambda event: None)
    version = HybridLogicalClock.parse(SERVICE_TS)
    # what the client made of the fixed answers
    assert got == [
        Entry(b"abc", version),
        SetResult(True, version),
        SetResult(True, version),
        True,
        VDeleteResult.VALUE_MISMATCH,
    ]
    assert sub.active
    sent = requests(bytes(relay.sent))
    assert len(sent) == 6
    assert sent == PINNED


# The request PUBLISH packets, byte for byte (correlation data masked), as this client sent them before its request
# path was reworked for cost (issue 40). Packet id 1 went to the SUBSCRIBE; each __ts counter is the clock's after
# merging the previous answer's version. Each is written as: fixed header and remaining length, the request topic,
# packet id and properties length, the properties every request carries (its __ts, given by its counter, in the
# middle), the ones only some carry, and the RESP payload.
_TOPIC = b"\x00\x41statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"
#: message expiry 10 s, content type, response topic, correlation data (masked), and __ts's name and length
_PROPS_HEAD = (
    b"\x02\x00\x00\x00\x0a\x03\x00\x18application/octet-stream\x08\x00\x65clients/sskv-wire/services/statestore/v1/"
    b"FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response\x09\x00\x10" + MASK + b"\x26\x00\x04__ts\x00\x1f"
)
_PROPS_TAIL = (
    b"\x26\x00\x07__srcId\x00\x09sskv-wire\x26\x00\x09__protVer\x00\x031.0"
    b"\x26\x00\x0a$partition\x00\x09sskv-wire\x26\x00\x0e$high_priority\x00\x00"
)


def _pinned(header: str, id_and_props_length: str, counter: bytes, payload: bytes, extra: bytes = b"") -> bytes:
    head, middle = bytes.fromhex(header), bytes.fromhex(id_and_props_length)
    ts = b"001700000000000:%s:sskv-wire" % counter
    return head + _TOPIC + middle + _PROPS_HEAD + ts + _PROPS_TAIL + extra + payload


PINNED = [
    _pinned("32f102", "00029402", b"00000", b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"),
    _pinned("32fc02", "00039402", b"00002", b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n"),
    _pinned(  # NX, PX 1500, a fencing token and persistence
        "32d503",
        "0004d602",
        b"00004",
        b"*6\r\n$3\r\nSET\r\n$3\r\nkey\r\n$2\r\nv2\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n1500\r\n",
        b"\x26\x00\x04__ft\x00\x21001699999999995:00003:lock-holder\x26\x00\x0faio-persistence\x00\x04true",
    ),
    _pinned("32f102", "00059402", b"00006", b"*2\r\n$3\r\nDEL\r\n$3\r\nkey\r\n"),
    _pinned("32fa02", "00069402", b"00008", b"*3\r\n$4\r\nVDEL\r\n$3\r\nkey\r\n$2\r\nv2\r\n"),
    _pinned("32fb02", "00079402", b"00010", b"*2\r\n$9\r\nKEYNOTIFY\r\n$7\r\nwatched\r\n"),
]
