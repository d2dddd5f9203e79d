"""The paho transport (``_transport/paho.py``: aiomqtt and paho, ``SSKV_MQTT_TRANSPORT=paho``) as an independent
oracle for our own MQTT codec, and its correctness hooks.

* the PUBLISH property encoder of ``_protocol/mqtt_publish.py`` produces paho's ``Properties.pack()`` bytes,
  byte for byte (the paho transport lets paho encode them itself);
* the PUBLISH decoder produces what paho's ``decode_publish`` + aiomqtt's ``Message`` + ``_convert`` produce,
  and refuses (``MalformedPacketError``) what that path refuses;
* through a real mosquitto: every property arrives intact at QoS 1, packets leave in call order, large packets
  survive partial writes and reads, ``publish`` waits for the PUBACK and fails at once when the connection
  ends, the server's Receive Maximum is honoured, and paho's own packet handling is left as it is.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiomqtt
import paho.mqtt.client as paho_client
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from paho.mqtt import _packet as paho_packet
from paho.mqtt.properties import Properties

from sskv_mapping._protocol.mqtt_publish import InboundMessage, MalformedPacketError, OutgoingMessage, decode_publish
from sskv_mapping._protocol.mqtt_publish import publish_properties as _publish_property_bytes
from sskv_mapping._transport import paho as paho_module
from sskv_mapping._transport.paho import PahoConnection, _publish_properties
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import ConfigurationError, ConnectionLostError, ServiceUnavailableError

WAIT = 10.0

# -- what paho would do ------------------------------------------------------------------------------------


def paho_pack(
    correlation_data: bytes | None,
    response_topic: str | None,
    user_properties: list[tuple[str, str]],
    content_type: str | None,
    message_expiry: int | None,
) -> bytes:
    # the transport's own builder: paho's Properties, packed by paho
    message = OutgoingMessage(
        "t", b"", 1, correlation_data, response_topic, user_properties, content_type, message_expiry
    )
    props = _publish_properties(message)
    packed: bytes = props.pack()
    return bytes(packed)


def paho_decode(header: int, packet: bytes) -> InboundMessage:
    """The paho transport's inbound path: paho's decoder, its MQTTMessage, aiomqtt's Message, then our conversion."""
    result = paho_packet.decode_publish(header, packet, paho_client.MQTTv5)
    message = paho_client.MQTTMessage(mid=result.mid, topic=result.topic)
    message.qos = result.qos
    message.properties = result.properties
    message.payload = result.payload
    return paho_module._convert(aiomqtt.Message._from_paho_message(message))


def publish_packet(topic: bytes, qos: int, mid: int, properties: bytes, payload: bytes) -> tuple[int, bytes]:
    """(first byte, variable header + payload) of a PUBLISH, as paho hands them to its decoder."""
    body = struct.pack("!H", len(topic)) + topic
    if qos:
        body += struct.pack("!H", mid)
    return 0x30 | (qos << 1), body + properties + payload


# Strings the way MQTT allows them (no U+0000, no U+FEFF; surrogates cannot be encoded at all).
mqtt_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00\ufeff"), max_size=40)
user_props = st.lists(st.tuples(mqtt_text, mqtt_text), max_size=12)
optional_text = st.none() | mqtt_text
correlation = st.none() | st.binary(max_size=40)
expiry = st.none() | st.integers(0, 0xFFFFFFFF)


# -- the encoder -------------------------------------------------------------------------------------------

ENCODER_CASES = [
    (None, None, [], None, None),
    (b"", "", [("", "")], "", 0),
    (
        b"\x00\xff" * 8,
        "clients/c-1/services/statestore/_any_/command/invoke/response",
        [],
        "application/octet-stream",
        10,
    ),
    (
        uuid.uuid4().bytes,
        "réponse/日本/🙂",
        [("clé", "värde"), ("__ts", "1732262400000:00000:c")],
        "text/π",
        0xFFFFFFFF,
    ),
    (None, None, [("k", "v")] * 3, None, None),  # repeated names keep their order
    (b"x" * 300, "t" * 200, [(f"name-{i}", "v" * i) for i in range(200)], "c", 1),  # a 2- then 3-byte length
]


