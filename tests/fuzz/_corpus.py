"""Seeds and oracles shared by the hypothesis fuzz tests and the atheris targets (not a test module).

* Seeds: valid encodings of requests, replies, HLC strings, notifications (topic, payload, ``__ts``) and MQTT
  PUBLISH packets (first byte, then the rest), the starting points of structure-aware mutation.
* Reference parsers: small, spec-driven (docs/design/protocol.md §1, §2, §4, §5) re-readings of each grammar, written
  independently of ``sskv_mapping._protocol``, so a fuzz input is checked differentially: the library
  must accept exactly what the reference accepts, with the same value.
* Oracles (``check_*``): run the library parser on one input; a :class:`ProtocolError` (or, for the service
  side, a :class:`ServiceError`) is a fine outcome; any other exception propagates (a crash), and a broken
  invariant is an ``AssertionError``. An accepted input must also re-encode consistently (round trip). (The
  PUBLISH decoder's differential check against paho is ``tests/transport/test_paho.py``.)

No hypothesis or atheris import here: atheris runs these in a bare subprocess.
"""

from __future__ import annotations

import re

from sskv_mapping._protocol import mqtt_packets as _packets
from sskv_mapping._protocol import resp3
from sskv_mapping._protocol.commands import (
    Command,
    Delete,
    Get,
    KeyNotify,
    Scan,
    ScanPage,
    Set,
    SetCondition,
    VDelete,
    VDeleteResult,
    parse_command,
)
from sskv_mapping._protocol.error_texts import ERROR_TEXTS
from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.mqtt_publish import (
    InboundMessage,
    MalformedPacketError,
    decode_publish,
    mqtt_str,
    publish_properties,
)
from sskv_mapping._protocol.mqtt_session import MqttSession
from sskv_mapping._protocol.notifications import KeyOperation, encode_notification, parse_notification
from sskv_mapping._protocol.topics import NOTIFY_PREFIX, notification_topic
from sskv_mapping.errors import ProtocolError, RequestSyntaxError, ServiceError, UnsupportedCommandError

__all__ = [
    "HLC_SEEDS",
    "MUST_FAIL",
    "NOTIFICATION_SEEDS",
    "PACKET_STREAM_SEEDS",
    "PUBLISH_SEEDS",
    "REPLY_SEEDS",
    "REQUEST_SEEDS",
    "Reject",
    "check_hlc",
    "check_notification",
    "check_packet_stream",
    "check_publish",
    "check_reply",
    "check_request",
    "check_session_stream",
    "encode_publish",
    "encode_reply",
    "expected_decode",
    "join_notification",
    "ref_reply",
    "split_notification",
]

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
U64_MAX = 2**64 - 1
MAX_DEPTH = 8  # protocol: replies nest at most this deep (the library's documented limit)


# ---------------------------------------------------------------------------------------------------------
# seeds

_KEYS = [b"k", b"key", b"a\r\nb", b"\x00\xff", b"$3\r\n*1\r\n", "clé-ключ-鍵".encode(), b"x" * 300]
_VALUES = [b"", b"v", b"value", b"\r\n", b"-1", b"\x00" * 5, b"y" * 1000]

REQUEST_SEEDS: list[bytes] = [
    *(resp3.encode_request(b"GET", k) for k in _KEYS),
    *(resp3.encode_request(b"SET", k, v) for k, v in zip(_KEYS, _VALUES, strict=True)),
    resp3.encode_request(b"SET", b"key", b"value", b"NX", b"PX", b"1000"),
    resp3.encode_request(b"SET", b"lock", b"holder", b"NEX", b"PX", b"30000"),
    resp3.encode_request(b"SET", b"k", b"v", b"PX", b"1"),
    resp3.encode_request(b"set", b"k", b"v", b"nx"),
    resp3.encode_request(b"DEL", b"k"),
    resp3.encode_request(b"VDEL", b"k", b"v"),
    resp3.encode_request(b"KEYNOTIFY", b"k"),
    resp3.encode_request(b"KEYNOTIFY", b"k", b"STOP"),
    resp3.encode_request(b"keynotify", b"k", b"stop"),
    resp3.encode_request(),
    resp3.encode_request(b"SCAN", b"*"),
    resp3.encode_request(b"SCAN", b"key*", b"\x00\xffx"),
    resp3.encode_request(b"scan", b"[!a-z]?[*]"),
    resp3.encode_request(b"SCAN", b""),
    resp3.encode_request(b"SCAN", b"*", b""),
    resp3.encode_request(b"GET", b""),
]

