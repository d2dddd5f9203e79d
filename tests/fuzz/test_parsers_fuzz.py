"""Structure-aware fuzzing of the four parsers of hostile input: RESP3 (replies and requests), HLC strings,
KEYNOTIFY notifications (topic + payload + ``__ts``) and MQTT PUBLISH packets (``_protocol/mqtt_publish.py``).

Beyond the property tests in ``tests/protocol``: every input starts from a valid encoding and is mutated
several times over (bytes flipped, inserted, deleted, cut; length and count headers spliced with huge,
negative, signed, padded, non-ASCII or non-digit numbers; type bytes swapped; CRLF broken; aggregates nested
past the depth limit; two encodings glued). Each result goes through an oracle in ``_corpus``: only
:class:`ProtocolError` (service side: :class:`ServiceError`) may escape, the library must accept exactly
what an independent reference parser accepts and read the same value, and whatever is accepted re-encodes
and parses back to itself.

The whole module runs in well under 20 s; ``SSKV_HYPOTHESIS_SCALE=20`` runs a deep session.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sskv_mapping._protocol import resp3
from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.mqtt_publish import MalformedPacketError, decode_publish, publish_properties
from sskv_mapping._protocol.notifications import KeyOperation, encode_notification
from sskv_mapping._protocol.topics import NOTIFY_PREFIX, notification_topic
from sskv_mapping.errors import ProtocolError

from ._corpus import (
    HLC_SEEDS,
    NOTIFICATION_SEEDS,
    PACKET_STREAM_SEEDS,
    PUBLISH_SEEDS,
    REPLY_SEEDS,
    REQUEST_SEEDS,
    check_hlc,
    check_notification,
    check_packet_stream,
    check_publish,
    check_reply,
    check_request,
    check_session_stream,
    encode_publish,
    encode_reply,
)

_SCALE = float(os.environ.get("SSKV_HYPOTHESIS_SCALE", "1"))


def budget(n: int) -> settings:
    return settings(
        max_examples=max(1, int(n * _SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# ---------------------------------------------------------------------------------------------------------
# valid starting points

_VERBS = [b"GET", b"SET", b"DEL", b"VDEL", b"KEYNOTIFY", b"get", b"NX", b"NEX", b"PX", b"STOP", b"SCAN", b"NOTIFY"]
args = st.lists(st.sampled_from(_VERBS) | st.binary(max_size=10) | st.sampled_from([b"1000", b"-1", b"0"]), max_size=7)
valid_requests = st.sampled_from(REQUEST_SEEDS) | args.map(lambda a: resp3.encode_request(*a))

line_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=16)
scalar_replies = st.one_of(
    st.none(),
    st.binary(max_size=24),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-2, 2),
    line_text.map(resp3.SimpleString),
    line_text.map(resp3.ErrorReply),
)
reply_values = st.recursive(scalar_replies, lambda inner: st.lists(inner, max_size=4), max_leaves=10)
valid_replies = st.sampled_from(REPLY_SEEDS) | reply_values.map(encode_reply)

# ---------------------------------------------------------------------------------------------------------
# mutation

#: Replacements for the number in a ``$n`` / ``*n`` / ``:n`` header: off by one, huge, negative, padded,
#: signed, spaced, hex, underscored, non-ASCII digits (int() would take some of these), empty.
_NUMBERS = [
    b"0",
    b"-1",
    b"-2",
    b"-0",
    b"00003",
    b"9223372036854775807",
    b"9223372036854775808",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"99999999999999999999",
    b"9" * 400,
    b"",
    b"-",
    b"+3",
    b" 3",
    b"3 ",
    b"0x3",
    b"3_0",
    "\u0663".encode(),  # ARABIC-INDIC DIGIT THREE
    "\uff13".encode(),  # FULLWIDTH DIGIT THREE
    b"1e3",
    b"3\r",
]
_HEADER = re.compile(rb"[$*:](-?[0-9]*)\r\n")
_TOKENS = [b"\r\n", b"\r", b"\n", b"$", b"*", b":", b"+", b"-", b"-1", b"$-1\r\n", b"*1\r\n", b"ERR ", b"\x00", b"\xff"]


#: the byte-level mutations every fuzz input takes (:func:`_mutate_bytes`)
_BYTE_MUTATIONS = ("flip", "insert", "delete", "truncate", "dup")


def _mutate_bytes(draw: st.DrawFn, buf: bytearray, op: str, tokens: list[bytes]) -> None:
    """Flip a byte, insert a token or random bytes, delete or duplicate a run, or truncate (not on an empty one)."""
    size = len(buf)
    if op == "flip" and size:
        buf[draw(st.integers(0, size - 1))] = draw(st.integers(0, 255))
    elif op == "insert":
        at = draw(st.integers(0, size))
        buf[at:at] = draw(st.sampled_from(tokens) | st.binary(min_size=1, max_size=4))
    elif op == "delete" and size:
        at = draw(st.integers(0, size - 1))
        del buf[at : at + draw(st.integers(1, 4))]
    elif op == "truncate":
        del buf[draw(st.integers(0, size)) :]
    elif op == "dup" and size:
        at = draw(st.integers(0, size - 1))
        end = draw(st.integers(at, size))
        buf[end:end] = buf[at:end]


@st.composite
def mutate(draw: st.DrawFn, data: bytes) -> bytes:
    """Apply up to four structure-aware mutations to ``data`` (none now and then: the accepting paths count too)."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(0, 4))):
        op = draw(
            st.sampled_from(
                ["flip", "insert", "delete", "truncate", "dup", "length", "type", "crlf", "nest", "glue", "unicode"]
            )
        )
        size = len(buf)
        if op in _BYTE_MUTATIONS:
            _mutate_bytes(draw, buf, op, _TOKENS)
        elif op == "length":
            headers = list(_HEADER.finditer(bytes(buf)))
            if headers:
                m = draw(st.sampled_from(headers))
                old = m[1]
                near = [b"%d" % (int(old) + d) for d in (-1, 1, 2)] if old not in (b"", b"-") else []
                buf[m.start(1) : m.end(1)] = draw(st.sampled_from(_NUMBERS + near))
        elif op == "type":
            starts = [m.start() for m in _HEADER.finditer(bytes(buf))] or [0]
            at = draw(st.sampled_from(starts))
            if at < size:
                buf[at] = draw(st.sampled_from(b"$*:+-_#%!=,("))
        elif op == "crlf":
            spots = [m.start() for m in re.finditer(rb"\r\n", bytes(buf))]
            if spots:
                at = draw(st.sampled_from(spots))
                buf[at : at + 2] = draw(st.sampled_from([b"\n", b"\r", b"\n\r", b"\r\r\n", b""]))
        elif op == "nest":
            depth = draw(st.integers(1, 12))
            buf[0:0] = b"*1\r\n" * depth
        elif op == "glue":
            buf += draw(st.sampled_from(REPLY_SEEDS + REQUEST_SEEDS))
        elif op == "unicode":
            at = draw(st.integers(0, size))
            buf[at:at] = draw(st.text(max_size=3)).encode("utf-8", "surrogatepass")
    return bytes(buf)


