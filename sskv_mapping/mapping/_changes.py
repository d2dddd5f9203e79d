"""A dict namespace's changes as decoded events: ``d.changes()`` and ``d.on_change(fn)``.

One feed per namespace store watches every key it lists and finds new keys (index notifications or a SCAN at an
interval); each stream is a bounded queue that coalesces on overflow. Design: docs/guide/live-config.md.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import inspect
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .._blocking import BlockingTwin
from .._namespace.fanout import gather_bounded
from .._namespace.store import NamespaceStore
from .._protocol.hlc import HybridLogicalClock
from .._protocol.notifications import KeyEvent, KeyOperation
from ..client._client import KeySubscription
from ..client._in_flight import background
from ..codecs import decode_value
from ..errors import ConfigurationError, StateStoreError
from ._listing import NamespaceListing

__all__ = ["DEFAULT_CHANGES_MAXSIZE", "DEFAULT_SCAN_INTERVAL", "AsyncChangeStream", "Change", "ChangeStream"]

log = logging.getLogger("sskv_mapping.changes")

V = TypeVar("V")

#: Seconds between two SCANs that look for keys other processes added, where SCAN is the listing (index mode is told
#: by the index's notifications instead). What one costs at 1k/10k/100k keys: docs/benchmarks.md.
DEFAULT_SCAN_INTERVAL = 1.0
#: Events one stream holds before it coalesces (one pending event per key, the latest) and says so.
DEFAULT_CHANGES_MAXSIZE = 1000
_FAN_OUT = 64
#: a SCAN pass is followed by at least this many times its own duration before the next
_SCAN_SHARE = 10
_RETRY = 0.5  # seconds before keys that could not be watched (the connection was down) are tried again
#: deleted keys whose watches a feed keeps (a key set again soon is heard at once); past this, the oldest deleted
#: key's watch is released, and the key is found again by the listing if it comes back
_GONE_KEPT = 1000


@dataclass(frozen=True, slots=True)
class Change(Generic[V]):
    """One change of a dict key: its new ``value`` (``None`` and ``deleted=True`` when it was deleted or expired).

    ``version`` is the change's HLC (``None`` for a deletion found by a re-read). ``synthetic``: found by a re-read
    after a reconnect (where a run of changes made meanwhile led), not by a notification. ``coalesced``: this stream
    overflowed and this is the key's latest change, earlier ones of the key were skipped (``stream.dropped`` counts).
    """

    key: str
    value: V | None
    version: HybridLogicalClock | None
    deleted: bool = False
    synthetic: bool = False
    coalesced: bool = False


class _Tracked:
    __slots__ = ("exists", "sub", "version")

    def __init__(self) -> None:
        self.sub: KeySubscription | None = None
        self.version: HybridLogicalClock | None = None  # of the last change known (applied or the baseline read)
        self.exists = False


class _Feed(Generic[V]):
    """Every key of one namespace watched, their changes decoded and handed to the open streams."""

    def __init__(self, store: NamespaceStore[V]) -> None:
        self.store = store
        self.streams: set[AsyncChangeStream[V]] = set()
        self._tracked: dict[str, _Tracked] = {}
        self._gone: dict[str, None] = {}  # tracked keys absent now, oldest first (at most _GONE_KEPT)
        self._releasing: list[KeySubscription] = []  # watches of forgotten keys, released by _watch_new
        self._wanted: set[str] = set()  # keys to watch (found by a listing, a notification, a local write)
        self._work: asyncio.Event | None = None
        self._relist = False
        self._tasks: list[asyncio.Task[None]] = []
        self._started: asyncio.Future[None] | None = None
        self._unlisten: Callable[[], None] | None = None
        #: SCANs run so far to find new keys (SCAN mode)
        self.scans = 0

    @property
    def scan_interval(self) -> float:
        return min((s.scan_interval for s in self.streams), default=DEFAULT_SCAN_INTERVAL)

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started is not None:
            await asyncio.shield(self._started)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._started = fut
        try:
            await self._start()
        except BaseException as exc:
            self._started = None
            fut.set_exception(exc)
            fut.exception()
            await self.stop()
            raise
        fut.set_result(None)

    async def _start(self) -> None:
        store = self.store
        await store.start()
        index = store.index
        if not isinstance(index, NamespaceListing):
            raise ConfigurationError("changes() needs a namespace with a key listing (a dict's)")
        self._unlisten = index.listen(self._listing_changed)
        keys = list(await index.listing(refresh=True))
        await gather_bounded((self._track(k, report=False) for k in keys), _FAN_OUT)
        loop = asyncio.get_running_loop()
        self._work = asyncio.Event()
        self._tasks.append(loop.create_task(self._watch_new(), name=f"sskv-changes-{store.namespace}"))
        if index.mode != "index":  # SCAN is the listing: nobody tells of a key another process adds
            self._tasks.append(loop.create_task(self._scan_loop(), name=f"sskv-changes-scan-{store.namespace}"))

    async def stop(self) -> None:
        self._started = None
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        subs = [t.sub for t in self._tracked.values() if t.sub is not None] + self._releasing
        self._tracked.clear()
        self._gone.clear()
        self._releasing = []
        self._wanted.clear()
        for sub in subs:
            try:
                await sub.close()
            except StateStoreError as exc:
                log.debug("releasing a change watch failed: %s", exc)

    # -- finding keys -------------------------------------------------------------------------------------

    def _want(self, keys: Iterable[str]) -> None:
        new = [k for k in keys if k not in self._tracked]
        if new and self._work is not None:
            self._wanted.update(new)
            self._work.set()

    def _listing_changed(self, keys: Iterable[str] | None) -> None:
        if keys is not None:
            self._want(keys)
        elif self._work is not None:  # shards newly in use: a listing loads (and watches) them
            self._relist = True
            self._work.set()

    async def _watch_new(self) -> None:
        assert self._work is not None
        index = self.store.index
        assert isinstance(index, NamespaceListing)
        while True:
            await self._work.wait()
            self._work.clear()
            batch, self._wanted = self._wanted, set()
            releasing, self._releasing = self._releasing, []
            await gather_bounded((_release(sub) for sub in releasing), _FAN_OUT)
            try:
                if self._relist:  # shards put in use since: loaded (and so watched) by a listing
                    self._relist = False
                    batch |= set(await index.listing()) - set(self._tracked)
                await gather_bounded((self._track(k, report=True) for k in batch), _FAN_OUT)
            except StateStoreError as exc:
                log.debug("watching new keys failed, tried again: %s", exc)
                self._wanted |= {k for k in batch if k not in self._tracked}
                self._relist = self._relist or index.mode == "index"
                await asyncio.sleep(_RETRY)  # the connection is down: a back-off, not a synchronisation
                self._work.set()

    async def _scan_loop(self) -> None:
        index = self.store.index
        assert isinstance(index, NamespaceListing)
        took = 0.0
        while True:
            # the documented polling interval of SCAN mode, stretched so that SCANs take at most a tenth of the time
            # (a pass over 10,000 keys took half a second on a loaded machine: docs/benchmarks.md)
            await asyncio.sleep(max(self.scan_interval, _SCAN_SHARE * took))
            started = time.monotonic()
            try:
                with background():  # yields to the application's own requests
                    listed = await index.listing(refresh=True)
            except StateStoreError as exc:
                log.debug("a SCAN for new keys failed: %s", exc)
                continue
            took = time.monotonic() - started
            self.scans += 1
            self._want(listed)

    async def _track(self, key: str, *, report: bool) -> None:
        """Watch ``key``, then read it (a change in between is notified): its current value is the baseline, and
        reported as a change when ``report`` (a key found after the feed started)."""
        if key in self._tracked:
            return
        tracked = self._tracked[key] = _Tracked()
        store = self.store
        data_key = store.data_key(key)
        try:
            tracked.sub = await store.client.subscribe_key(data_key, lambda ev: self._on_event(key, tracked, ev))
            got = await store.client.get(data_key)
        except BaseException:
            if self._tracked.get(key) is tracked:
                del self._tracked[key]
            if tracked.sub is not None:
                sub, tracked.sub = tracked.sub, None
                asyncio.get_running_loop().create_task(sub.close())
            raise
        if self._tracked.get(key) is not tracked:  # forgotten meanwhile (deleted, past _GONE_KEPT)
            if tracked.sub is not None:
                self._release_later(tracked)
            return
        if got is None:  # absent: nothing to report (a change notified meanwhile was reported by the notification)
            if not tracked.exists:
                self._went(key)
            return
        if tracked.version is not None and got.version is not None and got.version <= tracked.version:
            return  # a notification as new as the answer (or newer) came first
        tracked.version, tracked.exists = got.version, True
        if report:
            self._publish(key, KeyEvent(data_key, KeyOperation.SET, got.value, got.version))

    # -- events -------------------------------------------------------------------------------------------

    def _on_event(self, key: str, tracked: _Tracked, event: KeyEvent) -> None:
        if self._tracked.get(key) is not tracked:
            return
        version = event.version
        if version is not None and tracked.version is not None and version <= tracked.version:
            return  # the baseline read had it already
        deleted = event.op is KeyOperation.DELETE
        if deleted and not tracked.exists:
            if version is not None:
                tracked.version = version
            return  # absent before, absent now
        tracked.exists = not deleted
        if version is not None:
            tracked.version = version
        self._publish(key, event)
        if deleted:
            self._went(key)
        else:
            self._gone.pop(key, None)

    def _went(self, key: str) -> None:
        """``key`` is absent now: its watch is kept for a while; the oldest deleted key's past ``_GONE_KEPT`` is
        released (bounded: a namespace whose keys come and go does not grow the watches without end)."""
        gone = self._gone
        gone.pop(key, None)
        gone[key] = None
        while len(gone) > _GONE_KEPT:
            oldest = next(iter(gone))
            del gone[oldest]
            tracked = self._tracked.pop(oldest, None)
            if tracked is not None:
                self._release_later(tracked)

    def _release_later(self, tracked: _Tracked) -> None:
        if tracked.sub is not None:
            self._releasing.append(tracked.sub)
            tracked.sub = None
        if self._work is not None:
            self._work.set()

    def _publish(self, key: str, event: KeyEvent) -> None:
        if event.op is KeyOperation.DELETE or event.value is None:
            change: Change[V] = Change(key, None, event.version, deleted=True, synthetic=event.synthetic)
        else:
            try:
                value = decode_value(self.store.codec, key, event.value, binding=self.store.binding(key))
            except Exception as exc:  # a value another writer stored with another codec: told, not fatal
                log.warning("changes(): the new value of %r does not decode: %s", key, exc)
                return
            change = Change(key, value, event.version, synthetic=event.synthetic)
        for stream in list(self.streams):
            stream._put(change)  # noqa: SLF001 - the feed fills its streams


async def _release(sub: KeySubscription) -> None:
    try:
        await sub.close()
    except StateStoreError as exc:
        log.debug("releasing a change watch failed: %s", exc)


_feeds: weakref.WeakKeyDictionary[NamespaceStore[Any], _Feed[Any]] = weakref.WeakKeyDictionary()


def feed_of(store: NamespaceStore[V]) -> _Feed[V]:
    """The namespace store's feed (one per store: a dict and its fenced views share it)."""
    feed = _feeds.get(store)
    if feed is None:
        feed = _feeds[store] = _Feed(store)
    return feed


