"""The cache's counters and latency histogram, shared by the async cache and its blocking twin."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Final

from ..local_cache import CacheStats

__all__ = ["LATENCY_BUCKETS", "CacheCounters", "OpLatency", "StateStoreCacheStats"]

# -- stats ------------------------------------------------------------------------------------------------

#: Upper bounds (seconds) of the latency histogram buckets; a last bucket counts everything slower.
LATENCY_BUCKETS: Final = (0.001, 0.005, 0.02, 0.1, 0.5)


@dataclass(frozen=True, slots=True)
class OpLatency:
    """Latency of one operation: how many calls, their total and slowest duration (seconds), and a histogram
    (``buckets[i]`` counts calls taking at most ``LATENCY_BUCKETS[i]``, the last one the slower rest)."""

    count: int
    total: float
    max: float
    buckets: tuple[int, ...]

    @property
    def mean(self) -> float:
        """The mean duration in seconds (0.0 before any call)."""
        return self.total / self.count if self.count else 0.0


@dataclass(frozen=True, slots=True)
class StateStoreCacheStats:
    """A snapshot of a cache's counters (see :meth:`AsyncStateStoreCache.stats`).

    ``hits``/``misses`` count looked-up keys (``get``, ``get_many`` per key, ``get_or_set``); ``sets`` the
    values written (``set``, ``add`` when it added, ``set_many`` per key, ``get_or_set`` when it stored,
    ``incr``/``decr``); ``deletes`` the keys removed (``delete``, ``delete_many``, ``clear``, expire-now
    TTLs). ``latency`` is per operation name; ``local`` the local cache's own counters, if it has one.
    """

    hits: int
    misses: int
    sets: int
    deletes: int
    latency: Mapping[str, OpLatency]
    local: CacheStats | None = None

    @property
    def hit_ratio(self) -> float:
        """``hits / (hits + misses)`` (0.0 before any lookup)."""
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0


class CacheCounters:
    """Counters shared by the async cache and the blocking facade's fast path (any thread); ``clock`` (monotonic
    seconds) times the operations :meth:`timed` wraps."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.sets = 0
        self.deletes = 0
        self._ops: dict[str, list[Any]] = {}  # name -> [count, total, max, buckets]

    def count(self, *, hits: int = 0, misses: int = 0, sets: int = 0, deletes: int = 0) -> None:
        """Add to the hit, miss, set and delete counters (thread-safe)."""
        with self._lock:
            self.hits += hits
            self.misses += misses
            self.sets += sets
            self.deletes += deletes

    def observe(self, op: str, seconds: float) -> None:
        """Record one ``op`` call that took ``seconds`` in its latency histogram."""
        bucket = bisect.bisect_left(LATENCY_BUCKETS, seconds)  # the first bound >= seconds (len: slower than all)
        with self._lock:
            rec = self._ops.get(op)
            if rec is None:
                rec = self._ops[op] = [0, 0.0, 0.0, [0] * (len(LATENCY_BUCKETS) + 1)]
            rec[0] += 1
            rec[1] += seconds
            rec[2] = max(rec[2], seconds)
            rec[3][bucket] += 1

    def looked_up(self, op: str, seconds: float, hit: bool) -> None:
        """``count(hits=1)`` or ``count(misses=1)`` and ``observe(op, seconds)`` in one step (one lock): a lookup
        of one key (``get``), the cache's hot path."""
        bucket = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1
            rec = self._ops.get(op)
            if rec is None:
                rec = self._ops[op] = [0, 0.0, 0.0, [0] * (len(LATENCY_BUCKETS) + 1)]
            rec[0] += 1
            rec[1] += seconds
            if seconds > rec[2]:
                rec[2] = seconds
            rec[3][bucket] += 1

    def timed(self, op: str) -> AbstractContextManager[None]:
        """Observe how long the ``with`` block took as one ``op``, also when it raises."""
        return _Timed(self, op)

    def snapshot(self, local: CacheStats | None) -> StateStoreCacheStats:
        """The counters now, with ``local`` (the local cache's own statistics) attached."""
        with self._lock:
            latency = {op: OpLatency(r[0], r[1], r[2], tuple(r[3])) for op, r in self._ops.items()}
            return StateStoreCacheStats(self.hits, self.misses, self.sets, self.deletes, latency, local)


class _Timed:
    """:meth:`CacheCounters.timed`'s context: a plain object, not a generator-based context manager (one per
    cache call on the request path; a generator and its wrapper cost about twice as many instructions)."""

    __slots__ = ("_counters", "_op", "_started")

    def __init__(self, counters: CacheCounters, op: str) -> None:
        self._counters = counters
        self._op = op
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = self._counters.clock()

    def __exit__(self, *exc: object) -> None:
        counters = self._counters
        counters.observe(self._op, counters.clock() - self._started)
