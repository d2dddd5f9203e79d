"""The size limits of a key and a value, said before anything is written.

Why these numbers: docs/design/transport.md, "The session core and the other transports"; users: docs/reliability.md.
"""

from __future__ import annotations

from .topics import NOTIFY_PREFIX

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_TOPIC_BYTES",
    "MAX_WATCHER_ID_BYTES",
    "NOTIFY_OVERHEAD",
    "WRITE_BOUND",
    "key_too_long",
    "max_value_bytes",
    "value_too_large",
    "watch_too_long",
]

#: MQTT's longest topic name (a two-byte length prefix)
MAX_TOPIC_BYTES = 65_535
#: the longest watcher client id the key limit accounts for (bytes of UTF-8)
MAX_WATCHER_ID_BYTES = 256
#: what one connection may have waiting to be written (``_transport.stream.WRITE_BOUND``; a test keeps them equal):
#: a payload larger than this can never be queued by ``publish_nowait``
WRITE_BOUND = 16 << 20

_NOTIFY_MIDDLE = "/command/notify/"
#: the notification topic without the key's hex: 59 + 2 * 256 + 16 = 587 bytes
NOTIFY_TOPIC_FIXED = len(NOTIFY_PREFIX) + 2 * MAX_WATCHER_ID_BYTES + len(_NOTIFY_MIDDLE)
#: the longest key whose notification topic fits: (65,535 - 587) // 2 = 32,474 bytes
MAX_KEY_BYTES = (MAX_TOPIC_BYTES - NOTIFY_TOPIC_FIXED) // 2

#: A notification PUBLISH less its value and the key's hex, from above: fixed header (5), topic length (2) and the
#: topic without the key (587), packet id (2), properties (length 1 + ``__ts`` user property 1 + 2 + 4 + 2 + at most
#: 47: "<wall ms>:<counter>:StateStore"), the payload's RESP3 framing (``*4 $6 NOTIFY $3 SET $5 VALUE $<n>``, 50 at
#: most): 703 bytes, rounded up.
NOTIFY_OVERHEAD = 768


def max_value_bytes(key_length: int, max_packet_size: int | None) -> int:
    """The largest value that may be stored under a key of ``key_length`` bytes, with the broker's Maximum Packet
    Size ``max_packet_size`` (``None``: it stated none)."""
    bound = WRITE_BOUND if max_packet_size is None else min(WRITE_BOUND, max_packet_size)
    return bound - NOTIFY_OVERHEAD - 2 * key_length


def watch_too_long(client_id: str, key: bytes) -> str | None:
    """Why ``client_id`` cannot be notified of ``key`` (the topic would pass MQTT's limit: a client id over
    :data:`MAX_WATCHER_ID_BYTES` and a long key), or ``None`` if it can."""
    length = len(NOTIFY_PREFIX) + 2 * len(client_id.encode("utf-8")) + len(_NOTIFY_MIDDLE) + 2 * len(key)
    if length <= MAX_TOPIC_BYTES:
        return None
    return (
        f"changes of this {len(key):,}-byte key cannot be notified to client id {client_id[:40]!r}... "
        f"({len(client_id.encode('utf-8')):,} bytes): the notification topic would be {length:,} bytes, over "
        f"MQTT's {MAX_TOPIC_BYTES:,} (keys up to {MAX_KEY_BYTES:,} bytes are notified to client ids up to "
        f"{MAX_WATCHER_ID_BYTES} bytes)"
    )


def key_too_long(key: bytes) -> str | None:
    """Why ``key`` cannot be stored (its notifications could never be sent), or ``None`` if it can."""
    if len(key) <= MAX_KEY_BYTES:
        return None
    return (
        f"the key is {len(key):,} bytes, over the key limit of {MAX_KEY_BYTES:,} bytes (its change notifications "
        f"carry it hex-encoded in an MQTT topic, at most {MAX_TOPIC_BYTES:,} bytes)"
    )


def value_too_large(key: bytes, value_length: int, max_packet_size: int | None) -> str | None:
    """Why a value of ``value_length`` bytes cannot be stored under ``key``, or ``None`` if it can."""
    limit = max_value_bytes(len(key), max_packet_size)
    if value_length <= limit:
        return None
    if max_packet_size is not None and max_packet_size < WRITE_BOUND:
        source = f"the broker's maximum packet size ({max_packet_size:,} bytes)"
    else:
        source = f"the {WRITE_BOUND:,}-byte write bound of a connection"
    return (
        f"the value is {value_length:,} bytes, over the value limit of {limit:,} bytes for this key "
        f"({source}, less {NOTIFY_OVERHEAD} bytes and twice the key's length for its change notifications)"
    )
