"""Connection attempts that the broker ends before CONNACK fail at once, with a typed error.

aiomqtt on its own ignores a disconnect before CONNACK and waits for the connect timeout. That made a
client (or the emulator) that reconnected onto a dying or just-restarted broker hang for the whole
``connect_timeout`` (10 s by default) in the fault suite. The connect timeout here is far longer than the
test's own time limit, so only the early failure can pass.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sskv_mapping import BrokerConnectError
from sskv_mapping._transport.paho import PahoConnection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping._transport.stream import StreamConnection
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState

LONG_CONNECT_TIMEOUT = 600.0


class ClosingBroker:
    """A loopback TCP server that reads the CONNECT packet's first bytes and closes without CONNACK."""

    def __init__(self) -> None:
        self.connects = 0
        self.server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(1)
        if first[:1] == b"\x10":  # CONNECT
            self.connects += 1
        writer.close()

    async def __aenter__(self) -> ClosingBroker:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", [PahoConnection, StreamConnection], ids=["paho", "stream"])
async def test_transport_connect_fails_when_closed_before_connack(transport: type[Any]) -> None:
    async with ClosingBroker() as broker:
        settings = ConnectionSettings("127.0.0.1", broker.port, connect_timeout=LONG_CONNECT_TIMEOUT)
        conn = transport(settings, lambda message: None)
        with pytest.raises(BrokerConnectError, match="before CONNACK") as info:
            await conn.connect()
        assert not isinstance(info.value.__cause__, TimeoutError)
        assert broker.connects == 1
        assert not conn.connected


@pytest.mark.timeout(60)
async def test_client_connect_fails_when_closed_before_connack() -> None:
    async with ClosingBroker() as broker:
        settings = ConnectionSettings("127.0.0.1", broker.port, connect_timeout=LONG_CONNECT_TIMEOUT)
        client = AsyncStateStoreClient(settings=settings, timeout=5)
        with pytest.raises(BrokerConnectError, match="before CONNACK"):
            await client.connect()
        assert client.state is ConnectionState.DISCONNECTED
        assert client.requests_sent == 0
        await client.close()
