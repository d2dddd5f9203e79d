"""A broker's side of the packet codecs: a client's CONNECT/PUBLISH/SUBSCRIBE/UNSUBSCRIBE read back with their user
properties (what the fault proxy acts on), and the refusals it answers with, read by the client's own decoders."""

from __future__ import annotations

import pytest

from sskv_mapping._protocol import mqtt_packets as packets
from sskv_mapping._protocol.mqtt_publish import MalformedPacketError, mqtt_str, varint

FAULT = b"\x26" + mqtt_str("fault:rejectpublish") + mqtt_str("135")


def _split(packet: bytes) -> tuple[int, bytes]:
    ((first, body),) = packets.PacketSplitter().feed(packet)
    return first, body


def test_a_connect_with_user_properties() -> None:
    connect = packets.connect_packet("me", keepalive=30, session_expiry=60)
    first, body = _split(connect)
    request = packets.decode_client_request(first, body)
    assert request is not None and request.kind == packets.CONNECT and request.user_properties == ()
    # the same CONNECT with a user property added to its properties
    props = b"\x11" + (60).to_bytes(4, "big") + b"\x26" + mqtt_str("fault:rejectconnect") + mqtt_str("137")
    head = mqtt_str("MQTT") + bytes((5, 0x00)) + (30).to_bytes(2, "big") + varint(len(props)) + props
    request = packets.decode_client_request(0x10, head + mqtt_str("me"))
    assert request is not None and request.user_property("fault:rejectconnect") == "137"


def test_a_publish_with_its_packet_id_and_properties() -> None:
    props = varint(len(FAULT)) + FAULT
    first, body = _split(packets.publish_packet(mqtt_str("a/b"), b"payload", 1, 4242, props))
    request = packets.decode_client_request(first, body)
    assert request is not None
    assert (request.kind, request.packet_id, request.qos, request.topics) == (packets.PUBLISH, 4242, 1, ("a/b",))
    assert request.user_property("fault:rejectpublish") == "135" and request.user_property("other") is None


def test_subscribe_and_unsubscribe_list_their_filters() -> None:
    first, body = _split(packets.subscribe_packet(7, [("a/+", 1), ("b/#", 0)]))
    request = packets.decode_client_request(first, body)
    assert request is not None and (request.kind, request.packet_id, request.topics) == (8, 7, ("a/+", "b/#"))
    first, body = _split(packets.unsubscribe_packet(8, ["a/+"]))
    request = packets.decode_client_request(first, body)
    assert request is not None and (request.kind, request.packet_id, request.topics) == (10, 8, ("a/+",))
    assert packets.decode_client_request(0xC0, b"") is None  # PINGREQ: nothing to answer in the broker's place


def test_the_refusals_read_back_with_the_clients_decoders() -> None:
    first, body = _split(packets.connack_packet(0x89))
    assert first == 0x20 and packets.decode_connack(body).reason == 0x89
    first, body = _split(packets.ack_packet(packets.PUBLISH, 99, [0x87]))
    assert first == 0x40 and packets.decode_ack(body) == (99, 0x87)
    first, body = _split(packets.ack_packet(packets.SUBSCRIBE, 5, [0x87, 0x87]))
    assert first == 0x90 and packets.decode_suback(body) == (5, [0x87, 0x87])
    first, body = _split(packets.ack_packet(packets.UNSUBSCRIBE, 6, [0x11]))
    assert first == 0xB0 and packets.decode_suback(body) == (6, [0x11])
    first, body = _split(packets.disconnect_packet(0x8B))
    assert first == 0xE0 and packets.decode_disconnect(body) == (0x8B, None)


def test_malformed_requests_are_typed_errors() -> None:
    with pytest.raises(MalformedPacketError):
        packets.decode_client_request(0x10, b"\x00\x04MQTT\x04")  # MQTT 3.1.1
    with pytest.raises(MalformedPacketError):
        packets.decode_client_request(0x82, b"\x00\x07\x00")  # no filter
    with pytest.raises(MalformedPacketError):
        packets.ack_packet(packets.PUBLISH, 1, [0x87, 0x87])
    with pytest.raises(MalformedPacketError):
        packets.disconnect_packet(256)
