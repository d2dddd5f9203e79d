"""MQTT topics of the state store and their hex rules (docs/design/protocol.md §1 and §4)."""

from __future__ import annotations

import binascii

from ..errors import ProtocolError

__all__ = [
    "NOTIFY_PREFIX",
    "REQUEST_TOPIC",
    "SERVICE_ID",
    "is_forbidden_response_topic",
    "is_topic_name",
    "notification_filter",
    "notification_topic",
    "parse_notification_topic",
    "response_topic",
]

SERVICE_ID = "FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8"
REQUEST_TOPIC = f"statestore/v1/{SERVICE_ID}/command/invoke"
NOTIFY_PREFIX = f"clients/statestore/v1/{SERVICE_ID}/"
_FORBIDDEN_PREFIX = f"clients/statestore/v1/{SERVICE_ID}"


def _hex(data: bytes) -> str:
    return data.hex().upper()


def response_topic(client_id: str) -> str:
    """The response topic the Rust SDK uses for ``client_id``."""
    return f"clients/{client_id}/services/statestore/v1/{SERVICE_ID}/command/invoke/response"


def notification_topic(client_id: str, key: bytes) -> str:
    """Where the service publishes changes of ``key`` for ``client_id`` (upper-case hex of both)."""
    return f"{NOTIFY_PREFIX}{_hex(client_id.encode('utf-8'))}/command/notify/{_hex(key)}"


def notification_filter(client_id: str) -> str:
    """The subscription that covers every notification for ``client_id``."""
    return f"{NOTIFY_PREFIX}{_hex(client_id.encode('utf-8'))}/command/notify/+"


def parse_notification_topic(topic: str) -> tuple[str, bytes]:
    """Return ``(client_id, key)`` from a notification topic; :class:`ProtocolError` otherwise."""
    if not topic.startswith(NOTIFY_PREFIX):
        raise ProtocolError(f"not a state store notification topic: {topic[:120]!r}")
    parts = topic[len(NOTIFY_PREFIX) :].split("/")
    if len(parts) != 4 or parts[1] != "command" or parts[2] != "notify":
        raise ProtocolError(f"malformed notification topic: {topic[:120]!r}")
    client_hex, key_hex = parts[0], parts[3]
    try:
        client_id = _unhex(client_hex).decode("utf-8")
        key = _unhex(key_hex)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed hex in notification topic: {topic[:120]!r}") from exc
    if not key:
        raise ProtocolError("notification topic names an empty key")
    return client_id, key


def _unhex(text: str) -> bytes:
    # Upper case is what the service writes; accept lower case too, but nothing else (no spaces, no 0x).
    if not text.isascii() or not text.isalnum():
        raise ValueError("not hex")
    return binascii.unhexlify(text)


def is_forbidden_response_topic(topic: str) -> bool:
    """The service disconnects clients whose response topic is the request topic or under its prefix."""
    return topic == REQUEST_TOPIC or topic.startswith(_FORBIDDEN_PREFIX)


def is_topic_name(topic: str) -> bool:
    """Whether ``topic`` can name a PUBLISH: no wildcard ``+``/``#`` nor U+0000 (MQTT 5 [MQTT-3.3.2-14],
    [MQTT-4.7.3-2])."""
    return "+" not in topic and "#" not in topic and "\x00" not in topic