async def stop_feed(store: NamespaceStore[Any]) -> None:
    """Stop the store's feed, if it has one (the dict closes)."""
    feed = _feeds.pop(store, None)  # its value holds the store: left in, the weak entry would never go
    if feed is not None:
        for stream in list(feed.streams):
            await stream.aclose()
        await feed.stop()


Callback = Callable[[Change[Any]], Awaitable[None] | None]


class AsyncChangeStream(Generic[V]):
    """``async for change in d.changes()``: the namespace's changes as :class:`Change` values, from when the stream
    started (``async with``, :meth:`start` or the first iteration).

    Per key in version order, each change at most once, the key's latest value after every reconnect (from the
    client's watches). Bounded: past ``maxsize`` queued events, each key keeps only its latest change, delivered
    after the queue with ``coalesced=True``, and :attr:`dropped` counts the skipped ones.
    """

    def __init__(
        self,
        feed: Any,  # the namespace's _Feed: streams are made by d.changes() and d.on_change()
        *,
        maxsize: int = DEFAULT_CHANGES_MAXSIZE,
        scan_interval: float = DEFAULT_SCAN_INTERVAL,
        callback: Callback | None = None,
        executor: concurrent.futures.Executor | None = None,
    ) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ConfigurationError(f"maxsize must be a positive number of events, not {maxsize!r}")
        if isinstance(scan_interval, bool) or not isinstance(scan_interval, int | float) or not scan_interval > 0:
            raise ConfigurationError(f"scan_interval must be positive seconds, not {scan_interval!r}")
        self._feed: _Feed[V] = feed
        self.maxsize = maxsize
        self.scan_interval = float(scan_interval)
        self._queue: collections.deque[Change[V]] = collections.deque()
        self._missed: dict[str, Change[V]] = {}
        self._ready = asyncio.Event()
        self._closed = False
        self._started = False
        #: changes skipped because this stream's consumer fell ``maxsize`` events behind (coalesced into the key's
        #: latest change)
        self.dropped = 0
        #: how many times the stream overflowed (the queue was full when a change came)
        self.overflows = 0
        self._callback = callback
        self._executor = executor
        self._dispatcher: asyncio.Task[None] | None = None

    # -- the feed's side ----------------------------------------------------------------------------------

    def _put(self, change: Change[V]) -> None:
        if self._closed:
            return
        if self._missed or len(self._queue) >= self.maxsize:
            if not self._missed:
                self.overflows += 1
            # the key's changes queued already stay (they come first); this one waits behind them, and replaces
            # the one of the key waiting there (skipped: counted, and said on the one delivered)
            previous = self._missed.pop(change.key, None)
            if previous is not None:
                self.dropped += 1
                change = Change(
                    change.key, change.value, change.version, change.deleted, change.synthetic, coalesced=True
                )
            self._missed[change.key] = change
        else:
            self._queue.append(change)
        self._ready.set()

    # -- the consumer's side ------------------------------------------------------------------------------

    async def start(self) -> AsyncChangeStream[V]:
        """Start watching the namespace now (iterating or ``async with`` does it too). Returns the stream."""
        if not self._started and not self._closed:
            self._started = True
            self._feed.streams.add(self)
            try:
                await self._feed.start()
            except BaseException:
                self._feed.streams.discard(self)
                self._started = False
                raise
            if self._callback is not None:
                self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch(), name="sskv-on-change")
        return self

    async def __aenter__(self) -> AsyncChangeStream[V]:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncChangeStream[V]:
        return self

    async def __anext__(self) -> Change[V]:
        if not self._started:
            await self.start()
        while True:
            if self._queue:
                return self._queue.popleft()
            if self._missed:
                key = next(iter(self._missed))
                return self._missed.pop(key)
            if self._closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()

    async def next(self, timeout: float | None = None) -> Change[V]:
        """The next change, waiting at most ``timeout`` seconds (``TimeoutError`` after that)."""
        async with asyncio.timeout(timeout):
            return await self.__anext__()

    def pending(self) -> int:
        """Changes waiting for the consumer (queued, and coalesced after an overflow)."""
        return len(self._queue) + len(self._missed)

    async def aclose(self) -> None:
        """Stop: the iteration ends after the changes already queued. The feed stops with its last stream."""
        if self._closed:
            return
        self._closed = True
        self._ready.set()
        feed = self._feed
        if self._started:
            feed.streams.discard(self)
            if not feed.streams:
                await feed.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None and dispatcher is not asyncio.current_task():
            dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await dispatcher

    async def _dispatch(self) -> None:
        callback = self._callback
        assert callback is not None
        loop = asyncio.get_running_loop()
        async for change in self:
            try:
                if self._executor is not None:
                    await loop.run_in_executor(self._executor, callback, change)
                    continue
                result = callback(change)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("an on_change callback failed for key %r", change.key)


