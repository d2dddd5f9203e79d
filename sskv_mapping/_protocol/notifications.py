"""KEYNOTIFY notifications, topic + payload -> :class:`KeyEvent` (docs/design/protocol.md §4)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import ProtocolError
from . import resp3
from .hlc import HybridLogicalClock
from .topics import parse_notification_topic

__all__ = ["KeyEvent", "KeyOperation", "encode_notification", "parse_notification"]


class KeyOperation(enum.Enum):
    """What a change notification reports: a ``SET`` of the key or its ``DELETE`` (expiry included)."""

    SET = "SET"
    DELETE = "DELETE"


@dataclass(frozen=True, slots=True)
class KeyEvent:
    """One change of a watched key. ``value`` is the new value after a SET, ``None`` after a delete.

    ``version`` is the change's HLC (``None`` only if the service sent none). ``synthetic`` marks events a
    client made up after a reconnect, from re-reading a key whose notifications may have been lost.
    """

    key: bytes
    op: KeyOperation
    value: bytes | None
    version: HybridLogicalClock | None
    synthetic: bool = False


def encode_notification(op: KeyOperation, value: bytes | None = None) -> bytes:
    """Service side: the payload of a notification."""
    if op is KeyOperation.SET:
        if value is None:
            raise ValueError("a SET notification carries the new value")
        return resp3.encode_array([b"NOTIFY", b"SET", b"VALUE", value])
    return resp3.encode_array([b"NOTIFY", b"DELETE"])


def parse_notification_payload(payload: bytes) -> tuple[KeyOperation, bytes | None]:
    reply = resp3.parse_reply(payload)
    if not isinstance(reply, list) or not all(isinstance(x, bytes) for x in reply):
        raise ProtocolError("a notification must be an array of bulk strings")
    if len(reply) < 2 or reply[0] != b"NOTIFY":
        raise ProtocolError("a notification must start with NOTIFY")
    op = reply[1]
    if op == b"SET":
        if len(reply) == 4 and reply[2] == b"VALUE":
            value = reply[3]
            assert isinstance(value, bytes)
            return KeyOperation.SET, value
        raise ProtocolError("a SET notification must be NOTIFY SET VALUE <value>")
    if op in (b"DELETE", b"DEL"):  # DEL: what the public article says; the service sends DELETE
        if len(reply) == 2:
            return KeyOperation.DELETE, None
        raise ProtocolError("a DELETE notification has no further elements")
    raise ProtocolError(f"unknown notification operation {op!r:.40}")


def parse_notification(topic: str, payload: bytes, ts: str | None) -> tuple[str, KeyEvent]:
    """Parse a notification message into ``(client_id, KeyEvent)``; :class:`ProtocolError` otherwise."""
    client_id, key = parse_notification_topic(topic)
    op, value = parse_notification_payload(payload)
    version = HybridLogicalClock.parse(ts) if ts is not None else None
    return client_id, KeyEvent(key, op, value, version)
