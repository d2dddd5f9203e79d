"""KEYNOTIFY watches of one client: shared per key, delivered once and in order, restored after a reconnect.

What a watch promises: docs/design/architecture.md, "The client's parts".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from .._protocol.commands import Get, KeyNotify
from .._protocol.hlc import HybridLogicalClock
from .._protocol.notifications import KeyEvent, KeyOperation
from .._transport.backoff import Backoff
from ..errors import ConnectionLostError, StateStoreError
from ._closing import closed_error

__all__ = ["AsyncKeyWatch", "EventSink", "KeySubscription", "Watches"]

log = logging.getLogger("sskv_mapping.client")

EventSink = Callable[[KeyEvent], None]
Request = Callable[..., Awaitable[tuple[bytes, HybridLogicalClock | None]]]

_UNKNOWN = object()
_CLOSED = object()
_CLIENT_CLOSED = object()  # the client closed under the watch: its iteration ends with ClientStateError
_LOST_FOR_GOOD = object()  # the connection dropped and reconnect is off: its iteration ends with ConnectionLostError


class _Registration:
    """One KEYNOTIFY registration shared by every local watcher of a key."""

    __slots__ = ("key", "last_seen", "lock", "newest", "registered", "resync", "sinks")

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.sinks: list[EventSink] = []
        #: the service confirmed our KEYNOTIFY on the current connection (notifications flow)
        self.registered = False
        #: a reconnect happened and the key was not re-read since (changes meanwhile are not reported yet)
        self.resync = False
        #: the version of the last event delivered; ``None``: known absent; ``_UNKNOWN``: no event yet
        self.last_seen: HybridLogicalClock | object | None = _UNKNOWN
        #: the newest version of any change delivered (SET or DELETE): older or equal ones are duplicates
        self.newest: HybridLogicalClock | None = None
        self.lock = asyncio.Lock()


class Watches:
    """Every KEYNOTIFY registration of one client, by key."""

    def __init__(
        self,
        request: Request,
        *,
        connected: Callable[[], bool],
        connection: Callable[[], object],
        timeout: Callable[[], float | None],
        backoff: Callable[[], Backoff],
    ) -> None:
        self._request = request
        self._connected = connected
        self._connection = connection
        self._timeout = timeout
        self._backoff = backoff
        self._registrations: dict[bytes, _Registration] = {}
        #: connection drops so far: a KEYNOTIFY answered after a drop may have been applied on the connection that
        #: ended (its reply kept in the session), and the service dropped it with that connection
        self._drops = 0
        #: notifications dropped as duplicates (a version not newer than one already delivered for the key)
        self.duplicate_notifications = 0
        #: re-reads after a reconnect not delivered: a notification as new or newer came first
        self.stale_catch_ups = 0

    @property
    def keys(self) -> list[bytes]:
        return list(self._registrations)

    def active(self, key: bytes) -> bool:
        """The service confirmed the key's registration on the current connection (changes are notified)."""
        reg = self._registrations.get(key)
        return reg is not None and reg.registered and self._connected()

    async def keynotify(self, key: bytes, *, timeout: float | None, stop: bool = False) -> bool:
        """KEYNOTIFY (or STOP) with its reply checked: a service error (clock skew...) raises here."""
        cmd = KeyNotify(key, stop=stop)
        payload, _ = await self._request(cmd, timeout=timeout)
        return cmd.decode(payload)

    async def add(self, key: bytes, sink: EventSink, timeout: float | None) -> KeySubscription:
        """Call ``sink(event)`` for every change of ``key``; returns once the service confirmed the registration."""
        reg = self._registrations.get(key)
        if reg is None:
            reg = self._registrations[key] = _Registration(key)
        reg.sinks.append(sink)
        try:
            async with reg.lock:
                while not reg.registered:
                    drops = self._drops
                    await self.keynotify(key, timeout=timeout)
                    # registered unless the connection dropped meanwhile: then ask again on the current one
                    reg.registered = self._drops == drops
        except BaseException:
            await self.remove(key, sink)
            raise
        return KeySubscription(self, key, sink)

    async def remove(self, key: bytes, sink: EventSink) -> None:
        """Stop calling ``sink``; the last watcher of a key to leave sends KEYNOTIFY STOP."""
        reg = self._registrations.get(key)
        if reg is None:
            return
        with contextlib.suppress(ValueError):
            reg.sinks.remove(sink)
        if reg.sinks:
            return
        async with reg.lock:
            if reg.sinks or self._registrations.get(key) is not reg:
                return
            del self._registrations[key]
            if reg.registered and self._connected():
                reg.registered = False
                try:
                    await self.keynotify(key, stop=True, timeout=self._timeout())
                except StateStoreError as exc:
                    # the service keeps notifying a registration it still holds: worth an operator's eye
                    log.warning("KEYNOTIFY STOP for %r failed (the registration may linger): %s", key, exc)

    def dropped(self) -> None:
        """The connection dropped: the service forgot every registration, and changes will be missed."""
        self._drops += 1
        for reg in self._registrations.values():
            reg.registered = False
            reg.resync = True

    def close(self) -> None:
        """End every :class:`AsyncKeyWatch` (the client closed) and forget the registrations."""
        for reg in self._registrations.values():
            for sink in list(reg.sinks):
                if isinstance(sink, _QueueSink):
                    sink.close()
        self._registrations.clear()

    def lost_for_good(self) -> None:
        """End every :class:`AsyncKeyWatch` with :class:`ConnectionLostError`: the connection dropped and will not
        come back (reconnect is off), so no change will ever be delivered."""
        for reg in self._registrations.values():
            for sink in list(reg.sinks):
                if isinstance(sink, _QueueSink):
                    sink.queue.put_nowait(_LOST_FOR_GOOD)

    async def restore(self) -> None:
        """Re-register every watched key, then re-read it and report changes missed while away.

        Retried with backoff until every watch is back or this connection is gone: the broker may return
        before the service does (a KEYNOTIFY sent then is never answered), and a watch given up after one
        try would leave the caches above it fed by no notification at all, serving old values forever.
        """
        conn = self._connection()
        drops = self._drops
        backoff = self._backoff()
        while True:
            failed = False
            for reg in list(self._registrations.values()):
                if self._connection() is not conn or not self._connected():
                    return  # dropped again (or closed): the next reconnect restores what is left
                try:
                    async with reg.lock:
                        if not reg.sinks or not reg.resync:
                            continue
                        if not reg.registered:
                            await self.keynotify(reg.key, timeout=self._timeout())
                            if self._drops != drops:
                                return  # applied on the connection that dropped (and dropped with it): the next one's
                            reg.registered = True
                        await self._resync(reg, drops)
                except StateStoreError as exc:
                    failed = True
                    log.warning("could not restore the watch on %r yet: %s", reg.key, exc)
            if not failed:
                return
            await asyncio.sleep(backoff.next())

    async def _resync(self, reg: _Registration, drops: int) -> None:
        cmd = Get(reg.key)
        newest_before = reg.newest
        payload, version = await self._request(cmd, timeout=self._timeout())
        value = cmd.decode(payload)
        if self._drops != drops:
            return  # dropped again meanwhile: the next restore registers and re-reads the key
        reg.resync = False
        overtaken = reg.newest != newest_before
        if overtaken and (version is None or (reg.newest is not None and version <= reg.newest)):
            # The key is registered again (before this GET was sent), so notifications flowed while it was out,
            # and one as new as its answer came first: the watcher has the latest already. An absent key has no
            # version: any change notified meanwhile (made after the registration) makes the answer no news,
            # whichever came first. Read before that change, the answer is older; read after it, the key was
            # deleted after the registration too, and that DELETE is notified next.
            self.stale_catch_ups += 1
            return
        # Deliver when the key differs from the last event we delivered, or when we never delivered one (we
        # cannot know what the watcher missed).
        if value is None:
            changed = reg.last_seen is not None
            event = KeyEvent(reg.key, KeyOperation.DELETE, None, None, synthetic=True)
        else:
            changed = reg.last_seen is _UNKNOWN or version != reg.last_seen
            event = KeyEvent(reg.key, KeyOperation.SET, value, version, synthetic=True)
        if changed:
            self._deliver(reg, event)

    def notify(self, event: KeyEvent) -> None:
        """A notification for this client arrived: deliver it to the key's watchers (duplicates dropped)."""
        reg = self._registrations.get(event.key)
        if reg is not None:
            self._deliver(reg, event)

    def _deliver(self, reg: _Registration, event: KeyEvent) -> None:
        version = event.version
        if version is not None:
            newest = reg.newest
            if newest is not None and version <= newest:
                # QoS 1 may deliver twice, and a redelivery may come after a newer change: either way the
                # watcher has seen this change (or a later one) already.
                self.duplicate_notifications += 1
                return
            if newest is None or version > newest:
                reg.newest = version
        if event.op is KeyOperation.DELETE:
            reg.last_seen = None
        else:
            reg.last_seen = event.version
        for sink in list(reg.sinks):
            try:
                sink(event)
            except Exception:
                log.exception("watch callback failed for key %r", reg.key)


