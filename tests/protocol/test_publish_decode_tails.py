"""decode_publish keeps the decoded user properties that follow a PUBLISH's first one (a client's requests repeat them
byte for byte): a message decodes to the same pairs whether they were looked up or read, a different tail is read
afresh, and a malformed one is refused every time (never kept)."""

from __future__ import annotations

import pytest

from sskv_mapping._protocol.mqtt_publish import (
    MalformedPacketError,
    decode_publish,
    mqtt_str,
    publish_properties,
    varint,
)


def _packet(user: list[tuple[str, str]], *, raw_tail: bytes = b"", after: bytes = b"") -> bytes:
    """A QoS 1 PUBLISH body (what follows the Remaining Length) with these user properties; ``raw_tail`` is appended
    to the properties as is (a hand-made, maybe malformed, property), ``after`` after it (another property)."""
    props = publish_properties(b"corr", "reply/topic", user, None, 10)
    body = props[1:] if props[0] < 0x80 else props[2:]  # the properties without their length, to extend them
    body += raw_tail + after
    head = mqtt_str("req/topic") + (7).to_bytes(2, "big")
    return head + varint(len(body)) + body + b"payload"


def _user(body: bytes) -> tuple[tuple[str, str], ...]:
    return decode_publish(0x32, body)[0].user_properties


def test_the_same_tail_decodes_the_same_whether_read_or_looked_up() -> None:
    tail = [("__srcId", "tail-client"), ("__protVer", "1.0"), ("$partition", "tail-client")]
    first = [("__ts", "001700000000000:00001:tail-client"), *tail]
    second = [("__ts", "001700000000001:00000:tail-client"), *tail]
    assert _user(_packet(first)) == tuple(first)
    assert _user(_packet(second)) == tuple(second)  # its tail's pairs looked up: the same values
    assert _user(_packet(second)) == tuple(second)


def test_a_different_tail_is_read_afresh() -> None:
    one = [("__ts", "1:0:a"), ("__srcId", "client-one"), ("__protVer", "1.0")]
    other = [("__ts", "1:0:a"), ("__srcId", "client-two"), ("__protVer", "1.0")]
    assert _user(_packet(one)) == tuple(one)
    assert _user(_packet(other)) == tuple(other)
    assert _user(_packet(one)) == tuple(one)


def test_a_malformed_tail_is_refused_every_time() -> None:
    bad = b"\x26" + mqtt_str("name") + b"\x00\x02\xff\xfe"  # a value that is not UTF-8
    body = _packet([("__ts", "1:0:a"), ("__srcId", "bad-tail")], raw_tail=bad)
    for _ in range(2):
        with pytest.raises(MalformedPacketError, match="not UTF-8"):
            decode_publish(0x32, body)


def test_a_tail_followed_by_another_property_decodes_every_time() -> None:
    user = [("__ts", "1:0:a"), ("__srcId", "mixed-tail")]
    body = _packet(user, after=b"\x01\x01")  # a Payload Format Indicator after the user properties
    for _ in range(2):
        assert _user(body) == tuple(user)
    again = _packet(user, after=b"\x01\x01\x01\x00")  # the indicator twice: refused, whatever was kept before
    with pytest.raises(MalformedPacketError, match="more than once"):
        decode_publish(0x32, again)


def _response(user: list[tuple[str, str]], *, raw_tail: bytes = b"", corr: bytes = b"corr") -> bytes:
    """A response's PUBLISH body: no response topic, so its user properties are looked up whole."""
    props = publish_properties(corr, None, user, None, None)
    body = (props[1:] if props[0] < 0x80 else props[2:]) + raw_tail
    head = mqtt_str("clients/c/response") + (9).to_bytes(2, "big")
    return head + varint(len(body)) + body + b"reply"


def test_a_responses_user_properties_decode_the_same_whether_read_or_looked_up() -> None:
    user = [("__stat", "200"), ("__protVer", "1.0"), ("__ts", "001700000000000:00001:Whole")]
    for corr in (b"one", b"two", b"one"):  # the same properties after other correlation data: looked up
        message = decode_publish(0x32, _response(user, corr=corr))[0]
        assert message.user_properties == tuple(user)
        assert message.correlation_data == corr and message.payload == b"reply"
    other = [("__stat", "200"), ("__protVer", "1.0"), ("__ts", "001700000000000:00002:Whole")]
    assert _user(_response(other)) == tuple(other)  # one byte apart: read afresh
    assert _user(_response(user)) == tuple(user)


def test_a_malformed_response_run_is_refused_every_time() -> None:
    bad = b"\x26" + mqtt_str("name") + b"\x00\x02\xff\xfe"  # a value that is not UTF-8
    body = _response([("__stat", "200")], raw_tail=bad)
    for _ in range(2):
        with pytest.raises(MalformedPacketError, match="not UTF-8"):
            decode_publish(0x32, body)
    followed = _response([("__stat", "200"), ("__protVer", "1.0")], raw_tail=b"\x01\x01")
    for _ in range(2):  # a run followed by another property: decoded each time, the indicator checked
        assert _user(followed) == (("__stat", "200"), ("__protVer", "1.0"))
    with pytest.raises(MalformedPacketError, match="more than once"):
        decode_publish(0x32, _response([("__stat", "200"), ("__protVer", "1.0")], raw_tail=b"\x01\x01\x01\x00"))
