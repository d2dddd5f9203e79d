"""A TCP relay between clients and a broker that cuts connections as load balancers and restarting front-ends do
(the fault of issue 26): real sockets on loopback, the broker and the clients untouched."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), not a FIN: the peer sees ECONNRESET, as after a cut."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class CuttingRelay:
    """Forwards TCP to ``target``. :meth:`cut` aborts every relayed connection (RST both ways) and refuses new
    ones for ``refuse_for`` seconds; :meth:`hold` discards from then on what the broker sends (``"replies"``: a
    PUBACK lost with the link) or what clients send (``"requests"``: a PUBLISH lost with it), and
    :attr:`upstream_bytes` counts what clients sent (to cut right after a request)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server: asyncio.Server | None = None
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._refusing_until = 0.0
        self._holding: str | None = None
        self._closed_quietly: set[asyncio.StreamWriter] = set()
        self.connections = 0
        self.cuts = 0
        self.upstream_bytes = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    def hold(self, direction: str) -> None:
        assert direction in ("replies", "requests")
        self._holding = direction

    def cut(self, refuse_for: float = 0.2, *, how: str = "reset") -> None:
        """``how="reset"``: RST both ways; ``"close"``: a clean close (FIN) both ways, without a word of MQTT --
        what a proxy that closes connections does, and what a broker that takes a session over without 0x8E
        does to the older connection."""
        assert how in ("reset", "close")
        self.cuts += 1
        self._holding = None
        self._refusing_until = asyncio.get_running_loop().time() + refuse_for
        pairs, self._pairs = self._pairs, []
        for client, upstream in pairs:
            if how == "reset":
                _reset(client)
                _reset(upstream)
            else:  # FIN now; what either side still sends is read and dropped until it closes (no RST for unread data)
                self._closed_quietly.update((client, upstream))
                for w in (client, upstream):
                    with contextlib.suppress(OSError, RuntimeError):
                        w.write_eof()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if asyncio.get_running_loop().time() < self._refusing_until:
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        self.connections += 1
        self._pairs.append((writer, up_writer))
        for src, dst, upstream in ((reader, up_writer, True), (up_reader, writer, False)):
            task = asyncio.create_task(self._pump(src, dst, upstream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(65536):
                if upstream:
                    self.upstream_bytes += len(data)
                if self._holding == ("requests" if upstream else "replies") or dst in self._closed_quietly:
                    continue  # lost with the link
                dst.write(data)
                await dst.drain()
        with contextlib.suppress(OSError):
            dst.close()
        self._closed_quietly.discard(dst)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for client, upstream in self._pairs:
            client.transport.abort()
            upstream.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