REPLY_SEEDS: list[bytes] = [
    b"+OK\r\n",
    b":-1\r\n",
    b":0\r\n",
    b":1\r\n",
    b":9223372036854775807\r\n",
    b":-9223372036854775808\r\n",
    b"-1\r\n",
    b"$-1\r\n",
    b"$0\r\n\r\n",
    b"$5\r\nhello\r\n",
    b"$4\r\n\r\n\r\n\r\n",
    *(resp3.encode_error(text) for text in ERROR_TEXTS),
    b"-ERR something new\r\n",
    b"-ERR: article style\r\n",
    encode_notification(KeyOperation.DELETE),
    encode_notification(KeyOperation.SET, b"new value"),
    b"*2\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n$3\r\ntok\r\n",  # a SCAN page
    b"*1\r\n*0\r\n",
    b"*1\r\n*2\r\n$4\r\nkey1\r\n$4\r\nkey2\r\n",  # SCAN's last page
    b"*2\r\n*0\r\n$3\r\n\x00\xffx\r\n",  # an empty page with more to come
    b"*2\r\n*1\r\n$-1\r\n$1\r\nt\r\n",  # SCAN: a null key
    b"*3\r\n*0\r\n$1\r\nt\r\n$1\r\nu\r\n",
    b"*3\r\n+OK\r\n:5\r\n$-1\r\n",
]

HLC_SEEDS: list[str] = [
    "001696374425000:00001:StateStore",
    "1696374425000:1:StateStore",
    "0:0:",
    f"{U64_MAX}:{U64_MAX}:node",
    "000000000001000:00000:client-ü-鍵",
    "1:2:a b/c\td",
]


def join_notification(topic: str, payload: bytes, ts: str | None) -> bytes:
    """One fuzz input for the notification parser: ``topic SEP payload SEP ts`` (``ts`` absent: no 2nd SEP)."""
    parts = [topic.encode("utf-8"), payload]
    if ts is not None:
        parts.append(ts.encode("utf-8"))
    return _SEP.join(parts)


def split_notification(data: bytes) -> tuple[str, bytes, str | None]:
    """The inverse of :func:`join_notification`, total on any bytes (MQTT strings are always valid UTF-8)."""
    topic, _, rest = data.partition(_SEP)
    payload, sep, ts = rest.partition(_SEP)
    return (
        topic.decode("utf-8", "replace"),
        payload,
        ts.decode("utf-8", "replace") if sep else None,
    )


_SEP = b"\n~~\n"

NOTIFICATION_SEEDS: list[tuple[str, bytes, str | None]] = [
    (notification_topic("client-id1", b"SOMEKEY"), encode_notification(KeyOperation.SET, b"v"), HLC_SEEDS[0]),
    (notification_topic("client-id1", b"SOMEKEY"), encode_notification(KeyOperation.DELETE), HLC_SEEDS[1]),
    (notification_topic("sskv-0123", b"\x00\r\n"), encode_notification(KeyOperation.SET, b""), None),
    (notification_topic("ü/é", "鍵".encode()), resp3.encode_array([b"NOTIFY", b"DEL"]), "5:0:StateStore"),
    (f"{NOTIFY_PREFIX}63/command/notify/6b", encode_notification(KeyOperation.DELETE), None),  # lower-case hex
    (f"{NOTIFY_PREFIX}63/command/notify/6B", b"*0\r\n", None),
]


# ---------------------------------------------------------------------------------------------------------
# reference parsers


class Reject(Exception):
    """The reference parser refuses the input."""


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def line(self) -> bytes:
        end = self.data.find(b"\r\n", self.pos)
        if end < 0:
            raise Reject("no CRLF")
        raw = self.data[self.pos : end]
        self.pos = end + 2
        return raw

    def take(self, n: int) -> bytes:
        if self.pos + n + 2 > len(self.data) or self.data[self.pos + n : self.pos + n + 2] != b"\r\n":
            raise Reject("bulk body")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n + 2
        return raw


