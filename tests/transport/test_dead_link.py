"""A dead link noticed under traffic: a TCP proxy (in the test, on loopback) between the client and mosquitto
stops forwarding both ways without closing anything -- a node lost, a partition, no RST. The client keeps
sending requests, so "nothing written" never happens; it must notice by what it no longer *receives*: a
PINGREQ after half a keepalive without a read, the link dropped when its PINGRESP does not come within half a
keepalive more. The calls in flight fail at once with ConnectionLostError (not at their timeouts), and the
client reconnects (through the proxy, which forwards new connections) and serves again.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest

from sskv_mapping._transport.factory import chosen_transport
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import ConnectionLostError
from tests._support.waiting import eventually

KEEPALIVE = 4


class FreezingProxy:
    """Forwards TCP between clients and ``target``; :meth:`freeze` makes every connection open now stop
    forwarding in both directions, sockets left open (what is sent is read and held, never delivered)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server: asyncio.Server | None = None
        self._frozen: list[asyncio.Event] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self.connections = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    def freeze(self) -> None:
        for frozen in self._frozen:
            frozen.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers += [writer, up_writer]
        frozen = asyncio.Event()
        self._frozen.append(frozen)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(src, dst, frozen))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, frozen: asyncio.Event) -> None:
        while data := await src.read(65536):
            if frozen.is_set():
                continue  # held: read (the sender sees its bytes taken) and never delivered
            dst.write(data)
            await dst.drain()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for writer in self._writers:
            writer.close()
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def proxy(mosquitto: MosquittoBroker) -> AsyncIterator[tuple[FreezingProxy, int]]:
    p = FreezingProxy((mosquitto.host, mosquitto.port))
    port = await p.start()
    try:
        yield p, port
    finally:
        await p.close()


@pytest.mark.skipif(
    chosen_transport() != "stream",
    reason="keepalive by bytes received is the stream transport's; paho pings on writes only (2x keepalive here)",
)
async def test_a_link_that_goes_silent_under_traffic_is_noticed_within_one_and_a_half_keepalives(
    proxy: tuple[FreezingProxy, int], emulator: object
) -> None:
    p, port = proxy
    # no session: the calls in flight at the drop fail at once, which is how this test sees the drop noticed
    settings = ConnectionSettings("127.0.0.1", port, keepalive=KEEPALIVE, session_expiry=0)
    loop = asyncio.get_running_loop()
    async with AsyncStateStoreClient(settings=settings, timeout=60, backoff_max=0.2) as client:
        key = f"dead-link-{uuid.uuid4().hex[:8]}"
        await client.set(key, b"v")
        failures: list[float] = []
        successes_after: list[float] = []
        frozen_at: list[float] = []

        async def traffic() -> None:
            while True:
                try:
                    await client.set(key, b"v")
                except ConnectionLostError:
                    failures.append(loop.time())
                    with contextlib.suppress(ConnectionLostError):
                        await client.wait_connected(timeout=30)
                    continue
                if frozen_at and failures:
                    successes_after.append(loop.time())

        flowing = asyncio.create_task(traffic())
        try:
            await eventually(lambda: client.requests_sent > 20, timeout=30)
            frozen_at.append(loop.time())
            p.freeze()
            await eventually(lambda: bool(failures), timeout=KEEPALIVE * 4)
            noticed = failures[0] - frozen_at[0]
            assert noticed <= 1.5 * KEEPALIVE, f"the dead link was noticed after {noticed:.2f} s"
            await eventually(lambda: bool(successes_after), timeout=30)  # reconnected, through a new connection
            assert client.reconnects >= 1 and p.connections >= 2
        finally:
            flowing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flowing
