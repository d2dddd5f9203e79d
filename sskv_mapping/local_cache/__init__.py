"""The local, in-process cache in front of the state store, kept current by KEYNOTIFY events.

Sans-IO and thread-safe; what it guarantees: docs/guide/local-cache.md.
"""

from __future__ import annotations

import enum
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final, Generic, Literal, TypeVar

from .._fork import in_child_after_fork
from .._protocol.hlc import HybridLogicalClock
from .._protocol.notifications import KeyEvent, KeyOperation
from ..errors import ConfigurationError
from ._entries import _TOUCH_LOG_MAX, _Entries
from ._reads import ReadTicket, _InFlightReads, _Verdict

__all__ = ["ABSENT", "DEFAULT_MAX_STALENESS", "Absent", "CacheStats", "CachedEntry", "LocalCache", "ReadTicket"]

log = logging.getLogger("sskv_mapping.local_cache")

V = TypeVar("V")

#: How long an entry is served after its last confirmation by default (seconds): a notification lost by a broker
#: leaves a value stale for at most this long; in line with what config and web pages are commonly cached for.
DEFAULT_MAX_STALENESS = 30.0

#: A monotonic clock in seconds, like :func:`time.monotonic`.
MonotonicClock = Callable[[], float]


class _AbsentType(enum.Enum):
    ABSENT = "ABSENT"

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


#: The value of a cached *absence*: the key is known not to exist (negative caching).
ABSENT: Final = _AbsentType.ABSENT
#: The type of :data:`ABSENT`, for annotations (``entry.value is ABSENT`` narrows it away).
Absent = Literal[_AbsentType.ABSENT]


@dataclass(frozen=True, slots=True)
class CachedEntry(Generic[V]):
    """What the cache knows about one key.

    Attributes:
        value: the decoded value, or :data:`ABSENT` when the key is known not to exist.
        raw: the stored bytes (``None`` for an absence), e.g. for ``VDEL``, which compares bytes.
        version: the key's version (the HLC of the change), ``None`` if unknown (a GET miss has none).
        fence: the fencing token this client wrote the value with, if any.
        expires_at: when the key itself expires (``PX``), on the cache's monotonic clock; ``None``: never.
        stale: set on entries served while disconnected with ``stale_while_disconnected=True``.
        confirmed_at: when the cache last stored or confirmed the entry (its monotonic clock); set by the cache.

    The decoded ``value`` is shared by every reader of the entry: treat it as immutable (or decode ``raw``
    again) before handing a mutable object to user code.

    Example:
        >>> v = HybridLogicalClock(1_700_000_000_000, 0, "StateStore")
        >>> CachedEntry({"a": 1}, b'{"a":1}', v).absent
        False
        >>> CachedEntry.missing(v).value
        ABSENT
    """

    value: V | Absent
    raw: bytes | None = None
    version: HybridLogicalClock | None = None
    fence: HybridLogicalClock | None = None
    expires_at: float | None = None
    stale: bool = False
    confirmed_at: float | None = field(default=None, compare=False, repr=False)

    @property
    def absent(self) -> bool:
        """Whether this entry records that the key does not exist."""
        return self.value is ABSENT

    @classmethod
    def missing(cls, version: HybridLogicalClock | None = None) -> CachedEntry[V]:
        """A cached absence, e.g. after a ``DELETE`` notification with that version or a GET miss."""
        return cls(ABSENT, None, version)


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A consistent snapshot of a :class:`LocalCache`'s counters."""

    hits: int
    misses: int
    size: int
    maxsize: int
    reads_in_flight: int
    #: entries dropped to make room for others (0 with a local ``ttl``: cachetools ages those itself)
    evictions: int = 0


def _check_options(maxsize: object, ttl: object, clock: object, max_staleness: object) -> None:
    """A :class:`LocalCache`'s options checked before anything is built."""
    if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
        raise ConfigurationError(f"LocalCache maxsize must be a positive int, not {maxsize!r}")
    if ttl is not None and not _is_seconds(ttl):
        raise ConfigurationError(f"LocalCache ttl must be positive seconds or None, not {ttl!r}")
    if max_staleness is not None and not _is_seconds(max_staleness):
        raise ConfigurationError(f"max_staleness must be positive seconds or None, not {max_staleness!r}")
    if not callable(clock):
        raise ConfigurationError("LocalCache monotonic must be a callable returning monotonic seconds")


