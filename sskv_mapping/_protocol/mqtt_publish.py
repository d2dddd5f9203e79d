"""The MQTT 5 PUBLISH packet this project sends and receives, as bytes (compared with paho's in the tests).

Design: docs/design/transport.md, "The session core and the other transports".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigurationError, ProtocolError

__all__ = [
    "InboundMessage",
    "MalformedPacketError",
    "OutgoingMessage",
    "PackedUserProperties",
    "decode_publish",
    "message_size",
    "mqtt_bytes",
    "mqtt_str",
    "publish_properties",
    "publish_size",
    "read_utf8",
    "reply_properties",
    "varint",
]


class MalformedPacketError(ProtocolError):
    """A PUBLISH packet that does not follow MQTT 5 (or that paho/aiomqtt would refuse)."""


_new = object.__new__


@dataclass(slots=True)
class InboundMessage:
    """A received PUBLISH, with the MQTT 5 properties this project uses, as plain values, its fields in
    :class:`OutgoingMessage`'s order.

    Read-only by convention, not frozen (as ``httpx.Request``): one is built per message received, and a frozen
    dataclass's ``__init__`` costs three times as much. It compares by value, so it is not hashable.
    """

    topic: str
    payload: bytes
    qos: int
    correlation_data: bytes | None
    response_topic: str | None
    user_properties: tuple[tuple[str, str], ...]
    content_type: str | None
    message_expiry: int | None = None

    def user_property(self, name: str) -> str | None:
        """The first value of user property ``name`` (order-independent lookup)."""
        for key, value in self.user_properties:
            if key == name:
                return value
        return None


# -- encoding ------------------------------------------------------------------------------------------------


def mqtt_bytes(data: bytes) -> bytes:
    """Binary Data: a two-byte length, then the bytes; :class:`ConfigurationError` past 65,535 bytes."""
    if len(data) > 0xFFFF:
        raise ConfigurationError("an MQTT property value may be at most 65,535 bytes")
    return len(data).to_bytes(2, "big") + data


#: Encoded (length-prefixed) short strings. Most of a request's or response's property strings repeat from one
#: message to the next (names, client id, response topic, content type); a timestamp churns it, and it is
#: emptied when full rather than managed as an LRU.
_ENCODED: dict[str, bytes] = {}
_ENCODED_MAX = 1024


def mqtt_str(text: str) -> bytes:
    """A UTF-8 Encoded String: a two-byte length, then the UTF-8 bytes (short ones are cached)."""
    field = _ENCODED.get(text)
    if field is None:
        field = mqtt_bytes(text.encode())
        if len(text) <= 256:
            if len(_ENCODED) >= _ENCODED_MAX:
                _ENCODED.clear()
            _ENCODED[text] = field
    return field


def varint(n: int) -> bytes:
    """A Variable Byte Integer: seven bits per byte, least significant first, the top bit says "more"."""
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:  # a reply's or request's properties, most packets: two bytes without the loop
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


class PackedUserProperties(tuple[tuple[str, str], ...]):
    """User properties that keep their own encoding (each pair as ``0x26``, name, value), for a sender that
    publishes the same ones many times (the emulator's replies: one per version). A tuple of the pairs to every
    reader; :func:`publish_properties` encodes them once, on first use (an in-process transport never does)."""

    #: the encoded pairs, set by :meth:`pack` on first use (until then the instance is a bare tuple, no
    #: ``__dict__`` made): read it as ``try: props.packed except AttributeError: props.pack()``
    packed: bytes

    def pack(self) -> bytes:
        """The encoded pairs, as :func:`publish_properties` writes them (kept as :attr:`packed`)."""
        packed = self.packed = b"".join(b"\x26" + mqtt_str(name) + mqtt_str(value) for name, value in self)
        return packed


def publish_properties(
    correlation_data: bytes | None,
    response_topic: str | None,
    user_properties: Sequence[tuple[str, str]],
    content_type: str | None,
    message_expiry: int | None,
) -> bytes:
    """The PUBLISH properties, Property Length first, that paho's ``Properties.pack()`` would produce for these
    values, in its order (its name table's: 0x02, 0x03, 0x08, 0x09, then every 0x26 in the given order)."""
    body = b"" if message_expiry is None else b"\x02" + message_expiry.to_bytes(4, "big")
    if content_type is not None:
        body += b"\x03" + mqtt_str(content_type)
    if response_topic is not None:
        body += b"\x08" + mqtt_str(response_topic)
    if correlation_data is not None:
        if len(correlation_data) > 0xFFFF:
            raise ConfigurationError("an MQTT property value may be at most 65,535 bytes")
        body += b"\x09" + len(correlation_data).to_bytes(2, "big") + bytes(correlation_data)
    if type(user_properties) is PackedUserProperties:
        try:
            body += user_properties.packed
        except AttributeError:
            body += user_properties.pack()
    elif user_properties:
        body += b"".join([b"\x26" + mqtt_str(name) + mqtt_str(value) for name, value in user_properties])
    size = len(body)
    return (bytes((size,)) if size < 0x80 else varint(size)) + body


#: a content type's property (0x03 and the string), for reply_properties: one or two per process
_CONTENT_TYPE_FIELDS: dict[str, bytes] = {}


def _content_type_field(content_type: str) -> bytes:
    field = b"\x03" + mqtt_str(content_type)
    if len(_CONTENT_TYPE_FIELDS) >= 16:
        _CONTENT_TYPE_FIELDS.clear()
    _CONTENT_TYPE_FIELDS[content_type] = field
    return field


def reply_properties(correlation_data: bytes, content_type: str | None, user_properties: PackedUserProperties) -> bytes:
    """``publish_properties(correlation_data, None, user_properties, content_type, None)``, the properties of a
    reply (a responder's: no response topic, no expiry), with fewer steps: one per reply the emulator sends."""
    if len(correlation_data) > 0xFFFF:
        raise ConfigurationError("an MQTT property value may be at most 65,535 bytes")
    head = b"" if content_type is None else _CONTENT_TYPE_FIELDS.get(content_type) or _content_type_field(content_type)
    try:
        packed = user_properties.packed
    except AttributeError:
        packed = user_properties.pack()
    body = head + b"\x09" + len(correlation_data).to_bytes(2, "big") + bytes(correlation_data) + packed
    size = len(body)
    return (bytes((size,)) if size < 0x80 else varint(size)) + body


# -- decoding ------------------------------------------------------------------------------------------------


def read_utf8(buf: bytes, pos: int, end: int) -> tuple[str, int]:
    """An MQTT UTF-8 string at ``pos`` that must end by ``end``: ``(value, next position)``.

    paho's ``readUTF`` rules: the length must fit, the bytes must be strict UTF-8 (which already excludes
    the surrogates D800-DFFF), and U+0000 and U+FEFF are refused.
    """
    if pos + 2 > end:
        raise MalformedPacketError("Not enough data to read string length")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise MalformedPacketError("Length delimited string too long")
    try:
        value = buf[pos + 2 : stop].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedPacketError(f"string not UTF-8: {exc}") from exc
    if "\x00" in value or "\ufeff" in value:
        raise MalformedPacketError("[MQTT-1.5.4-2] Null or U+FEFF found in UTF-8 data")
    return value, stop


#: The user properties that end a PUBLISH's properties, after its first user property, decoded: the bytes (every
#: one of them checked once, as any others) -> the pairs. A client's requests repeat them byte for byte (its id,
#: the protocol version, the partition...; only the first, ``__ts``, changes), so a request's are looked up rather
#: than decoded again. Bounded in entries and in the bytes of each; emptied when full.
_USER_TAILS: dict[bytes, tuple[tuple[str, str], ...]] = {}
_USER_TAILS_MAX = 1024
_USER_TAIL_BYTES = 1024
#: The same for what starts a request's properties, its Message Expiry Interval and Response Topic (a client's
#: requests repeat them byte for byte): those bytes -> (expiry, response topic), checked once; bounded likewise.
_HEADS: dict[bytes, tuple[int, str]] = {}
_HEAD_BYTES = 1024
_SEEN_HEAD = 1 << 0x02 | 1 << 0x08


def decode_publish(header: int, packet: bytes | bytearray) -> tuple[InboundMessage, int]:
    """A PUBLISH packet's variable header and payload -> ``(message, packet id)``, QoS 0 and 1.

    ``header`` is the packet's first byte (``0x30`` | DUP, QoS, RETAIN bits); ``packet`` is what follows the
    Remaining Length. What paho's ``decode_publish`` + ``Properties.unpack`` + aiomqtt's ``Message``/``Topic``
    + the transport's conversion compute: every packet that path accepts decodes to the same
    :class:`InboundMessage`; what it refuses raises :class:`MalformedPacketError`: unknown or non-PUBLISH
    property ids, a repeated single-valued property, out-of-range values, lengths that overrun, bad UTF-8, an
    empty or wildcard topic (aiomqtt's ``Topic``). One deliberate difference: a fixed-size value that runs
    past the declared property length is refused here; paho reads on into the payload.
    """
    buf = packet if type(packet) is bytes else bytes(packet)
    try:  # the decoding in the same frame (one call per message received)
        qos = (header >> 1) & 3
        size = len(buf)
        pos = 2 + ((buf[0] << 8) | buf[1])
        if pos > size:
            raise MalformedPacketError("topic longer than the packet")
        topic = buf[2:pos].decode("utf-8")
        if not topic or "+" in topic or "#" in topic:
            raise MalformedPacketError(f"invalid topic {topic[:80]!r}")  # as aiomqtt's Topic (no aliases are enabled)
        mid = 0
        if qos:
            if pos + 2 > size:
                raise MalformedPacketError("no packet identifier")
            mid = (buf[pos] << 8) | buf[pos + 1]
            pos += 2
        # Property Length, a Variable Byte Integer of at most four bytes (one or two: without the loop).
        length = buf[pos]
        if length < 0x80:
            pos += 1
        elif buf[pos + 1] < 0x80:
            length = (length & 0x7F) | (buf[pos + 1] << 7)
            pos += 2
        else:
            length = shift = 0
            for _ in range(4):
                byte = buf[pos]
                pos += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            else:
                raise MalformedPacketError("Variable Byte Integer is more than four bytes long")
        end = pos + length
        if end > size:
            raise MalformedPacketError("properties longer than the packet")
        correlation: bytes | None = None
        response_topic: str | None = None
        content_type: str | None = None
        expiry: int | None = None
        user: list[tuple[str, str]] = []
        seen_single = 0  # bit set of the single-valued ids seen (all PUBLISH ids are < 64)
        tail_at = -1  # where the user properties after the first begin (-2: something else follows them)
        head: bytes | None = None  # a request's expiry and response topic, not yet in _HEADS
        if pos + 8 <= end and buf[pos] == 0x02 and buf[pos + 5] == 0x08:  # a request's: see _HEADS
            stop = pos + 8 + ((buf[pos + 6] << 8) | buf[pos + 7])
            if stop <= end and stop - pos <= _HEAD_BYTES:
                head = buf[pos:stop]
                known = _HEADS.get(head)
                if known is not None:
                    expiry, response_topic = known
                    seen_single = _SEEN_HEAD
                    pos = stop
                    head = None
        # the user properties from which on they are looked up whole: after a request's first; all of them when
        # no response topic came before them (a response, a notification)
        tail_from = 0 if response_topic is None else 1
        while pos < end:
            ident = buf[pos]
            pos += 1
            if ident == 0x26:  # User Property (may repeat): read_utf8 twice, inline (five or more per request)
                if tail_at == -1 and len(user) == tail_from:
                    # the properties after a request's first (its __ts) are the same bytes on each of its client's
                    # requests, and a response's or notification's (no response topic before them) often all are:
                    # decoded once, then looked up (see _USER_TAILS)
                    tail = _USER_TAILS.get(buf[pos - 1 : end])
                    if tail is not None:
                        user.extend(tail)
                        pos = end
                        break
                    tail_at = pos - 1
                if pos + 2 > end:
                    raise MalformedPacketError("Not enough data to read string length")
                stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
                if stop > end:
                    raise MalformedPacketError("Length delimited string too long")
                try:
                    name = buf[pos + 2 : stop].decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise MalformedPacketError(f"string not UTF-8: {exc}") from exc
                if "\x00" in name or "\ufeff" in name:
                    raise MalformedPacketError("[MQTT-1.5.4-2] Null or U+FEFF found in UTF-8 data")
                if stop + 2 > end:
                    raise MalformedPacketError("Not enough data to read string length")
                pos = stop + 2 + ((buf[stop] << 8) | buf[stop + 1])
                if pos > end:
                    raise MalformedPacketError("Length delimited string too long")
                try:
                    value = buf[stop + 2 : pos].decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise MalformedPacketError(f"string not UTF-8: {exc}") from exc
                if "\x00" in value or "\ufeff" in value:
                    raise MalformedPacketError("[MQTT-1.5.4-2] Null or U+FEFF found in UTF-8 data")
                user.append((name, value))
                continue
            if tail_at >= 0:  # the properties after the first user property are not all user properties: not kept
                tail_at = -2
            if ident == 0x09:  # Correlation Data (every request has it: tested first, its bit inline)
                if seen_single & 0x200:
                    raise MalformedPacketError("Property 0x09 must not exist more than once")
                seen_single |= 0x200
                if pos + 2 > end:
                    raise MalformedPacketError("Not enough data to read binary data length")
                stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
                if stop > end:
                    raise MalformedPacketError("Length delimited binary data too long")
                correlation = buf[pos + 2 : stop]
                pos = stop
                continue
            if ident == 0x0B:  # Subscription Identifier (may repeat): a VBI, 1..268435455
                sub_id = shift = 0
                for _ in range(4):
                    if pos >= end:
                        raise MalformedPacketError("Not enough data to decode Variable Byte Integer")
                    byte = buf[pos]
                    pos += 1
                    sub_id |= (byte & 0x7F) << shift
                    shift += 7
                    if not byte & 0x80:
                        break
                else:
                    raise MalformedPacketError("Variable Byte Integer is more than four bytes long")
                if sub_id < 1:
                    raise MalformedPacketError("SubscriptionIdentifier property value must be in the range 1-268435455")
                continue
            bit = 1 << ident if ident < 64 else 0
            if seen_single & bit:
                raise MalformedPacketError(f"Property {ident:#04x} must not exist more than once")
            seen_single |= bit
            if ident == 0x08:  # Response Topic: read_utf8, inline (every request has one)
                if pos + 2 > end:
                    raise MalformedPacketError("Not enough data to read string length")
                stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
                if stop > end:
                    raise MalformedPacketError("Length delimited string too long")
                try:
                    response_topic = buf[pos + 2 : stop].decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise MalformedPacketError(f"string not UTF-8: {exc}") from exc
                if "\x00" in response_topic or "\ufeff" in response_topic:
                    raise MalformedPacketError("[MQTT-1.5.4-2] Null or U+FEFF found in UTF-8 data")
                pos = stop
                tail_from = 1  # a request's: its user properties from the second on are looked up
            elif ident == 0x03:  # Content Type
                content_type, pos = read_utf8(buf, pos, end)
            elif ident == 0x02:  # Message Expiry Interval
                if pos + 4 > end:
                    raise MalformedPacketError("Four Byte Integer runs past the properties")
                expiry = int.from_bytes(buf[pos : pos + 4], "big")
                pos += 4
            elif ident == 0x01:  # Payload Format Indicator: 0 or 1, not reported
                if pos >= end or buf[pos] > 1:
                    raise MalformedPacketError("PayloadFormatIndicator property value must be 0 or 1")
                pos += 1
            elif ident == 0x23:  # Topic Alias: 1..65535, not reported (aliases are never enabled)
                if pos + 2 > end or not (buf[pos] or buf[pos + 1]):
                    raise MalformedPacketError("TopicAlias property value must be in the range 1-65535")
                pos += 2
            else:
                raise MalformedPacketError(f"property {ident:#04x} is not allowed in a PUBLISH")
        if tail_at >= 0 and end - tail_at <= _USER_TAIL_BYTES:
            if len(_USER_TAILS) >= _USER_TAILS_MAX:
                _USER_TAILS.clear()
            _USER_TAILS[buf[tail_at:end]] = tuple(user[tail_from:])
        if head is not None and expiry is not None and response_topic is not None:  # both read from head's bytes
            if len(_HEADS) >= _USER_TAILS_MAX:
                _HEADS.clear()
            _HEADS[head] = (expiry, response_topic)
        message = _new(InboundMessage)  # InboundMessage(...) without its call: one per message received
        message.topic = topic
        message.payload = buf[end:]
        message.qos = qos
        message.correlation_data = correlation
        message.response_topic = response_topic
        message.user_properties = tuple(user)
        message.content_type = content_type
        message.message_expiry = expiry
        return message, mid
    except MalformedPacketError:
        raise
    except (IndexError, ValueError) as exc:  # a read past the end; UnicodeDecodeError is a ValueError
        raise MalformedPacketError(f"malformed PUBLISH: {exc}") from exc


# -- outgoing ------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class OutgoingMessage:
    """A PUBLISH to send, with the MQTT 5 properties this project uses, as plain values: what every
    :class:`~sskv_mapping.Connection`'s ``publish``/``publish_nowait`` takes.

    ``qos`` is 0 or 1; ``correlation_data`` (0x09), ``response_topic`` (0x08), ``content_type`` (0x03) and
    ``message_expiry`` (0x02, seconds) are left out of the packet when ``None``; ``user_properties`` (0x26) go in
    their order. The counterpart of :class:`InboundMessage`, with the same fields in the same order. Read-only by
    convention, not frozen (one is built per request and per reply); it compares by value, so it is not hashable.
    """

    topic: str
    payload: bytes
    qos: int = 1
    correlation_data: bytes | None = None
    response_topic: str | None = None
    user_properties: Sequence[tuple[str, str]] = ()
    content_type: str | None = None
    message_expiry: int | None = None

    def encoded_properties(self) -> bytes:
        """The PUBLISH properties, Property Length first (:func:`publish_properties`)."""
        return publish_properties(
            self.correlation_data, self.response_topic, self.user_properties, self.content_type, self.message_expiry
        )


def publish_size(topic_field: int, properties: int, payload: int, qos: int) -> int:
    """The whole size of a PUBLISH packet, fixed header included (what a broker's Maximum Packet Size counts),
    from the sizes of its parts: the length-prefixed topic, the properties with their Property Length, and the
    payload; a QoS 1 PUBLISH adds its two-byte packet id. The one place this project computes it."""
    remaining = topic_field + (2 if qos else 0) + properties + payload
    if remaining < 0x80:
        return remaining + 2
    if remaining < 0x4000:
        return remaining + 3
    if remaining < 0x200000:
        return remaining + 4
    return remaining + 5


def message_size(message: OutgoingMessage, properties: bytes | None = None) -> int:
    """The whole size of the PUBLISH packet ``message`` encodes to (:func:`publish_size`); ``properties``: its
    :meth:`~OutgoingMessage.encoded_properties` when the caller has them already."""
    if properties is None:
        properties = message.encoded_properties()
    topic = message.topic
    field = _ENCODED.get(topic)
    topic_field = len(field) if field is not None else 2 + len(topic.encode("utf-8"))
    return publish_size(topic_field, len(properties), len(message.payload), message.qos)
