"""A zero-cost state store: answers a SET with OK and any other request with the same GET hit. Run as its own
process by bench_rpc.py and bench_instructions.py, so that a requester is measured without the emulator's work:
``python benchmarks/_zero_responder.py HOST PORT``. It prints ``ready`` once subscribed, then serves until killed.
Every packet one read brings is answered in one write: it stands in for a service on cores of its own, so it spends
as little of the shared machine as it can.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _rawmqtt import _packet, _str, _varint, parse_publish, publish_packet, user_properties

REQUEST_TOPIC = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"
VALUE = b"x" * 16
REPLY = b"$16\r\n" + VALUE + b"\r\n"
SET_REPLY = b"+OK\r\n"
# what the service puts on a GET hit: status, protocol version, the key's version
USER = user_properties([("__stat", "200"), ("__protVer", "1.0"), ("__ts", "001700000000000:00001:StateStore")])


class Responder(asyncio.Protocol):
    """The MQTT 5 connection: CONNECT, SUBSCRIBE, then each request PUBLISH acknowledged and answered."""

    def __init__(self) -> None:
        self.buffer = b""
        self.next_id = 0
        self.subscribed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # no keepalive: it sends no PINGREQ, and between bench_instructions' runs it may be idle for minutes
        connect = _str(b"MQTT") + bytes([5, 0x02]) + struct.pack("!H", 0) + _varint(0) + _str(b"bench-zero-responder")
        subscribe = struct.pack("!H", 1) + _varint(0) + _str(REQUEST_TOPIC.encode()) + bytes([1])
        transport.write(_packet(0x10, connect) + _packet(0x82, subscribe))

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        out: list[bytes] = []
        pos = 0
        while True:
            length, mult, at = 0, 1, pos + 1
            while at < len(buf) and buf[at] & 0x80:
                length, mult, at = length + (buf[at] & 0x7F) * mult, mult * 128, at + 1
            if at >= len(buf):
                break  # the remaining length is not all here yet
            start = at + 1
            end = start + length + (buf[at] & 0x7F) * mult
            if end > len(buf):
                break  # nor the packet
            first = buf[pos]
            if first >> 4 == 3:
                _, pid, props, payload = parse_publish(first, buf[start:end])
                if pid is not None:
                    out.append(b"\x40\x02" + struct.pack("!H", pid))
                self.next_id = self.next_id % 65535 + 1
                reply = SET_REPLY if payload[8:11] == b"SET" else REPLY
                out.append(publish_packet(props[0x08], reply, self.next_id, None, props[0x09], USER))
            elif first >> 4 == 9 and not self.subscribed.done():
                self.subscribed.set_result(None)
            pos = end
        self.buffer = buf[pos:]
        if out:
            self.transport.write(b"".join(out))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.subscribed.done():
            self.subscribed.set_exception(ConnectionError("the broker closed the responder's connection"))


async def main(host: str, port: int) -> None:
    _, responder = await asyncio.get_running_loop().create_connection(Responder, host, port)
    await responder.subscribed
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