mutated_requests = valid_requests.flatmap(mutate)
mutated_replies = valid_replies.flatmap(mutate)


# ---------------------------------------------------------------------------------------------------------
# RESP3


@budget(400)
@given(mutated_replies)
@example(b"*1\r\n" * 9 + b":1\r\n")  # one level past the depth limit
@example(b"*1\r\n" * 8 + b":1\r\n")  # at the limit
@example(b"*9223372036854775807\r\n")
@example(b"$9223372036854775807\r\nx\r\n")
@example(b":" + b"9" * 5000 + b"\r\n")  # int() would raise ValueError past 4300 digits
@example(b"$\xd9\xa3\r\nabc\r\n")  # an Arabic-Indic three
@example(b"-ERR\r\n")
@example(b"-\r\n")
@example(b"+\xff\r\n")
def test_mutated_replies_parse_strictly_or_raise_protocol_error(data: bytes) -> None:
    check_reply(data)


@budget(400)
@given(mutated_requests)
@example(b"*2\r\n$3\r\nGET\r\n$-1\r\n")  # a null element
@example(b"*2\r\n$3\r\nGET\r\n*1\r\n$1\r\nk\r\n")  # a nested array
@example(b"*1\r\n$03\r\nGET\r\n")
@example(b"*-1\r\n")
@example(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n")  # count larger than the elements present
def test_mutated_requests_parse_strictly_or_raise_typed_errors(data: bytes) -> None:
    check_request(data)


@budget(150)
@given(st.lists(st.sampled_from([*_TOKENS, b"0", b"1", b"3", b"OK", b"GET", b"NOTIFY"]) | st.binary(max_size=3)))
def test_token_soup(parts: list[bytes]) -> None:
    data = b"".join(parts)
    check_reply(data)
    check_request(data)
    check_request(b"*" + data)


@budget(100)
@given(reply_values)
def test_every_reply_value_round_trips_exactly(value: resp3.Reply) -> None:
    data = encode_reply(value)
    assert check_reply(data)
    assert encode_reply(resp3.parse_reply(data)) == data


# ---------------------------------------------------------------------------------------------------------
# HLC

_HLC_PARTS = [
    "",
    "0",
    "1",
    "000000000000000000001",  # 21 digits
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
    "-1",
    "+1",
    " 1",
    "1 ",
    "1_000",
    "0x10",
    "\u0663",
    "\uff13",
    "1.5",
    "1e3",
    "\ud800",
    "\udcff",
    "StateStore",
    "a:b",
]


@st.composite
def mutated_hlcs(draw: st.DrawFn) -> str | bytes:
    base = draw(
        st.sampled_from(HLC_SEEDS)
        | st.builds(lambda w, c, n: f"{w}:{c}:{n}", st.integers(0), st.integers(0), st.text(max_size=8))
    )
    parts = base.split(":")
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["replace", "add", "drop", "insert"]))
        if op == "replace":
            parts[draw(st.integers(0, len(parts) - 1))] = draw(st.sampled_from(_HLC_PARTS) | st.text(max_size=4))
        elif op == "add":
            parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(_HLC_PARTS)))
        elif op == "drop" and len(parts) > 1:
            del parts[draw(st.integers(0, len(parts) - 1))]
        else:
            i = draw(st.integers(0, len(parts) - 1))
            at = draw(st.integers(0, len(parts[i])))
            parts[i] = parts[i][:at] + draw(st.text(max_size=2)) + parts[i][at:]
    text = ":".join(parts)
    if draw(st.booleans()):
        return text
    raw = bytearray(text.encode("utf-8", "surrogatepass"))
    if raw and draw(st.booleans()):
        raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    return bytes(raw)