# A RESP integer is signed 64-bit: an optional minus and 1-19 ASCII digits (leading zeros tolerated).
_INT = re.compile(rb"-?[0-9]{1,19}")


def _ref_int(raw: bytes) -> int:
    if _INT.fullmatch(raw) is None:
        raise Reject("integer")
    value = int(raw)
    if not I64_MIN <= value <= I64_MAX:
        raise Reject("integer range")
    return value


def _ref_text(raw: bytes) -> str:
    if b"\r" in raw or b"\n" in raw:
        raise Reject("CR/LF in a line")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Reject("not UTF-8") from None


def _ref_value(cur: _Cursor, depth: int) -> resp3.Reply:
    if cur.pos >= len(cur.data):
        raise Reject("empty")
    kind = cur.data[cur.pos]
    cur.pos += 1
    if kind == ord("+"):
        return resp3.SimpleString(_ref_text(cur.line()))
    if kind == ord(":"):
        return _ref_int(cur.line())
    if kind == ord("-"):
        raw = cur.line()
        if raw == b"1":
            return -1  # the article's legacy "not applied"
        text = _ref_text(raw)
        # "-ERR <text>" keeps <text>; a bare "-ERR" is malformed; any other line is kept whole
        if text == "ERR":
            raise Reject("bare -ERR")
        return resp3.ErrorReply(text.removeprefix("ERR "))
    if kind == ord("$"):
        n = _ref_int(cur.line())
        if n == -1:
            return None
        if n < 0:
            raise Reject("negative length")
        return cur.take(n)
    if kind == ord("*"):
        if depth >= MAX_DEPTH:
            raise Reject("too deep")
        n = _ref_int(cur.line())
        if n < 0:
            raise Reject("negative count")
        return [_ref_value(cur, depth + 1) for _ in range(n)]
    raise Reject("type byte")


def ref_reply(data: bytes) -> resp3.Reply:
    cur = _Cursor(data)
    value = _ref_value(cur, 0)
    if cur.pos != len(data):
        raise Reject("trailing bytes")
    return value


def ref_request(data: bytes) -> list[bytes]:
    """An array of bulk strings (no null, no nesting), nothing after it."""
    if not data.startswith(b"*"):
        raise Reject("not an array")
    value = ref_reply(data)
    assert isinstance(value, list)
    if not all(isinstance(item, bytes) for item in value):
        raise Reject("element is not a bulk string")
    return [item for item in value if isinstance(item, bytes)]


_HLC = re.compile(r"\+?([0-9]{1,20}):\+?([0-9]{1,20}):([^:]*)")


def ref_hlc(raw: str | bytes) -> tuple[int, int, str]:
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Reject("not UTF-8") from None
    m = _HLC.fullmatch(raw)
    if m is None:
        raise Reject("HLC shape")
    wall, counter, node = int(m[1]), int(m[2]), m[3]
    if wall > U64_MAX or counter > U64_MAX:
        raise Reject("HLC range")
    try:
        node.encode("utf-8")  # a version travels as an MQTT UTF-8 string: a lone surrogate cannot
    except UnicodeEncodeError:
        raise Reject("node id not encodable") from None
    return wall, counter, node


_TOPIC = re.compile(re.escape(NOTIFY_PREFIX) + r"((?:[0-9A-Fa-f]{2})+)/command/notify/((?:[0-9A-Fa-f]{2})+)")


def ref_notification(topic: str, payload: bytes, ts: str | None) -> tuple[str, bytes, KeyOperation, bytes | None]:
    m = _TOPIC.fullmatch(topic)
    if m is None:
        raise Reject("topic")
    try:
        client_id = bytes.fromhex(m[1]).decode("utf-8")
    except UnicodeDecodeError:
        raise Reject("client id not UTF-8") from None
    key = bytes.fromhex(m[2])
    items = ref_reply(payload)
    if not isinstance(items, list) or not all(isinstance(x, bytes) for x in items):
        raise Reject("payload shape")
    if items[:3] == [b"NOTIFY", b"SET", b"VALUE"] and len(items) == 4:
        op, value = KeyOperation.SET, items[3]
    elif items in ([b"NOTIFY", b"DELETE"], [b"NOTIFY", b"DEL"]):
        op, value = KeyOperation.DELETE, None
    else:
        raise Reject("payload")
    if ts is not None:
        ref_hlc(ts)
    assert value is None or isinstance(value, bytes)
    return client_id, key, op, value


