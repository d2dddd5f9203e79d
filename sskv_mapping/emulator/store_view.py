"""The inspector's pure part: the store's contents as a person reads them.

What it does and why: docs/design/architecture.md, "The emulator's parts", `emulator/store_view.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .._namespace.key_layout import KeyLayout, parse_key
from .._protocol.commands import Delete, Get, KeyNotify, Scan, Set, SetCondition, VDelete, parse_command
from .._protocol.notifications import parse_notification_payload
from ..errors import ProtocolError
from .core import CoreResult, EmulatorCore, KeyRecord

__all__ = [
    "KeyRole",
    "describe_request",
    "key_from_text",
    "key_record",
    "list_keys",
    "list_locks",
    "list_namespaces",
    "list_watches",
    "role_of",
    "show_bytes",
    "trace_id_of",
]

#: the longest value text sent in a listing (more of the value is one ``/api/key`` request away)
PREVIEW_CHARS = 200
#: the longest value text ``/api/key`` sends (a longer value is shown cut, with its size): rendering never costs more
#: than this, whatever the value's size
VIEW_CHARS = 64 * 1024
#: index and generation entries larger than this are not parsed to describe a namespace
_JSON_PARSE_MAX = 1 << 20


@dataclass(frozen=True, slots=True)
class KeyRole:
    """What a key is to the library: which namespace and face it belongs to, and its part there."""

    namespace: str
    face: str  # "dict", "cache" or "prefix" (ns/<key> with nothing else to tell a dict listed by SCAN)
    part: str  # the layout's name in _namespace/key_layout.py: "data", "index shard", "entry", "gos-lock", ...
    detail: str = ""  # the user key, the shard number, the generation
    lock: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "face": self.face, "part": self.part, "detail": self.detail}


def _text(raw: bytes, partial: bool = False) -> str | None:
    """``raw`` as text, or None when it is not (invalid UTF-8, control characters). ``partial``: ``raw`` is the head
    of a longer value, and may end inside a character (dropped)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not partial or exc.start < len(raw) - 3:
            return None
        try:
            text = raw[: exc.start].decode("utf-8")
        except UnicodeDecodeError:
            return None
    if any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        return None
    return text