@budget(500)
@given(mutated_hlcs())
@example("1:2:\ud800")  # a lone surrogate: str, but not UTF-8 text
@example("1:2:\udcff")  # what argv holds for a non-UTF-8 byte
@example(b"1:2:\xed\xa0\x80")  # a surrogate encoded in bytes: not UTF-8
@example("1" * 5000 + ":0:n")
def test_mutated_hlcs_parse_strictly_or_raise_protocol_error(raw: str | bytes) -> None:
    check_hlc(raw)


@pytest.mark.parametrize("text", ["1:2:\ud800", "000000000000001:00000:\udcff", "1:2:a\udfffb"])
def test_hlc_node_id_that_is_not_utf8_text_is_a_protocol_error(text: str) -> None:
    """Regression: it used to parse, and then fail untyped (UnicodeEncodeError) when compared or sent.

    Reachable from the CLI (``--fencing-token`` from a non-UTF-8 argv arrives with surrogate escapes) and from
    a persistence file whose JSON holds a ``\\ud800`` escape."""
    with pytest.raises(ProtocolError):
        HybridLogicalClock.parse(text)


# ---------------------------------------------------------------------------------------------------------
# notifications

_HEX_VARIANTS = [
    "",
    "0",
    "ABC",
    "GG",
    "6b",
    "6B6",
    " 6B",
    "6B ",
    "0x6B",
    "\uff16B",
    "6B/6B",
    "+",
    "#",
    "00",
    "FF",
    "C3A9",
]