@pytest.mark.parametrize("case", ENCODER_CASES)
def test_encoder_matches_paho_pack(case: tuple[Any, ...]) -> None:
    corr, response, user, ctype, exp = case
    assert _publish_property_bytes(corr, response, user, ctype, exp) == paho_pack(corr, response, user, ctype, exp)


@given(correlation, optional_text, user_props, optional_text, expiry)
@settings(max_examples=300, deadline=None)
def test_encoder_matches_paho_pack_for_any_values(
    corr: bytes | None, response: str | None, user: list[tuple[str, str]], ctype: str | None, exp: int | None
) -> None:
    assert _publish_property_bytes(corr, response, user, ctype, exp) == paho_pack(corr, response, user, ctype, exp)


def test_encoder_refuses_a_value_over_65535_bytes() -> None:
    with pytest.raises(ConfigurationError):
        _publish_property_bytes(b"x" * 65536, None, [], None, None)
    with pytest.raises(ConfigurationError):
        _publish_property_bytes(None, None, [("k", "é" * 40000)], None, None)  # 80,000 bytes once encoded


def test_encoded_properties_are_what_paho_logs_and_sends() -> None:
    props = _publish_properties(
        OutgoingMessage("t", b"", correlation_data=b"c", response_topic="r", user_properties=[("a", "b")])
    )
    assert type(props) is Properties  # paho's own: paho encodes what the paho transport sends
    assert props.pack() == _publish_property_bytes(b"c", "r", [("a", "b")], None, None)


# -- the decoder -------------------------------------------------------------------------------------------


@given(
    topic=mqtt_text.filter(lambda t: t and "+" not in t and "#" not in t),
    qos=st.sampled_from([0, 1]),
    mid=st.integers(1, 65535),
    corr=correlation,
    response=optional_text,
    user=user_props,
    ctype=optional_text,
    exp=expiry,
    payload=st.binary(max_size=100),
)
@settings(max_examples=300, deadline=None)
@example(
    topic="t", qos=1, mid=7, corr=b"", response="", user=[("", "")], ctype="", exp=0, payload=b""
)  # every property present and empty
def test_decoder_matches_paho_and_aiomqtt(
    topic: str,
    qos: int,
    mid: int,
    corr: bytes | None,
    response: str | None,
    user: list[tuple[str, str]],
    ctype: str | None,
    exp: int | None,
    payload: bytes,
) -> None:
    props = paho_pack(corr, response, user, ctype, exp)
    header, body = publish_packet(topic.encode(), qos, mid, props, payload)
    message, got_mid = decode_publish(header, bytearray(body))
    assert message == paho_decode(header, body)
    assert got_mid == (mid if qos else 0)
    assert type(message.payload) is bytes and (corr is None or type(message.correlation_data) is bytes)


def test_decoder_skips_the_properties_it_does_not_report_as_paho_does() -> None:
    # Payload Format Indicator, Topic Alias, two Subscription Identifiers (one of them 4 bytes long)
    props = b"\x01\x01" + b"\x23\x00\x05" + b"\x0b\x01" + b"\x0b\xff\xff\xff\x7f" + b"\x26\x00\x01k\x00\x01v"
    header, body = publish_packet(b"a/b", 1, 9, bytes([len(props)]) + props, b"data")
    message, mid = decode_publish(header, body)
    assert message == paho_decode(header, body)
    assert (mid, message.user_properties, message.payload) == (9, (("k", "v"),), b"data")


def _props(raw: bytes) -> bytes:
    return bytes([len(raw)]) + raw


