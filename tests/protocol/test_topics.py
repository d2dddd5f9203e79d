"""MQTT topics of the state store and their upper-case hex rules (docs/design/protocol.md §1, §4)."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sskv_mapping._protocol.topics import (
    NOTIFY_PREFIX,
    REQUEST_TOPIC,
    SERVICE_ID,
    is_forbidden_response_topic,
    notification_filter,
    notification_topic,
    parse_notification_topic,
    response_topic,
)
from sskv_mapping.errors import ProtocolError

from ._strategies import FAST, FUZZ, keys_or_nasty

EXAMPLE_TOPIC = (
    "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/534F4D454B4559"
)
_HEX = re.compile(r"[0-9A-F]+")

client_ids = st.text(min_size=1, max_size=24)


def test_request_topic() -> None:
    assert SERVICE_ID == "FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8"
    assert REQUEST_TOPIC == "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"


def test_response_topic_is_the_rust_sdk_one() -> None:
    assert (
        response_topic("client-id1") == "clients/client-id1/services/statestore/v1/"
        "FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response"
    )


def test_notification_topic_example_from_protocol_md() -> None:
    assert notification_topic("client-id1", b"SOMEKEY") == EXAMPLE_TOPIC
    assert EXAMPLE_TOPIC.endswith("/636C69656E742D696431/command/notify/534F4D454B4559")


def test_parse_notification_topic_example() -> None:
    assert parse_notification_topic(EXAMPLE_TOPIC) == ("client-id1", b"SOMEKEY")


def test_hex_is_upper_case_and_binary_keys_are_hexed_raw() -> None:
    topic = notification_topic("c", b"\xab\xcd\x00\r\n/+#")
    assert topic.endswith("/command/notify/ABCD000D0A2F2B23")
    assert parse_notification_topic(topic) == ("c", b"\xab\xcd\x00\r\n/+#")


def test_client_id_is_hexed_as_utf8() -> None:
    assert notification_topic("é", b"k") == f"{NOTIFY_PREFIX}C3A9/command/notify/6B"
    assert parse_notification_topic(f"{NOTIFY_PREFIX}C3A9/command/notify/6B") == ("é", b"k")


def test_notification_filter_covers_every_key_of_the_client() -> None:
    assert notification_filter("client-id1") == (
        "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/+"
    )


def test_lower_case_hex_is_accepted() -> None:
    assert parse_notification_topic(EXAMPLE_TOPIC.lower().replace(NOTIFY_PREFIX.lower(), NOTIFY_PREFIX)) == (
        "client-id1",
        b"SOMEKEY",
    )


@pytest.mark.parametrize(
    "topic",
    [
        "",
        "clients/statestore/v1/OTHER/636C/command/notify/4B",
        EXAMPLE_TOPIC.replace("clients/", "client/"),
        EXAMPLE_TOPIC.replace("/v1/", "/v2/"),
        f"{NOTIFY_PREFIX}636C/command/notify",
        f"{NOTIFY_PREFIX}636C/command/notify/",  # empty key
        f"{NOTIFY_PREFIX}/command/notify/4B",  # empty client id
        f"{NOTIFY_PREFIX}636C/command/notify/4B/extra",
        f"{NOTIFY_PREFIX}636C/command/notif/4B",
        f"{NOTIFY_PREFIX}636C/cmd/notify/4B",
        f"{NOTIFY_PREFIX}636C/command/invoke/4B",
        f"{NOTIFY_PREFIX}636C/command/notify/4",  # odd length
        f"{NOTIFY_PREFIX}636C/command/notify/GG",  # not hex
        f"{NOTIFY_PREFIX}636C/command/notify/0x4B",
        f"{NOTIFY_PREFIX}636C/command/notify/ 4B",
        f"{NOTIFY_PREFIX}636C/command/notify/4B ",
        f"{NOTIFY_PREFIX}636C/command/notify/4B\n",
        f"{NOTIFY_PREFIX}636C/command/notify/\uff14\uff22",  # fullwidth: alphanumeric but not ASCII
        f"{NOTIFY_PREFIX}636C/command/notify/+",  # the filter is not a topic
        f"{NOTIFY_PREFIX}FF/command/notify/4B",  # client id not UTF-8
        f"{NOTIFY_PREFIX}6/command/notify/4B",
        f"x{EXAMPLE_TOPIC}",
    ],
)
def test_parse_notification_topic_rejects(topic: str) -> None:
    with pytest.raises(ProtocolError):
        parse_notification_topic(topic)


@pytest.mark.parametrize(
    ("topic", "forbidden"),
    [
        (REQUEST_TOPIC, True),
        ("clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8", True),
        ("clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response", True),
        (f"{NOTIFY_PREFIX}636C/command/notify/+", True),
        (response_topic("client-id1"), False),
        ("clients/client-id1/services/statestore/_any_/command/invoke/response", False),  # the article's
        ("statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response", False),
    ],
)
def test_forbidden_response_topics(topic: str, forbidden: bool) -> None:
    assert is_forbidden_response_topic(topic) is forbidden


@FAST
@given(client_ids, keys_or_nasty)
def test_notification_topic_round_trip(client_id: str, key: bytes) -> None:
    topic = notification_topic(client_id, key)
    assert topic.startswith(NOTIFY_PREFIX)
    client_hex, command, notify, key_hex = topic[len(NOTIFY_PREFIX) :].split("/")
    assert (command, notify) == ("command", "notify")
    assert _HEX.fullmatch(client_hex) and _HEX.fullmatch(key_hex)
    assert parse_notification_topic(topic) == (client_id, key)
    assert topic.rsplit("/", 1)[0] == notification_filter(client_id).rsplit("/", 1)[0]


@FAST
@given(client_ids)
def test_response_topic_is_forbidden_only_for_a_client_id_under_the_service_prefix(client_id: str) -> None:
    topic = response_topic(client_id)
    assert is_forbidden_response_topic(topic) is client_id.startswith(f"statestore/v1/{SERVICE_ID}")


_topic_parts = st.sampled_from(["clients", "statestore", "v1", SERVICE_ID, "command", "notify", "4B", "636C", "", "+"])
_topics = st.lists(_topic_parts | st.text(max_size=6), max_size=9).map("/".join)


@FUZZ
@given(_topics | st.text(max_size=40) | st.builds(lambda s: NOTIFY_PREFIX + s, st.text(max_size=40)))
@example(f"{NOTIFY_PREFIX}636C/command/notify/4B")
def test_parse_notification_topic_raises_only_protocol_error(topic: str) -> None:
    try:
        client_id, key = parse_notification_topic(topic)
    except ProtocolError:
        return
    assert key
    # never a wrong value: the canonical topic of the result is the input, up to hex case
    assert notification_topic(client_id, key) == NOTIFY_PREFIX + topic[len(NOTIFY_PREFIX) :].upper().replace(
        "/COMMAND/NOTIFY/", "/command/notify/"
    )
