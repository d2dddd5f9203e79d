"""``OutgoingMessage`` and the one PUBLISH size formula (``_protocol/mqtt_publish.py``).

The size every transport and the client check against the broker's Maximum Packet Size must be the length of the
bytes really written: our encoder's (``mqtt_packets.publish_packet``, what ``StreamConnection`` writes, through
``MqttSession.publish``), and paho's (what ``PahoConnection`` hands to its socket).
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sskv_mapping import OutgoingMessage as ExportedOutgoingMessage
from sskv_mapping._protocol import mqtt_packets as packets
from sskv_mapping._protocol.mqtt_publish import (
    InboundMessage,
    OutgoingMessage,
    decode_publish,
    message_size,
    mqtt_str,
    publish_properties,
    publish_size,
)
from sskv_mapping._protocol.mqtt_session import MqttSession
from sskv_mapping.errors import ValueTooLargeError

# property mixes: none, each alone, all together, empty values, multi-byte text, many user properties
MIXES: list[dict[str, Any]] = [
    {},
    {"correlation_data": b"\x01" * 16},
    {"response_topic": "clients/c-1/services/statestore/_any_/command/invoke/response"},
    {"user_properties": [("__ts", "1700000000000:0:c-1"), ("__srcId", "c-1")]},
    {"content_type": "application/octet-stream"},
    {"message_expiry": 3600},
    {
        "correlation_data": b"",
        "response_topic": "",
        "user_properties": [("", "")],
        "content_type": "",
        "message_expiry": 0,
    },
    {
        "correlation_data": bytes(range(40)),
        "response_topic": "réponse/日本",
        "user_properties": [("clé", "välue"), ("k", "v"), ("k", "w")],
        "content_type": "text/plain; charset=utf-8",
        "message_expiry": 0xFFFFFFFF,
    },
    {"user_properties": [(f"name{i}", "v" * i) for i in range(60)]},
]
# payload sizes either side of the Remaining Length's 1/2, 2/3 and 3/4-byte boundaries (given a short topic and
# no properties; the mixes move them, the sweep in the hypothesis test covers the rest)
PAYLOADS = [0, 1, 120, 121, 122, 16_375, 16_376, 16_377, 2_097_144, 2_097_145, 2_097_146]


def _wire(message: OutgoingMessage, packet_id: int = 7) -> bytes:
    """The PUBLISH our encoder writes for ``message``."""
    return packets.publish_packet(
        mqtt_str(message.topic), message.payload, message.qos, packet_id, message.encoded_properties()
    )


@pytest.mark.parametrize("qos", [0, 1])
@pytest.mark.parametrize("mix", MIXES, ids=[",".join(m) or "none" for m in MIXES])
def test_the_size_is_the_length_of_the_encoded_packet(mix: dict[str, Any], qos: int) -> None:
    for n in PAYLOADS:
        message = OutgoingMessage("a/b", b"p" * n, qos, **mix)
        assert message_size(message) == len(_wire(message)), n
        assert message_size(message, message.encoded_properties()) == len(_wire(message))


@settings(max_examples=300, deadline=None)
@given(
    topic=st.text(st.characters(codec="utf-8", exclude_characters="\x00\ufeff+#"), min_size=1, max_size=300),
    payload=st.integers(0, 70_000),
    qos=st.sampled_from([0, 1]),
    correlation=st.none() | st.binary(max_size=64),
    expiry=st.none() | st.integers(0, 0xFFFFFFFF),
    user=st.lists(st.tuples(st.text(max_size=20), st.text(max_size=300)), max_size=8).filter(
        lambda pairs: all("\x00" not in a + b and "\ufeff" not in a + b for a, b in pairs)
    ),
)
def test_the_size_matches_the_encoder_for_any_message(
    topic: str, payload: int, qos: int, correlation: bytes | None, expiry: int | None, user: list[tuple[str, str]]
) -> None:
    try:
        topic.encode()
        for name, value in user:
            (name + value).encode()
    except UnicodeEncodeError:  # a lone surrogate: not an MQTT string, nothing to encode
        return
    message = OutgoingMessage(topic, bytes(payload), qos, correlation, None, user, None, expiry)
    wire = _wire(message)
    assert message_size(message) == len(wire)
    [(first, body)] = packets.PacketSplitter().feed(wire)  # and the bytes are one whole PUBLISH of that message
    decoded, _ = decode_publish(first, body)
    assert (decoded.topic, len(decoded.payload), decoded.correlation_data) == (topic, payload, correlation)


@pytest.mark.parametrize("mix", MIXES[1:], ids=[",".join(m) for m in MIXES[1:]])
def test_the_size_is_the_length_of_what_paho_writes(mix: dict[str, Any]) -> None:
    paho_client = pytest.importorskip("paho.mqtt.client")
    from sskv_mapping._transport.paho import _publish_properties

    client = paho_client.Client(paho_client.CallbackAPIVersion.VERSION2, protocol=paho_client.MQTTv5)
    written: list[bytes] = []
    client._sock = object()  # "connected": paho builds the packet and hands it to its queue, caught here
    client._packet_queue = lambda command, packet, mid, qos, info=None: written.append(bytes(packet))
    try:
        for n in (0, 121, 16_376):
            message = OutgoingMessage("a/b/é", b"p" * n, 1, **mix)
            client._send_publish(7, message.topic.encode(), message.payload, 1, properties=_publish_properties(message))
            assert message_size(message) == len(written[-1]) == len(_wire(message))
    finally:
        client._sock = None  # nothing to close


def test_the_session_checks_the_same_size() -> None:
    # MqttSession.publish refuses exactly the packets whose size (the one formula) is over the broker's limit
    message = OutgoingMessage("a/b", b"x" * 200, 1, b"c" * 16, "r/t", [("k", "v")], None, 10)
    limit = message_size(message)
    for room, refused in ((limit, False), (limit - 1, True)):
        session: MqttSession[None] = MqttSession()
        session.max_packet_size = room
        field, props = mqtt_str(message.topic), message.encoded_properties()
        if refused:
            with pytest.raises(ValueTooLargeError) as caught:
                session.publish(field, message.payload, 1, props, None)
            assert (caught.value.size, caught.value.limit) == (limit, room)
        else:
            packet = session.publish(field, message.payload, 1, props, None)
            assert packet is not None and len(packet) == limit


def test_publish_size_counts_the_packet_id_and_the_remaining_length_bytes() -> None:
    assert publish_size(5, 1, 0, 0) == 1 + 1 + 6
    assert publish_size(5, 1, 0, 1) == 1 + 1 + 8
    assert publish_size(5, 1, 119, 1) == 1 + 1 + 127
    assert publish_size(5, 1, 120, 1) == 1 + 2 + 128  # the Remaining Length takes a second byte
    assert publish_size(0, 0, packets.MAX_PACKET, 0) == packets.MAX_PACKET + 5


def test_an_outgoing_message_is_slotted_and_exported() -> None:
    message = OutgoingMessage("t", b"p")
    assert ExportedOutgoingMessage is OutgoingMessage
    assert (message.qos, message.correlation_data, message.user_properties, message.message_expiry) == (
        1,
        None,
        (),
        None,
    )
    assert not hasattr(message, "__dict__")
    with pytest.raises(AttributeError):
        message.retain = True  # type: ignore[attr-defined]  # slots: no field beyond the eight
    assert message.encoded_properties() == publish_properties(None, None, (), None, None) == b"\x00"


def test_both_message_classes_have_one_field_order() -> None:
    # the fields the two share (all of them), in the same order: read positionally, the same way
    assert [f.name for f in dataclasses.fields(InboundMessage)] == [f.name for f in dataclasses.fields(OutgoingMessage)]
    assert [f.name for f in dataclasses.fields(OutgoingMessage)] == [
        "topic",
        "payload",
        "qos",
        "correlation_data",
        "response_topic",
        "user_properties",
        "content_type",
        "message_expiry",
    ]


def test_an_outgoing_message_is_a_plain_dataclass_read_only_by_convention() -> None:
    message = OutgoingMessage("t", b"p", 0, b"c", "r", [("k", "v")], "ct", 5)
    assert type(message) is OutgoingMessage
    assert dataclasses.astuple(message) == ("t", b"p", 0, b"c", "r", [("k", "v")], "ct", 5)
    assert dataclasses.replace(message, qos=1) == OutgoingMessage("t", b"p", 1, b"c", "r", [("k", "v")], "ct", 5)
    assert copy.copy(message) == message == pickle.loads(pickle.dumps(message))
    with pytest.raises(TypeError):
        hash(message)  # compared by value and not frozen: not hashable (nothing keys on a message)

    class Tagged(OutgoingMessage):
        __slots__ = ()

    tagged = Tagged("t", b"p", message_expiry=5)
    assert (type(tagged), tagged.topic, tagged.message_expiry) == (Tagged, "t", 5)
    assert copy.copy(tagged) == tagged and type(copy.copy(tagged)) is Tagged


def test_an_inbound_message_is_a_plain_dataclass_read_only_by_convention() -> None:
    message = InboundMessage("t", b"p", 1, b"c", "r", (("k", "v"),), "ct", 5)
    by_name = InboundMessage(
        topic="t", payload=b"p", qos=1, correlation_data=b"c", response_topic="r", user_properties=(("k", "v"),),
        content_type="ct", message_expiry=5,
    )  # fmt: skip
    assert type(message) is InboundMessage and message == by_name
    assert dataclasses.astuple(message) == ("t", b"p", 1, b"c", "r", (("k", "v"),), "ct", 5)
    assert InboundMessage("t", b"p", 1, None, None, (), None).message_expiry is None
    assert copy.copy(message) == message == pickle.loads(pickle.dumps(message))
    assert message.user_property("k") == "v"
    assert not hasattr(message, "__dict__")
    with pytest.raises(TypeError):
        hash(message)
