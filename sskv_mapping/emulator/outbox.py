"""The emulator's replies and notifications, published in order, never dropped in silence.

Design: docs/design/architecture.md, "The emulator's parts".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence

from .._protocol import headers, limits
from .._protocol.hlc import HybridLogicalClock
from .._protocol.mqtt_publish import PackedUserProperties, publish_properties, reply_properties
from .._protocol.resp3 import encode_error
from .._protocol.topics import NOTIFY_PREFIX
from .._transport.base import Connection, OutgoingMessage
from .._transport.stream import StreamConnection
from ..errors import OverloadedError, ResponseTooLargeError, StateStoreError, ValueTooLargeError, WriteBufferFullError
from .core import Notification

__all__ = ["Outbox"]

log = logging.getLogger("sskv_mapping.emulator")

#: what a request whose response would be over the broker's Maximum Packet Size (or the write bound) gets instead
_TOO_LARGE_REPLY = encode_error(ResponseTooLargeError.TEXT)
#: what a request gets when its reply cannot even wait (more than _WAITING_BYTES_MAX of replies wait already)
_OVERLOADED_REPLY = encode_error(OverloadedError.TEXT)

#: notifications published per loop iteration: a write with more watchers has the rest drained in later iterations
_FANOUT_CHUNK = 1000
#: past this many notifications waiting, replies wait behind them: a writer (a SET's reply comes before its
#: notifications) cannot run ahead of its fan-outs, and what waits stays near this bound instead of growing
_BACKPRESSURE_NOTES = 20_000
#: replies waiting for room in the write backlog, in bytes, at most: past it a reply is answered "overloaded"
_WAITING_BYTES_MAX = 64 << 20
#: notifications waiting for room, at most (references to the payload each change shares): past it, dropped (logged)
_WAITING_NOTES_MAX = 200_000
#: how long a publish waits for room in the write backlog (the broker is not reading)
_ROOM_TIMEOUT_S = 30.0
#: client ids whose hex is kept (a notification topic per watcher per change)
_HEX_ID_CACHE = 100_000

#: a response waiting for room: topic, payload, correlation data, user properties, content type
_Reply = tuple[str, bytes, bytes, Sequence[tuple[str, str]], str | None]


class _NoteBatch:
    """The notifications of one change still to publish, in order (``next``: the first not yet sent)."""

    __slots__ = ("next", "notes")

    def __init__(self, notes: list[Notification]) -> None:
        self.notes = notes
        self.next = 0


class Outbox:
    """Publishes an emulator's replies and notifications on its current connection (``current()``; ``None``
    while disconnected: dropped, counted). ``stats`` gets the counters; drain tasks are kept in ``tasks`` (the
    server waits for them at shutdown)."""

    def __init__(
        self,
        current: Callable[[], Connection | None],
        stats: dict[str, int],
        tasks: set[asyncio.Task[None]],
    ) -> None:
        self._current = current
        self.stats = stats
        for name in ("too_large", "waited", "overloaded", "notifications_dropped", "publish_failures"):
            stats.setdefault(name, 0)
        self._tasks = tasks
        # publishes waiting for room in the write backlog, in order (see _drain), and what they hold
        self._waiting: deque[_Reply | _NoteBatch] = deque()
        self._waiting_bytes = 0
        self._waiting_notes = 0
        self._drainer: asyncio.Task[None] | None = None
        self._drops_logged = 0
        # a fan-out's topics and properties, built once: the key's hex, the client ids' hex, the __ts property
        self._hex_key: bytes | None = None
        self._hex_key_text = ""
        self._hex_ids: dict[str, str] = {}
        self._props_version: HybridLogicalClock | None = None
        self._props: Sequence[tuple[str, str]] = ()

    @property
    def waiting(self) -> int:
        """How many replies and notifications wait for room now."""
        return self._waiting_notes + sum(1 for item in self._waiting if not isinstance(item, _NoteBatch))

    def notify(self, notes: list[Notification]) -> None:
        """Queue the notifications of one request (or expiry), in order. Up to :data:`_FANOUT_CHUNK` go out at
        once; the rest of a larger fan-out waits in :attr:`_waiting` and is drained a chunk per loop iteration, so
        the requests of other clients are served meanwhile. Anything already waiting keeps them behind it."""
        self.stats["notifications"] += len(notes)
        if self._waiting:
            self._defer_notes(notes)
            return
        for index, note in enumerate(notes):
            if index == _FANOUT_CHUNK or not self._publish_note(note):
                self._defer_notes(notes[index:])
                return

    def _note_topic(self, note: Notification) -> str:
        """``note.topic``, with the hex of the key (once per key in a row) and of the client id (kept) cached: a
        fan-out to N watchers hex-encodes the key once, not N times (30 KB keys: 60 KB of hex each)."""
        key = note.key
        if key is not self._hex_key:
            self._hex_key, self._hex_key_text = key, key.hex().upper()
        ids = self._hex_ids
        client_hex = ids.get(note.client_id)
        if client_hex is None:
            if len(ids) >= _HEX_ID_CACHE:
                ids.clear()
            client_hex = ids[note.client_id] = note.client_id.encode("utf-8").hex().upper()
        return f"{NOTIFY_PREFIX}{client_hex}/command/notify/{self._hex_key_text}"

    def _note_properties(self, note: Notification) -> Sequence[tuple[str, str]]:
        """The ``__ts`` property, built and encoded once per version (every watcher of one change gets it)."""
        if note.version is not self._props_version:
            self._props_version = note.version
            self._props = PackedUserProperties([(headers.TIMESTAMP, str(note.version))])
        return self._props

    def _publish_note(self, note: Notification) -> bool:
        """Publish one notification now; False when the write backlog is full (nothing sent: it must wait)."""
        topic = self._note_topic(note)
        if len(topic) > limits.MAX_TOPIC_BYTES:  # a watcher id over 256 bytes and a key near the key limit
            self.stats["too_large"] += 1
            self._warn_dropped(f"a notification to {topic[:120]!r}: its topic is over MQTT's 65,535 bytes")
            return True
        return self.publish_on(self._current(), topic, note.payload, None, self._note_properties(note), None)

    def publish(
        self,
        topic: str,
        payload: bytes,
        correlation: bytes | None,
        user_properties: Sequence[tuple[str, str]],
        content_type: str | None,
    ) -> bool:
        """Queue one publish. A response goes out now when it can; one that cannot be written now waits its turn
        in :attr:`_waiting` (never dropped within the bound), one that could never be sent is answered
        ``-ERR`` instead. Returns False only for a notification that has to wait (the caller queues it in order)."""
        return self.publish_on(self._current(), topic, payload, correlation, user_properties, content_type)

    def publish_on(
        self,
        conn: Connection | None,
        topic: str,
        payload: bytes,
        correlation: bytes | None,
        user_properties: Sequence[tuple[str, str]],
        content_type: str | None,
    ) -> bool:
        """:meth:`publish` on ``conn``, the current connection the caller has at hand (the server's replies)."""
        if conn is None:
            self.stats["publish_failures"] += 1
            log.debug("not connected: dropping a publish to %r", topic[:200])
            return True
        if len(payload) > limits.WRITE_BOUND:
            # over what a connection may have waiting to be written: it could never be queued (a value stored past
            # the limits: loaded from a file, or from an emulator without them)
            self.stats["too_large"] += 1
            self._too_large(topic, payload, correlation, content_type, len(payload), limits.WRITE_BOUND)
            return True
        if correlation is not None and self._waiting_notes > _BACKPRESSURE_NOTES:
            # saturated by fan-outs: replies wait behind them, so writers slow down to what the broker takes
            return self._defer_reply(conn, (topic, payload, correlation, user_properties, content_type))
        # Queued right here (PahoConnection: by paho), in call order; no task is made and no PUBACK awaited.
        try:
            if type(conn) is StreamConnection and type(user_properties) is PackedUserProperties:
                # a reply or notification of the usual kind (properties encoded once per version): encoded as
                # OutgoingMessage would be, without the message object (the same bytes: test_reply_bytes.py)
                if correlation is None:
                    props = publish_properties(None, None, user_properties, content_type, None)
                else:
                    props = reply_properties(correlation, content_type, user_properties)
                conn.publish_encoded_nowait(topic, payload, props)
            else:
                conn.publish_nowait(
                    OutgoingMessage(topic, payload, 1, correlation, None, user_properties, content_type)
                )
        except ValueTooLargeError as exc:
            # Over the broker's Maximum Packet Size: the broker would drop this connection for it. Refused by the
            # transport before sending; a response becomes an error reply the requester can read, a notification
            # is dropped. Either way the emulator stays connected.
            self.stats["too_large"] += 1
            self._too_large(topic, payload, correlation, content_type, exc.size, exc.limit)
        except WriteBufferFullError:
            # the backlog is at its bound (large replies, a fan-out): wait for room rather than drop it
            if correlation is None:
                return False
            return self._defer_reply(conn, (topic, payload, correlation, user_properties, content_type))
        except StateStoreError as exc:
            self.stats["publish_failures"] += 1
            log.debug("a publish failed: %s", exc)
        return True

    def _too_large(
        self, topic: str, payload: bytes, correlation: bytes | None, content_type: str | None, size: int, limit: int
    ) -> None:
        what = "a notification" if correlation is None else "a response"
        log.warning(
            "%s to %r would be %d bytes, over the limit of %d bytes (the broker's maximum packet size or the "
            "emulator's write bound): %s",
            what,
            topic[:200],
            size,
            limit,
            "dropped" if correlation is None or payload == _TOO_LARGE_REPLY else "answering an error instead",
        )
        if correlation is not None and payload != _TOO_LARGE_REPLY:  # never loops: the error reply is tried once
            self.publish(topic, _TOO_LARGE_REPLY, correlation, headers.response_properties(None), content_type)

    # -- waiting for room: replies never dropped within the bound, fan-outs drained a chunk at a time ----------

    def _defer_reply(self, conn: Connection, item: _Reply) -> bool:
        if self._waiting_bytes + len(item[1]) > _WAITING_BYTES_MAX:
            # the bound on what waits: answer the requester at once (a short reply, tried once) instead of silence
            self.stats["overloaded"] += 1
            log.warning("replies are not being written fast enough: answering %r 'overloaded'", item[0][:200])
            with contextlib.suppress(StateStoreError):
                conn.publish_nowait(
                    OutgoingMessage(
                        item[0], _OVERLOADED_REPLY, 1, item[2], None, headers.response_properties(None), item[4]
                    )
                )
            return True
        self._waiting_bytes += len(item[1])
        self._waiting.append(item)
        self.stats["waited"] += 1
        self._start_drain(conn)
        return True

    def _defer_notes(self, notes: list[Notification]) -> None:
        conn = self._current()
        if conn is None:
            return
        if self._waiting_notes + len(notes) > _WAITING_NOTES_MAX:
            # bounded: a notification is never trusted to arrive (clients re-read after max_staleness); said loudly
            self.stats["notifications_dropped"] += len(notes)
            self._warn_dropped(f"{len(notes)} notification(s): {self._waiting_notes:,} already wait to be written")
            return
        self._waiting_notes += len(notes)
        self._waiting.append(_NoteBatch(notes))
        self._start_drain(conn)

    def _warn_dropped(self, what: str) -> None:
        self._drops_logged += 1
        if self._drops_logged <= 10 or self._drops_logged % 1000 == 0:
            log.warning("dropping %s (%d time(s) so far)", what, self._drops_logged)

    def _start_drain(self, conn: Connection) -> None:
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain(conn), name="sskv-emulator-drain")
            self._tasks.add(self._drainer)
            self._drainer.add_done_callback(self._tasks.discard)

    async def _drain(self, conn: Connection) -> None:
        """Publish what waits, in order: a chunk of a fan-out per loop iteration; when the backlog is full, wait
        for room (``Connection.publish`` waits while the transport is paused, then sends) and go on."""
        waiting = self._waiting
        try:
            while waiting and self._current() is conn:
                item = waiting[0]
                if isinstance(item, _NoteBatch):  # notifications of one change, in order
                    # A chunk at a time, its last one awaited (its PUBACK: the chunk has left): the broker's
                    # Receive Maximum queue never holds more than about a chunk, so a reply to another request
                    # waits behind one chunk of a fan-out, not all of it.
                    stop = min(item.next + _FANOUT_CHUNK, len(item.notes))
                    while item.next < stop and self._current() is conn:
                        note = item.notes[item.next]
                        item.next += 1
                        self._waiting_notes -= 1
                        topic = self._note_topic(note)
                        paced = item.next == stop and len(topic) <= limits.MAX_TOPIC_BYTES
                        if paced or not self._publish_note(note):
                            await self._publish_waiting(conn, topic, note.payload, None, self._note_properties(note))
                    if item.next >= len(item.notes):
                        waiting.popleft()
                    continue
                topic, payload, correlation, props, content_type = item
                waiting.popleft()
                self._waiting_bytes -= len(payload)
                try:
                    conn.publish_nowait(OutgoingMessage(topic, payload, 1, correlation, None, props, content_type))
                except WriteBufferFullError:
                    await self._publish_waiting(conn, topic, payload, correlation, props, content_type)
                except ValueTooLargeError as exc:
                    self._too_large(topic, payload, correlation, content_type, exc.size, exc.limit)
                except StateStoreError as exc:
                    self.stats["publish_failures"] += 1
                    log.debug("a waiting publish failed: %s", exc)
        finally:
            if self._current() is not conn:  # that connection is gone: what waited for it is lost with it
                self.stats["publish_failures"] += len(waiting)
                waiting.clear()
                self._waiting_bytes = self._waiting_notes = 0

    async def _publish_waiting(
        self,
        conn: Connection,
        topic: str,
        payload: bytes,
        correlation: bytes | None,
        props: Sequence[tuple[str, str]],
        content_type: str | None = None,
    ) -> None:
        try:
            message = OutgoingMessage(topic, payload, 1, correlation, None, props, content_type)
            await conn.publish(message, timeout=_ROOM_TIMEOUT_S)
        except StateStoreError as exc:
            self.stats["publish_failures"] += 1
            log.warning("a publish to %r that waited for room failed: %s", topic[:200], exc)
