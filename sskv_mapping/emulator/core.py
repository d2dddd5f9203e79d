"""The state store as a pure state machine, faithful to docs/design/protocol.md §1-§6.

What it models and its choices: docs/design/architecture.md, "The emulator's parts".
"""

from __future__ import annotations

import base64
import heapq
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .._protocol import limits, resp3
from .._protocol.commands import (
    Command,
    Delete,
    Get,
    KeyNotify,
    Scan,
    Set,
    SetCondition,
    VDelete,
    parse_command,
)
from .._protocol.headers import FENCING_TOKEN, PERSISTENCE, TIMESTAMP
from .._protocol.hlc import MAX_DRIFT_MS, HybridLogicalClock, system_clock_ms, trusted
from .._protocol.notifications import KeyOperation, encode_notification
from .._protocol.topics import notification_topic
from ..errors import (
    ClockDriftError,
    FencingTokenLowerVersionError,
    FencingTokenRequiredError,
    FencingTokenSkewError,
    MalformedTimestampError,
    MissingTimestampError,
    NotAuthorizedError,
    ProtocolError,
    QuotaExceededError,
    RequestTooLargeError,
    ServiceError,
    TimestampSkewError,
    UnknownCommandError,
)
from .duplicates import DEFAULT_MAX_AGE_MS, DEFAULT_MAX_ENTRIES, RecentAnswers
from .scan import DEFAULT_SCAN_PAGE_SIZE, KeySpace

__all__ = ["SERVICE_NODE_ID", "CoreResult", "EmulatorCore", "KeyRecord", "Notification"]

#: The node id of the service's hybrid logical clock (the real service writes ``StateStore`` too).
SERVICE_NODE_ID = "StateStore"

# The service clock never refuses to advance (a client may push it up to 60 s ahead, and an injected
# wall clock may jump back); only *requests* are checked against MAX_DRIFT_MS.
_UNLIMITED_DRIFT = 2**64
_MAX_COUNTER = 2**64 - 1

_new = object.__new__
_OK = resp3.encode_simple("OK")
_ONE = resp3.encode_integer(1)
_ZERO = resp3.encode_integer(0)
_MINUS_ONE = resp3.encode_integer(-1)
_NIL = resp3.encode_bulk(None)
_DELETE_PAYLOAD = encode_notification(KeyOperation.DELETE)

_PERSIST_FORMAT = 1

#: how every client sends a GET: ``*2``, ``$3 GET``, then the key's length (upper case, as the SDKs write it)
_GET_HEAD = b"*2\r\n$3\r\nGET\r\n$"


#: a ``__ts`` in its usual form, the one ``HybridLogicalClock.parse`` reads without its checking way: ASCII digits
#: (at most 20 each), an ASCII node id (without ':', as the split into three parts gives)
_USUAL_TS = re.compile(r"([0-9]{1,20}):([0-9]{1,20}):([\x00-\x39\x3b-\x7f]*)").fullmatch

#: how every client sends a SET: ``*3`` (no option), ``$3 SET``, then the key's length
_SET_HEAD = b"*3\r\n$3\r\nSET\r\n$"


def _plain_set(payload: bytes) -> Set | None:
    """``parse_command(payload)`` for a well-formed ``SET key value`` (no option) that starts with :data:`_SET_HEAD`;
    ``None`` for anything else (an empty key, a malformed length, bytes after the request...), which
    :func:`parse_command` then answers."""
    end = payload.find(b"\r\n", 14)
    raw = payload[14:end]
    if end < 0 or not raw.isdigit() or len(raw) > 10:
        return None
    start = end + 2
    stop = start + int(raw)
    if stop == start or payload[stop : stop + 3] != b"\r\n$":
        return None
    end = payload.find(b"\r\n", stop + 3)
    raw = payload[stop + 3 : end]
    if end < 0 or not raw.isdigit() or len(raw) > 10:
        return None
    begin = end + 2
    finish = begin + int(raw)
    if len(payload) != finish + 2 or payload[finish:] != b"\r\n":
        return None
    return Set(payload[start:stop], payload[begin:finish], None, None)