@st.composite
def mutated_notifications(draw: st.DrawFn) -> tuple[str, bytes, str | None]:
    topic, payload, ts = draw(
        st.sampled_from(NOTIFICATION_SEEDS)
        | st.builds(
            lambda c, k, v, t: (notification_topic(c, k), encode_notification(KeyOperation.SET, v), t),
            st.text(max_size=8),
            st.binary(min_size=1, max_size=8),
            st.binary(max_size=8),
            st.none() | st.sampled_from(HLC_SEEDS),
        )
    )
    what = draw(st.sets(st.sampled_from(["topic", "payload", "ts"]), max_size=3))
    if "topic" in what:
        levels = topic[len(NOTIFY_PREFIX) :].split("/")
        how = draw(st.sampled_from(["hex", "level", "prefix", "text"]))
        if how == "hex":
            levels[draw(st.sampled_from([0, len(levels) - 1]))] = draw(st.sampled_from(_HEX_VARIANTS))
        elif how == "level":
            i = draw(st.integers(0, len(levels)))
            if draw(st.booleans()) and i < len(levels):
                del levels[i]
            else:
                levels.insert(i, draw(st.sampled_from(["command", "notify", "", "x"])))
        topic = NOTIFY_PREFIX + "/".join(levels)
        if how == "prefix":
            topic = (
                draw(st.sampled_from(["", "clients/", NOTIFY_PREFIX.lower(), NOTIFY_PREFIX[:-1]]))
                + topic[len(NOTIFY_PREFIX) :]
            )
        elif how == "text":
            at = draw(st.integers(0, len(topic)))
            topic = topic[:at] + draw(st.text(max_size=3)) + topic[at:]
    if "payload" in what:
        payload = draw(
            mutate(payload)
            | st.sampled_from(REPLY_SEEDS)
            | st.lists(st.sampled_from([b"NOTIFY", b"SET", b"DELETE", b"DEL", b"VALUE", b"v"]), max_size=5).map(
                lambda items: resp3.encode_array(items)
            )
        )
    if "ts" in what:
        ts = draw(st.none() | mutated_hlcs().map(lambda t: t if isinstance(t, str) else t.decode("utf-8", "replace")))
    return topic, payload, ts


@budget(500)
@given(mutated_notifications())
@example((f"{NOTIFY_PREFIX}63/command/notify/6b", encode_notification(KeyOperation.DELETE), None))
@example((f"{NOTIFY_PREFIX}C3/command/notify/6B", encode_notification(KeyOperation.DELETE), None))  # not UTF-8
@example((f"{NOTIFY_PREFIX}/command/notify/6B", encode_notification(KeyOperation.DELETE), None))  # empty client
@example((f"{NOTIFY_PREFIX}63/command/notify/٣٣", encode_notification(KeyOperation.DELETE), None))
@example((f"{NOTIFY_PREFIX}63/command/notify/6B", encode_notification(KeyOperation.DELETE), "1:2:\ud800"))
def test_mutated_notifications_parse_strictly_or_raise_protocol_error(note: tuple[str, bytes, str | None]) -> None:
    check_notification(*note)


# ---------------------------------------------------------------------------------------------------------
# MQTT PUBLISH

mqtt_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00\ufeff"), max_size=12)


@st.composite
def valid_publishes(draw: st.DrawFn) -> bytes:
    """A PUBLISH the project's encoder could send, now and then with the properties it never reports."""
    topic = draw(mqtt_text.filter(lambda t: t and "+" not in t and "#" not in t))
    qos = draw(st.sampled_from([0, 1]))
    properties = publish_properties(
        draw(st.none() | st.binary(max_size=20)),
        draw(st.none() | mqtt_text),
        draw(st.lists(st.tuples(mqtt_text, mqtt_text), max_size=4)),
        draw(st.none() | mqtt_text),
        draw(st.none() | st.integers(0, 2**32 - 1)),
    )
    extra = draw(st.sampled_from([b"", b"\x01\x00", b"\x01\x01", b"\x23\x00\x01", b"\x0b\x01", b"\x0b\x80\x01"]))
    if extra:  # prepend it: the Property Length grows by its size (one byte while it stays under 128)
        length, rest = properties[0], properties[1:]
        if length + len(extra) < 0x80:
            properties = bytes([length + len(extra)]) + extra + rest
    payload = draw(st.binary(max_size=24))
    return encode_publish(topic.encode(), qos, draw(st.integers(0, 65535)), properties, payload)


