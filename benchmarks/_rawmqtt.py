"""A minimal MQTT 5 client written directly on asyncio streams: the benchmarks' raw floor.

Only what a request/response round trip needs (CONNECT, SUBSCRIBE, PUBLISH QoS 1 with Response Topic
and Correlation Data, PUBACK). No library: this measures mosquitto + loopback + asyncio, nothing else.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _str(s: bytes) -> bytes:
    return struct.pack("!H", len(s)) + s


def user_properties(pairs: list[tuple[str, str]]) -> bytes:
    """MQTT 5 user properties (0x26), encoded once, for :meth:`RawMqtt.publish`."""
    return b"".join(b"\x26" + _str(k.encode()) + _str(v.encode()) for k, v in pairs)


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


def publish_packet(
    topic: bytes, payload: bytes, pid: int, response_topic: bytes | None, corr: bytes | None, user: bytes
) -> bytes:
    """A QoS 1 PUBLISH; ``user``: user properties already encoded (:func:`user_properties`)."""
    props = b""
    if response_topic is not None:
        props += b"\x08" + _str(response_topic)
    if corr is not None:
        props += b"\x09" + _str(corr)
    props += user
    body = _str(topic) + struct.pack("!H", pid) + _varint(len(props)) + props + payload
    return _packet(0x32, body)


def parse_publish(first: int, body: bytes) -> tuple[bytes, int | None, dict[int, bytes], bytes]:
    """A PUBLISH's topic, packet id (``None`` at QoS 0), the properties a round trip reads (response topic 0x08,
    correlation data 0x09, content type 0x03; the rest skipped) and payload."""
    tlen = struct.unpack_from("!H", body)[0]
    topic = body[2 : 2 + tlen]
    pos = 2 + tlen
    pid = None
    if (first >> 1) & 3:
        pid = struct.unpack_from("!H", body, pos)[0]
        pos += 2
    plen, mult = 0, 1
    while True:
        b = body[pos]
        pos += 1
        plen += (b & 0x7F) * mult
        mult *= 128
        if not b & 0x80:
            break
    end = pos + plen
    props: dict[int, bytes] = {}
    while pos < end:
        pid_ = body[pos]
        pos += 1
        if pid_ in (0x08, 0x09, 0x03):
            n = struct.unpack_from("!H", body, pos)[0]
            props[pid_] = body[pos + 2 : pos + 2 + n]
            pos += 2 + n
        elif pid_ == 0x26:
            n = struct.unpack_from("!H", body, pos)[0]
            m = struct.unpack_from("!H", body, pos + 2 + n)[0]
            pos += 4 + n + m
        elif pid_ == 0x01:
            pos += 1
        elif pid_ == 0x02:
            pos += 4
        elif pid_ == 0x23:
            pos += 2
        elif pid_ == 0x0B:
            while body[pos] & 0x80:
                pos += 1
            pos += 1
        else:
            raise ValueError(f"unexpected property {pid_:#x}")
    return topic, pid, props, body[end:]


class RawMqtt:
    """One MQTT 5 connection; ``on_publish(topic, payload, props)`` is called for every inbound PUBLISH."""

    def __init__(self, host: str, port: int, client_id: str, keepalive: int = 60) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        #: seconds; no PINGREQ is ever sent, so a connection idle for 1.5x this long is closed by the broker (0: never)
        self.keepalive = keepalive
        self.on_publish: Callable[[bytes, bytes, dict[int, bytes]], None] = lambda t, p, props: None
        self._next_id = 0
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._reader_task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        body = (
            _str(b"MQTT")
            + bytes([5, 0x02])
            + struct.pack("!H", self.keepalive)
            + _varint(0)
            + _str(self.client_id.encode())
        )
        self.writer.write(_packet(0x10, body))
        first, payload = await self._read_packet()
        if first >> 4 != 2 or payload[1] != 0:
            raise ConnectionError(f"CONNACK refused: {payload!r}")
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

    def _packet_id(self) -> int:
        self._next_id = self._next_id % 65535 + 1
        return self._next_id

    async def subscribe(self, topic: str) -> None:
        pid = self._packet_id()
        fut = asyncio.get_running_loop().create_future()
        self._acks[pid] = fut
        body = struct.pack("!H", pid) + _varint(0) + _str(topic.encode()) + bytes([1])
        self.writer.write(_packet(0x82, body))
        await fut

    def publish(
        self,
        topic: bytes,
        payload: bytes,
        response_topic: bytes | None = None,
        corr: bytes | None = None,
        user: bytes = b"",
    ) -> None:
        """QoS 1 publish; the PUBACK is consumed by the read loop and not waited for. ``user``: user properties
        already encoded (:func:`user_properties`)."""
        self.writer.write(publish_packet(topic, payload, self._packet_id(), response_topic, corr, user))

    async def _read_packet(self) -> tuple[int, bytes]:
        first = (await self.reader.readexactly(1))[0]
        mult, length = 1, 0
        while True:
            b = (await self.reader.readexactly(1))[0]
            length += (b & 0x7F) * mult
            mult *= 128
            if not b & 0x80:
                break
        return first, await self.reader.readexactly(length)

    async def _read_loop(self) -> None:
        while True:
            try:
                first, body = await self._read_packet()
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            kind = first >> 4
            if kind == 3:
                self._handle_publish(first, body)
            elif kind == 9:  # SUBACK
                pid = struct.unpack_from("!H", body)[0]
                fut = self._acks.pop(pid, None)
                if fut is not None and not fut.done():
                    fut.set_result(None)

    def _handle_publish(self, first: int, body: bytes) -> None:
        topic, pid, props, payload = parse_publish(first, body)
        if pid is not None:
            self.writer.write(_packet(0x40, struct.pack("!H", pid)))
        self.on_publish(topic, payload, props)

    async def close(self) -> None:
        self.writer.write(_packet(0xE0, b"\x00" + _varint(0)))
        if self._reader_task is not None:
            self._reader_task.cancel()
        self.writer.close()
