"""The MQTT 5 packets a client and the emulator exchange with a broker, as bytes, and :class:`PacketSplitter`.

Only what this project needs of MQTT 5; anything else is a ``MalformedPacketError`` (docs/design/transport.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .mqtt_publish import MalformedPacketError, decode_publish, mqtt_bytes, mqtt_str, varint

__all__ = [
    "AUTH_CONTINUE",
    "AUTH_REAUTHENTICATE",
    "AUTH_SUCCESS",
    "BAD_CREDENTIALS",
    "DISCONNECT",
    "DISCONNECT_END_SESSION",
    "MAX_PACKET",
    "PINGREQ",
    "SESSION_TAKEN_OVER",
    "Auth",
    "ClientRequest",
    "Connack",
    "PacketSplitter",
    "ack_packet",
    "auth_packet",
    "connack_packet",
    "connect_packet",
    "decode_ack",
    "decode_auth",
    "decode_client_request",
    "decode_connack",
    "decode_disconnect",
    "decode_suback",
    "disconnect_packet",
    "puback_packet",
    "publish_packet",
    "reason_name",
    "subscribe_packet",
    "unsubscribe_packet",
]

#: The largest Remaining Length MQTT can express (a four-byte Variable Byte Integer): 256 MiB less 1 byte.
MAX_PACKET = 268_435_455


CONNECT, CONNACK, PUBLISH, PUBACK = 1, 2, 3, 4
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK = 8, 9, 10, 11
PINGREQ_TYPE, PINGRESP, DISCONNECT_TYPE, AUTH = 12, 13, 14, 15

PINGREQ = b"\xc0\x00"
#: DISCONNECT with reason 0 (normal disconnection) and no properties
DISCONNECT = b"\xe0\x00"
#: DISCONNECT with reason 0 and Session Expiry Interval 0: the clean end of a persistent session (the broker
#: frees it now instead of keeping it for the expiry the CONNECT asked for, MQTT 5 3.14.2.2.2)
DISCONNECT_END_SESSION = b"\xe0\x07\x00\x05\x11\x00\x00\x00\x00"
#: CONNACK/DISCONNECT reason codes the client reacts to: another connection took our client id's session,
#: and the refusals of credentials
SESSION_TAKEN_OVER = 0x8E
BAD_CREDENTIALS = frozenset({0x86, 0x87, 0x8C})

_REASONS = {
    0x00: "Success",
    0x10: "No matching subscribers",
    0x11: "No subscription existed",
    0x80: "Unspecified error",
    0x81: "Malformed Packet",
    0x82: "Protocol Error",
    0x83: "Implementation specific error",
    0x84: "Unsupported Protocol Version",
    0x85: "Client Identifier not valid",
    0x86: "Bad User Name or Password",
    0x87: "Not authorized",
    0x88: "Server unavailable",
    0x89: "Server busy",
    0x8A: "Banned",
    0x8B: "Server shutting down",
    0x8C: "Bad authentication method",
    0x8D: "Keep Alive timeout",
    0x8E: "Session taken over",
    0x8F: "Topic Filter invalid",
    0x90: "Topic Name invalid",
    0x91: "Packet Identifier in use",
    0x92: "Packet Identifier not found",
    0x93: "Receive Maximum exceeded",
    0x94: "Topic Alias invalid",
    0x95: "Packet too large",
    0x96: "Message rate too high",
    0x97: "Quota exceeded",
    0x98: "Administrative action",
    0x99: "Payload format invalid",
    0x9A: "Retain not supported",
    0x9B: "QoS not supported",
    0x9C: "Use another server",
    0x9D: "Server moved",
    0x9E: "Shared Subscriptions not supported",
    0x9F: "Connection rate exceeded",
    0xA0: "Maximum connect time",
    0xA1: "Subscription Identifiers not supported",
    0xA2: "Wildcard Subscriptions not supported",
}


def reason_name(code: int) -> str:
    """The MQTT 5 name of a reason code (``0x87`` -> ``"Not authorized"``)."""
    return _REASONS.get(code, f"reason code 0x{code:02X}")


def _packet(first: int, body: bytes) -> bytes:
    if len(body) > MAX_PACKET:
        raise MalformedPacketError(f"an MQTT packet may be at most {MAX_PACKET:,} bytes, not {len(body):,}")
    return bytes((first,)) + varint(len(body)) + body


# -- outbound ---------------------------------------------------------------------------------------------------


def connect_packet(
    client_id: str,
    *,
    keepalive: int,
    username: str | None = None,
    password: str | bytes | None = None,
    auth_method: str | None = None,
    auth_data: bytes | None = None,
    receive_maximum: int | None = None,
    maximum_packet_size: int | None = None,
    clean_start: bool = True,
    session_expiry: int = 0,
) -> bytes:
    """CONNECT, MQTT 5, no will. Authentication: user name/password and/or an enhanced
    authentication method with its data (``K8S-SAT`` and the token). ``receive_maximum`` (property 0x21) and
    ``maximum_packet_size`` (0x27) are our own limits, declared to the broker when given. ``clean_start`` (the
    flag) and ``session_expiry`` (property 0x11, seconds, sent when not 0): whether the broker resumes the
    session it keeps for this client id, and how long it keeps it after the connection ends."""
    flags = 0x02 if clean_start else 0x00
    payload = mqtt_str(client_id)
    if username is not None:
        flags |= 0x80
        payload += mqtt_str(username)
    if password is not None:
        flags |= 0x40
        payload += mqtt_bytes(password.encode() if isinstance(password, str) else bytes(password))
    props = b""
    if session_expiry:
        if not 0 < session_expiry <= 0xFFFFFFFF:
            raise MalformedPacketError(f"Session Expiry Interval must be 0..4294967295, not {session_expiry}")
        props += b"\x11" + session_expiry.to_bytes(4, "big")
    if receive_maximum is not None:
        if not 0 < receive_maximum <= 0xFFFF:
            raise MalformedPacketError(f"Receive Maximum must be 1..65535, not {receive_maximum}")
        props += b"\x21" + receive_maximum.to_bytes(2, "big")
    if maximum_packet_size is not None:
        if not 0 < maximum_packet_size <= MAX_PACKET + 5:
            raise MalformedPacketError(f"Maximum Packet Size must be 1..{MAX_PACKET + 5}, not {maximum_packet_size}")
        props += b"\x27" + maximum_packet_size.to_bytes(4, "big")
    if auth_method is not None:
        props += b"\x15" + mqtt_str(auth_method)
        if auth_data is not None:
            props += b"\x16" + mqtt_bytes(auth_data)
    if not 0 <= keepalive <= 0xFFFF:
        raise MalformedPacketError(f"keepalive must be 0..65535 seconds, not {keepalive}")
    head = mqtt_str("MQTT") + bytes((5, flags)) + keepalive.to_bytes(2, "big") + varint(len(props)) + props
    return _packet(0x10, head + payload)


def publish_packet(topic_field: bytes, payload: bytes, qos: int, packet_id: int, properties: bytes) -> bytes:
    """A PUBLISH: ``topic_field`` is the length-prefixed topic (:func:`mqtt_str`), ``properties`` the encoded
    properties with their length (:func:`~sskv_mapping._protocol.mqtt_publish.publish_properties`)."""
    size = len(topic_field) + len(properties) + len(payload) + (2 if qos else 0)
    if size > MAX_PACKET:
        raise MalformedPacketError(f"a PUBLISH may be at most {MAX_PACKET:,} bytes, not {size:,}")
    # the Remaining Length inline when it takes one or two bytes (varint's, without its call)
    length = (
        bytes((size,)) if size < 0x80 else bytes((size & 0x7F | 0x80, size >> 7)) if size < 0x4000 else varint(size)
    )
    if qos:
        return b"".join(
            (bytes((0x30 | (qos << 1),)), length, topic_field, packet_id.to_bytes(2, "big"), properties, payload)
        )
    return b"".join((b"\x30", length, topic_field, properties, payload))


def puback_packet(packet_id: int) -> bytes:
    """PUBACK, success (the two-byte form)."""
    return b"\x40\x02" + packet_id.to_bytes(2, "big")


def subscribe_packet(packet_id: int, filters: Iterable[tuple[str, int]]) -> bytes:
    body = packet_id.to_bytes(2, "big") + b"\x00"
    for topic_filter, qos in filters:
        body += mqtt_str(topic_filter) + bytes((qos,))
    return _packet(0x82, body)


def unsubscribe_packet(packet_id: int, filters: Iterable[str]) -> bytes:
    body = packet_id.to_bytes(2, "big") + b"\x00"
    for topic_filter in filters:
        body += mqtt_str(topic_filter)
    return _packet(0xA2, body)


# -- inbound ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connack:
    reason: int
    session_present: bool
    #: what the broker said of itself: Receive Maximum (0x21), Maximum Packet Size (0x27), Server Keep Alive
    #: (0x13), Assigned Client Identifier (0x12), Reason String (0x1F), ... by property id
    properties: dict[int, object] = field(default_factory=dict)


# MQTT 5 property identifiers by value type (MQTT 5.0, 2.2.2.2)
_BYTE = frozenset({0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A})
_TWO = frozenset({0x13, 0x21, 0x22, 0x23})
_FOUR = frozenset({0x02, 0x11, 0x18, 0x27})
_STRING = frozenset({0x03, 0x08, 0x12, 0x15, 0x1A, 0x1C, 0x1F})
_BINARY = frozenset({0x09, 0x16})


def _properties(buf: bytes, pos: int) -> tuple[dict[int, object], int]:
    """Properties at ``pos`` (length first) -> ``({id: value}, position after them)``; user properties (0x26)
    are collected as a list of pairs."""
    length, pos = _read_varint(buf, pos)
    end = pos + length
    if end > len(buf):
        raise MalformedPacketError("properties longer than the packet")
    props: dict[int, object] = {}
    while pos < end:
        ident = buf[pos]
        pos += 1
        if ident in _BYTE:
            size = 1
        elif ident in _TWO:
            size = 2
        elif ident in _FOUR:
            size = 4
        elif ident == 0x0B:
            value, pos = _read_varint(buf, pos)
            props[ident] = value
            continue
        elif ident in _STRING or ident in _BINARY:
            if pos + 2 > end:
                raise MalformedPacketError("property length runs past the properties")
            stop = pos + 2 + int.from_bytes(buf[pos : pos + 2], "big")
            if stop > end:
                raise MalformedPacketError("property value runs past the properties")
            raw = buf[pos + 2 : stop]
            pos = stop
            try:
                props[ident] = raw.decode("utf-8") if ident in _STRING else bytes(raw)
            except UnicodeDecodeError as exc:
                raise MalformedPacketError(f"property 0x{ident:02X} is not UTF-8") from exc
            continue
        elif ident == 0x26:
            pairs: list[tuple[str, str]] = []
            for _ in range(2):
                if pos + 2 > end:
                    raise MalformedPacketError("user property runs past the properties")
                stop = pos + 2 + int.from_bytes(buf[pos : pos + 2], "big")
                if stop > end:
                    raise MalformedPacketError("user property runs past the properties")
                try:
                    pairs.append(buf[pos + 2 : stop].decode("utf-8"))  # type: ignore[arg-type]
                except UnicodeDecodeError as exc:
                    raise MalformedPacketError("user property is not UTF-8") from exc
                pos = stop
            existing = props.setdefault(0x26, [])
            assert isinstance(existing, list)
            existing.append((pairs[0], pairs[1]))
            continue
        else:
            raise MalformedPacketError(f"unknown property 0x{ident:02X}")
        if pos + size > end:
            raise MalformedPacketError(f"property 0x{ident:02X} runs past the properties")
        props[ident] = int.from_bytes(buf[pos : pos + size], "big")
        pos += size
    return props, pos


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(4):
        if pos >= len(buf):
            raise MalformedPacketError("Variable Byte Integer runs past the packet")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos
    raise MalformedPacketError("Variable Byte Integer is more than four bytes long")


def decode_connack(body: bytes) -> Connack:
    if len(body) < 2 or body[0] > 1:
        raise MalformedPacketError("malformed CONNACK")
    props: dict[int, object] = {}
    if len(body) > 2:
        props, end = _properties(body, 2)
        if end != len(body):
            raise MalformedPacketError("bytes after the CONNACK properties")
    return Connack(body[1], bool(body[0]), props)


def decode_ack(body: bytes) -> tuple[int, int]:
    """PUBACK (or another two-byte-id acknowledgement): ``(packet id, reason code)``; properties are skipped."""
    if len(body) == 2:  # the usual success form
        return (body[0] << 8) | body[1], 0
    if len(body) < 2:
        raise MalformedPacketError("acknowledgement without a packet identifier")
    reason = body[2] if len(body) > 2 else 0
    if len(body) > 3:
        _, end = _properties(body, 3)
        if end != len(body):
            raise MalformedPacketError("bytes after the acknowledgement's properties")
    return int.from_bytes(body[:2], "big"), reason


def decode_suback(body: bytes) -> tuple[int, list[int]]:
    """SUBACK or UNSUBACK: ``(packet id, one reason code per filter)``."""
    if len(body) < 3:
        raise MalformedPacketError("malformed SUBACK/UNSUBACK")
    _, pos = _properties(body, 2)
    return int.from_bytes(body[:2], "big"), list(body[pos:])


def decode_disconnect(body: bytes) -> tuple[int, str | None]:
    """DISCONNECT from the broker: ``(reason code, reason string)``."""
    if not body:
        return 0, None
    reason = body[0]
    text = None
    if len(body) > 1:
        props, _ = _properties(body, 1)
        value = props.get(0x1F)
        text = value if isinstance(value, str) else None
    return reason, text


class PacketSplitter:
    """Cuts a byte stream into whole MQTT packets: ``feed(data)`` -> ``[(first byte, body), ...]``.

    Whatever a ``recv`` returned is parsed at once, every complete packet in it; an incomplete tail is kept for
    the next ``feed``. A packet over ``max_size`` (its whole length: fixed header included, as MQTT 5's Maximum
    Packet Size counts it) or a Remaining Length of more than four bytes is a :class:`MalformedPacketError` (the
    connection must be dropped) as soon as its fixed header is read -- nothing of it is buffered first.

    Linear: the tail grows in a ``bytearray`` (amortised appends) and a pending packet is re-examined by its
    header only, never copied again until it is whole (one big packet over many reads costs its size twice: the
    tail made bytes once, its body sliced from it).
    """

    __slots__ = ("_buf", "_max", "_need")

    def __init__(self, max_size: int = MAX_PACKET + 5) -> None:
        self._buf = bytearray()
        self._max = max_size
        self._need = 0  # bytes the pending tail needs before another parse can complete a packet

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        if not self._buf:
            # the usual case: the read holds whole packets; bodies are slices of ``data`` (one copy each)
            if type(data) is not bytes:
                data = bytes(data)
            out, pos = self._split(data)
            if pos < len(data):
                self._buf += memoryview(data)[pos:]
            return out
        buf = self._buf
        buf += data
        if len(buf) < self._need:
            return []
        # a packet completed: the tail is read as bytes (one copy of it; the bodies are then slices of that)
        out, pos = self._split(bytes(buf))
        del buf[:pos]
        return out

    def _split(self, buf: bytes) -> tuple[list[tuple[int, bytes]], int]:
        size = len(buf)
        pos = 0
        limit = self._max
        out: list[tuple[int, bytes]] = []
        while pos + 1 < size:
            first = buf[pos]
            byte = buf[pos + 1]
            if byte < 0x80:  # a one-byte Remaining Length (acknowledgements, small packets)
                length = byte
                start = pos + 2
            elif size - pos > 2 and buf[pos + 2] < 0x80:  # two bytes (a request or reply of 128 B to 16 KB)
                length = (byte & 0x7F) | (buf[pos + 2] << 7)
                start = pos + 3
            else:
                length = byte & 0x7F
                shift = 7
                cur = pos + 2
                while True:
                    if cur >= size:
                        self._need = 0
                        return out, pos
                    byte = buf[cur]
                    cur += 1
                    length |= (byte & 0x7F) << shift
                    if not byte & 0x80:
                        break
                    shift += 7
                    if shift > 21:
                        raise MalformedPacketError("Remaining Length is more than four bytes long")
                start = cur
            end = start + length
            if end - pos > limit:
                raise MalformedPacketError(f"a packet of {end - pos:,} bytes is over the limit ({limit:,})")
            if end > size:
                self._need = end - pos
                return out, pos
            out.append((first, buf[start:end]))
            pos = end
        self._need = 0
        return out, pos

    @property
    def pending(self) -> int:
        """Bytes of an incomplete packet kept for the next :meth:`feed`."""
        return len(self._buf)


# -- a broker's side: what a fault-injecting proxy reads from a client and answers in the broker's place -----------


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """The parts of a client's CONNECT, PUBLISH, SUBSCRIBE or UNSUBSCRIBE a broker answers to: the packet type
    (1, 3, 8, 10), its packet identifier (0 for CONNECT and a QoS 0 PUBLISH), its QoS (PUBLISH), its topic or
    filters, and its user properties in order."""

    kind: int
    packet_id: int
    qos: int
    topics: tuple[str, ...]
    user_properties: tuple[tuple[str, str], ...]

    def user_property(self, name: str) -> str | None:
        """The first value of user property ``name``."""
        for key, value in self.user_properties:
            if key == name:
                return value
        return None


def _pairs(props: dict[int, object]) -> tuple[tuple[str, str], ...]:
    found = props.get(0x26)
    return tuple(found) if isinstance(found, list) else ()


def decode_client_request(first: int, body: bytes) -> ClientRequest | None:
    """A client's packet (first byte, body) -> :class:`ClientRequest`; ``None`` for any other packet type. A
    malformed one is a :class:`MalformedPacketError`."""
    kind = first >> 4
    if kind == CONNECT:
        if len(body) < 10 or body[:6] != b"\x00\x04MQTT" or body[6] != 5:
            raise MalformedPacketError("not an MQTT 5 CONNECT")
        props, _ = _properties(body, 10)
        return ClientRequest(CONNECT, 0, 0, (), _pairs(props))
    if kind == PUBLISH:
        message, packet_id = decode_publish(first, body)
        return ClientRequest(PUBLISH, packet_id, message.qos, (message.topic,), message.user_properties)
    if kind in (SUBSCRIBE, UNSUBSCRIBE):
        if len(body) < 3:
            raise MalformedPacketError("malformed SUBSCRIBE/UNSUBSCRIBE")
        props, pos = _properties(body, 2)
        topics: list[str] = []
        while pos < len(body):
            if pos + 2 > len(body):
                raise MalformedPacketError("topic filter runs past the packet")
            stop = pos + 2 + int.from_bytes(body[pos : pos + 2], "big")
            if stop > len(body):
                raise MalformedPacketError("topic filter runs past the packet")
            try:
                topics.append(body[pos + 2 : stop].decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise MalformedPacketError("topic filter is not UTF-8") from exc
            pos = stop + (1 if kind == SUBSCRIBE else 0)  # a SUBSCRIBE's options byte
        if not topics:
            raise MalformedPacketError("SUBSCRIBE/UNSUBSCRIBE without a topic filter")
        return ClientRequest(kind, int.from_bytes(body[:2], "big"), 0, tuple(topics), _pairs(props))
    return None


def _reason(code: int) -> bytes:
    if not 0 <= code <= 0xFF:
        raise MalformedPacketError(f"a reason code is one byte, not {code}")
    return bytes((code,))


def connack_packet(reason: int) -> bytes:
    """CONNACK with ``reason``, session present 0 and no properties: a refusal's (MQTT 5 3.2.2.1.1)."""
    return _packet(0x20, b"\x00" + _reason(reason) + b"\x00")