class KeySubscription:
    """A callback watching one key; :meth:`close` (or ``async with``) unregisters it."""

    def __init__(self, watches: Watches, key: bytes, sink: EventSink) -> None:
        self._watches = watches
        self.key = key
        self._sink = sink
        self._closed = False

    @property
    def active(self) -> bool:
        """Whether changes of the key are being notified now: the service confirmed the registration on
        the current connection. False while disconnected and after a reconnect until the watch is restored
        (a value read then may change unnoticed, so caches must not keep it)."""
        return not self._closed and self._watches.active(self.key)

    async def close(self) -> None:
        """Drop this subscription; the key's KEYNOTIFY registration goes when its last subscriber does."""
        if not self._closed:
            self._closed = True
            await self._watches.remove(self.key, self._sink)

    async def __aenter__(self) -> KeySubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _QueueSink:
    """Feeds an :class:`AsyncKeyWatch`; the client ends it when it closes."""

    __slots__ = ("queue",)

    def __init__(self, queue: asyncio.Queue[object]) -> None:
        self.queue = queue

    def __call__(self, event: KeyEvent) -> None:
        self.queue.put_nowait(event)

    def close(self) -> None:
        self.queue.put_nowait(_CLIENT_CLOSED)


Subscribe = Callable[[bytes, EventSink], Awaitable[KeySubscription]]


