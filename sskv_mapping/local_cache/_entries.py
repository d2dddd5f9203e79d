"""Where a local cache keeps its entries: a cachetools LRU (or TTL) cache, and the hot map its hits read.

Sans-IO; its cache calls it under the cache's lock. Part of ``sskv_mapping.local_cache``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from cachetools import Cache, LRUCache, TTLCache


class _Expiring(Protocol):
    """An entry as the entries see it: it may say when its key expires (the cache's monotonic clock)."""

    @property
    def expires_at(self) -> float | None: ...


E = TypeVar("E", bound=_Expiring)


class _EvictingLRU(LRUCache[bytes, Any]):
    """An ``LRUCache`` that reports what it evicts (the hot map must forget it too)."""

    def __init__(self, maxsize: int, evicted: Callable[[bytes, None], object]) -> None:
        super().__init__(maxsize)
        self._evicted = evicted
        #: entries dropped to make room
        self.evictions = 0

    def popitem(self) -> tuple[bytes, Any]:
        key, value = super().popitem()
        self.evictions += 1
        self._evicted(key, None)
        return key, value


#: touches of hot entries kept before they are replayed into the LRU order (bounds the log's memory)
_TOUCH_LOG_MAX = 1024
#: how many distinct keys, the most recently touched, a replay moves up the LRU order
_TOUCH_REPLAY = 64


class _Entries(Generic[E]):
    """Where a :class:`LocalCache` keeps its entries: a cachetools cache that bounds and orders them (LRU, or a
    ``TTLCache`` for a local ttl), and in front of it the hot map, the entries ``get()`` may serve without the lock.

    Knows nothing of versions, staleness or connections: its cache decides what to put, drop and serve hot, and
    calls it under the cache's lock. The hot path reads ``hot`` and appends the keys it served to ``touched``
    without the lock (a dict lookup and a list append are atomic); :meth:`replay_touches` later counts those hits
    and moves their keys up the LRU order. A value of ``hot`` is ``(serve_until, entry)``: the cache's deadline
    for serving the entry as it is (``None``: forever), so a hit costs one clock read and one compare. With a
    local ttl nothing is hot: cachetools ages the entries, so every read takes the locked path.
    """

    __slots__ = ("data", "hot", "hot_hits", "lookup", "touched", "use_hot")

    def __init__(self, maxsize: int, ttl: float | None, clock: Callable[[], float]) -> None:
        self.hot: dict[bytes, tuple[float | None, E]] = {}
        self.touched: list[bytes] = []
        #: hot hits counted by replays so far (those logged since are ``len(touched)``)
        self.hot_hits = 0
        self.data: Cache[bytes, E] = (
            _EvictingLRU(maxsize, self.hot.pop) if ttl is None else TTLCache(maxsize, ttl, timer=clock)
        )
        self.use_hot = ttl is None
        #: LRU/TTL aware, marks the entry recently used; bound once (the locked path of every miss of the hot map)
        self.lookup: Callable[[bytes], E] = self.data.__getitem__

    def held(self, key: bytes) -> E | None:
        """The entry held for ``key`` without an LRU update (``in`` on a TTLCache honours its ttl)."""
        return Cache.__getitem__(self.data, key) if key in self.data else None

    def items(self) -> list[tuple[bytes, E]]:
        """Every entry held, without LRU updates."""
        data = self.data
        return [(k, Cache.__getitem__(data, k)) for k in list(Cache.__iter__(data))]

    def put(self, key: bytes, entry: E, *, hot: bool, serve_until: float | None) -> None:
        """Hold ``entry`` for ``key`` (evicting the least recently used if full); serve it hot until ``serve_until``
        if ``hot``."""
        self.replay_touches()  # an eviction this may cause must see the recent hits
        self.data[key] = entry
        if hot and self.use_hot:
            self.hot[key] = (serve_until, entry)

    def drop(self, key: bytes) -> bool:
        """Forget ``key``; whether an entry was held."""
        self.hot.pop(key, None)
        try:
            del self.data[key]
        except KeyError:  # missing, or a TTLCache entry that had expired (deleted all the same)
            return False
        return True

    def expire(self, now: float) -> int:
        """Drop every entry past the local ttl or its ``expires_at``; how many were dropped."""
        data = self.data
        before = Cache.__len__(data)  # not len(): TTLCache.__len__ would purge first
        if isinstance(data, TTLCache):
            data.expire()
        for key in [k for k, e in self.items() if e.expires_at is not None and e.expires_at <= now]:
            self.drop(key)
        return before - Cache.__len__(data)

    def cool(self) -> None:
        """Serve nothing hot until put again (the entries stay held)."""
        self.hot.clear()

    def clear(self) -> None:
        self.hot.clear()
        self.data.clear()

    def replay_touches(self) -> None:
        """Count the hot hits logged since the last replay and move their keys up the LRU order.

        Only the :data:`_TOUCH_REPLAY` most recent distinct keys move up: replaying every key would cost what the
        hot path saved (a cachetools lookup each). A key read often is among them; when hits spread evenly over
        many keys, no order among those keys would mean much anyway.
        """
        touched = self.touched
        n = len(touched)
        keys = touched[:n]
        del touched[:n]  # in place: the hot path holds this very list; appends meanwhile are kept
        self.hot_hits += n
        recent: dict[bytes, None] = {}
        for key in reversed(keys):  # newest first
            if key not in recent:
                recent[key] = None
                if len(recent) >= _TOUCH_REPLAY:
                    break
        data = self.data
        for key in reversed(recent):  # oldest of them first: the newest ends up the most recently used
            if key in data:
                self.lookup(key)

    def __len__(self) -> int:
        return len(self.data)

    @property
    def maxsize(self) -> int:
        return int(self.data.maxsize)