#: bytes that break the rules in the places the decoder checks: string lengths, UTF-8 (invalid, a surrogate,
#: U+0000, U+FEFF), Variable Byte Integers (continuation bits), property ids (every PUBLISH one, others), wildcards
_PUBLISH_TOKENS = [
    b"\x00",
    b"\xff",
    b"\x80",
    b"\xff\xff\xff\xff",
    b"\x00\x00",
    b"\xff\xff",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\xef\xbb\xbf",
    b"+",
    b"#",
    *(bytes([ident]) for ident in (0x01, 0x02, 0x03, 0x08, 0x09, 0x0B, 0x11, 0x23, 0x26, 0x2A, 0x7F)),
]


@st.composite
def mutate_publish(draw: st.DrawFn, data: bytes) -> bytes:
    """Up to four mutations of a PUBLISH fuzz input (none now and then: the accepting path counts too)."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "dup", "header", "length"]))
        size = len(buf)
        if op in _BYTE_MUTATIONS:
            _mutate_bytes(draw, buf, op, _PUBLISH_TOKENS)
        elif op == "header" and size:
            buf[0] = draw(st.sampled_from([0x30, 0x31, 0x32, 0x33, 0x34, 0x36, 0x38, 0x3A, 0x3F]))
        elif op == "length" and size > 1:  # a length byte (topic, property, string) off by a little or a lot
            at = draw(st.integers(1, size - 1))
            buf[at] = max(0, min(255, buf[at] + draw(st.sampled_from([-2, -1, 1, 2, 0x7F, 0x80, -0x80]))))
    return bytes(buf)


mutated_publishes = (st.sampled_from(PUBLISH_SEEDS) | valid_publishes()).flatmap(mutate_publish)


@budget(500)
@given(mutated_publishes)
@example(b"")
@example(b"\x30")
@example(b"\x30\x00\x01t\xff\xff\xff\xff\x01")  # a five-byte Property Length
@example(b"\x30\x00\x01t\x03\x08\x00\x05ab")  # a string past the properties
@example(b"\x30\x00\x01t\x02\x02\x00\x00\x00\x05")  # an expiry that runs past the properties
@example(b"\x30\x00\x02\xed\xa0\x00")  # a surrogate in the topic
@example(b"\x30\x00\x01t\x05\x26\x00\x01\x00\x00")  # U+0000 in a user property name
def test_mutated_publishes_decode_strictly_or_raise_malformed_packet(data: bytes) -> None:
    check_publish(data)


@budget(300)
@given(valid_publishes())
def test_every_encoded_publish_decodes_to_its_values(data: bytes) -> None:
    assert check_publish(data)


@pytest.mark.parametrize("seed", PUBLISH_SEEDS)
def test_publish_seeds_are_accepted(seed: bytes) -> None:
    assert check_publish(seed)


def test_malformed_publish_error_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        decode_publish(0x30, b"\x00\x05ab")
    assert issubclass(MalformedPacketError, ProtocolError)


# -- the packet stream: PacketSplitter and the decoders of what a broker sends -------------------------------------


@budget(500)
@given(st.sampled_from(PACKET_STREAM_SEEDS).flatmap(mutate_publish))
@example(b"")
@example(b"\x40\xff\xff\xff\xff\x01")  # a five-byte Remaining Length
@example(b"\x20\x03\x00\x00\x09")  # CONNACK properties longer than the packet
@example(b"\x90\x03\x00\x01\x01\xff")  # SUBACK property length past the end
def test_mutated_packet_streams_split_and_decode_strictly(data: bytes) -> None:
    check_packet_stream(data)


@budget(500)
@given(st.sampled_from(PACKET_STREAM_SEEDS).flatmap(mutate_publish))
@example(b"\x40\x02\x00\x01" * 3 + b"\x40\x03\x00\x02\x87")  # PUBACKs, one repeated, one refusing
@example(b"\x90\x04\x00\x06\x00\x00")  # a SUBACK for the subscription's packet id
@example(b"\x30\xff\xff\x7f")  # a PUBLISH announced over the session's inbound limit
def test_mutated_packet_streams_keep_the_session_consistent(data: bytes) -> None:
    check_session_stream(data)