class AsyncKeyWatch:
    """``async for event in client.watch(key)``: the changes of one key as :class:`KeyEvent` values.

    Registration happens on ``async with`` (or the first iteration); events of changes made after that are
    delivered, including this client's own writes. After a reconnect, a synthetic event (``synthetic=True``)
    reports a change that happened while disconnected.

    The promise: events come in version order (a value never goes back to an older one), each change at most
    once (a notification the broker delivers twice is dropped), and after every reconnect the key's latest
    value is delivered: by the re-read, or by a notification newer than the re-read's answer, which is then
    dropped. Changes made while disconnected are not each reported, only where they led. Notifications are not
    trusted to arrive: one lost while connected is repaired by the next change or the next reconnect.

    :meth:`aclose` ends the iteration quietly; the client closing ends it with
    :class:`~sskv_mapping.errors.ClientStateError`, and a connection lost for good (reconnect off) with
    :class:`~sskv_mapping.errors.ConnectionLostError` (nothing more will come, and a loop waiting on it must not
    take that for a quiet key).
    """

    def __init__(self, subscribe: Subscribe, key: bytes) -> None:
        self._subscribe = subscribe
        self.key = key
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._sub: KeySubscription | None = None
        self._done = False

    async def start(self) -> AsyncKeyWatch:
        """Register the watch (KEYNOTIFY) now; iterating or ``async with`` does it too. Returns the watch."""
        if self._sub is None and not self._done:
            self._sub = await self._subscribe(self.key, _QueueSink(self._queue))
        return self

    async def __aenter__(self) -> AsyncKeyWatch:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncKeyWatch:
        return self

    async def __anext__(self) -> KeyEvent:
        if self._sub is None:
            await self.start()
        if self._done and self._queue.empty():
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _CLOSED:
            self._done = True
            raise StopAsyncIteration
        if item is _CLIENT_CLOSED or item is _LOST_FOR_GOOD:
            self._done = True
            self._queue.put_nowait(item)  # every later call says so too
            if item is _LOST_FOR_GOOD:
                raise ConnectionLostError(
                    f"the connection was lost for good (reconnect is off) while watching {self.key!r}"
                )
            raise closed_error(f"watching {self.key!r}")
        assert isinstance(item, KeyEvent)
        return item

    async def next(self, timeout: float | None = None) -> KeyEvent:
        """The next event, waiting at most ``timeout`` seconds (``TimeoutError`` after that)."""
        async with asyncio.timeout(timeout):
            return await self.__anext__()

    async def aclose(self) -> None:
        """Stop watching: the iteration ends after the events already queued."""
        self._done = True
        sub, self._sub = self._sub, None
        self._queue.put_nowait(_CLOSED)
        if sub is not None:
            await sub.close()