# ---------------------------------------------------------------------------------------------------------
# the reference encoder (resp3 itself only encodes arrays of bulk strings)


def encode_reply(value: resp3.Reply) -> bytes:
    if value is None or isinstance(value, bytes):
        return resp3.encode_bulk(value)
    if isinstance(value, int):
        return resp3.encode_integer(value)
    if isinstance(value, resp3.SimpleString):
        return resp3.encode_simple(value.text)
    if isinstance(value, resp3.ErrorReply):
        return resp3.encode_error(value.text)
    return b"*%d\r\n" % len(value) + b"".join(encode_reply(v) for v in value)


def _same(a: resp3.Reply, b: resp3.Reply) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# ---------------------------------------------------------------------------------------------------------
# oracles

_DECODERS: list[Command] = [
    Get(b"k"),
    Set(b"k", b"v"),
    Set(b"k", b"v", SetCondition.NX),
    Delete(b"k"),
    VDelete(b"k", b"v"),
    KeyNotify(b"k"),
    KeyNotify(b"k", stop=True),
    Scan(b"k*"),
    Scan(b"k*", b"\x00tok"),
]

MUST_FAIL = object()  # marker: the decoder must raise ProtocolError


def expected_decode(cmd: Command, reply: resp3.Reply) -> object:
    """What ``cmd.decode`` must give for a parsed ``reply`` (docs/design/protocol.md §2), independent of commands.py."""
    ok = isinstance(reply, resp3.SimpleString) and reply.text == "OK"
    is_int = isinstance(reply, int)
    if isinstance(cmd, Get):
        return reply if reply is None or isinstance(reply, bytes) else MUST_FAIL
    if isinstance(cmd, Set):
        return True if ok else False if is_int and reply == -1 else MUST_FAIL
    if isinstance(cmd, Delete):
        return bool(reply) if is_int and reply in (0, 1) else MUST_FAIL
    if isinstance(cmd, VDelete):
        return VDeleteResult(reply) if isinstance(reply, int) and reply in (-1, 0, 1) else MUST_FAIL
    if isinstance(cmd, Scan):  # docs/design/protocol.md §8: [keys] or [keys, token]; keys and token non-null bulks
        if not isinstance(reply, list) or len(reply) not in (1, 2) or not isinstance(reply[0], list):
            return MUST_FAIL
        if not all(isinstance(k, bytes) for k in reply[0]) or (len(reply) == 2 and not isinstance(reply[1], bytes)):
            return MUST_FAIL
        return ScanPage(list(reply[0]), reply[1] if len(reply) == 2 else None)  # type: ignore[arg-type]
    return True if ok else False if cmd.stop and is_int and reply == 0 else MUST_FAIL


def _check_decoders(data: bytes, reply: resp3.Reply | Reject) -> None:
    for cmd in _DECODERS:
        try:
            got: object = cmd.decode(data)
        except ServiceError as exc:
            assert isinstance(reply, resp3.ErrorReply), f"{cmd!r} raised {exc!r} for a non-error reply {data!r:.200}"
            expected_type = ERROR_TEXTS.get(reply.text, ServiceError)
            if isinstance(cmd, Scan) and cmd.token is None and reply.text == "unknown command":
                expected_type = UnsupportedCommandError  # a first page: the service has no SCAN
            assert exc.text == reply.text and type(exc) is expected_type
            continue
        except ProtocolError:
            assert isinstance(reply, Reject) or expected_decode(cmd, reply) is MUST_FAIL, (
                f"{cmd!r} refused {data!r:.200}, a fine reply"
            )
            continue
        assert not isinstance(reply, Reject | resp3.ErrorReply), f"{cmd!r} decoded {data!r:.200} to {got!r}"
        expected = expected_decode(cmd, reply)
        assert expected is not MUST_FAIL and type(got) is type(expected) and got == expected, (
            f"{cmd!r} decoded {data!r:.200} to {got!r}, expected {expected!r}"
        )


