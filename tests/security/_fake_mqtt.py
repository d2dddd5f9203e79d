"""A tiny fake MQTT 5 broker on asyncio sockets (loopback only), for the K8S-SAT tests.

mosquitto without a plugin refuses every enhanced-authentication method, so it cannot show what a client
puts in CONNECT. This server records each CONNECT's client id, user name, Authentication Method (property
0x15) and Authentication Data (0x16); answers CONNACK (success, or a chosen failure reason code), SUBACK,
UNSUBACK, PUBACK and PINGRESP; and drops every connection on demand. Nothing else: it routes no messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass

__all__ = ["ConnectRecord", "FakeMqttBroker"]

# MQTT 5 property identifiers by value type (MQTT 5.0 spec, section 2.2.2.2).
_BYTE = {0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A}
_TWO = {0x13, 0x21, 0x22, 0x23}
_FOUR = {0x02, 0x11, 0x18, 0x27}
_VARINT = {0x0B}
_STRING = {0x03, 0x08, 0x12, 0x15, 0x1A, 0x1C, 0x1F}
_BINARY = {0x09, 0x16}
_PAIR = {0x26}

AUTHENTICATION_METHOD = 0x15
AUTHENTICATION_DATA = 0x16


@dataclass(frozen=True)
class ConnectRecord:
    client_id: str
    username: str | None
    password: bytes | None
    auth_method: str | None
    auth_data: bytes | None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("truncated packet")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        value: int = struct.unpack("!H", self.take(2))[0]
        return value

    def varint(self) -> int:
        value, shift = 0, 0
        for _ in range(4):
            byte = self.u8()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise ValueError("malformed variable byte integer")

    def binary(self) -> bytes:
        return self.take(self.u16())

    def string(self) -> str:
        return self.binary().decode("utf-8")

    def properties(self) -> dict[int, object]:
        end = self.varint()
        end += self.pos
        props: dict[int, object] = {}
        while self.pos < end:
            ident = self.varint()
            value: object
            if ident in _BYTE:
                value = self.u8()
            elif ident in _TWO:
                value = self.u16()
            elif ident in _FOUR:
                value = struct.unpack("!I", self.take(4))[0]
            elif ident in _VARINT:
                value = self.varint()
            elif ident in _STRING:
                value = self.string()
            elif ident in _BINARY:
                value = self.binary()
            elif ident in _PAIR:
                value = (self.string(), self.string())
            else:
                raise ValueError(f"unknown property 0x{ident:02x}")
            props[ident] = value
        return props


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


def parse_connect(body: bytes) -> ConnectRecord:
    r = _Reader(body)
    if r.string() != "MQTT" or r.u8() != 5:
        raise ValueError("not an MQTT 5 CONNECT")
    flags = r.u8()
    r.u16()  # keepalive
    props = r.properties()
    client_id = r.string()
    if flags & 0x04:  # will flag: will properties, topic, payload
        r.properties()
        r.string()
        r.binary()
    username = r.string() if flags & 0x80 else None
    password = r.binary() if flags & 0x40 else None
    method = props.get(AUTHENTICATION_METHOD)
    data = props.get(AUTHENTICATION_DATA)
    return ConnectRecord(
        client_id=client_id,
        username=username,
        password=password,
        auth_method=method if isinstance(method, str) else None,
        auth_data=data if isinstance(data, bytes) else None,
    )


class FakeMqttBroker:
    """``async with FakeMqttBroker() as fake: ... fake.port ... await fake.wait_for_connects(2)``.

    ``connack_reason``: the CONNACK reason code to answer (0 = success; 0x87 = not authorized, ...).
    ``suback_reason``: answer every SUBSCRIBE with this reason code (``None``: grant the requested QoS).
    """

    def __init__(self, connack_reason: int = 0, suback_reason: int | None = None) -> None:
        self.connack_reason = connack_reason
        self.suback_reason = suback_reason
        self.connects: list[ConnectRecord] = []
        self.accepted = 0  #: TCP connections accepted (a client that fails before connecting makes none)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()

    async def __aenter__(self) -> FakeMqttBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.drop_all()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._server.wait_closed()

    def drop_all(self) -> int:
        """Close every client connection abruptly (no DISCONNECT): what a broker restart looks like."""
        writers = list(self._writers)
        for writer in writers:
            writer.transport.abort()
        self._writers.clear()
        return len(writers)

    async def wait_for_connects(self, count: int, timeout: float = 10.0) -> list[ConnectRecord]:
        async with asyncio.timeout(timeout):
            while len(self.connects) < count:
                self._changed.clear()
                await self._changed.wait()
        return list(self.connects)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        self.accepted += 1
        try:
            while True:
                first = (await reader.readexactly(1))[0]
                length, shift = 0, 0
                while True:
                    byte = (await reader.readexactly(1))[0]
                    length |= (byte & 0x7F) << shift
                    shift += 7
                    if not byte & 0x80:
                        break
                body = await reader.readexactly(length)
                if not self._answer(first, body, writer):
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
            self._handlers.discard(task)

    def _answer(self, first: int, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """Reply to one packet; False ends the connection."""
        kind = first >> 4
        if kind == 1:  # CONNECT
            self.connects.append(parse_connect(body))
            self._changed.set()
            writer.write(_packet(0x20, bytes([0, self.connack_reason, 0])))  # flags, reason, no properties
            return self.connack_reason == 0
        if kind == 8:  # SUBSCRIBE: packet id, properties, (filter, options)*
            r = _Reader(body)
            packet_id = r.take(2)
            r.properties()
            codes = bytearray()
            while r.pos < len(body):
                r.string()
                requested = r.u8() & 0x03
                codes.append(requested if self.suback_reason is None else self.suback_reason)
            writer.write(_packet(0x90, packet_id + b"\x00" + bytes(codes)))
        elif kind == 10:  # UNSUBSCRIBE
            r = _Reader(body)
            packet_id = r.take(2)
            r.properties()
            count = 0
            while r.pos < len(body):
                r.string()
                count += 1
            writer.write(_packet(0xB0, packet_id + b"\x00" + bytes(count)))
        elif kind == 3:  # PUBLISH: acknowledge QoS 1, route nothing
            if (first >> 1) & 0x03 == 1:
                r = _Reader(body)
                r.string()
                writer.write(_packet(0x40, r.take(2)))
        elif kind == 12:  # PINGREQ
            writer.write(b"\xd0\x00")
        elif kind == 14:  # DISCONNECT
            return False
        return True
