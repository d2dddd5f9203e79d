"""The fault proxy's toxics at the TCP level: a local echo server behind it, real sockets on loopback.

Timing checks are lower bounds only (a toxic that delays must have delayed at least that long), never "fast enough".
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import pytest

from sskv_mapping.errors import ClientStateError, ConfigurationError
from sskv_mapping.testing import FaultProxy
from tests._support.waiting import eventually

LONG = 10.0  # a bound for what must happen, generous for a loaded machine


class Echo:
    """Echoes what it reads; ``b"close"`` makes it close its side (and records when)."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.closed_at: list[float] = []
        self.received = bytearray()

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return "127.0.0.1", self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                self.received += data
                if data.endswith(b"close"):
                    self.closed_at.append(time.monotonic())
                    break
                writer.write(data)
                await writer.drain()
        writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    server = Echo()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def proxy(echo: Echo) -> AsyncIterator[FaultProxy]:
    assert echo.server is not None
    async with FaultProxy(("127.0.0.1", echo.server.sockets[0].getsockname()[1]), seed=7) as p:
        yield p


async def _open(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(proxy.host, proxy.port)


async def _turned_away(proxy: FaultProxy) -> bool:
    """A new connection is reset or closed before any byte comes back."""
    try:
        reader, writer = await _open(proxy)
    except ConnectionError:
        return True
    try:
        writer.write(b"anyone?")
        return await asyncio.wait_for(reader.read(1), LONG) == b""
    except ConnectionError:
        return True
    finally:
        writer.close()


async def _round_trip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), LONG)