def show_bytes(raw: bytes, limit: int | None = PREVIEW_CHARS) -> dict[str, Any]:
    """``{"as": "json"|"text"|"hex", "text": ..., "size": n, "cut": bool}``: JSON pretty-printable text is ``json``.

    Only the value's head is looked at, never the whole of a large value (a 60 MB value must not hold up the
    emulator's loop): ``text`` is at most ``limit`` characters, :data:`VIEW_CHARS` when ``limit`` is None, and
    ``cut`` says there is more (``size`` is the whole value's). A cut value is never ``json`` (it would not parse)."""
    limit = VIEW_CHARS if limit is None else min(limit, VIEW_CHARS)
    head = raw[: 4 * limit + 3]  # enough for ``limit`` characters of UTF-8
    partial = len(head) < len(raw)
    text = _text(head, partial)
    kind = "text"
    if text is None:
        kind, text = "hex", head[: limit // 3 + 1].hex(" ")
    elif not partial and (
        text[:1] in '{["' or text in ("true", "false", "null") or text[:1].isdigit() or text[:1] == "-"
    ):
        try:
            json.loads(text)
            kind = "json"
        except ValueError:
            pass
    cut = partial or len(text) > limit
    if cut and kind == "json":
        kind = "text"
    return {"as": kind, "text": text[:limit] if cut else text, "size": len(raw), "cut": cut}


def key_from_text(text: str | None, hex_text: str | None) -> bytes:
    """The key bytes a client named: ``key`` (UTF-8 text) or ``key_hex``. Raises ``ValueError``."""
    if hex_text is not None:
        key = bytes.fromhex(hex_text)
    elif text is not None:
        key = text.encode("utf-8", "surrogatepass")
    else:
        raise ValueError("name the key: ?key=TEXT or ?key_hex=HEX")
    if not key:
        raise ValueError("the key is empty")
    return key


def _key_json(key: bytes) -> dict[str, Any]:
    text = _text(key)
    return {"key": text if text is not None else key.hex(" "), "key_hex": key.hex(), "key_is_text": text is not None}


def role_of(key: bytes) -> KeyRole | None:
    """The library's part this key plays, from the faces' own table of layouts (``None``: not a layout they write)."""
    found = parse_key(key)
    if found is None:
        return None
    layout = found.layout
    return KeyRole(found.namespace, layout.face, layout.name, found.detail, lock=layout.lock)


def _ttl_ms(entry: KeyRecord, now_ms: int) -> int | None:
    return None if entry.expires_at_ms is None else max(0, entry.expires_at_ms - now_ms)


def key_record(
    key: bytes, entry: KeyRecord, now_ms: int, watchers: Iterable[str] = (), limit: int | None = PREVIEW_CHARS
) -> dict[str, Any]:
    """One key as the page lists it."""
    role = role_of(key)
    return {
        **_key_json(key),
        "value": show_bytes(entry.value, limit),
        "version": str(entry.version),
        "ttl_ms": _ttl_ms(entry, now_ms),
        "fencing_token": None if entry.fencing_token is None else str(entry.fencing_token),
        "persist": entry.persist,
        "role": None if role is None else role.as_json(),
        "lock": entry.lease or (role is not None and role.lock),
        "watchers": list(watchers),
    }


def _live(core: EmulatorCore, now_ms: int) -> list[tuple[bytes, KeyRecord]]:
    out = []
    for key in core:
        entry = core.entry(key)
        if entry is not None and (entry.expires_at_ms is None or entry.expires_at_ms > now_ms):
            out.append((key, entry))
    return out


def list_keys(core: EmulatorCore, now_ms: int, prefix: bytes = b"", limit: int = 500) -> dict[str, Any]:
    """The live keys starting with ``prefix``, sorted, at most ``limit`` of them, and how many there are."""
    watched = core.watched()
    live = _live(core, now_ms)
    matched = sorted((k, e) for k, e in live if k.startswith(prefix))
    return {
        "now_ms": now_ms,
        "total": len(live),
        "matched": len(matched),
        "keys": [key_record(k, e, now_ms, watched.get(k, ())) for k, e in matched[:limit]],
    }


def _json_of(entry: KeyRecord | None) -> Any:
    if entry is None or len(entry.value) > _JSON_PARSE_MAX:  # a huge value is not parsed on the emulator's loop
        return None
    try:
        return json.loads(entry.value)
    except ValueError:
        return None


def list_namespaces(core: EmulatorCore, now_ms: int, prefix: bytes = b"") -> list[dict[str, Any]]:
    """Each namespace recognised from its keys, as its face shows it (a dict's index, a cache's generations)."""
    found: dict[str, dict[str, Any]] = {}
    roles: list[tuple[KeyRole, bytes, KeyRecord]] = []
    for key, entry in _live(core, now_ms):
        role = role_of(key)
        if role is None or not key.startswith(prefix):
            continue
        roles.append((role, key, entry))
        ns = found.setdefault(role.namespace, {"namespace": role.namespace, "face": "prefix", "keys": 0})
        ns["keys"] += 1
        if role.face != "prefix":
            ns["face"] = role.face
    for ns_name, ns in found.items():
        if ns["face"] == "dict":
            _describe_dict(core, ns_name, ns, roles)
        elif ns["face"] == "cache":
            _describe_cache(core, ns_name, ns, roles)
        else:
            ns["data_keys"] = ns["keys"]
            ns["listing"] = "none stored: a dict listed by SCAN, or plain keys with a '/'"
    return sorted(found.values(), key=lambda n: str(n["namespace"]))


def _describe_dict(core: EmulatorCore, name: str, ns: dict[str, Any], roles: list[tuple[KeyRole, bytes, Any]]) -> None:
    meta = _json_of(core.entry(KeyLayout(name).index_meta()))
    shards: dict[str, int] = {}
    listed: set[str] = set()
    data: set[str] = set()
    for role, _, entry in roles:
        if role.namespace != name:
            continue
        if role.part == "index shard":
            content = _json_of(entry)
            if isinstance(content, dict):
                shards[role.detail] = len(content)
                listed.update(str(k) for k in content)
        elif role.part == "data":
            data.add(role.detail)
    ns["listing"] = "stored index"
    ns["shards"] = meta.get("shards") if isinstance(meta, dict) else None
    ns["shards_in_use"] = dict(sorted(shards.items()))
    ns["listed"] = len(listed)
    ns["data_keys"] = len(data)
    ns["listed_without_data"] = sorted(listed - data)[:20]
    ns["data_not_listed"] = sorted(data - listed)[:20]


def _describe_cache(core: EmulatorCore, name: str, ns: dict[str, Any], roles: list[tuple[KeyRole, bytes, Any]]) -> None:
    state = _json_of(core.entry(KeyLayout(name).generation()))
    gen = state.get("gen") if isinstance(state, dict) else None
    retired = state.get("retired", []) if isinstance(state, dict) else []
    by_gen: dict[str, int] = {}
    ledger = 0
    for role, key, _ in roles:
        if role.namespace != name:
            continue
        found = parse_key(key) if role.part == "entry" else None
        if found is not None:
            g = str(found.parts["gen"])
            by_gen[g] = by_gen.get(g, 0) + 1
        elif role.part == "ledger shard":
            ledger += 1
    ns["generation"] = gen
    ns["retired"] = retired
    ns["entries"] = by_gen.get(gen, 0) if isinstance(gen, str) else 0
    ns["entries_by_generation"] = by_gen
    ns["unreachable_entries"] = sum(n for g, n in by_gen.items() if g != gen)
    ns["ledger_shards"] = ledger


def list_locks(core: EmulatorCore, now_ms: int, prefix: bytes = b"") -> list[dict[str, Any]]:
    """The leased locks: holder (the value), lease left (the TTL), fencing token (the version)."""
    out = []
    for key, entry in sorted(_live(core, now_ms)):
        role = role_of(key)
        if not key.startswith(prefix) or not (entry.lease or (role is not None and role.lock)):
            continue
        out.append(
            {
                **_key_json(key),
                "holder": show_bytes(entry.value),
                "lease_left_ms": _ttl_ms(entry, now_ms),
                "fencing_token": str(entry.version),
                "role": None if role is None else role.as_json(),
            }
        )
    return out


def list_watches(core: EmulatorCore, prefix: bytes = b"") -> dict[str, Any]:
    """KEYNOTIFY registrations: each watched key with its clients, and each client with how many keys it watches."""
    watched = core.watched()
    by_client: dict[str, list[dict[str, Any]]] = {}
    keys = []
    for key in sorted(watched):
        if not key.startswith(prefix):
            continue
        keys.append({**_key_json(key), "clients": watched[key], "exists": key in core})
        for client in watched[key]:
            by_client.setdefault(client, []).append(_key_json(key))
    return {
        "keys": keys,
        "clients": [{"client_id": c, "count": len(ks), "keys": ks[:50]} for c, ks in sorted(by_client.items())],
    }


def _reply_text(payload: bytes) -> str:
    if payload.startswith(b"$") and not payload.startswith(b"$-1"):
        size = payload[1 : payload.find(b"\r")].decode("ascii", "replace")
        return f"value ({size} bytes)"
    line = payload.split(b"\r\n", 1)[0]
    return {b"+OK": "OK", b":1": "1", b":0": "0", b":-1": "not applied (-1)", b"$-1": "nil"}.get(
        line, line.decode("utf-8", "replace")[:200]
    )


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` (``00-<32 hex>-<16 hex>-<2 hex>``), ``None`` if it is not one."""
    if traceparent is None:
        return None
    parts = traceparent.split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or parts[1] == "0" * 32:
        return None
    try:
        int(parts[1], 16)
    except ValueError:
        return None
    return parts[1].lower()


def describe_request(
    at_ms: int, client_id: str | None, request: bytes | None, result: CoreResult, traceparent: str | None = None
) -> dict[str, Any]:
    """One line of the live feed: the request (``None``: an expiry on the timer), its reply and notifications, and
    the trace id of its ``traceparent`` user property (``trace_id``, when it carried a valid one)."""
    event: dict[str, Any] = {"at_ms": at_ms, "client": client_id}
    trace_id = trace_id_of(traceparent)
    if trace_id is not None:
        event["trace_id"] = trace_id
    if request is None:
        event["op"] = "EXPIRE"
    else:
        try:
            cmd = parse_command(request)
        except ProtocolError:
            cmd = None
        if isinstance(cmd, Set):
            event.update(op="SET", **_key_json(cmd.key), value=show_bytes(cmd.value, 80))
            opts = [] if cmd.condition is None else [cmd.condition.name]
            if cmd.expiry_ms is not None:
                opts.append(f"PX {cmd.expiry_ms}")
            event["options"] = " ".join(opts)
            event["lease"] = cmd.condition is SetCondition.NEX and cmd.expiry_ms is not None
        elif isinstance(cmd, Get | Delete | VDelete | KeyNotify):
            op = {Get: "GET", Delete: "DEL", VDelete: "VDEL", KeyNotify: "KEYNOTIFY"}[type(cmd)]
            event.update(op=op, **_key_json(cmd.key))
            if isinstance(cmd, KeyNotify) and cmd.stop:
                event["options"] = "STOP"
        elif isinstance(cmd, Scan):
            event.update(op="SCAN", pattern=show_bytes(cmd.pattern, 80)["text"])
        else:
            event["op"] = "?"
        event["reply"] = _reply_text(result.payload)
    if result.version is not None:
        event["version"] = str(result.version)
    event["notifications"] = [
        {
            "client": n.client_id,
            **_key_json(n.key),
            "op": _notified_op(n.payload),
        }
        for n in result.notifications
    ]
    return event


def _notified_op(payload: bytes) -> str:
    try:
        return parse_notification_payload(payload)[0].value
    except ProtocolError:
        return "?"
