"""Write backpressure against a broker that stops reading (a private mosquitto, SIGSTOPped).

``publish_nowait`` never waits: once the write backlog (the transport's buffer, the output of this loop
iteration, the publishes held for the broker's Receive Maximum) would pass the connection's bound it raises
``WriteBufferFullError`` and keeps nothing -- 100,000 publishes of 4 KiB leave the backlog under the bound.
``publish`` waits while the transport is paused, within its timeout, and goes out once the broker reads again.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from sskv_mapping._protocol.mqtt_publish import OutgoingMessage
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping._transport.stream import StreamConnection
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import RequestTimeoutError, WriteBufferFullError

PAYLOAD = b"b" * 4096
BOUND = 4 << 20


@pytest.mark.parametrize("qos", [0, 1], ids=["qos0-socket-buffer", "qos1-receive-maximum-queue"])
async def test_a_broker_that_stops_reading_bounds_the_backlog_and_makes_publish_wait(
    fresh_mosquitto: MosquittoBroker, qos: int
) -> None:
    pid = fresh_mosquitto.pid
    assert pid is not None
    conn = StreamConnection(ConnectionSettings(fresh_mosquitto.host, fresh_mosquitto.port), lambda m: None)
    await conn.connect()
    conn.write_bound = BOUND
    os.kill(pid, signal.SIGSTOP)
    try:
        accepted = refused = 0
        largest = 0
        for i in range(100_000):
            try:
                conn.publish_nowait(OutgoingMessage("t/backpressure", PAYLOAD, qos=qos))
                accepted += 1
            except WriteBufferFullError:
                refused += 1
            largest = max(largest, conn._output.backlog())
            if i % 64 == 63:
                await asyncio.sleep(0)  # the loop writes what was queued (the socket takes what it can)
        assert largest <= BOUND + len(PAYLOAD) + 200, largest
        assert refused > 0 and accepted > 0
        assert conn.connected
        if qos == 0:
            assert conn._output.paused  # the transport's buffer passed its high-water mark
            # an awaiting publisher waits (nothing added to the backlog) and times out, nothing sent
            before = conn._output.backlog()
            with pytest.raises(RequestTimeoutError, match="nothing was sent"):
                await conn.publish(OutgoingMessage("t/backpressure", PAYLOAD, qos=0), timeout=0.5)
            assert conn._output.backlog() == before
            waiting = asyncio.create_task(conn.publish(OutgoingMessage("t/backpressure", b"after", qos=0), timeout=60))
            await asyncio.sleep(0)
            assert not waiting.done()
        os.kill(pid, signal.SIGCONT)
        if qos == 0:
            async with asyncio.timeout(60):
                await waiting  # the broker reads again: the buffer drains, the publisher goes on
        async with asyncio.timeout(60):
            await conn.publish(OutgoingMessage("t/backpressure", b"last", qos=1))
        assert conn.connected
    finally:
        os.kill(pid, signal.SIGCONT)
        await conn.close()


async def test_a_responder_stops_reading_while_its_writes_are_paused() -> None:
    """read_flow_control (the emulator's connection): no new requests are read while replies cannot leave."""
    drain = asyncio.Event()

    async def slow_reader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)  # the CONNECT
        writer.write(b"\x20\x03\x00\x00\x00")
        await drain.wait()  # not reading: our peer's writes pile up
        while await reader.read(1 << 20):
            pass

    server = await asyncio.start_server(slow_reader, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = StreamConnection(ConnectionSettings("127.0.0.1", port, keepalive=0), lambda m: None)
    conn.read_flow_control = True
    try:
        await conn.connect()
        transport = conn._transport
        assert transport is not None and transport.is_reading()
        while not conn._output.paused:
            conn.publish_nowait(OutgoingMessage("t/replies", PAYLOAD, qos=0))
            await asyncio.sleep(0)
        assert not transport.is_reading()
        drain.set()
        async with asyncio.timeout(30):
            await conn.publish(OutgoingMessage("t/replies", b"after", qos=0))  # waits for resume_writing
        assert not conn._output.paused and transport.is_reading()
    finally:
        await conn.close()
        server.close()
