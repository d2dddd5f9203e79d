"""The stored key index's format, pure: what a shard and the used-shards key look like as bytes, and which shard a
key belongs to. :mod:`sskv_mapping.mapping._index` (``StoredKeyIndex``) reads and writes the store
with it.

What it does and why: docs/design/namespaces.md, "The stored index, key by key", `mapping/_index_format.py`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .._namespace.key_index import IndexEntry
from ..errors import ProtocolError

__all__ = ["IndexEntry", "decode_shard", "decode_used", "encode_shard", "encode_used", "shard_of"]


def shard_of(key: str, shards: int) -> int:
    """The shard (``0 <= i < shards``) that lists ``key``."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big") % shards


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json(raw: bytes, what: str) -> Any:
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"{what} is not valid JSON: {exc}") from exc


def decode_shard(raw: bytes | None) -> dict[str, IndexEntry]:
    """A shard's entries from its stored bytes (``None`` or empty: no entries)."""
    if raw is None or raw == b"":
        return {}
    data = _json(raw, "an index shard")
    if not isinstance(data, dict):
        raise ProtocolError("an index shard is not a JSON object")
    out: dict[str, IndexEntry] = {}
    for key, value in data.items():
        if _is_int(value):
            out[key] = IndexEntry(value)
        elif isinstance(value, list) and len(value) == 2 and all(_is_int(v) for v in value):
            out[key] = IndexEntry(value[0], value[1])
        else:
            raise ProtocolError(f"an index shard entry is not added_ms or [added_ms, expires_ms]: {value!r:.80}")
    return out


def encode_shard(entries: dict[str, IndexEntry]) -> bytes:
    """A shard's stored bytes, canonical: the same entries in any order give the same bytes."""
    data = {k: e.added_ms if e.expires_ms is None else [e.added_ms, e.expires_ms] for k, e in entries.items()}
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


def decode_used(raw: bytes | None) -> dict[str, IndexEntry]:
    """The used-shards key as the shard-like map ``StoredKeyIndex`` keeps it in: ``str(i) -> IndexEntry(0)``."""
    if raw is None or raw == b"":
        return {}
    data = _json(raw, "the used-shards key")
    if not isinstance(data, list) or not all(_is_int(i) for i in data):
        raise ProtocolError("the used-shards key is not a JSON list of shard numbers")
    return {str(i): IndexEntry(0) for i in data}


def encode_used(used: dict[str, IndexEntry]) -> bytes:
    """The used-shards key's stored bytes: its shard numbers, sorted."""
    return json.dumps(sorted(int(k) for k in used), separators=(",", ":")).encode()