def _is_seconds(value: object) -> bool:
    """Whether ``value`` is a positive, finite number of seconds (a bool is not)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value > 0


def _free_after_fork(lock: threading.Lock, *then: Callable[[], None]) -> None:
    """In a forked child: free a cache's lock if a parent thread held it at the fork (that thread does not exist
    here; the lock cannot be replaced: the hot path's closures hold it), then forget: ``then`` is the cache's
    ``disconnected`` (its notifications go to the parent's connection) and ``clear`` (the parent's values)."""
    if lock.locked():
        lock.release()
    for step in then:
        step()


def _key_text(key: bytes) -> str:
    text = repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


class LocalCache(Generic[V]):
    """A bounded, thread-safe cache of decoded values, ordered by version, with read-in-flight protection.

    Args:
        maxsize: the most entries kept; the least recently used one is evicted first.
        ttl: if set, no entry is served longer than this many seconds after it was stored (a local bound
            on top of the keys' own expiry, for keys whose notifications might be missed).
        monotonic: the monotonic clock (seconds) for ``ttl``, ``expires_at`` and ``max_staleness``; inject a fake
            one in tests.
        stale_while_disconnected: keep serving entries while disconnected, marked ``stale=True``.
        max_staleness: serve an entry only within this many seconds of its last confirmation (a read, a write, a
            notification, or :meth:`confirm`), so that a value whose notification was lost is stale for at most
            this long; ``None`` trusts notifications forever. Default :data:`DEFAULT_MAX_STALENESS` (30 s).

    Keys are the normalized ``bytes`` keys of the store.

    Example:
        >>> now = [0.0]
        >>> cache: LocalCache[str] = LocalCache(maxsize=100, monotonic=lambda: now[0])
        >>> v1 = HybridLogicalClock(1_000, 0, "StateStore")
        >>> cache.store_write(b"k", CachedEntry("one", b"one", v1, expires_at=cache.deadline(5.0)))
        True
        >>> cache.get(b"k").value
        'one'
        >>> cache.apply_event(KeyEvent(b"k", KeyOperation.DELETE, None, v1), bytes.decode)
        >>> cache.get(b"k").value  # an event as old as the entry changes nothing
        'one'
        >>> now[0] = 5.0  # the key's PX expiry has passed
        >>> cache.get(b"k") is None
        True
    """

    def __init__(
        self,
        maxsize: int = 1024,
        *,
        ttl: float | None = None,
        monotonic: MonotonicClock = time.monotonic,
        stale_while_disconnected: bool = False,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
    ) -> None:
        clock = monotonic
        _check_options(maxsize, ttl, clock, max_staleness)
        self._clock = clock
        self._ttl = None if ttl is None else float(ttl)
        self._max_staleness = None if max_staleness is None else float(max_staleness)
        #: entries not served because their last confirmation was more than ``max_staleness`` ago
        self.stale_misses = 0
        self._entries: _Entries[CachedEntry[V]] = _Entries(maxsize, self._ttl, clock)
        self._serve_stale = bool(stale_while_disconnected)
        self._connected = True
        self._lock = threading.Lock()
        self._reads = _InFlightReads(self)
        self._hits = 0
        self._misses = 0
        self._get = self._getter(None)
        in_child_after_fork(self._forked)

    # -- the hot path -------------------------------------------------------------------------------------

    def get(self, key: bytes) -> CachedEntry[V] | None:
        """The entry for ``key`` if it may be served now, else ``None``; counts a hit or a miss.

        An entry past its ``expires_at`` (or the local ``ttl``) is dropped. While disconnected nothing is
        served, unless the cache serves stale entries, which then come back with ``stale=True``.
        """
        return self._get(key)

    def reader(self, prefix: bytes) -> Callable[[object], CachedEntry[V] | None]:
        """``get`` for the ``str`` keys of one namespace in one call: ``reader(prefix)(key)`` is
        ``get(prefix + key.encode())``, and ``None`` for what is not a non-empty ``str`` encodable as UTF-8 (the
        caller's slow path raises the typed error). The hit path of every ``d[key]``: one frame, not three."""
        return self._getter(prefix)

    def _getter(self, prefix: bytes | None) -> Callable[[Any], CachedEntry[V] | None]:
        # Hot path (every d[key]), so written once as a closure over what it reads: on CPython 3.11 ``with lock``
        # measured about twice the cost of an explicit acquire/release, ``data[key]`` dispatches through a slot
        # wrapper that the bound ``__getitem__`` skips, and each attribute or call saved shows in
        # benchmarks/bench_local_cache.py and bench_dict.py. Nothing captured here is ever rebound.
        lock = self._lock
        entries = self._entries
        lookup = entries.lookup
        drop = entries.drop
        replay_touches = entries.replay_touches
        clock = self._clock
        max_stale = self._max_staleness
        hot_get = entries.hot.get
        touched = entries.touched
        touch = touched.append

        def get(key: Any) -> CachedEntry[V] | None:
            if prefix is not None:
                if key.__class__ is not str:
                    return None
                try:
                    key = prefix + key.encode("utf-8")  # "" gives the bare prefix: held by no entry, a miss
                except UnicodeEncodeError:  # a lone surrogate
                    return None
            hit = hot_get(key)
            if hit is not None:
                until = hit[0]
                if until is None or until > clock():
                    touch(key)
                    if len(touched) >= _TOUCH_LOG_MAX:
                        with lock:
                            replay_touches()
                    return hit[1]
            lock.acquire()
            try:
                try:
                    entry = lookup(key)  # LRU/TTL aware, marks the entry recently used
                except KeyError:
                    self._misses += 1
                    return None
                expires_at = entry.expires_at
                if expires_at is not None and expires_at <= clock():
                    drop(key)
                    self._misses += 1
                    return None
                if self._connected:
                    confirmed = entry.confirmed_at
                    if max_stale is not None and confirmed is not None and confirmed + max_stale <= clock():
                        self.stale_misses += 1  # kept (a re-read may confirm it) but not served
                        self._misses += 1
                        return None
                    self._hits += 1
                    return entry
                if self._serve_stale:
                    self._hits += 1
                    return replace(entry, stale=True)
                self._misses += 1
                return None
            finally:
                lock.release()

        return get

    # -- reads from the network ---------------------------------------------------------------------------

    def begin_read(self, key: bytes) -> ReadTicket:
        """Call before sending a GET for ``key``; pass the ticket to :meth:`finish_read` or :meth:`abandon`.

        Prefer ``with cache.begin_read(key) as ticket:`` so the ticket is abandoned on any error.
        """
        with self._lock:
            return self._reads.begin(key)

    def finish_read(self, ticket: ReadTicket, entry: CachedEntry[V]) -> bool:
        """Store the result of the read ``ticket`` stands for, unless something newer is known.

        Refused (returns ``False``) when, since :meth:`begin_read`, the key had an event, a write or an
        invalidation, or the cache was cleared, disconnected or reconnected. When two reads of one key
        overlap, the versions decide; if one of them has no version (a GET miss) the order is unknowable
        and the entry is dropped rather than guessed. Closes the ticket; a closed ticket stores nothing.

        Returns:
            Whether ``entry`` was stored.
        """
        key = ticket.key
        with self._lock:
            verdict = self._reads.finish(ticket)
            if verdict is _Verdict.REFUSE:
                return False
            old = self._entries.held(key)
            new_v = entry.version
            old_v = None if old is None else old.version
            if verdict is _Verdict.RACED:
                # Another read of this key stored its result while ours was in flight; which GET the
                # service answered last is unknown, so only versions can order the two.
                if old is None:  # that result is gone again (evicted or dropped): nothing to order against
                    return False
                if new_v is None or old_v is None:  # a miss has no version: unknowable, trust neither
                    self._entries.drop(key)
                    self._reads.changed(key)
                    return False
            if new_v is not None and old_v is not None and new_v <= old_v:
                if new_v == old_v and old is not None:
                    self._put(key, old)  # the store still holds what we cached: confirmed now
                return False
            # undisturbed, an entry held now was there before our GET was sent, so our result is newer
            self._put(key, entry)
            self._reads.stored(key)
            return True

    def abandon(self, ticket: ReadTicket) -> None:
        """Close a ticket whose read failed or was cancelled; nothing is stored. Idempotent."""
        with self._lock:
            self._reads.abandon(ticket)

    # -- writes and notifications -------------------------------------------------------------------------

    def store_write(self, key: bytes, entry: CachedEntry[V]) -> bool:
        """Record this client's own acknowledged write (read-your-writes).

        Stored unless the cache already holds a newer version (an event that overtook the acknowledgement).
        Replaces an entry of the *same* version, because a write knows more (fence, expiry) than the
        notification echoing it. A write without a version (e.g. an acknowledged DEL, which carries none)
        only drops the entry: it cannot be ordered against events.

        Returns:
            Whether ``entry`` was stored.
        """
        with self._lock:
            self._reads.changed(key)
            if entry.version is None:
                self._entries.drop(key)
                return False
            old = self._entries.held(key)
            if old is not None and old.version is not None and entry.version < old.version:
                return False
            self._put(key, entry)
            return True

    def apply_event(self, event: KeyEvent, loads: Callable[[bytes], V]) -> None:
        """Apply a KEYNOTIFY change (real or synthetic) of a key; never raises for bad data.

        Only keys already cached, or with a read in flight, are updated: an event does not pull an evicted
        key back in. A ``SET`` stores ``loads(value)`` with the event's version, a ``DELETE`` a cached
        absence; both only if strictly newer than the cached entry. An event without a version, or whose
        value ``loads`` cannot decode, drops the entry.
        """
        key = event.key
        version = event.version
        if version is None or (event.op is KeyOperation.SET and event.value is None):
            self.invalidate(key)
            return
        if event.op is KeyOperation.DELETE:
            with self._lock:
                self._reads.changed(key)
                if self._wants(key, version):
                    self._put(key, CachedEntry(ABSENT, None, version))
            return
        with self._lock:
            self._reads.changed(key)
            if not self._wants(key, version):
                return
        raw = event.value
        assert raw is not None
        try:
            value = loads(raw)  # outside the lock: decoding may be slow, readers must not wait for it
        except Exception as exc:
            log.warning(
                "dropping the cached entry of %s: the value in its notification does not decode (%s: %s)",
                _key_text(key),
                type(exc).__name__,
                exc,
            )
            self.invalidate(key)
            return
        with self._lock:
            self._reads.changed(key)
            if self._wants(key, version):
                self._put(key, CachedEntry(value, raw, version))

    def invalidate(self, key: bytes) -> bool:
        """Forget ``key``; a read of it in flight will not be stored. Returns whether an entry was held."""
        with self._lock:
            self._reads.changed(key)
            return self._entries.drop(key)

    def holds(self, key: bytes) -> bool:
        """Whether ``key`` has an entry (served or not) or a read in flight: notifications for it matter."""
        with self._lock:
            return key in self._reads or self._entries.held(key) is not None

    def clear(self) -> None:
        """Forget every entry; reads in flight will not be stored. The hit/miss counters are kept."""
        with self._lock:
            self._clear()

    # -- staleness ----------------------------------------------------------------------------------------

    def confirm(self, key: bytes, version: HybridLogicalClock | None) -> bool:
        """The store holds ``version`` of ``key`` now (a re-read found it unchanged): serve the entry for another
        ``max_staleness``. Only an entry of exactly that version is confirmed; returns whether one was."""
        with self._lock:
            old = self._entries.held(key)
            if old is None or old.version != version or version is None:
                return False
            self._put(key, old)
            return True

    def due(self, within: float, limit: int | None = None) -> list[bytes]:
        """Keys whose entries stop being served within ``within`` seconds for want of a confirmation (or have
        already), oldest confirmation first, at most ``limit``: what a revalidator should re-read now. Entries
        whose key expires before that are left to expire. Empty when ``max_staleness`` is ``None``."""
        max_staleness = self._max_staleness
        if max_staleness is None:
            return []
        with self._lock:
            horizon = self._clock() + within - max_staleness  # confirmed before this: due
            found = [
                (e.confirmed_at, k)
                for k, e in self._entries.items()
                if e.confirmed_at is not None
                and e.confirmed_at <= horizon
                and (e.expires_at is None or e.expires_at > e.confirmed_at + max_staleness)
            ]
        found.sort()
        return [k for _, k in (found if limit is None else found[:limit])]

    # -- counters and sizes ----------------------------------------------------------------------------------

    @property
    def max_staleness(self) -> float | None:
        """Seconds an entry is served after its last confirmation (``None``: forever)."""
        return self._max_staleness

    @property
    def hits(self) -> int:
        """How many :meth:`get` calls returned an entry."""
        entries = self._entries
        return self._hits + entries.hot_hits + len(entries.touched)

    @property
    def misses(self) -> int:
        """How many :meth:`get` calls returned ``None``."""
        return self._misses

    @property
    def size(self) -> int:
        """How many entries are held (entries past ``expires_at`` count until read or :meth:`expire`)."""
        with self._lock:
            return len(self._entries)

    @property
    def maxsize(self) -> int:
        return self._entries.maxsize

    @property
    def ttl(self) -> float | None:
        """The local TTL in seconds, if any."""
        return self._ttl

    @property
    def reads_in_flight(self) -> int:
        """How many read tickets are open."""
        with self._lock:
            return self._reads.tickets

    def stats(self) -> CacheStats:
        """A consistent snapshot of the counters."""
        with self._lock:
            return CacheStats(
                hits=self._hits + self._entries.hot_hits + len(self._entries.touched),
                misses=self._misses,
                size=len(self._entries),
                maxsize=self._entries.maxsize,
                reads_in_flight=self._reads.tickets,
                evictions=getattr(self._entries.data, "evictions", 0),
            )

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        state = "connected" if self._connected else "disconnected"
        counts = f"hits={self.hits} misses={self._misses}"
        return f"<LocalCache {len(self)}/{self.maxsize} entries, {state}, {counts}>"

    # -- connection state ---------------------------------------------------------------------------------

    def disconnected(self) -> None:
        """The broker connection dropped: notifications are lost from now on, so stop serving entries
        (or serve them as stale, with ``stale_while_disconnected=True``)."""
        with self._lock:
            self._connected = False
            self._entries.cool()  # nothing is served as it is while notifications are lost (stale: the slow path)
            self._reads.new_epoch()

    def reconnected(self) -> None:
        """The connection is back: anything may have changed meanwhile, so empty the cache and serve again.

        The client re-registers its watches and delivers synthetic events for keys that changed; those go
        through :meth:`apply_event` as usual.
        """
        with self._lock:
            self._clear()
            self._connected = True

    def _forked(self) -> None:  # in a forked child (sskv_mapping._fork): the parent's values are not served
        _free_after_fork(self._lock, self.disconnected, self.clear)

    @property
    def connected(self) -> bool:
        """Whether the cache believes its notifications are flowing (see :meth:`disconnected`)."""
        return self._connected

    # -- helpers for callers --------------------------------------------------------------------------------

    def deadline(self, ttl: float | None) -> float | None:
        """``expires_at`` for a key written with a ``PX`` of ``ttl`` seconds, or ``None`` for no TTL.

        Call it *before* sending the write: the service starts the TTL when it applies the SET, which is
        later, so the local entry expires no later than the key.
        """
        return None if ttl is None else self._clock() + ttl

    def peek(self, key: bytes) -> CachedEntry[V] | None:
        """The entry held for ``key``, even if it could not be served now; no counting, no LRU update."""
        with self._lock:
            return self._entries.held(key)

    def expire(self) -> int:
        """Drop every entry past its ``expires_at`` or local ``ttl`` now; returns how many were dropped."""
        with self._lock:
            return self._entries.expire(self._clock())

    def __contains__(self, key: object) -> bool:
        """Whether :meth:`get` would serve an entry (a value or a cached absence) for ``key`` now."""
        if not isinstance(key, bytes):
            return False
        with self._lock:
            if not (self._connected or self._serve_stale):
                return False
            entry = self._entries.held(key)
            if entry is None:
                return False
            now = self._clock()
            if self._connected and self._aged(entry, now):
                return False
            return entry.expires_at is None or entry.expires_at > now

    # -- internals; the caller holds the lock ---------------------------------------------------------------

    def _put(self, key: bytes, entry: CachedEntry[V]) -> None:
        """Hold ``entry``, confirmed now; served without the lock (while connected) until the earlier of the key's
        expiry and the end of this confirmation's ``max_staleness``."""
        now = self._clock()
        entry = replace(entry, stale=False, confirmed_at=now)
        until = entry.expires_at
        if self._max_staleness is not None:
            fresh_until = now + self._max_staleness
            until = fresh_until if until is None else min(until, fresh_until)
        self._entries.put(key, entry, hot=self._connected, serve_until=until)

    def _aged(self, entry: CachedEntry[V], now: float) -> bool:
        """Whether ``entry`` was last confirmed more than ``max_staleness`` ago."""
        confirmed = entry.confirmed_at
        return self._max_staleness is not None and confirmed is not None and confirmed + self._max_staleness <= now

    def _wants(self, key: bytes, version: HybridLogicalClock) -> bool:
        """Whether an event of ``version`` should be stored: key held (or being read) and event newer."""
        old = self._entries.held(key)
        if old is None:
            return key in self._reads
        return old.version is None or version > old.version

    def _clear(self) -> None:
        self._entries.clear()
        self._reads.new_epoch()
