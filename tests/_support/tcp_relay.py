"""A TCP relay in front of a broker that can cut every relayed connection, as a load balancer dropping TCP does.

:meth:`TcpRelay.cut` aborts every connection both ways with a reset (SO_LINGER 0, no FIN, no MQTT DISCONNECT) and
refuses new connections for ``refuse_for`` seconds (each is accepted and reset at once). The broker behind stays
up, and with it every MQTT session: what a network blip between a client and the broker looks like.

Example::

    async with TcpRelay(broker_host, broker_port) as relay:
        client = AsyncStateStoreClient(relay.host, relay.port)
        ...
        relay.cut()
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

__all__ = ["TcpRelay"]

_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    writer.transport.abort()


class TcpRelay:
    """Relays 127.0.0.1:``port`` (a free one) to ``target_host``:``target_port``; counts cuts and connections."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.host = "127.0.0.1"
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._refuse_until = 0.0
        #: connections relayed (accepted while not refusing, and connected to the target)
        self.connections = 0
        #: connections reset at once because they came while refusing
        self.refused = 0
        self.cuts = 0

    async def start(self) -> TcpRelay:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._reset_all()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> TcpRelay:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def cut(self, refuse_for: float = 0.2) -> int:
        """Reset every relayed connection, both ways, and refuse new ones for ``refuse_for`` s; returns how many."""
        self.cuts += 1
        self._refuse_until = asyncio.get_running_loop().time() + refuse_for
        return self._reset_all()

    def _reset_all(self) -> int:
        links, self._links = self._links, set()
        for client, upstream in links:
            _reset(client)
            _reset(upstream)
        return len(links)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if asyncio.get_running_loop().time() < self._refuse_until:
            self.refused += 1
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        self.connections += 1
        link = (writer, up_writer)
        self._links.add(link)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.ensure_future(self._pump(src, dst, link))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        link: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (OSError, ConnectionError):
            pass
        # one side ended: end the other (a reset if the link was cut, else as the peer did)
        if link in self._links:
            self._links.discard(link)
            for w in link:
                w.transport.abort()