async def test_without_toxics_it_relays_both_ways(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    assert await _round_trip(reader, writer, b"hello" * 1000) == b"hello" * 1000
    assert proxy.stats.connections == 1
    assert proxy.stats.upstream_bytes == proxy.stats.downstream_bytes == 5000
    writer.close()
    await eventually(lambda: proxy.open_links == 0, LONG)


async def test_latency_delays_each_way_and_keeps_the_order(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    await _round_trip(reader, writer, b"warm")
    proxy.add_toxic("latency", stream="upstream", latency=150, jitter=0)
    proxy.add_toxic("latency", stream="downstream", latency=100, jitter=90)
    start = time.monotonic()
    assert await _round_trip(reader, writer, b"x") == b"x"
    assert time.monotonic() - start >= 0.15 + 0.01  # 150 ms up, at least 10 ms down
    messages = [b"%03d;" % n for n in range(60)]
    for message in messages:  # jitter of +-90 ms on each chunk: still in order
        writer.write(message)
        await writer.drain()
        await asyncio.sleep(0.001)
    got = await asyncio.wait_for(reader.readexactly(sum(map(len, messages))), LONG)
    assert got == b"".join(messages)
    writer.close()


async def test_bandwidth_paces_the_bytes(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    proxy.add_toxic("bandwidth", stream="downstream", rate=20)  # 20 KB/s
    start = time.monotonic()
    data = bytes(range(256)) * 40  # 10,240 bytes: half a second at 20 KB/s
    assert await _round_trip(reader, writer, data) == data
    assert time.monotonic() - start >= 0.4  # the last chunk's pacing may fall after its write
    writer.close()


async def test_slicer_sends_small_segments(proxy: FaultProxy) -> None:
    proxy.add_toxic("slicer", stream="downstream", average_size=3, size_variation=2, delay=5000)
    sock = socket.create_connection((proxy.host, proxy.port))
    try:
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        data = bytes(range(200))
        await loop.sock_sendall(sock, data)
        got = bytearray()
        reads = []
        async with asyncio.timeout(LONG):
            while len(got) < len(data):
                chunk = await loop.sock_recv(sock, 65536)
                assert chunk
                reads.append(len(chunk))
                got += chunk
        assert bytes(got) == data
        assert len(reads) > 5  # 40-200 segments 5 ms apart cannot all arrive in one read
    finally:
        sock.close()


async def test_timeout_zero_stalls_without_closing_until_removed(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    await _round_trip(reader, writer, b"warm")
    proxy.add_toxic("timeout", stream="upstream", timeout=0)
    writer.write(b"held")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(4), 0.3)
    assert proxy.open_links == 1  # half-open: nothing flows, nothing closes
    proxy.remove_toxic("timeout_upstream")
    assert await asyncio.wait_for(reader.readexactly(4), LONG) == b"held"
    writer.close()


async def test_timeout_closes_after_its_time(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    start = time.monotonic()
    proxy.add_toxic("timeout", stream="downstream", timeout=200)
    writer.write(b"never echoed")
    assert await asyncio.wait_for(reader.read(100), LONG) == b""
    assert time.monotonic() - start >= 0.2
    writer.close()


async def test_reset_peer_resets_each_connection_after_its_timeout(proxy: FaultProxy) -> None:
    proxy.add_toxic("reset_peer", timeout=100, jitter=50)
    for _ in range(3):  # a flapping link: every new connection is reset too
        reader, writer = await _open(proxy)
        start = time.monotonic()
        with pytest.raises(ConnectionResetError):
            async with asyncio.timeout(LONG):
                while True:
                    writer.write(b"ping")
                    await writer.drain()
                    await reader.readexactly(4)
        assert time.monotonic() - start >= 0.05
        writer.close()
    assert proxy.stats.cuts >= 3
    await eventually(lambda: proxy.open_links == 0, LONG)


async def test_slow_close_holds_the_close_back(proxy: FaultProxy, echo: Echo) -> None:
    proxy.add_toxic("slow_close", stream="downstream", delay=300)
    reader, writer = await _open(proxy)
    writer.write(b"close")
    assert await asyncio.wait_for(reader.read(100), LONG) == b""
    await eventually(lambda: bool(echo.closed_at), LONG)
    assert time.monotonic() - echo.closed_at[0] >= 0.3
    writer.close()


async def test_limit_data_cuts_mid_stream(proxy: FaultProxy) -> None:
    proxy.add_toxic("limit_data", stream="downstream", bytes=10)
    reader, writer = await _open(proxy)
    writer.write(b"0123456789abcdefghij")
    got = await asyncio.wait_for(reader.read(100), LONG)
    rest = await asyncio.wait_for(reader.read(100), LONG) if got else b""
    assert got + rest == b"0123456789"
    assert await asyncio.wait_for(reader.read(100), LONG) == b""
    writer.close()


async def test_toxicity_zero_spares_every_connection(proxy: FaultProxy) -> None:
    proxy.add_toxic("timeout", stream="upstream", toxicity=0.0, timeout=0)
    reader, writer = await _open(proxy)
    assert await _round_trip(reader, writer, b"free") == b"free"
    writer.close()


async def test_cut_resets_and_refuses_for_a_while_and_disable_until_enabled(proxy: FaultProxy) -> None:
    reader, writer = await _open(proxy)
    await _round_trip(reader, writer, b"warm")
    assert proxy.cut(refuse_for=5) == 1
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(reader.readexactly(1), LONG)
    writer.close()
    assert await _turned_away(proxy)  # accepted and reset at once
    assert proxy.stats.refused >= 1
    proxy.reset()
    proxy.cut(refuse_for=0)
    proxy.disable()
    assert await _turned_away(proxy)
    proxy.enable()
    reader, writer = await _open(proxy)
    assert await _round_trip(reader, writer, b"back") == b"back"
    writer.close()


async def test_removing_a_toxic_restores_the_link_and_nothing_piles_up(proxy: FaultProxy) -> None:
    for n in range(20):
        proxy.add_toxic("latency", latency=1)
        reader, writer = await _open(proxy)
        assert await _round_trip(reader, writer, b"%d" % n) == b"%d" % n
        proxy.remove_toxic("latency_downstream")
        writer.close()
    await eventually(lambda: proxy.open_links == 0, LONG)
    assert proxy.toxics == []


def test_bad_toxics_are_typed_errors() -> None:
    with FaultProxy(("127.0.0.1", 9)) as proxy:
        with pytest.raises(ConfigurationError, match="unknown toxic type"):
            proxy.add_toxic("netem")
        with pytest.raises(ConfigurationError, match="no attribute 'delay'"):
            proxy.add_toxic("latency", delay=3)
        with pytest.raises(ConfigurationError, match="needs its 'rate'"):
            proxy.add_toxic("bandwidth")
        with pytest.raises(ConfigurationError, match=">= 0"):
            proxy.add_toxic("latency", latency=-1)
        with pytest.raises(ConfigurationError, match="stream"):
            proxy.add_toxic("latency", stream="sideways")
        with pytest.raises(ConfigurationError, match="probability"):
            proxy.add_toxic("latency", toxicity=2)
        with pytest.raises(ConfigurationError, match="mqtt=True"):
            proxy.reject_next("publish", 0x87)
        proxy.add_toxic("latency", latency=5)
        with pytest.raises(ConfigurationError, match="already"):
            proxy.add_toxic("latency", latency=5)
        assert proxy.update_toxic("latency_downstream", jitter=2).attributes == {"latency": 5, "jitter": 2}
        with pytest.raises(ConfigurationError, match="no toxic named"):
            proxy.remove_toxic("nope")
    with pytest.raises(ClientStateError, match="not started"):
        proxy.add_toxic("latency")
