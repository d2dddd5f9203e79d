"""What keeps one namespace's local cache current: a KEYNOTIFY per key read, released once idle, and the
background re-reads that keep cached entries within ``max_staleness``.

Design: docs/design/namespaces.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from .._protocol.notifications import KeyEvent
from ..client._client import AsyncStateStoreClient, KeySubscription
from ..client._in_flight import background
from ..errors import StateStoreError
from ..local_cache import LocalCache
from .fanout import BoundedWork, SharedLoads, gather_bounded

log = logging.getLogger(__name__)

__all__ = ["KeyWatches"]

#: KEYNOTIFY STOPs of released watches in flight at once (in the background, beside the callers' own requests)
_RELEASE_FAN_OUT = 16
#: re-reads of cached entries about to outlive their max_staleness, in flight at once (in the background)
_REVALIDATE_FAN_OUT = 32


class KeyWatches:
    """The watched keys of one namespace store (``key in watches``, ``len(watches)``, iteration), each watched
    once (:meth:`ensure`), released once the cache no longer holds it and the watches pass ``limit``, and the
    revalidator that re-reads (``reread``) cached entries before they age out."""

    def __init__(
        self,
        client: AsyncStateStoreClient,
        cache: LocalCache[Any],
        on_event: Callable[[KeyEvent], None],
        reread: Callable[[bytes], Awaitable[object]],
        *,
        prefix: bytes,
        name: str,
    ) -> None:
        self._client = client
        self._cache = cache
        self._on_event = on_event
        self._reread = reread  # a cached re-read of a key, through a read ticket (the store's)
        #: the keys the revalidator re-reads start with it (a cache's generation: see switch_prefix)
        self.prefix = prefix
        self._name = name
        self._subs: dict[bytes, KeySubscription] = {}
        self._pending: SharedLoads[bytes] = SharedLoads()  # KEYNOTIFYs in flight, which others wait for
        # Watches of keys the cache no longer holds are released once there are this many: the store keeps
        # a KEYNOTIFY registration per watched key, and a long-lived process reads far more keys than it
        # caches.
        self.limit = 2 * cache.maxsize
        # KEYNOTIFY STOPs of released watches: one background task, a few in flight (a release of 10,000 idle
        # watches at once was 10,000 requests at once, which an untuned broker's queue dropped by the thousand)
        self.releasing: BoundedWork[KeySubscription] = BoundedWork(
            _release, _RELEASE_FAN_OUT, name=f"sskv-release-watches-{name}"
        )
        #: how many idle watches were released so far
        self.released = 0
        # Re-reads entries before they outlive the local cache's max_staleness (see _revalidate_loop); None once
        # closed too (_closed).
        self._revalidator: asyncio.Task[None] | None = None
        #: cached entries re-read in the background so far (to keep them within max_staleness)
        self.revalidations = 0
        self._closed = False

    def __contains__(self, data_key: object) -> bool:
        """Whether ``data_key`` is watched, or its KEYNOTIFY is in flight."""
        return data_key in self._subs or data_key in self._pending

    def __iter__(self) -> Iterator[bytes]:
        """The keys watched now (not those whose KEYNOTIFY is in flight)."""
        return iter(list(self._subs))

    def __len__(self) -> int:
        return len(self._subs)

    def active(self, data_key: bytes) -> bool:
        """Whether changes of ``data_key`` are notified now (watched, and the registration is live)."""
        sub = self._subs.get(data_key)
        return sub is not None and sub.active

    async def ensure(self, data_key: bytes) -> None:
        """Watch ``data_key`` unless it is already (one KEYNOTIFY per key, however many callers wait for it)."""
        if data_key in self._subs:
            return
        cache = self._cache
        if self._revalidator is None and cache.max_staleness is not None and not self._closed:
            self._revalidator = asyncio.get_running_loop().create_task(
                self._revalidate_loop(cache.max_staleness), name=f"sskv-revalidate-{self._name}"
            )
        await self._pending.run(data_key, self._watch)

    async def _watch(self, data_key: bytes) -> None:
        self._subs[data_key] = await self._client.subscribe_key(data_key, self._on_event)
        if len(self._subs) > self.limit:
            self._release_idle(keep=data_key)

    def switch_prefix(self, prefix: bytes) -> None:
        """The keys are under ``prefix`` from now on: every watch settled so far is released."""
        self.prefix = prefix
        stale, self._subs = list(self._subs.values()), {}
        self.releasing.submit(stale)

    async def close(self) -> None:
        """Stop revalidating and release every watch (waiting for the releases)."""
        self._closed = True
        if self._revalidator is not None:
            self._revalidator.cancel()
            self._revalidator = None
        subs, self._subs = list(self._subs.values()), {}
        await gather_bounded((_release(sub) for sub in subs), _RELEASE_FAN_OUT)
        await self.releasing.wait()

    def _release_idle(self, keep: bytes) -> None:
        """Stop watching every key the cache does not hold (nor reads now), except ``keep`` (about to be).

        Run when the watches outnumber ``limit`` (twice the cache size), so the cost is amortised and
        at most about ``maxsize`` watches stay. Without a watch a key cannot be cached (reads and writes
        re-create it first), so nothing stale can be served.
        """
        cache = self._cache
        idle = [k for k in self._subs if k != keep and not cache.holds(k)]
        self.released += len(idle)
        self.releasing.submit([self._subs.pop(k) for k in idle])

    async def _revalidate_loop(self, max_staleness: float) -> None:
        """Re-read cached entries before they outlive ``max_staleness``, so that a hit stays a hit although
        every entry is confirmed at least that often (a notification lost by a broker cannot leave a value stale
        for longer). Every ``max_staleness / 10`` s it re-reads, 32 at a time, the entries that would age out
        within the next ``max_staleness / 5`` s (plus that period): each entry once per about 0.75 x max_staleness
        while it is cached. A re-read that finds the same version confirms the entry; a newer one replaces it."""
        cache = self._cache
        period = max_staleness / 10
        within = max_staleness / 5 + period
        with background():  # the re-reads yield to the client's calls (client/_in_flight.py)
            while True:
                await asyncio.sleep(period)
                if not cache.connected:
                    continue  # nothing is served now, and everything is cleared on reconnect
                due = [k for k in cache.due(within) if k.startswith(self.prefix)]
                if due:
                    await gather_bounded((self._revalidate(k) for k in due), _REVALIDATE_FAN_OUT)

    async def _revalidate(self, data_key: bytes) -> None:
        if not self.active(data_key):
            return  # not notified of changes now: left to age out rather than refreshed without a watch
        try:
            await self._reread(data_key)
        except StateStoreError as exc:  # the entry ages out; a reader re-reads it then
            log.debug("revalidating a cached entry failed: %s", exc)
            return
        self.revalidations += 1


async def _release(sub: KeySubscription) -> None:
    try:
        await sub.close()
    except StateStoreError as exc:  # the client drops the registration on its side regardless
        log.warning("releasing an idle watch failed: %s", exc)