def check_reply(data: bytes) -> bool:
    """Client side: ``parse_reply`` and every command decoder on ``data``. True if the reply parsed."""
    expected: resp3.Reply | Reject
    try:
        expected = ref_reply(data)
    except Reject as exc:
        expected = exc
    try:
        got = resp3.parse_reply(data)
    except ProtocolError:
        assert isinstance(expected, Reject), f"parse_reply refused {data!r:.300}; the reference reads {expected!r:.200}"
        _check_decoders(data, expected)
        return False
    assert not isinstance(expected, Reject), f"parse_reply accepted {data!r:.300} as {got!r:.200} ({expected})"
    assert _same(got, expected), f"parse_reply read {data!r:.300} as {got!r:.200}, the reference as {expected!r:.200}"
    # round trip: the canonical encoding of what was accepted reads back as the same value
    assert _same(resp3.parse_reply(encode_reply(got)), got)
    _check_decoders(data, got)
    return True


def check_request(data: bytes) -> bool:
    """Service side: ``parse_request`` (only ProtocolError) and ``parse_command`` (only ServiceError)."""
    expected: list[bytes] | Reject
    try:
        expected = ref_request(data)
    except Reject as exc:
        expected = exc
    try:
        args = resp3.parse_request(data)
    except ProtocolError:
        assert isinstance(expected, Reject), f"parse_request refused {data!r:.300}; reference: {expected!r:.200}"
        try:
            parse_command(data)
        except RequestSyntaxError:
            return False
        raise AssertionError(f"parse_command accepted {data!r:.300}, which is not a request") from None
    assert isinstance(expected, list) and expected == args, f"parse_request read {data!r:.300} as {args!r:.200}"
    assert resp3.parse_request(resp3.encode_request(*args)) == args  # round trip
    try:
        cmd = parse_command(data)
    except ServiceError as exc:
        assert type(exc) in ERROR_TEXTS.values() and exc.text == exc.TEXT, f"untyped service error {exc!r}"
        return True
    first = cmd.pattern if isinstance(cmd, Scan) else cmd.key
    assert args and args[0].upper() == cmd.VERB and first == args[1], f"{data!r:.300} parsed to {cmd!r:.200}"
    assert parse_command(cmd.encode()) == cmd  # round trip through the client's encoder
    return True


def check_hlc(raw: str | bytes) -> bool:
    """``HybridLogicalClock.parse``: only ProtocolError; an accepted value prints and re-parses to itself."""
    expected: tuple[int, int, str] | Reject
    try:
        expected = ref_hlc(raw)
    except Reject as exc:
        expected = exc
    try:
        value = HybridLogicalClock.parse(raw)
    except ProtocolError:
        assert isinstance(expected, Reject), f"HLC parse refused {raw!r:.200}; reference: {expected!r}"
        return False
    assert not isinstance(expected, Reject), f"HLC parse accepted {raw!r:.200} ({expected})"
    assert (value.wall_ms, value.counter, value.node_id) == expected
    text = str(value)
    text.encode("utf-8")  # it goes on the wire as an MQTT UTF-8 string
    assert HybridLogicalClock.parse(text) == value
    assert HybridLogicalClock.parse(text.encode("utf-8")) == value
    assert value.sort_key() == (value.wall_ms, value.counter, value.node_id.encode("utf-8"))
    assert not value < value and value <= value
    return True


