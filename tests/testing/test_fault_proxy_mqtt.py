"""The fault proxy's MQTT faults (the Azure IoT Operations SDKs' faultable broker's ``fault:*`` user properties,
and the same faults armed from the test) over the real mosquitto and emulator, with our client in front."""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest

from sskv_mapping import AsyncStateStoreClient, PublishRefusedError
from sskv_mapping._protocol import mqtt_packets as packets
from sskv_mapping._protocol.mqtt_publish import mqtt_str, varint
from sskv_mapping._transport.factory import chosen_transport
from sskv_mapping.client import ConnectionState
from sskv_mapping.errors import ConfigurationError
from sskv_mapping.testing import FaultProxy
from tests._support.waiting import eventually

pytestmark = pytest.mark.broker

WAIT = 10.0


def _raw_packets(sock: socket.socket, want: int) -> list[tuple[int, bytes]]:
    splitter = packets.PacketSplitter()
    got: list[tuple[int, bytes]] = []
    sock.settimeout(WAIT)
    while len(got) < want:
        data = sock.recv(65536)
        if not data:
            break
        got += splitter.feed(data)
    return got


def _connect_with(properties: list[tuple[str, str]], client_id: str) -> bytes:
    props = b"".join(b"\x26" + mqtt_str(k) + mqtt_str(v) for k, v in properties)
    head = mqtt_str("MQTT") + bytes((5, 0x02)) + (30).to_bytes(2, "big") + varint(len(props)) + props
    body = head + mqtt_str(client_id)
    return b"\x10" + varint(len(body)) + body


def _publish_with(properties: list[tuple[str, str]], packet_id: int) -> bytes:
    props = b"".join(b"\x26" + mqtt_str(k) + mqtt_str(v) for k, v in properties)
    return packets.publish_packet(mqtt_str("sskv/test/fault"), b"x", 1, packet_id, varint(len(props)) + props)


async def test_a_refused_publish_is_a_typed_error_and_the_next_call_works(broker_address: tuple[str, int]) -> None:
    key = f"fault-{uuid.uuid4().hex[:8]}"
    async with (
        FaultProxy(broker_address, mqtt=True) as proxy,
        AsyncStateStoreClient.from_url(proxy.url, timeout=WAIT) as client,
    ):
        await client.set(key, b"before")
        proxy.reject_next("publish", 0x87)
        with pytest.raises(PublishRefusedError, match="Not authorized"):
            await client.set(key, b"refused")
        assert proxy.stats.faults == 1
        entry = await client.get(key)  # nothing of the refused write reached the store
        assert entry is not None and entry.value == b"before"
        assert client.reconnects == 0


@pytest.mark.skipif(chosen_transport() != "stream", reason="the stream transport's session guarantees")
async def test_a_disconnect_on_a_publish_is_ridden_out(broker_address: tuple[str, int]) -> None:
    """``fault:disconnect`` without a delay: the proxy sends DISCONNECT in the broker's place and drops the
    PUBLISH; the client reconnects, sends it again within the call's deadline, and the call succeeds."""
    key = f"fault-{uuid.uuid4().hex[:8]}"
    async with (
        FaultProxy(broker_address, mqtt=True) as proxy,
        AsyncStateStoreClient.from_url(proxy.url, timeout=WAIT) as client,
    ):
        await client.set(key, b"before")
        proxy.disconnect_next("publish", 0x8B)  # Server shutting down
        assert await client.set(key, b"after")
        await eventually(lambda: client.state is ConnectionState.CONNECTED, WAIT)
        assert client.reconnects == 1 and proxy.stats.faults == 1
        entry = await client.get(key)
        assert entry is not None and entry.value == b"after"
        proxy.disconnect_next("publish", 0x8B, delay=0.2)  # passed on, answered, then the link is dropped
        assert await client.set(key, b"later")
        await eventually(lambda: client.reconnects == 2, WAIT)


async def test_the_sdk_brokers_user_properties_are_honoured(broker_address: tuple[str, int]) -> None:
    """A client that writes the ``fault:*`` user properties itself (as the SDKs' tests do): CONNECT refused with
    the code asked for; a PUBLISH refused once per ``fault:requestid``."""
    async with FaultProxy(broker_address, mqtt=True) as proxy:
        loop = asyncio.get_running_loop()

        def exchange() -> None:
            with socket.create_connection((proxy.host, proxy.port)) as sock:
                sock.sendall(_connect_with([("fault:rejectconnect", "137")], f"f-{uuid.uuid4().hex[:6]}"))
                ((first, body),) = _raw_packets(sock, 1)
                assert first == 0x20 and packets.decode_connack(body).reason == 0x89
                assert sock.recv(10) == b""  # and closed
            with socket.create_connection((proxy.host, proxy.port)) as sock:
                sock.sendall(_connect_with([], f"f-{uuid.uuid4().hex[:6]}"))
                ((first, body),) = _raw_packets(sock, 1)
                assert packets.decode_connack(body).reason == 0
                refuse = [("fault:rejectpublish", "151"), ("fault:requestid", "r1")]
                sock.sendall(_publish_with(refuse, 1) + _publish_with(refuse, 2))  # the same request id twice
                acks = sorted(packets.decode_ack(body) for first, body in _raw_packets(sock, 2) if first >> 4 == 4)
                assert acks == [(1, 0x97), (2, 0x10)]  # refused once (Quota exceeded); then the broker's own answer

        await loop.run_in_executor(None, exchange)
        assert proxy.stats.faults == 2


def test_faults_name_their_packets() -> None:
    with FaultProxy(("127.0.0.1", 9), mqtt=True) as proxy:
        with pytest.raises(ConfigurationError, match="packet must be one of"):
            proxy.reject_next("pingreq", 0x87)
        with pytest.raises(ConfigurationError, match="0-255"):
            proxy.reject_next("publish", 300)
        with pytest.raises(ConfigurationError, match="reject_next"):
            proxy.disconnect_next("connect")