#: well-formed GET requests seen lately -> their keys (the same keys are read again and again); emptied when full
_GET_KEYS: dict[bytes, bytes] = {}
_GET_KEYS_MAX = 4096
_GET_KEYS_PAYLOAD = 256


def _get_key(payload: bytes) -> bytes | None:
    """The key of a well-formed ``GET key`` request that starts with :data:`_GET_HEAD`; ``None`` for anything else
    (an empty key, a malformed length, bytes after the request...), which the general parser then answers."""
    end = payload.find(b"\r\n", 14)
    raw = payload[14:end]
    if end < 0 or not raw.isdigit() or len(raw) > 10:
        return None
    start = end + 2
    stop = start + int(raw)
    if stop == start or len(payload) != stop + 2 or payload[stop:] != b"\r\n":
        return None
    return payload[start:stop]


# The requests whose answers are remembered for their copies: those that change the store. A copy of a GET or a
# SCAN is answered afresh (nothing is applied twice, and their answers, values and key pages, may be large), and so
# is a KEYNOTIFY: registering twice changes nothing, and a copy re-sent after a reconnect must register again, since
# the disconnect dropped the registration its first copy made.
_REMEMBERED = frozenset({Set, Delete, VDelete})


@dataclass(frozen=True, slots=True)
class Notification:
    """One KEYNOTIFY message: ``payload`` for ``client_id`` about ``key``, with ``__ts`` = ``version``."""

    client_id: str
    key: bytes
    payload: bytes
    version: HybridLogicalClock

    @property
    def topic(self) -> str:
        """The notification topic (docs/design/protocol.md §4)."""
        return notification_topic(self.client_id, self.key)


@dataclass(slots=True, init=False)
class CoreResult:
    """What the service answers to one request.

    ``payload`` is the RESP3 reply, ``version`` the response ``__ts`` (``None``: absent), and
    ``notifications`` the messages to publish after the response, in order (an expiry noticed while
    handling the request comes first). ``duplicate``: the request was a copy of one already served, and this
    is the first copy's answer (nothing was applied, nothing is notified).

    Read-only by convention, not frozen (as :class:`~sskv_mapping._protocol.mqtt_publish.InboundMessage`): one is
    built per request served, and a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``.
    """

    payload: bytes
    version: HybridLogicalClock | None
    notifications: list[Notification]
    duplicate: bool

    def __init__(
        self,
        payload: bytes,
        version: HybridLogicalClock | None,
        notifications: list[Notification] | None = None,
        duplicate: bool = False,
    ) -> None:
        self.payload = payload
        self.version = version
        self.notifications = [] if notifications is None else notifications
        self.duplicate = duplicate


@dataclass(slots=True)
class KeyRecord:
    """A key's state inside the emulator (exposed read-only for tests and tooling)."""

    value: bytes
    version: HybridLogicalClock
    expires_at_ms: int | None = None
    fencing_token: HybridLogicalClock | None = None
    persist: bool = False
    #: written by ``SET NEX PX`` without a fencing token: how a lease is taken or renewed (docs/design/protocol.md §6),
    #: so tooling (the inspector) can show it as a lock whatever its name
    lease: bool = False