def check_notification(topic: str, payload: bytes, ts: str | None) -> bool:
    """``parse_notification``: only ProtocolError; an accepted one re-encodes to the same event."""
    expected: tuple[str, bytes, KeyOperation, bytes | None] | Reject
    try:
        expected = ref_notification(topic, payload, ts)
    except Reject as exc:
        expected = exc
    try:
        client_id, event = parse_notification(topic, payload, ts)
    except ProtocolError:
        assert isinstance(expected, Reject), f"notification refused: {topic!r:.200} {payload!r:.200} {ts!r:.80}"
        return False
    assert not isinstance(expected, Reject), f"notification accepted: {topic!r:.200} {payload!r:.200} ({expected})"
    assert (client_id, event.key, event.op, event.value) == expected
    assert event.version == (None if ts is None else HybridLogicalClock.parse(ts))
    assert not event.synthetic
    # round trip: the service's own encoding of this event parses to the same thing
    canonical = notification_topic(client_id, event.key)
    head, _, tail = topic[len(NOTIFY_PREFIX) :].partition("/command/notify/")
    assert canonical == f"{NOTIFY_PREFIX}{head.upper()}/command/notify/{tail.upper()}"
    again = parse_notification(
        canonical,
        encode_notification(event.op, event.value),
        None if event.version is None else str(event.version),
    )
    assert again == (client_id, event)
    return True


# -- MQTT PUBLISH --------------------------------------------------------------------------------------------


def encode_publish(topic: bytes, qos: int, mid: int, properties: bytes, payload: bytes, *, flags: int = 0) -> bytes:
    """One fuzz input for the PUBLISH decoder: the first byte (``0x30``, QoS, ``flags``: DUP/RETAIN), then the
    variable header (topic, packet id at QoS > 0, ``properties`` with their length) and the payload."""
    body = len(topic).to_bytes(2, "big") + topic
    if qos:
        body += mid.to_bytes(2, "big")
    return bytes([0x30 | (qos << 1) | flags]) + body + properties + payload


_REQUEST_PROPS = publish_properties(
    b"\x01" * 16,
    "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/client-1/command/invoke/response",
    [("__ts", "001732262400000:00001:client-1"), ("__protVer", "1.0"), ("__srcId", "client-1")],
    "application/octet-stream",
    10,
)
_RESPONSE_PROPS = publish_properties(
    b"\x01" * 16, None, [("__stat", "200"), ("__ts", "001732262400000:00002:emu")], "application/octet-stream", 10
)
_SKIPPED_PROPS = b"\x01\x01" + b"\x23\x00\x05" + b"\x0b\x01" + b"\x0b\xff\xff\xff\x7f"  # PFI, alias, 2 sub ids

PUBLISH_SEEDS: list[bytes] = [
    encode_publish(
        b"statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke",
        1,
        7,
        _REQUEST_PROPS,
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
    ),
    encode_publish(b"clients/x/r", 1, 65535, _RESPONSE_PROPS, b"$1\r\nv\r\n"),
    encode_publish(b"t", 0, 0, b"\x00", b""),
    encode_publish(b"a/b", 1, 1, bytes([len(_SKIPPED_PROPS)]) + _SKIPPED_PROPS, b"data", flags=0x09),
    encode_publish("réponse/日本".encode(), 0, 0, publish_properties(b"", "", [("", "")], "", 0), b"\x00\xff"),
]


def check_publish(data: bytes) -> bool:
    """``decode_publish`` of ``data[0]`` (the first byte) and ``data[1:]``: only MalformedPacketError; an accepted
    packet's values re-encode (the project's own encoder) and decode to the same message and packet id."""
    header, body = (data[0], data[1:]) if data else (0x30, b"")
    try:
        message, mid = decode_publish(header, body)
    except MalformedPacketError:
        return False
    assert isinstance(message, InboundMessage) and type(message.payload) is bytes
    assert message.topic and not {"+", "#"} & set(message.topic), f"accepted topic {message.topic!r:.200}"
    assert message.qos == (header >> 1) & 3 and (message.qos or mid == 0)
    assert body.endswith(message.payload)
    properties = publish_properties(
        message.correlation_data,
        message.response_topic,
        message.user_properties,
        message.content_type,
        message.message_expiry,
    )
    again = encode_publish(message.topic.encode("utf-8"), message.qos, mid, properties, message.payload)
    assert decode_publish(again[0], again[1:]) == (message, mid), f"{data!r:.300} did not round-trip"
    return True


# -- the packet stream (``_protocol/mqtt_packets.py``) ------------------------------------------------------------