def ack_packet(kind: int, packet_id: int, reasons: Iterable[int]) -> bytes:
    """The acknowledgement of a client's request: PUBACK (``kind`` 3: one reason), SUBACK (8) or UNSUBACK (10):
    one reason per filter."""
    codes = b"".join(_reason(code) for code in reasons)
    pid = packet_id.to_bytes(2, "big")
    if kind == PUBLISH:
        if len(codes) != 1:
            raise MalformedPacketError("a PUBACK has one reason code")
        return _packet(0x40, pid + codes + b"\x00")
    if kind in (SUBSCRIBE, UNSUBSCRIBE):
        return _packet(0x90 if kind == SUBSCRIBE else 0xB0, pid + b"\x00" + codes)
    raise MalformedPacketError(f"no acknowledgement for packet type {kind}")


def disconnect_packet(reason: int) -> bytes:
    """DISCONNECT with ``reason`` and no properties (a broker's, or a client's)."""
    return _packet(0xE0, _reason(reason) + b"\x00")


# -- AUTH (MQTT 5 §3.15): re-authentication on a live connection ------------------------------------------------

#: AUTH reason codes: the exchange is over and the client is (re-)authenticated / one more step / the client
#: starts a re-authentication
AUTH_SUCCESS, AUTH_CONTINUE, AUTH_REAUTHENTICATE = 0x00, 0x18, 0x19
_REASONS.update({0x18: "Continue authentication", 0x19: "Re-authenticate"})
# the properties an AUTH may carry: Authentication Method, Authentication Data, Reason String, User Property
_AUTH_PROPERTIES = frozenset({0x15, 0x16, 0x1F, 0x26})