class ChangeStream(BlockingTwin, Generic[V]):
    """Blocking iterator over a namespace's changes (see :class:`AsyncChangeStream`)."""

    def __init__(self, stream: AsyncChangeStream[V]) -> None:
        super().__init__()
        self._stream = stream

    @property
    def dropped(self) -> int:
        """Changes skipped because the consumer fell behind (see :class:`AsyncChangeStream`)."""
        return self._stream.dropped

    @property
    def overflows(self) -> int:
        """How many times the consumer fell ``maxsize`` changes behind."""
        return self._stream.overflows

    def start(self) -> ChangeStream[V]:
        """Start watching the namespace now (iterating or ``with`` does it too). Returns the stream."""
        self._run(self._stream.start())
        return self

    def __enter__(self) -> ChangeStream[V]:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Change[V]]:
        while True:
            try:
                yield self._run(self._stream.__anext__())
            except StopAsyncIteration:
                return

    def next(self, timeout: float | None = None) -> Change[V]:
        """The next change, waiting at most ``timeout`` seconds (``TimeoutError`` after that)."""
        return self._run(self._stream.next(timeout))

    def pending(self) -> int:
        """Changes waiting for the consumer."""
        return self._stream.pending()

    def close(self) -> None:
        """Stop: the iteration ends after the changes already queued."""
        self._run(self._stream.aclose())