#: whole packets as a broker sends them: CONNACK (with properties), PUBACK (short and with a reason), SUBACK,
#: UNSUBACK, PINGRESP, DISCONNECT with a reason string, and two PUBLISHes back to back
PACKET_STREAM_SEEDS: list[bytes] = [
    b"\x20\x09\x00\x00\x06\x21\x00\x14\x13\x00\x3c",
    b"\x40\x02\x00\x07" + b"\x40\x03\x00\x08\x10",
    b"\x90\x05\x00\x01\x00\x01\x80" + b"\xb0\x03\x00\x02\x00",
    b"\xd0\x00" + b"\xe0\x08\x8b\x06\x1f\x00\x03bye",
    _packets.auth_packet(0x00, method="K8S-SAT", reason_string="ok") + b"\xf0\x00" + b"\xf0\x01\x87",
    _packets.publish_packet(
        mqtt_str("clients/c/r"), b"$1\r\nv\r\n", 1, 9, publish_properties(b"c" * 16, None, [], None, None)
    )
    + _packets.publish_packet(mqtt_str("a/b"), b"", 0, 0, publish_properties(None, None, [("__ts", "1:0:n")], None, 5)),
]


def check_packet_stream(data: bytes) -> int:
    """The bytes as a broker's stream: cut whole and cut at ``data[0]`` give the same packets, and every packet
    decodes by its type or raises ``MalformedPacketError`` -- nothing else escapes. Returns the packets read."""
    packets = _packets
    try:
        whole = packets.PacketSplitter().feed(data)
    except MalformedPacketError:
        return 0
    cut = data[0] % (len(data) + 1) if data else 0
    splitter = packets.PacketSplitter()
    assert splitter.feed(data[:cut]) + splitter.feed(data[cut:]) == whole, f"{data!r:.200} cut at {cut}"
    decoders = {
        packets.CONNACK: packets.decode_connack,
        packets.PUBACK: packets.decode_ack,
        packets.SUBACK: packets.decode_suback,
        packets.UNSUBACK: packets.decode_suback,
        packets.DISCONNECT_TYPE: packets.decode_disconnect,
    }
    for first, body in whole:
        kind = first >> 4
        try:
            if kind == packets.PUBLISH:
                decode_publish(first, body)
            elif kind == packets.AUTH:
                packets.decode_auth(first, body)
            elif kind in decoders:
                decoders[kind](body)
        except MalformedPacketError:
            pass
    return len(whole)


def check_session_stream(data: bytes) -> int:
    """The bytes as a broker's stream fed to the sans-IO session (``MqttSession``) with publishes in flight and
    queued behind a Receive Maximum of 2: every packet dispatched as the transport does (CONNACK, PUBACK then
    release, SUBACK, PINGRESP); only ``MalformedPacketError`` escapes, the Receive Maximum always holds, and
    every token comes back exactly once (by a PUBACK or SUBACK, or at the end from ``lost``). Returns the
    packets dispatched."""
    session: MqttSession[int] = MqttSession(keepalive=10, max_inbound_packet_size=4096)
    session.connack(b"\x00\x00\x03\x21\x00\x02")  # the broker's Receive Maximum: 2
    field = mqtt_str("a/b")
    for token in range(5):
        session.publish(field, b"x", 1, b"\x00", token)
    sub = session.request_id(100)
    assert sub not in session.inflight
    returned: list[int] = []
    count = 0
    try:
        for first, body in session.feed(data):
            count += 1
            kind = first >> 4
            try:
                if kind == _packets.CONNACK:
                    session.connack(body)
                elif kind == _packets.PUBACK:
                    acked_publish, _ = session.puback(body)
                    if acked_publish is not None:
                        returned.append(acked_publish)
                    session.release(lambda t: False)  # now in flight: back by their PUBACK or from lost()
                elif kind in (_packets.SUBACK, _packets.UNSUBACK):
                    acked, _ = session.acknowledged_request(body)
                    if acked is not None:
                        returned.append(acked)
                elif kind == _packets.PINGRESP:
                    session.keepalive.pingresp()
            except MalformedPacketError:
                pass
            assert len(session.inflight) <= max(session.send_quota, 2)
    except MalformedPacketError:
        pass
    lost = session.lost()
    assert sorted(returned + lost) == [0, 1, 2, 3, 4, 100], (returned, lost)
    return count