MALFORMED = {
    "truncated topic": (0x32, b"\x00\x10abc"),
    "no packet id": (0x32, b"\x00\x01t\x00"),
    "no property length": (0x30, b"\x00\x01t"),
    "property length past the end": (0x30, b"\x00\x01t\x09\x08\x00\x01r"),
    "5-byte property length": (0x30, b"\x00\x01t\xff\xff\xff\xff\x01"),
    "empty topic": publish_packet(b"", 0, 0, b"\x00", b""),
    "wildcard topic": publish_packet(b"a/+/c", 0, 0, b"\x00", b""),
    "topic not UTF-8": publish_packet(b"\xc3\x28", 0, 0, b"\x00", b""),
    "unknown property 0x00": publish_packet(b"t", 0, 0, _props(b"\x00\x01"), b""),
    "CONNECT-only property 0x11": publish_packet(b"t", 0, 0, _props(b"\x11\x00\x00\x00\x01"), b""),
    "two Response Topics": publish_packet(b"t", 0, 0, _props(b"\x08\x00\x01a\x08\x00\x01b"), b""),
    "two Correlation Data": publish_packet(b"t", 0, 0, _props(b"\x09\x00\x00\x09\x00\x00"), b""),
    "two Payload Format Indicators": publish_packet(b"t", 0, 0, _props(b"\x01\x00\x01\x00"), b""),
    "string past the properties": publish_packet(b"t", 0, 0, _props(b"\x08\x00\x05ab"), b"cdefgh"),
    "binary past the properties": publish_packet(b"t", 0, 0, _props(b"\x09\x00\x05ab"), b"cdefgh"),
    "user property value missing": publish_packet(b"t", 0, 0, _props(b"\x26\x00\x01k"), b""),
    "string not UTF-8": publish_packet(b"t", 0, 0, _props(b"\x03\x00\x02\xc3\x28"), b""),
    "U+0000 in a string": publish_packet(b"t", 0, 0, _props(b"\x26\x00\x01k\x00\x02a\x00"), b""),
    "U+FEFF in a string": publish_packet(b"t", 0, 0, _props(b"\x08\x00\x03\xef\xbb\xbf"), b""),
    "Payload Format Indicator 2": publish_packet(b"t", 0, 0, _props(b"\x01\x02"), b""),
    "Topic Alias 0": publish_packet(b"t", 0, 0, _props(b"\x23\x00\x00"), b""),
    "Subscription Identifier 0": publish_packet(b"t", 0, 0, _props(b"\x0b\x00"), b""),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_decoder_refuses_what_paho_refuses(name: str) -> None:
    header, body = MALFORMED[name]
    with pytest.raises(Exception):  # noqa: B017 - paho/aiomqtt raise several kinds; all end the connection
        paho_decode(header, body)
    with pytest.raises(MalformedPacketError):
        decode_publish(header, body)


def test_decoder_is_stricter_than_paho_on_one_overrun() -> None:
    """The one documented difference: paho reads a Message Expiry Interval on into the payload."""
    header, body = publish_packet(b"t", 0, 0, _props(b"\x02\x00"), b"\x00\x00\x05rest")
    assert paho_decode(header, body).message_expiry == 5
    with pytest.raises(MalformedPacketError):
        decode_publish(header, body)


@given(st.binary(max_size=60), st.sampled_from([0x30, 0x32, 0x33, 0x38]))
@settings(max_examples=500, deadline=None)
def test_decoder_on_arbitrary_bytes_agrees_with_paho_or_refuses(body: bytes, header: int) -> None:
    """Whatever the bytes: a MalformedPacketError (never another exception), or exactly paho's message."""
    try:
        message, _ = decode_publish(header, body)
    except MalformedPacketError:
        return
    assert message == paho_decode(header, body)


def test_encoder_output_decodes_to_the_same_values() -> None:
    user = [("__stat", "200"), ("__protVer", "1.0"), ("__ts", "1732262400000:00001:emu"), ("ü", "")]
    props = _publish_property_bytes(b"\x00" * 16, "clients/x/r", user, "application/octet-stream", 3600)
    message, mid = decode_publish(*publish_packet(b"clients/x/r", 1, 42, props, b"+OK\r\n"))
    assert message == InboundMessage(
        topic="clients/x/r",
        payload=b"+OK\r\n",
        qos=1,
        correlation_data=b"\x00" * 16,
        response_topic="clients/x/r",
        user_properties=tuple(user),
        content_type="application/octet-stream",
        message_expiry=3600,
    )
    assert mid == 42


# -- through a real mosquitto ------------------------------------------------------------------------------


class Inbox:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self._changed = asyncio.Event()

    def __call__(self, message: InboundMessage) -> None:
        self.messages.append(message)
        self._changed.set()

    async def wait_for(self, count: int) -> list[InboundMessage]:
        async with asyncio.timeout(WAIT):
            while len(self.messages) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.messages


def _settings(broker: MosquittoBroker, prefix: str) -> ConnectionSettings:
    return ConnectionSettings(broker.host, broker.port, client_id=f"{prefix}-{uuid.uuid4().hex[:10]}")


async def _connect(
    broker: MosquittoBroker, prefix: str, on_message: Callable[[InboundMessage], None] = lambda m: None
) -> PahoConnection:
    conn = PahoConnection(_settings(broker, prefix), on_message)
    await conn.connect()
    return conn


@pytest.fixture
async def pair(mosquitto: MosquittoBroker) -> AsyncIterator[tuple[PahoConnection, PahoConnection, Inbox, str]]:
    """(sender, receiver, receiver's inbox, a topic the receiver subscribed to at QoS 1)."""
    inbox = Inbox()
    sender = await _connect(mosquitto, "paho-tx")
    receiver = await _connect(mosquitto, "paho-rx", inbox)
    topic = f"test/paho/{uuid.uuid4().hex}"
    await receiver.subscribe([topic], qos=1)
    try:
        yield sender, receiver, inbox, topic
    finally:
        await sender.close()
        await receiver.close()


@pytest.mark.parametrize("nowait", [False, True], ids=["publish", "publish_nowait"])
async def test_round_trip_carries_every_property(
    pair: tuple[PahoConnection, PahoConnection, Inbox, str], nowait: bool
) -> None:
    sender, _, inbox, topic = pair
    user = [("__ts", "1732262400000:00000:c"), ("", ""), ("dup", "1"), ("dup", "2"), ("ключ", "値🙂")]
    user += [(f"p{i}", "v" * i) for i in range(60)]
    corr = bytes(range(256))[:64] + b"\x00\x00"
    kwargs: dict[str, Any] = {
        "qos": 1,
        "correlation_data": corr,
        "response_topic": "clients/réponse/日本",
        "user_properties": user,
        "content_type": "application/x-ü",
        "message_expiry": 3600,
    }
    payload = bytes(range(256)) * 4
    if nowait:
        sender.publish_nowait(OutgoingMessage(topic, payload, **kwargs))
    else:
        await sender.publish(OutgoingMessage(topic, payload, **kwargs))
    (message,) = await inbox.wait_for(1)
    assert message.topic == topic
    assert message.payload == payload
    assert message.qos == 1  # QoS 1 end to end: the subscription and the publish were both QoS 1
    assert message.correlation_data == corr
    assert message.response_topic == "clients/réponse/日本"
    assert message.content_type == "application/x-ü"
    assert message.user_properties == tuple(user)
    assert message.message_expiry is not None and 3590 <= message.message_expiry <= 3600  # what is left of it


async def test_round_trip_with_empty_values_and_no_properties(
    pair: tuple[PahoConnection, PahoConnection, Inbox, str],
) -> None:
    sender, _, inbox, topic = pair
    sender.publish_nowait(
        OutgoingMessage(topic, b"", correlation_data=b"", response_topic=None, user_properties=[("", "")])
    )
    sender.publish_nowait(OutgoingMessage(topic, b"plain"))
    first, second = await inbox.wait_for(2)
    assert (first.payload, first.correlation_data, first.user_properties) == (b"", b"", (("", ""),))
    assert (second.payload, second.correlation_data, second.response_topic, second.user_properties) == (
        b"plain",
        None,
        None,
        (),
    )


async def test_a_burst_leaves_in_order(pair: tuple[PahoConnection, PahoConnection, Inbox, str]) -> None:
    sender, _, inbox, topic = pair
    assert sender._client is not None
    window = sender._client._client._max_inflight_messages  # mosquitto's Receive Maximum (20 by default)
    assert window >= 10
    for i in range(200):  # more than the window: the rest waits in paho, released as PUBACKs come back
        sender.publish_nowait(OutgoingMessage(topic, str(i).encode(), correlation_data=i.to_bytes(2, "big")))
    messages = await inbox.wait_for(200)
    assert [m.payload for m in messages] == [str(i).encode() for i in range(200)]


async def test_large_packets_survive_partial_writes_and_reads(
    pair: tuple[PahoConnection, PahoConnection, Inbox, str],
) -> None:
    """A small send buffer makes paho's socket refuse most of a 2 MB packet: aiomqtt's writer finishes it."""
    sender, _, inbox, topic = pair
    assert sender._client is not None
    sock = sender._client._client.socket()
    assert isinstance(sock, socket.socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    big = os.urandom(2_000_000)
    sender.publish_nowait(OutgoingMessage(topic, big, correlation_data=b"big"))
    await sender.publish(
        OutgoingMessage(topic, b"after", correlation_data=b"small")
    )  # queued behind it, acknowledged after it
    first, second = await inbox.wait_for(2)
    assert (first.payload == big, first.correlation_data) == (True, b"big")
    assert (second.payload, second.correlation_data) == (b"after", b"small")


async def test_publish_waits_for_a_puback_even_one_with_a_reason_code(mosquitto: MosquittoBroker) -> None:
    """Nobody subscribes: mosquitto answers PUBACK 0x10 "no matching subscribers" (3 bytes, paho decodes it)."""
    sender = await _connect(mosquitto, "paho-nosub")
    try:
        async with asyncio.timeout(WAIT):
            await sender.publish(OutgoingMessage(f"test/nobody/{uuid.uuid4().hex}", b"x"), timeout=WAIT)
        assert sender._hooks is not None and not sender._hooks.acks
    finally:
        await sender.close()


async def test_publish_fails_when_the_connection_ends_before_the_puback(fresh_mosquitto: MosquittoBroker) -> None:
    sender = await _connect(fresh_mosquitto, "paho-drop")
    pid = fresh_mosquitto.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # the broker reads nothing more: no PUBACK will come
    try:
        pending = asyncio.ensure_future(sender.publish(OutgoingMessage("test/drop", b"x"), timeout=60))
        await asyncio.sleep(0.2)
        assert not pending.done()
        fresh_mosquitto.kill()
        async with asyncio.timeout(WAIT):  # not the 60 s publish timeout
            with pytest.raises(ConnectionLostError):
                await pending
        with pytest.raises(ConnectionLostError):
            sender.publish_nowait(OutgoingMessage("test/drop", b"y"))
    finally:
        fresh_mosquitto.kill()
        await sender.close()


@pytest.mark.parametrize(
    ("config", "limit"), [([], 20), (["max_inflight_messages 5"], 5), (["max_inflight_messages 0"], 0)]
)
async def test_the_servers_receive_maximum_is_honoured(config: list[str], limit: int) -> None:
    """mosquitto advertises its max_inflight_messages (default 20) as Receive Maximum, none when 0: it becomes
    paho's in-flight limit (0: none), and messages beyond it wait in paho and still all arrive, in order."""
    with MosquittoBroker(extra_config=config) as broker:
        inbox = Inbox()
        receiver = await _connect(broker, "paho-rm-rx", inbox)
        sender = await _connect(broker, "paho-rm-tx")
        try:
            await receiver.subscribe(["test/rm"], qos=1)
            assert sender._client is not None
            paho = sender._client._client
            assert paho._max_inflight_messages == limit
            for i in range(50):
                sender.publish_nowait(OutgoingMessage("test/rm", str(i).encode()))
            if limit:
                assert paho._inflight_messages <= limit
            messages = await inbox.wait_for(50)
            assert [m.payload for m in messages] == [str(i).encode() for i in range(50)]
        finally:
            await sender.close()
            await receiver.close()


async def test_paho_and_aiomqtt_are_left_as_they_are(
    mosquitto: MosquittoBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No paho method is replaced, inbound PUBLISHes take aiomqtt's path, and a request/response round trip, a
    PUBACK wait and a refusing PUBACK (0x10) work through paho's public callbacks."""
    converted: list[aiomqtt.Message] = []
    paho_convert = paho_module._convert

    def counting_convert(message: aiomqtt.Message) -> InboundMessage:
        converted.append(message)
        return paho_convert(message)

    monkeypatch.setattr(paho_module, "_convert", counting_convert)
    requests = f"test/paho/{uuid.uuid4().hex}"
    responses = f"{requests}/response"
    responder: list[PahoConnection] = []

    def answer(request: InboundMessage) -> None:
        assert request.response_topic is not None
        responder[0].publish_nowait(
            OutgoingMessage(request.response_topic, b"re:" + request.payload, correlation_data=request.correlation_data)
        )

    inbox = Inbox()
    responder.append(await _connect(mosquitto, "paho-server", answer))
    requester = await _connect(mosquitto, "paho-client", inbox)
    try:
        for conn in (requester, responder[0]):
            hooks, client = conn._hooks, conn._client
            assert hooks is not None and client is not None
            paho = client._client
            assert not {"_handle_publish", "_handle_pubackcomp", "_sock_recv", "loop_read"} & set(vars(paho))
        await responder[0].subscribe([requests], qos=1)
        await requester.subscribe([responses], qos=1)
        loop = asyncio.get_running_loop()
        refusal = loop.create_future()
        requester.publish_nowait(
            OutgoingMessage(
                requests, b"ping", correlation_data=b"c1", response_topic=responses, user_properties=[("k", "v")]
            ),
            refusal=refusal,
        )
        (response,) = await inbox.wait_for(1)
        assert (response.topic, response.payload, response.correlation_data) == (responses, b"re:ping", b"c1")
        assert not refusal.done()
        assert len(converted) == 2  # the request at the responder, the response here: both through aiomqtt
        async with asyncio.timeout(WAIT):
            await requester.publish(
                OutgoingMessage(requests, b"acked"), timeout=WAIT
            )  # PUBACK waits: paho's on_publish
        nobody = loop.create_future()
        requester.publish_nowait(OutgoingMessage(f"test/nobody/{uuid.uuid4().hex}", b"x"), refusal=nobody)
        async with asyncio.timeout(WAIT):
            with pytest.raises(ServiceUnavailableError):
                await nobody
    finally:
        await requester.close()
        await responder[0].close()


async def test_a_cancel_that_wait_for_loses_is_raised_again() -> None:
    """aiomqtt waits for CONNACK/SUBACK with asyncio.wait_for; on Python 3.11 a cancel arriving in the same
    loop iteration as the packet is lost there. A lost cancel once left a client's close() waiting for ever."""
    loop = asyncio.get_running_loop()

    async def victim() -> str:
        acked = loop.create_future()
        me = asyncio.current_task()
        assert me is not None

        def ack_and_cancel() -> None:
            acked.set_result("CONNACK")
            me.cancel()

        loop.call_soon(ack_and_cancel)
        result: str = await asyncio.wait_for(acked, 10)  # as aiomqtt's _wait_for
        paho_module._reraise_lost_cancel()
        return result

    task = asyncio.ensure_future(victim())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