@dataclass(frozen=True, slots=True)
class Auth:
    """A decoded AUTH packet. ``reason`` is whatever byte the peer sent (a broker refusing a re-authentication
    should send DISCONNECT, but the receiver decides what an unexpected code means, not the codec)."""

    reason: int = AUTH_SUCCESS
    method: str | None = None
    data: bytes | None = None
    reason_string: str | None = None


def auth_packet(
    reason: int, *, method: str | None = None, data: bytes | None = None, reason_string: str | None = None
) -> bytes:
    """AUTH with ``reason`` and the given properties; a bare success (0x00, no properties) is the two-byte form.
    Authentication Data needs a method ([MQTT-3.15.2-1]: every AUTH names the method it continues)."""
    if not 0 <= reason <= 0xFF:
        raise MalformedPacketError(f"a reason code is one byte, not {reason}")
    if data is not None and method is None:
        raise MalformedPacketError("AUTH with Authentication Data needs an Authentication Method")
    props = b""
    if method is not None:
        props += b"\x15" + mqtt_str(method)
    if data is not None:
        props += b"\x16" + mqtt_bytes(data)
    if reason_string is not None:
        props += b"\x1f" + mqtt_str(reason_string)
    if reason == AUTH_SUCCESS and not props:
        return b"\xf0\x00"
    return _packet(0xF0, bytes((reason,)) + varint(len(props)) + props)


def decode_auth(first: int, body: bytes) -> Auth:
    """An AUTH packet's first byte and body -> :class:`Auth`; anything not an AUTH as MQTT 5 writes it (reserved
    flags set, a property an AUTH may not carry, bytes after the properties) is a :class:`MalformedPacketError`."""
    if first != 0xF0:
        raise MalformedPacketError(f"not an AUTH packet (first byte 0x{first:02X})")
    if not body:
        return Auth()
    reason = body[0]
    if len(body) == 1:
        return Auth(reason)
    props, end = _properties(body, 1)
    if end != len(body):
        raise MalformedPacketError("bytes after the AUTH properties")
    extra = set(props) - _AUTH_PROPERTIES
    if extra:
        raise MalformedPacketError(f"property 0x{min(extra):02X} is not allowed in AUTH")
    method, data, text = props.get(0x15), props.get(0x16), props.get(0x1F)
    return Auth(
        reason,
        method if isinstance(method, str) else None,
        data if isinstance(data, bytes) else None,
        text if isinstance(text, str) else None,
    )