class EmulatorCore:
    """The state store service as a pure state machine.

    Args:
        now_ms: the wall clock in milliseconds since the epoch (inject a fake one in tests).
        node_id: the node id of the service clock.
        max_keys: the key quota (``None``: unlimited); a SET that would create a key beyond it fails with
            ``the quota has been exceeded``.
        scan: answer SCAN (default); ``False`` answers it ``-ERR unknown command`` like an older service.
        scan_page_size: the most keys in one SCAN page.
        scan_empty_pages: this many empty pages (with more to come) before every page of keys.
        duplicate_window: how many answers to remember for copies of a request (the oldest forgotten first;
            ``0``: none, every copy is applied).
        duplicate_window_ms: how long an answer is remembered for copies of its request (ms).

    Example:
        >>> from sskv_mapping._protocol.resp3 import encode_request
        >>> now = [1_700_000_000_000]
        >>> core = EmulatorCore(now_ms=lambda: now[0])
        >>> ts = {"__ts": "1700000000000:0:client-a"}
        >>> core.handle("client-a", encode_request(b"SET", b"k", b"v", b"PX", b"1000"), ts).payload
        b'+OK\\r\\n'
        >>> core.handle("client-a", encode_request(b"GET", b"k"), ts).payload
        b'$1\\r\\nv\\r\\n'
        >>> now[0] += 1_000  # expired
        >>> core.handle("client-a", encode_request(b"GET", b"k"), ts).payload
        b'$-1\\r\\n'
    """

    def __init__(
        self,
        *,
        now_ms: Callable[[], int] = system_clock_ms,
        node_id: str = SERVICE_NODE_ID,
        max_keys: int | None = None,
        scan: bool = True,
        scan_page_size: int = DEFAULT_SCAN_PAGE_SIZE,
        scan_empty_pages: int = 0,
        duplicate_window: int = DEFAULT_MAX_ENTRIES,
        duplicate_window_ms: int = DEFAULT_MAX_AGE_MS,
    ) -> None:
        if max_keys is not None and max_keys < 0:
            raise ValueError("max_keys must be >= 0 (or None for no quota)")
        self._now = now_ms
        #: The injected wall clock (a server's expiry timer must use the same one).
        self.now_ms = now_ms
        self.max_keys = max_keys
        self._clock = HybridLogicalClock(0, 0, node_id)
        self._store: dict[bytes, KeyRecord] = {}
        # key -> registered client ids (a dict: insertion-ordered, so notification order is stable)
        self._watchers: dict[bytes, dict[str, None]] = {}
        self._watched_by: dict[str, set[bytes]] = {}
        # (expires_at_ms, seq, key); entries go stale when the key is rewritten or deleted and are
        # skipped when popped (lazy deletion), and the heap is rebuilt when stale ones dominate.
        self._expiries: list[tuple[int, int, bytes]] = []
        self._seq = 0
        #: Bumped whenever an entry written with ``aio-persistence`` changes (set, deleted, expired);
        #: a server compares it to decide when to rewrite its persistence file.
        self.persistence_generation = 0
        #: the broker's Maximum Packet Size (``None``: none), set by the server from its CONNACK: a SET whose value or
        #: key is over the limits of :mod:`~sskv_mapping._protocol.limits` for it is refused (``RequestTooLargeError``)
        self.max_packet_size: int | None = None
        #: the sorted keys SCAN pages through (``None``: SCAN is answered ``unknown command``)
        self.keyspace = KeySpace(page_size=scan_page_size, empty_pages=scan_empty_pages) if scan else None
        #: the answers a copy of a recent request gets (docs/design/protocol.md §9: a re-sent request may arrive twice)
        self.answers = RecentAnswers(max_entries=duplicate_window, max_age_ms=duplicate_window_ms)

    # -- inspection ---------------------------------------------------------------------------------

    @property
    def clock(self) -> HybridLogicalClock:
        """The service's hybrid logical clock (the last version it issued or merged)."""
        return self._clock

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: object) -> bool:
        return key in self._store

    def __iter__(self) -> Iterator[bytes]:
        """The stored keys (a snapshot; keys past their expiry may remain until the next purge)."""
        return iter(list(self._store))

    def keys(self) -> list[bytes]:
        return list(self._store)

    def entry(self, key: bytes) -> KeyRecord | None:
        """The stored entry of ``key`` (no expiry check; for tests and tooling)."""
        return self._store.get(key)

    def watchers(self, key: bytes) -> list[str]:
        """The client ids registered for ``key``."""
        return list(self._watchers.get(key, ()))

    def registrations(self, client_id: str) -> set[bytes]:
        """The keys ``client_id`` is registered for."""
        return set(self._watched_by.get(client_id, ()))

    def watched(self) -> dict[bytes, list[str]]:
        """Every key with a KEYNOTIFY registration -> the client ids registered for it (a snapshot)."""
        return {key: list(clients) for key, clients in self._watchers.items()}

    # -- requests -----------------------------------------------------------------------------------

    def handle(
        self, client_id: str | None, payload: bytes, props: Mapping[str, str], correlation: bytes | None = None
    ) -> CoreResult:
        """Handle one request and return the reply, its ``__ts`` and the notifications to send.

        ``client_id`` is the requester's MQTT client id (``None`` when unknown); ``props`` its user
        properties (``__ts``, ``__ft``, ``aio-persistence``...). Service errors become ``-ERR`` replies;
        this never raises for any payload or header value. With ``correlation`` (the request's correlation
        data) and a client id, a copy of a recent state-changing request gets the first copy's answer
        (``duplicate=True``) and changes nothing.
        """
        now = self._now()
        if type(payload) is bytes:
            key = _GET_KEYS.get(payload)
            if key is None and payload[:14] == _GET_HEAD:
                key = _get_key(payload)
                if key is not None and len(payload) <= _GET_KEYS_PAYLOAD:
                    if len(_GET_KEYS) >= _GET_KEYS_MAX:
                        _GET_KEYS.clear()
                    _GET_KEYS[payload] = key
            if key is not None:
                return self._get(key, props, now)
        seen: tuple[str, bytes] | None = None
        if correlation is not None and client_id is not None:
            seen = (client_id, correlation)
            first = self.answers.answer(seen, payload, now)
            if first is not None:
                return CoreResult(first[0], first[1], [], True)
        notes = self._expire(now) if self._expiries and self._expiries[0][0] <= now else []
        kind: type[Command] | None = None
        try:
            plain = _plain_set(payload) if type(payload) is bytes and payload[:14] == _SET_HEAD else None
            cmd: Command = parse_command(payload) if plain is None else plain
            kind = type(cmd)
            if self.keyspace is None and kind is Scan:
                raise UnknownCommandError()
            raw_ts = props.get(TIMESTAMP)
            if raw_ts is not None:
                self._merge_request(raw_ts, now)
            elif kind is Set:
                raise MissingTimestampError()
            result = self._dispatch(cmd, client_id, props, now, notes)
        except ServiceError as exc:
            result = CoreResult(resp3.encode_error(exc.text), None, notes)
        if seen is not None and kind in _REMEMBERED:
            self.answers.remember(seen, payload, result.payload, result.version, now)
        return result

    def _get(self, key: bytes, props: Mapping[str, str], now: int) -> CoreResult:
        """A well-formed ``GET key``, what :meth:`handle` does for it without the general parser or a command object.
        No copy of a GET is ever answered from :attr:`answers` (only SET/DEL/VDEL are remembered, and a copy has the
        same bytes), so it is not looked up."""
        notes = self._expire(now) if self._expiries and self._expiries[0][0] <= now else []
        raw_ts = props.get(TIMESTAMP)
        if raw_ts is not None:
            try:
                self._merge_request(raw_ts, now)
            except ServiceError as exc:
                return CoreResult(resp3.encode_error(exc.text), None, notes)
        entry = self._store.get(key)
        if entry is None:
            return CoreResult(_NIL, None, notes)
        value = entry.value
        result = _new(CoreResult)  # CoreResult(...) without its __init__ call: one per GET
        result.payload = b"$%d\r\n%s\r\n" % (len(value), value)  # resp3.encode_bulk
        result.version = entry.version
        result.notifications = notes
        result.duplicate = False
        return result

    def _dispatch(
        self,
        cmd: Command,
        client_id: str | None,
        props: Mapping[str, str],
        now: int,
        notes: list[Notification],
    ) -> CoreResult:
        kind = type(cmd)
        if kind is Get:
            assert isinstance(cmd, Get)
            entry = self._store.get(cmd.key)
            if entry is None:
                return CoreResult(_NIL, None, notes)
            return CoreResult(resp3.encode_bulk(entry.value), entry.version, notes)
        if kind is Set:
            assert isinstance(cmd, Set)
            return self._set(cmd, props, now, notes)
        if kind is Delete or kind is VDelete:
            assert isinstance(cmd, Delete | VDelete)
            return self._delete(cmd, props, now, notes)
        if kind is Scan:
            assert isinstance(cmd, Scan) and self.keyspace is not None
            return CoreResult(self.keyspace.answer(cmd, lambda key: self._live(key, now)), None, notes)
        assert isinstance(cmd, KeyNotify)
        return CoreResult(self._keynotify(cmd, client_id), None, notes)

    def _live(self, key: bytes, now: int) -> bool:
        entry = self._store.get(key)
        return entry is not None and (entry.expires_at_ms is None or entry.expires_at_ms > now)

    def _set(self, cmd: Set, props: Mapping[str, str], now: int, notes: list[Notification]) -> CoreResult:
        key = cmd.key
        if len(key) > limits.MAX_KEY_BYTES or limits.value_too_large(key, len(cmd.value), self.max_packet_size):
            # its GET reply or its notifications could never be sent: refused rather than stored unreadable
            raise RequestTooLargeError()
        entry = self._store.get(key)
        token = self._fencing_token(props, now)
        self._check_fence(entry, token)
        if entry is not None:
            if cmd.condition is SetCondition.NX or (cmd.condition is SetCondition.NEX and entry.value != cmd.value):
                return CoreResult(_MINUS_ONE, entry.version, notes)
        elif self.max_keys is not None and len(self._store) >= self.max_keys:
            raise QuotaExceededError()
        version = self._tick(now)
        lease = token is None and cmd.expiry_ms is not None and cmd.condition is SetCondition.NEX
        if entry is not None and entry.fencing_token is not None and (token is None or token < entry.fencing_token):
            token = entry.fencing_token
        expires = now + cmd.expiry_ms if cmd.expiry_ms is not None else None
        persist = props.get(PERSISTENCE, "").lower() == "true"
        if persist or (entry is not None and entry.persist):
            self.persistence_generation += 1
        self._store[key] = KeyRecord(cmd.value, version, expires, token, persist, lease)
        if entry is None and self.keyspace is not None:
            self.keyspace.added(key)
        if expires is not None:
            self._schedule(expires, key)
        if key in self._watchers:  # the payload (a copy of the value) only made for a watched key
            self._notify(key, encode_notification(KeyOperation.SET, cmd.value), version, notes)
        return CoreResult(_OK, version, notes)

    def _delete(
        self, cmd: Delete | VDelete, props: Mapping[str, str], now: int, notes: list[Notification]
    ) -> CoreResult:
        key = cmd.key
        token = self._fencing_token(props, now)
        entry = self._store.get(key)
        if entry is None:
            return CoreResult(_ZERO, None, notes)
        self._check_fence(entry, token)
        if isinstance(cmd, VDelete) and entry.value != cmd.value:
            return CoreResult(_MINUS_ONE, None, notes)
        version = self._remove(key, entry, now, notes)
        return CoreResult(_ONE, version, notes)

    def _keynotify(self, cmd: KeyNotify, client_id: str | None) -> bytes:
        if client_id is None:
            # Without a client id there is no topic to deliver to; the real service always knows it.
            raise NotAuthorizedError()
        key = cmd.key
        if cmd.stop:
            watchers = self._watchers.get(key)
            if watchers is None or client_id not in watchers:
                return _ZERO
            del watchers[client_id]
            if not watchers:
                del self._watchers[key]
            keys = self._watched_by[client_id]
            keys.discard(key)
            if not keys:
                del self._watched_by[client_id]
            return _OK
        self._watchers.setdefault(key, {})[client_id] = None
        self._watched_by.setdefault(client_id, set()).add(key)
        return _OK

    # -- clients ------------------------------------------------------------------------------------

    def drop_client(self, client_id: str) -> int:
        """Forget every KEYNOTIFY registration of ``client_id`` (it disconnected); returns how many."""
        keys = self._watched_by.pop(client_id, None)
        if not keys:
            return 0
        for key in keys:
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.pop(client_id, None)
                if not watchers:
                    del self._watchers[key]
        return len(keys)

    # -- expiry -------------------------------------------------------------------------------------

    def next_expiry(self) -> int | None:
        """The wall time (ms) of the earliest pending expiry, or ``None`` if no key expires."""
        heap = self._expiries
        while heap:
            at, _, key = heap[0]
            entry = self._store.get(key)
            if entry is not None and entry.expires_at_ms == at:
                return at
            heapq.heappop(heap)
        return None

    def expire_due(self, now: int | None = None) -> list[Notification]:
        """Delete every key whose expiry time has come (``now`` defaults to the injected clock).

        Returns the DELETE notifications for their watchers; a key's fencing token goes with it.
        """
        return self._expire(self._now() if now is None else now)

    def _expire(self, now: int) -> list[Notification]:
        notes: list[Notification] = []
        heap = self._expiries
        while heap and heap[0][0] <= now:
            at, _, key = heapq.heappop(heap)
            entry = self._store.get(key)
            if entry is not None and entry.expires_at_ms == at:
                self._remove(key, entry, now, notes)
        return notes

    def _schedule(self, at: int, key: bytes) -> None:
        self._seq += 1
        heapq.heappush(self._expiries, (at, self._seq, key))
        if len(self._expiries) > 2 * len(self._store) + 1024:
            # Keys rewritten with PX again and again leave stale heap entries behind; rebuild.
            self._expiries = [
                (e.expires_at_ms, i, k) for i, (k, e) in enumerate(self._store.items()) if e.expires_at_ms is not None
            ]
            heapq.heapify(self._expiries)

    # -- persistence --------------------------------------------------------------------------------

    def dump_persistent(self) -> bytes:
        """The entries written with ``aio-persistence: true`` (and the service clock), as JSON bytes."""
        entries = [
            {
                "key": base64.b64encode(k).decode(),
                "value": base64.b64encode(e.value).decode(),
                "version": str(e.version),
                "expires_at_ms": e.expires_at_ms,
                "fencing_token": None if e.fencing_token is None else str(e.fencing_token),
            }
            for k, e in self._store.items()
            if e.persist
        ]
        doc = {"format": _PERSIST_FORMAT, "clock": str(self._clock), "entries": entries}
        return json.dumps(doc, separators=(",", ":")).encode()

    def load_persistent(self, data: bytes) -> int:
        """Load entries saved by :meth:`dump_persistent`; returns how many were restored.

        Entries whose expiry time has passed are dropped; the service clock moves past every restored
        version, so new versions stay strictly newer. Raises ``ValueError`` for a file that does not parse.
        """
        try:
            doc: Any = json.loads(data)
            if not isinstance(doc, dict) or doc.get("format") != _PERSIST_FORMAT:
                raise ValueError("not an sskv emulator persistence file (format 1)")
            clock = HybridLogicalClock.parse(doc["clock"])
            loaded: list[tuple[bytes, KeyRecord]] = []
            for item in doc["entries"]:
                token = item["fencing_token"]
                expires = item["expires_at_ms"]
                if expires is not None and not isinstance(expires, int):
                    raise ValueError("expires_at_ms must be an integer")
                loaded.append(
                    (
                        base64.b64decode(item["key"], validate=True),
                        KeyRecord(
                            base64.b64decode(item["value"], validate=True),
                            HybridLogicalClock.parse(item["version"]),
                            expires,
                            None if token is None else HybridLogicalClock.parse(token),
                            True,
                        ),
                    )
                )
        except (KeyError, TypeError, ProtocolError, ValueError) as exc:
            raise ValueError(f"cannot load the persistence file: {exc}") from exc
        now = self._now()
        restored = 0
        for key, entry in loaded:
            if not key or (entry.expires_at_ms is not None and entry.expires_at_ms <= now):
                continue
            if key not in self._store and self.keyspace is not None:
                self.keyspace.added(key)
            self._store[key] = entry
            if entry.expires_at_ms is not None:
                self._schedule(entry.expires_at_ms, key)
            self._merge_version(entry.version)
            restored += 1
        self._merge_version(HybridLogicalClock(clock.wall_ms, clock.counter, self._clock.node_id))
        return restored

    # -- internals ----------------------------------------------------------------------------------

    def _remove(self, key: bytes, entry: KeyRecord, now: int, notes: list[Notification]) -> HybridLogicalClock:
        del self._store[key]
        if self.keyspace is not None:
            self.keyspace.removed(key)
        if entry.persist:
            self.persistence_generation += 1
        version = self._tick(now)
        self._notify(key, _DELETE_PAYLOAD, version, notes)
        return version

    def _notify(self, key: bytes, payload: bytes, version: HybridLogicalClock, notes: list[Notification]) -> None:
        watchers = self._watchers.get(key)
        if watchers:
            notes.extend(Notification(client_id, key, payload, version) for client_id in watchers)

    def _request_hlc(self, raw: str, now: int, skew_error: type[ServiceError]) -> HybridLogicalClock:
        try:
            value = HybridLogicalClock.parse(raw)
        except (ProtocolError, ValueError):
            raise MalformedTimestampError() from None
        if value.wall_ms - now > MAX_DRIFT_MS:
            raise skew_error()
        return value

    def _fencing_token(self, props: Mapping[str, str], now: int) -> HybridLogicalClock | None:
        raw = props.get(FENCING_TOKEN)
        if raw is None:
            return None
        return self._request_hlc(raw, now, FencingTokenSkewError)

    @staticmethod
    def _check_fence(entry: KeyRecord | None, token: HybridLogicalClock | None) -> None:
        if entry is None or entry.fencing_token is None:
            return
        if token is None:
            raise FencingTokenRequiredError()
        if token < entry.fencing_token:
            raise FencingTokenLowerVersionError()

    def _merge_request(self, raw: str, now: int) -> None:
        """``self._merge(self._request_hlc(raw, now, TimestampSkewError), now)`` in one step, the merge's arithmetic
        (``HybridLogicalClock.merged``'s, with no drift limit) inline: every request with a ``__ts`` does this. The
        usual text (``HybridLogicalClock.parse``'s fast case: ASCII digits and node id) is read here without making a
        clock of it; anything else goes through ``_request_hlc`` and ``_merge``, with their exact results."""
        usual = _USUAL_TS(raw)
        if usual is not None:
            w, n, node = usual.groups()
            wall, counter = int(w), int(n)
            if wall <= _MAX_COUNTER and counter <= _MAX_COUNTER:
                if wall - now > MAX_DRIFT_MS:
                    raise TimestampSkewError()
                c = self._clock
                if node != c.node_id:
                    own = c.wall_ms
                    if now > own and now > wall:
                        if now <= _MAX_COUNTER:
                            self._clock = trusted(HybridLogicalClock, now, 0, c.node_id)
                            return
                    elif own == wall:
                        if c.counter > counter:
                            counter = c.counter
                        if counter < _MAX_COUNTER:
                            self._clock = trusted(HybridLogicalClock, own, counter + 1, c.node_id)
                            return
                    elif own > wall:
                        if c.counter < _MAX_COUNTER:
                            self._clock = trusted(HybridLogicalClock, own, c.counter + 1, c.node_id)
                            return
                    elif counter < _MAX_COUNTER:
                        self._clock = trusted(HybridLogicalClock, wall, counter + 1, c.node_id)
                        return
        # our own node id, a counter at its maximum, a wall time past 64 bits, or an unusual (or wrong) text
        self._merge(self._request_hlc(raw, now, TimestampSkewError), now)

    def _merge(self, ts: HybridLogicalClock, now: int) -> None:
        if ts.node_id != self._clock.node_id:
            try:
                self._clock = self._clock.merged(ts, now, _UNLIMITED_DRIFT)
                return
            except (ClockDriftError, ValueError):
                pass  # a counter at its maximum cannot be incremented: adopt it, _tick moves the wall on
        # HybridLogicalClock.merged ignores our own node id; a request may still carry it.
        self._merge_version(ts)

    def _merge_version(self, other: HybridLogicalClock) -> None:
        c = self._clock
        if (other.wall_ms, other.counter) > (c.wall_ms, c.counter):
            self._clock = HybridLogicalClock(other.wall_ms, other.counter, c.node_id)

    def _tick(self, now: int) -> HybridLogicalClock:
        c = self._clock
        if now > c.wall_ms:
            self._clock = HybridLogicalClock(now, 0, c.node_id)
        elif c.counter < _MAX_COUNTER:  # the counter + 1 of a valid clock: valid
            self._clock = trusted(HybridLogicalClock, c.wall_ms, c.counter + 1, c.node_id)
        else:  # never refuse a change: step the wall time instead of overflowing the counter
            self._clock = HybridLogicalClock(c.wall_ms + 1, 0, c.node_id)
        return self._clock
