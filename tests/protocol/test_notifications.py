"""KEYNOTIFY notifications (docs/design/protocol.md §4): topic + payload + ``__ts`` -> ``(client_id, KeyEvent)``."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.notifications import (
    KeyEvent,
    KeyOperation,
    encode_notification,
    parse_notification,
)
from sskv_mapping._protocol.resp3 import encode_request
from sskv_mapping._protocol.topics import NOTIFY_PREFIX, notification_topic
from sskv_mapping.errors import ProtocolError

from ._strategies import FAST, FUZZ, garbage, hlcs, keys_or_nasty, mutated, values_or_nasty

TOPIC = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/534F4D454B4559"
TS = "001696374425000:00001:StateStore"
VERSION = HybridLogicalClock(1696374425000, 1, "StateStore")
SET_PAYLOAD = b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$5\r\nhello\r\n"
DELETE_PAYLOAD = b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"


def test_encode_set_notification_exact_bytes() -> None:
    assert encode_notification(KeyOperation.SET, b"hello") == SET_PAYLOAD


def test_encode_set_notification_with_empty_value() -> None:
    assert encode_notification(KeyOperation.SET, b"") == b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$0\r\n\r\n"


def test_encode_delete_notification_exact_bytes() -> None:
    assert encode_notification(KeyOperation.DELETE) == DELETE_PAYLOAD


def test_a_set_notification_needs_a_value() -> None:
    with pytest.raises(ValueError):
        encode_notification(KeyOperation.SET, None)


def test_parse_set_notification() -> None:
    client_id, event = parse_notification(TOPIC, SET_PAYLOAD, TS)
    assert client_id == "client-id1"
    assert event == KeyEvent(b"SOMEKEY", KeyOperation.SET, b"hello", VERSION)
    assert event.synthetic is False


def test_parse_set_notification_with_empty_value_is_not_a_delete() -> None:
    _, event = parse_notification(TOPIC, encode_notification(KeyOperation.SET, b""), TS)
    assert event.op is KeyOperation.SET
    assert event.value == b""


def test_parse_delete_notification() -> None:
    assert parse_notification(TOPIC, DELETE_PAYLOAD, TS) == (
        "client-id1",
        KeyEvent(b"SOMEKEY", KeyOperation.DELETE, None, VERSION),
    )


def test_parse_legacy_del_notification_as_delete() -> None:
    # the public article says DEL; the service sends DELETE; accept both
    _, event = parse_notification(TOPIC, b"*2\r\n$6\r\nNOTIFY\r\n$3\r\nDEL\r\n", TS)
    assert event == KeyEvent(b"SOMEKEY", KeyOperation.DELETE, None, VERSION)


def test_unpadded_ts_is_accepted() -> None:
    _, event = parse_notification(TOPIC, DELETE_PAYLOAD, "1696374425000:1:StateStore")
    assert event.version == VERSION


def test_missing_ts_gives_no_version() -> None:
    _, event = parse_notification(TOPIC, DELETE_PAYLOAD, None)
    assert event.version is None


def test_binary_key_and_value() -> None:
    key, value = b"\x00\r\n\xff/+#", b"\r\n*1\r\n$-1\r\n"
    topic = notification_topic("client-id1", key)
    assert topic == NOTIFY_PREFIX + "636C69656E742D696431/command/notify/000D0AFF2F2B23"
    assert parse_notification(topic, encode_notification(KeyOperation.SET, value), TS) == (
        "client-id1",
        KeyEvent(key, KeyOperation.SET, value, VERSION),
    )


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"+OK\r\n",
        b"$6\r\nNOTIFY\r\n",
        b"*0\r\n",
        b"*1\r\n$6\r\nNOTIFY\r\n",
        b"*2\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n",  # SET without VALUE
        b"*3\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n",
        b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$3\r\nVAL\r\n$1\r\nv\r\n",
        b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$-1\r\n",  # null is not a value
        b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n:1\r\n",
        b"*5\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$1\r\nv\r\n$1\r\nw\r\n",
        b"*3\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n$1\r\nv\r\n",
        b"*2\r\n$6\r\nnotify\r\n$6\r\nDELETE\r\n",  # case matters on the wire
        b"*2\r\n$6\r\nNOTIFY\r\n$6\r\ndelete\r\n",
        b"*2\r\n$6\r\nNOTIFY\r\n$4\r\nVDEL\r\n",
        b"*2\r\n$6\r\nNOTIFY\r\n$7\r\nEXPIRED\r\n",
        b"*2\r\n$4\r\nPING\r\n$6\r\nDELETE\r\n",
        b"*2\r\n$6\r\nNOTIFY\r\n*0\r\n",
        b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\nX",  # trailing bytes
        b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE",  # truncated
        b"-ERR syntax error\r\n",
    ],
)
def test_malformed_payloads_are_protocol_errors(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_notification(TOPIC, payload, TS)


@pytest.mark.parametrize("ts", ["", "garbage", "1:2", "-1:0:n", "1:2:a:b", "\uff11:0:n"])
def test_malformed_ts_is_a_protocol_error(ts: str) -> None:
    with pytest.raises(ProtocolError):
        parse_notification(TOPIC, DELETE_PAYLOAD, ts)


@pytest.mark.parametrize(
    "topic", ["", "some/other/topic", TOPIC + "/x", TOPIC.replace("534F4D454B4559", ""), TOPIC[:-1]]
)
def test_malformed_topic_is_a_protocol_error(topic: str) -> None:
    with pytest.raises(ProtocolError):
        parse_notification(topic, DELETE_PAYLOAD, TS)


# ---------------------------------------------------------------------------------------------------------
# properties


events = st.one_of(
    st.tuples(st.just(KeyOperation.SET), values_or_nasty),
    st.tuples(st.just(KeyOperation.DELETE), st.none()),
)


@FAST
@given(st.text(min_size=1, max_size=20), keys_or_nasty, events, st.none() | hlcs)
def test_encode_then_parse_round_trips(
    client_id: str,
    key: bytes,
    event: tuple[KeyOperation, bytes | None],
    version: HybridLogicalClock | None,
) -> None:
    op, value = event
    topic = notification_topic(client_id, key)
    ts = None if version is None else str(version)
    assert parse_notification(topic, encode_notification(op, value), ts) == (
        client_id,
        KeyEvent(key, op, value, version),
    )


_valid_payloads = events.map(lambda e: encode_notification(*e))
_payloads = (
    garbage
    | mutated(_valid_payloads)
    | st.lists(st.sampled_from([b"NOTIFY", b"SET", b"DELETE", b"DEL", b"VALUE", b"v", b""]), max_size=5).map(
        lambda a: encode_request(*a)
    )
)


@FUZZ
@given(
    st.sampled_from([TOPIC]) | st.text(max_size=30) | st.builds(lambda s: NOTIFY_PREFIX + s, st.text(max_size=30)),
    _payloads,
    st.none() | st.sampled_from([TS]) | st.text(max_size=30),
)
@example(TOPIC, b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$-1\r\n", TS)
def test_parse_notification_raises_only_protocol_error(topic: str, payload: bytes, ts: str | None) -> None:
    try:
        client_id, event = parse_notification(topic, payload, ts)
    except ProtocolError:
        return
    # never a wrong value: re-encoding what was parsed gives the same event back
    canonical = encode_notification(event.op, event.value)
    assert parse_notification(notification_topic(client_id, event.key), canonical, ts) == (client_id, event)
    assert (event.value is None) is (event.op is KeyOperation.DELETE)
    if payload != canonical:  # the only other accepted spelling is the article's DEL
        assert payload == b"*2\r\n$6\r\nNOTIFY\r\n$3\r\nDEL\r\n"
