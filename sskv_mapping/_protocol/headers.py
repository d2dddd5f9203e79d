"""MQTT 5 user properties and header checks of requests and responses, as plain ``(name, value)`` pairs."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ..errors import ProtocolError, RpcStatusError, UnsupportedVersionError
from .hlc import HybridLogicalClock
from .mqtt_publish import mqtt_bytes, mqtt_str, varint

__all__ = [
    "CONTENT_TYPE",
    "FENCING_TOKEN",
    "HIGH_PRIORITY",
    "PARTITION",
    "PERSISTENCE",
    "PROTOCOL_VERSION",
    "PROT_VER",
    "SOURCE_ID",
    "STATUS",
    "STATUS_MESSAGE",
    "SUPPORTED_MAJOR",
    "TIMESTAMP",
    "RequestProperties",
    "UserProperties",
    "check_response",
    "expiry_seconds",
    "request_properties",
    "response_properties",
]

TIMESTAMP = "__ts"
SOURCE_ID = "__srcId"
PROT_VER = "__protVer"
PARTITION = "$partition"
HIGH_PRIORITY = "$high_priority"
FENCING_TOKEN = "__ft"
PERSISTENCE = "aio-persistence"
STATUS = "__stat"
STATUS_MESSAGE = "__stMsg"
SUPPORTED_MAJOR = "__supProtMajVer"

PROTOCOL_VERSION = "1.0"
CONTENT_TYPE = "application/octet-stream"

UserProperties = list[tuple[str, str]]


#: client id -> the request properties that never change for it (every request builds its list from these)
_TAILS: dict[str, tuple[tuple[str, str], ...]] = {}


def request_properties(
    client_id: str,
    timestamp: HybridLogicalClock,
    fencing_token: HybridLogicalClock | None = None,
    persist: bool = False,
) -> UserProperties:
    """The user properties the SDKs put on every request (docs/design/protocol.md §1)."""
    tail = _TAILS.get(client_id)
    if tail is None:
        if len(_TAILS) >= 1024:
            _TAILS.clear()
        tail = _TAILS[client_id] = ((SOURCE_ID, client_id), (PROT_VER, PROTOCOL_VERSION), (PARTITION, client_id))
    props: UserProperties = [(TIMESTAMP, str(timestamp)), *tail, (HIGH_PRIORITY, "")]
    if fencing_token is not None:
        props.append((FENCING_TOKEN, str(fencing_token)))
    if persist:
        props.append((PERSISTENCE, "true"))
    return props


class RequestProperties:
    """One client's request PUBLISH properties, encoded once but for what changes per request.

    :meth:`encode` gives the bytes ``publish_properties(correlation_data, response_topic,
    request_properties(client_id, ...), CONTENT_TYPE, expiry)`` gives, Property Length first: the content type,
    response topic and the constant user properties are kept encoded; a request adds its expiry, correlation data,
    ``__ts`` and (when given) fencing token and persistence flag.
    """

    __slots__ = ("_expiry", "_head", "_tail", "_usual")

    def __init__(self, client_id: str, response_topic: str) -> None:
        # what follows the Message Expiry Interval up to the correlation data's value
        self._head = b"\x03" + mqtt_str(CONTENT_TYPE) + b"\x08" + mqtt_str(response_topic) + b"\x09"
        # what follows __ts's value: the constant user properties, in request_properties' order
        self._tail = b"".join(
            b"\x26" + mqtt_str(name) + mqtt_str(value)
            for name, value in ((SOURCE_ID, client_id), (PROT_VER, PROTOCOL_VERSION), (PARTITION, client_id))
        ) + (b"\x26" + mqtt_str(HIGH_PRIORITY) + mqtt_str(""))
        self._expiry: tuple[int, bytes] = (-1, b"")  # the last expiry and its property (the timeout rarely changes)
        # the usual request's properties but its __ts value, in bytes: the expiry (5), the head, the correlation
        # data's 16 bytes and their length (18), __ts's name and value length (2), the tail
        self._usual = 5 + len(self._head) + 18 + len(_TS_NAME) + 2 + len(self._tail)

    def encode(
        self,
        correlation_data: bytes,
        timestamp: str,
        expiry: int,
        fencing_token: HybridLogicalClock | None = None,
        persist: bool = False,
    ) -> bytes:
        """The request's properties, Property Length first (``timestamp``: its ``__ts``, ``str(hlc)``)."""
        last, field = self._expiry
        if expiry != last:
            field = b"\x02" + expiry.to_bytes(4, "big")
            self._expiry = (expiry, field)
        ts = timestamp.encode()
        if len(correlation_data) == 16 and len(ts) < 0x100 and fencing_token is None and not persist:
            # the usual request: its Property Length worked out beforehand, the whole in one join (no pieces made
            # to be joined again)
            size = self._usual + len(ts)
            if size < 0x4000:
                return b"".join(
                    (
                        bytes((size,)) if size < 0x80 else bytes((size & 0x7F | 0x80, size >> 7)),
                        field,
                        self._head,
                        b"\x00\x10",
                        correlation_data,
                        _TS_NAME,
                        bytes((0, len(ts))),
                        ts,
                        self._tail,
                    )
                )
        # the client's correlation data is 16 bytes and its timestamp short: their length prefixes without a call
        corr = b"\x00\x10" + correlation_data if len(correlation_data) == 16 else mqtt_bytes(correlation_data)
        size = len(ts)
        ts_field = bytes((0, size)) + ts if size < 0x100 else mqtt_bytes(ts)
        body = b"".join((field, self._head, corr, _TS_NAME, ts_field, self._tail))
        if fencing_token is not None:
            body += _FT_NAME + mqtt_str(str(fencing_token))
        if persist:
            body += _PERSIST
        size = len(body)
        if size < 0x80:
            return bytes((size,)) + body
        if size < 0x4000:  # a request's usual size: varint's two bytes, without its call
            return bytes((size & 0x7F | 0x80, size >> 7)) + body
        return varint(size) + body


