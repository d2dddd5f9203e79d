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
# merging the previous answer's version.
PINNED = [
    # GET key
    bytes.fromhex(
        "32f1020041737461746573746f72652f76312f46413941453335462d324636342d343743442d394246462d303845324233324130"
        "4645382f636f6d6d616e642f696e766f6b6500029402020000000a0300186170706c69636174696f6e2f6f637465742d73747265"
        "616d080065636c69656e74732f73736b762d776972652f73657276696365732f737461746573746f72652f76312f464139414533"
        "35462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e766f6b652f726573706f6e"
        "7365090010000000000000000000000000000000002600045f5f7473001f3030313730303030303030303030303a30303030303a"
        "73736b762d776972652600075f5f7372634964000973736b762d776972652600095f5f70726f745665720003312e3026000a2470"
        "6172746974696f6e000973736b762d7769726526000e24686967685f7072696f7269747900002a320d0a24330d0a4745540d0a24"
        "330d0a6b65790d0a"
    ),
    # SET key value
    bytes.fromhex(
        "32fc020041737461746573746f72652f76312f46413941453335462d324636342d343743442d394246462d303845324233324130"
        "4645382f636f6d6d616e642f696e766f6b6500039402020000000a0300186170706c69636174696f6e2f6f637465742d73747265"
        "616d080065636c69656e74732f73736b762d776972652f73657276696365732f737461746573746f72652f76312f464139414533"
        "35462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e766f6b652f726573706f6e"
        "7365090010000000000000000000000000000000002600045f5f7473001f3030313730303030303030303030303a30303030323a"
        "73736b762d776972652600075f5f7372634964000973736b762d776972652600095f5f70726f745665720003312e3026000a2470"
        "6172746974696f6e000973736b762d7769726526000e24686967685f7072696f7269747900002a330d0a24330d0a5345540d0a24"
        "330d0a6b65790d0a24350d0a76616c75650d0a"
    ),
    # SET key v2 NX PX 1500, fencing token, persist
    bytes.fromhex(
        "32d5030041737461746573746f72652f76312f46413941453335462d324636342d343743442d394246462d303845324233324130"
        "4645382f636f6d6d616e642f696e766f6b650004d602020000000a0300186170706c69636174696f6e2f6f637465742d73747265"
        "616d080065636c69656e74732f73736b762d776972652f73657276696365732f737461746573746f72652f76312f464139414533"
        "35462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e766f6b652f726573706f6e"
        "7365090010000000000000000000000000000000002600045f5f7473001f3030313730303030303030303030303a30303030343a"
        "73736b762d776972652600075f5f7372634964000973736b762d776972652600095f5f70726f745665720003312e3026000a2470"
        "6172746974696f6e000973736b762d7769726526000e24686967685f7072696f7269747900002600045f5f667400213030313639"
        "393939393939393939353a30303030333a6c6f636b2d686f6c64657226000f61696f2d70657273697374656e6365000474727565"
        "2a360d0a24330d0a5345540d0a24330d0a6b65790d0a24320d0a76320d0a24320d0a4e580d0a24320d0a50580d0a24340d0a3135"
        "30300d0a"
    ),
    # DEL key
    bytes.fromhex(
        "32f1020041737461746573746f72652f76312f46413941453335462d324636342d343743442d394246462d303845324233324130"
        "4645382f636f6d6d616e642f696e766f6b6500059402020000000a0300186170706c69636174696f6e2f6f637465742d73747265"
        "616d080065636c69656e74732f73736b762d776972652f73657276696365732f737461746573746f72652f76312f464139414533"
        "35462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e766f6b652f726573706f6e"
        "7365090010000000000000000000000000000000002600045f5f7473001f3030313730303030303030303030303a30303030363a"
        "73736b762d776972652600075f5f7372634964000973736b762d776972652600095f5f70726f745665720003312e3026000a2470"
        "6172746974696f6e000973736b762d7769726526000e24686967685f7072696f7269747900002a320d0a24330d0a44454c0d0a24"
        "330d0a6b65790d0a"
    ),
    # VDEL key v2
    bytes.fromhex(
        "32fa020041737461746573746f72652f76312f46413941453335462d324636342d343743442d394246462d303845324233324130"
        "4645382f636f6d6d616e642f696e766f6b6500069402020000000a0300186170706c69636174696f6e2f6f637465742d73747265"
        "616d080065636c69656e74732f73736b762d776972652f73657276696365732f737461746573746f72652f76312f464139414533"
        "35462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e766f6b652f726573706f6e"
        "7365090010000000000000000000000000000000002600045f5f7473001f3030313730303030303030303030303a30303030383a"
        "73736b762d776972652600075f5f7372634964000973736b762d776972652600095f5f70726f745665720003312e3026000a2470"
        "6172746974696f6e000973736b762d7769726526000e24686967685f7072696f7269747900002a330d0a24340d0a5644454c0d0a"
        "24330d0a6b65790d0a24320d0a76320d0a"
    ),
    # KEYNOTIFY watched
    bytes.fromhex(
        "32fb020041737461746573746f72652f76312f46413941453335462d324636342d343743442d394246462d303845324233324130"
        "4645382f636f6d6d616e642f696e766f6b6500079402020000000a0300186170706c69636174696f6e2f6f637465742d73747265"
        "616d080065636c69656e74732f73736b762d776972652f73657276696365732f737461746573746f72652f76312f464139414533"
        "35462d324636342d343743442d394246462d3038453242333241304645382f636f6d6d616e642f696e766f6b652f726573706f6e"
        "7365090010000000000000000000000000000000002600045f5f7473001f3030313730303030303030303030303a30303031303a"
        "73736b762d776972652600075f5f7372634964000973736b762d776972652600095f5f70726f745665720003312e3026000a2470"
        "6172746974696f6e000973736b762d7769726526000e24686967685f7072696f7269747900002a320d0a24390d0a4b45594e4f54"
        "4946590d0a24370d0a776174636865640d0a"
    ),
]
