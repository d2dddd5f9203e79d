"""decode_publish keeps a request's first properties decoded (its Message Expiry Interval and Response Topic, the
same bytes on each of a client's requests): a message decodes the same whether they were looked up or read, a
repeated single-valued property after looked-up ones is still refused, and a malformed head is never kept."""

from __future__ import annotations

import pytest

from sskv_mapping._protocol.mqtt_publish import (
    MalformedPacketError,
    decode_publish,
    mqtt_str,
    publish_properties,
    varint,
)


def _packet(response_topic: str, expiry: int, *, after: bytes = b"", correlation: bytes = b"corr") -> bytes:
    """A QoS 1 PUBLISH body as a client's request: expiry, response topic, correlation data, a user property;
    ``after`` is appended to the properties as is."""
    props = publish_properties(correlation, response_topic, [("__ts", "1:0:a")], None, expiry)
    body = (props[1:] if props[0] < 0x80 else props[2:]) + after
    return mqtt_str("req/topic") + (7).to_bytes(2, "big") + varint(len(body)) + body + b"payload"


TOPIC = "clients/head-one/reply"


def test_the_same_head_decodes_the_same_whether_read_or_looked_up() -> None:
    first, _ = decode_publish(0x32, _packet(TOPIC, 10, correlation=b"one"))
    again, _ = decode_publish(0x32, _packet(TOPIC, 10, correlation=b"two"))
    assert (first.response_topic, first.message_expiry, first.correlation_data) == (TOPIC, 10, b"one")
    assert (again.response_topic, again.message_expiry, again.correlation_data) == (TOPIC, 10, b"two")
    assert again.user_properties == first.user_properties == (("__ts", "1:0:a"),)


def test_another_expiry_or_topic_is_read_afresh() -> None:
    decode_publish(0x32, _packet("clients/head-two/reply", 10))
    other, _ = decode_publish(0x32, _packet("clients/head-two/reply", 30))
    assert other.message_expiry == 30
    moved, _ = decode_publish(0x32, _packet("clients/head-three/reply", 10))
    assert moved.response_topic == "clients/head-three/reply"


def test_a_repeated_expiry_after_a_looked_up_head_is_refused() -> None:
    decode_publish(0x32, _packet("clients/head-four/reply", 10))  # its head now kept
    for _ in range(2):
        with pytest.raises(MalformedPacketError, match="more than once"):
            decode_publish(0x32, _packet("clients/head-four/reply", 10, after=b"\x02\x00\x00\x00\x05"))
        with pytest.raises(MalformedPacketError, match="more than once"):
            decode_publish(0x32, _packet("clients/head-four/reply", 10, after=b"\x08" + mqtt_str("again")))


def test_a_malformed_head_is_refused_every_time() -> None:
    bad = _packet("clients/head-\x00five/reply", 10)  # U+0000 in the response topic: refused, never kept
    for _ in range(3):
        with pytest.raises(MalformedPacketError):
            decode_publish(0x32, bad)