_TS_NAME = b"\x26" + mqtt_str(TIMESTAMP)
_FT_NAME = b"\x26" + mqtt_str(FENCING_TOKEN)
_PERSIST = b"\x26" + mqtt_str(PERSISTENCE) + mqtt_str("true")


def response_properties(
    version: HybridLogicalClock | None, status: int = 200, message: str | None = None
) -> UserProperties:
    """Service side: the user properties of a response."""
    props: UserProperties = [(STATUS, str(status)), (PROT_VER, PROTOCOL_VERSION)]
    if version is not None:
        props.append((TIMESTAMP, str(version)))
    if message is not None:
        props.append((STATUS_MESSAGE, message))
    return props


def expiry_seconds(timeout_s: float) -> int:
    """Message Expiry Interval for a request timeout: whole seconds, rounded up, at least 1, at most
    2**32 - 1 (the property is a four-byte integer: a longer timeout must not fail to encode)."""
    return min(max(1, math.ceil(timeout_s)), 0xFFFFFFFF)


def _major(version: str) -> int:
    head = version.split(".", 1)[0]
    # the length bound keeps int() away from its 4300-digit ValueError
    if not head.isascii() or not head.isdigit() or len(head) > 9:
        raise ProtocolError(f"malformed protocol version {version[:40]!r}")
    return int(head)


#: the response properties :func:`check_response` reads: a response carrying one twice is malformed
_RESPONSE_HEADERS = (STATUS, STATUS_MESSAGE, PROT_VER, SUPPORTED_MAJOR, TIMESTAMP)
_RESPONSE_HEADER_SET = frozenset(_RESPONSE_HEADERS)
#: the last ``__ts`` text parsed and its value (HybridLogicalClock is immutable: sharing it is safe)
_LAST_TS: tuple[str | None, HybridLogicalClock | None] = (None, None)


def check_response(
    properties: Mapping[str, str] | Iterable[tuple[str, str]], content_type: str | None
) -> HybridLogicalClock | None:
    """Validate a response's headers; return its ``__ts`` (or ``None`` when absent).

    Raises :class:`RpcStatusError` for ``__stat`` other than 200/204, :class:`UnsupportedVersionError` for a
    protocol major other than 1, :class:`ProtocolError` for anything malformed (missing ``__stat``
    included: every SDK rejects such a response).
    """
    if type(properties) is tuple and len(properties) == 3 and (content_type is None or content_type == CONTENT_TYPE):
        # the usual response, as the service and the emulator order it: status 200, this protocol version, __ts --
        # what the general way below finds in it, in three comparisons
        first, second, last = properties
        if first == _OK and second == _THIS_VERSION and last[0] == TIMESTAMP:
            return _timestamp(last[1])
    # One pass over the pairs, keeping only the names read here; another name may repeat (harmless), one of
    # these may not (first-wins and last-wins readers would disagree about it).
    stat = message = version = supported = ts = None
    # a received message's are a tuple of pairs: no ABC isinstance for it (one per response)
    pairs = (
        properties
        if type(properties) is tuple
        else properties.items()
        if isinstance(properties, Mapping)
        else properties
    )
    for name, value in pairs:
        if name not in _RESPONSE_HEADER_SET:
            continue
        if name == STATUS:
            if stat is not None:
                raise ProtocolError(f"response repeats the {name} property")
            stat = value
        elif name == TIMESTAMP:
            if ts is not None:
                raise ProtocolError(f"response repeats the {name} property")
            ts = value
        elif name == PROT_VER:
            if version is not None:
                raise ProtocolError(f"response repeats the {name} property")
            version = value
        elif name == STATUS_MESSAGE:
            if message is not None:
                raise ProtocolError(f"response repeats the {name} property")
            message = value
        else:
            if supported is not None:
                raise ProtocolError(f"response repeats the {name} property")
            supported = value
    if content_type not in (None, CONTENT_TYPE):
        raise ProtocolError(f"unexpected response content type {content_type[:60]!r}")
    if stat is None:
        raise ProtocolError("response has no __stat property")
    if not stat.isascii() or not stat.isdigit() or len(stat) > 3:
        raise ProtocolError(f"malformed __stat {stat[:20]!r}")
    if version is not None and version != PROTOCOL_VERSION and _major(version) != 1:
        raise UnsupportedVersionError(f"response protocol version {version[:20]!r}; this client speaks 1.x")
    status = int(stat)
    if status not in (200, 204):
        if status == 505:
            major = "?" if supported is None else supported[:20]
            raise UnsupportedVersionError(
                f"the service does not support protocol {PROTOCOL_VERSION} (supports major {major})"
            )
        raise RpcStatusError(status, message or "")
    if ts is None:
        return None
    return _timestamp(ts)


_OK = (STATUS, "200")
_THIS_VERSION = (PROT_VER, PROTOCOL_VERSION)


def _timestamp(ts: str) -> HybridLogicalClock | None:
    """``ts`` parsed (the last one parsed kept: a key read again has the version it had)."""
    global _LAST_TS
    last = _LAST_TS
    if last[0] == ts:  # a key read again: the version it had last time
        return last[1]
    parsed = HybridLogicalClock.parse(ts)
    _LAST_TS = (ts, parsed)
    return parsed
