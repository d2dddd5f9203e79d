"""Layer 4: :class:`StateStoreCache`, the async cache backend over one namespace of the state store, and its
blocking twin :class:`SyncStateStoreCache` (for Django, Flask and other WSGI code).

This is the layer the framework adapters (``sskv_mapping.integrations``) sit on. Its verbs are the union of
what those frameworks ask of a cache: ``get/set/add/delete/exists/touch/expire``, the ``*_many`` forms,
``clear``, ``get_or_set``, ``incr/decr``. Every framework spells "how long" differently;
:func:`translate_ttl` is the one table-tested place that turns their conventions into ours.

How the operations map onto the store (protocol.md §1, §6):

* ``set``: ``SET ns/key value [PX ms]``; ``add``: the same with ``NX``. Values go through a codec (JSON by
  default; pickle only if you pass a :class:`~sskv_mapping.codecs.PickleCodec` yourself).
* ``touch``/``expire``: the store has no EXPIRE. The entry is renewed with ``SET NEX`` of the *stored bytes*
  and the new ``PX``: NEX applies only if the value is still those bytes, so a concurrent change makes the
  renewal fail safely (``False``). NEX also applies to an *absent* key, so a delete landing between our GET
  and our SET would be undone by the renewal (a stale entry brought back after an invalidation); the key's
  notifications tell us when that happened, and the renewal is then taken back with ``VDEL``.
* ``incr``/``decr``: read-modify-write under a per-key leased lock (``ns#lock/<key>``), the write fenced with
  the lock's token, so a holder whose lease ran out cannot clobber a newer count. The fence stays on the key
  until it is deleted or expires, so every write of this class that meets a fenced key retries under the
  same lock, with its token; callers never see the fencing.
* ``get_or_set``: one computation per key across processes. In this process, concurrent callers of a key
  share one asyncio future; across processes, the leader of each process takes the leased lock
  ``ns#gos-lock/<key>`` (waiting on KEYNOTIFY, never polling), re-reads, computes only if still missing, and
  stores with ``NX``.
* ``clear``: deletes the keys listed in the namespace's key index (:mod:`sskv_mapping._index`), so it never
  touches another namespace.

TTL semantics (``ttl`` arguments): ``UNSET`` = the cache's ``default_ttl``; ``None`` = never expires; a
positive number of seconds or a ``timedelta``; zero or negative = expire now, i.e. the key is deleted (what
Django means by ``0``).

Must not import aiomqtt/paho, the emulator or the mapping module.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Generic, Literal, TypeVar, cast, overload

from ._protocol.commands import SetCondition, VDeleteResult
from ._protocol.errors import ClientStateError, ConfigurationError, FencingTokenRequiredError, StateStoreError
from ._protocol.hlc import HybridLogicalClock
from ._protocol.notifications import KeyEvent, KeyOperation
from ._store import NamespaceStore
from ._sync import get_loop_thread
from .client import UNSET, AsyncStateStoreClient, SetResult, StateStoreClient, TlsSettings, _Unset, ttl_to_ms
from .codecs import Codec, JsonCodec, get_codec
from .local_cache import ABSENT, CachedEntry, CacheStats, LocalCache
from .lock import AsyncLeasedLock

__all__ = [
    "DEFAULT_TTL",
    "LATENCY_BUCKETS",
    "OpLatency",
    "StateStoreCache",
    "StateStoreCacheStats",
    "SyncStateStoreCache",
    "TtlConvention",
    "translate_ttl",
]

log = logging.getLogger("sskv_mapping.cache")

V = TypeVar("V")
D = TypeVar("D")
T = TypeVar("T")

#: The default ``default_ttl``: five minutes, like Django's and Flask-Caching's default timeout. A cache
#: whose entries never expire fills the store's key quota sooner or later.
DEFAULT_TTL: Final = 300.0

#: What callers may pass as a ``ttl``: seconds, a timedelta, ``None`` (never expires) or ``UNSET`` (default).
TtlArg = float | int | timedelta | None | _Unset

# -- TTLs ---------------------------------------------------------------------------------------------------


def _seconds(value: object, what: str) -> float:
    """A finite number of seconds from an int, float or timedelta; anything else is a ConfigurationError."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise ConfigurationError(f"{what} must be seconds (int/float), a timedelta or None, not {type(value).__name__}")
    try:
        seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not math.isfinite(seconds):
        raise ConfigurationError(f"{what} must be a finite number of seconds (None: never expires), not {value!r}")
    return seconds


def _positive(seconds: float, what: str) -> float:
    try:
        ttl_to_ms(seconds)  # refuses what PX cannot carry (more than 100 years)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{what}: {exc}") from None
    return seconds


def _check_ttl(ttl: object, what: str = "ttl") -> float | None:
    """Our own convention: ``None`` never expires, > 0 seconds, <= 0 expire now (returned as ``0.0``)."""
    if ttl is None:
        return None
    seconds = _seconds(ttl, what)
    return 0.0 if seconds <= 0 else _positive(seconds, what)


def _expire_now(seconds: float | None) -> bool:
    return seconds is not None and seconds <= 0


#: The frameworks :func:`translate_ttl` knows.
TtlConvention = Literal["django", "flask", "litestar", "aiocache"]


@dataclass(frozen=True, slots=True)
class _Convention:
    none: Literal["never", "default"]  # what ``None`` means
    zero: Literal["never", "now"]  # what ``0`` means


# Checked against the frameworks' own code (Django 5.2 BaseCache.get_backend_timeout, cachelib/Flask-Caching
# 2.x BaseCache._normalize_timeout, litestar 2.x StorageObject.new, aiocache 0.12 BaseCache._get_ttl and the
# memory backend). A negative value means "already expired" wherever the framework gives it a meaning at all
# (Django, Flask's SimpleCache, litestar's MemoryStore, aiocache's memory backend), so it is "now" everywhere.
_CONVENTIONS: Final[dict[str, _Convention]] = {
    "django": _Convention(none="never", zero="now"),  # timeout=DEFAULT_TIMEOUT -> default_timeout
    "flask": _Convention(none="default", zero="never"),  # timeout=None -> CACHE_DEFAULT_TIMEOUT
    "litestar": _Convention(none="never", zero="never"),  # expires_in: int | timedelta | None
    "aiocache": _Convention(none="never", zero="never"),  # ttl=SENTINEL -> the cache's ttl
}


def translate_ttl(value: object, convention: str, default: object = UNSET) -> float | None:
    """Turn a framework's "timeout" argument into a ``ttl`` for :class:`StateStoreCache`.

    Returns ``None`` (never expires), ``0.0`` (expire now: ``set`` deletes the key) or positive seconds.
    ``value`` is :data:`~sskv_mapping.UNSET` when the framework's argument was not given (an adapter maps
    Django's ``DEFAULT_TIMEOUT`` and aiocache's ``SENTINEL`` to it); ``default`` is the framework's
    configured default timeout, which follows the same convention.

    ============  =========  =========  ===========  ==========  ===========
    convention    not given  ``None``   ``0``        ``< 0``     ``> 0``
    ============  =========  =========  ===========  ==========  ===========
    ``django``    default    never      expire now   expire now  seconds
    ``flask``     default    default    never        expire now  seconds
    ``litestar``  default    never      never        expire now  seconds
    ``aiocache``  default    never      never        expire now  seconds
    ============  =========  =========  ===========  ==========  ===========

    A ``timedelta`` is accepted wherever a number is. Booleans, strings, NaN and infinities raise
    :class:`ConfigurationError`.

    Example:
        >>> translate_ttl(0, "django", 300), translate_ttl(0, "flask", 300)
        (0.0, None)
        >>> translate_ttl(UNSET, "django", 300), translate_ttl(None, "flask", 60)
        (300.0, 60.0)
    """
    rules = _CONVENTIONS.get(convention) if isinstance(convention, str) else None
    if rules is None:
        raise ConfigurationError(f"unknown TTL convention {convention!r}; known: {', '.join(sorted(_CONVENTIONS))}")
    if value is UNSET or (value is None and rules.none == "default"):
        if default is UNSET:
            raise ConfigurationError(f"no timeout was given and no default for the {convention!r} convention")
        value = default
    if value is None:  # also a default of None under Flask's rules: there is nothing else it could mean
        return None
    seconds = _seconds(value, f"a {convention} timeout")
    if seconds == 0:
        return None if rules.zero == "never" else 0.0
    if seconds < 0:
        return 0.0
    return _positive(seconds, f"a {convention} timeout")


# -- keys -------------------------------------------------------------------------------------------------


def _check_key(key: object) -> str:
    if not isinstance(key, str):
        raise ConfigurationError(f"cache keys are str, not {type(key).__name__}")
    if not key:
        raise ConfigurationError("cache keys may not be empty")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates
        raise ConfigurationError(f"cache key is not valid UTF-8 text: {exc.reason}") from None
    return key


def _check_keys(keys: Iterable[str]) -> list[str]:
    if isinstance(keys, str | bytes):  # iterating would give characters, not keys
        raise ConfigurationError("pass an iterable of keys, not a single str")
    return list(dict.fromkeys(_check_key(k) for k in keys))


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
        return self.total / self.count if self.count else 0.0


@dataclass(frozen=True, slots=True)
class StateStoreCacheStats:
    """A snapshot of a cache's counters (see :meth:`StateStoreCache.stats`).

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
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0


class _Stats:
    """Counters shared by the async cache and the blocking facade's fast path (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.sets = 0
        self.deletes = 0
        self._ops: dict[str, list[Any]] = {}  # name -> [count, total, max, buckets]

    def count(self, *, hits: int = 0, misses: int = 0, sets: int = 0, deletes: int = 0) -> None:
        with self._lock:
            self.hits += hits
            self.misses += misses
            self.sets += sets
            self.deletes += deletes

    def observe(self, op: str, seconds: float) -> None:
        bucket = next((i for i, bound in enumerate(LATENCY_BUCKETS) if seconds <= bound), len(LATENCY_BUCKETS))
        with self._lock:
            rec = self._ops.get(op)
            if rec is None:
                rec = self._ops[op] = [0, 0.0, 0.0, [0] * (len(LATENCY_BUCKETS) + 1)]
            rec[0] += 1
            rec[1] += seconds
            rec[2] = max(rec[2], seconds)
            rec[3][bucket] += 1

    def snapshot(self, local: CacheStats | None) -> StateStoreCacheStats:
        with self._lock:
            latency = {op: OpLatency(r[0], r[1], r[2], tuple(r[3])) for op, r in self._ops.items()}
            return StateStoreCacheStats(self.hits, self.misses, self.sets, self.deletes, latency, local)


# -- get_or_set book-keeping --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Found:
    value: Any


@dataclass(slots=True)
class _Lead:
    """This caller computes the value: it holds the key's get_or_set lock and owns the in-process flight."""

    key: str
    lock: AsyncLeasedLock
    flight: asyncio.Future[Any]


class _Mutex:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class StateStoreCache(Generic[V]):
    """An async cache backend over one namespace of the state store, shared by every process that opens it.

    Example:
        >>> async def main(client: AsyncStateStoreClient) -> None:  # doctest: +SKIP
        ...     async with StateStoreCache(client, namespace="web", default_ttl=60) as cache:
        ...         await cache.set("page:/", "<html>…", ttl=30)
        ...         await cache.add("visits", 0, ttl=None)          # only if absent (SET NX)
        ...         await cache.incr("visits")                      # exact under concurrency
        ...         user = await cache.get_or_set("user:7", load_user, ttl=300)  # one load across processes
        ...         print(cache.stats().hit_ratio)

    Args:
        client: a connected :class:`AsyncStateStoreClient` (not closed with the cache unless it made it).
        namespace: the cache's keys are ``namespace/<key>``; ``clear`` deletes only these.
        codec: a :class:`Codec` or its name (``"json"``, the default; ``"str"``, ``"raw"``, ``"msgpack"``).
        default_ttl: what ``ttl=UNSET`` means (seconds, a timedelta, or ``None`` for never).
        local_cache_size: keep up to this many decoded entries in process, kept current by KEYNOTIFY (a hit
            costs no round trip). Off (0) by default: each cached key then holds a KEYNOTIFY registration for
            the life of the cache, which suits a small set of hot keys, not an open-ended key space.
        index: list the keys in the namespace's key index (needed by :meth:`clear`). Without it, writing a
            new key costs one round trip instead of five, and ``clear`` raises.
        lock_lease: lease (seconds) of the per-key locks of ``incr`` and ``get_or_set`` (the latter renews
            its lease while the value is computed).
        lock_timeout: how long to wait for such a lock before :class:`~sskv_mapping.LockError` (``None``:
            forever).
        max_in_flight: the most requests ``get_many``/``set_many``/``delete_many``/``clear`` keep in flight.
        clock: monotonic seconds, for latencies and the local cache.
    """

    def __init__(
        self,
        client: AsyncStateStoreClient,
        *,
        namespace: str = "cache",
        codec: Codec[V] | str | None = None,
        default_ttl: float | timedelta | None = DEFAULT_TTL,
        local_cache_size: int = 0,
        index: bool = True,
        lock_lease: float = 10.0,
        lock_timeout: float | None = 30.0,
        max_in_flight: int = 256,
        clock: Callable[[], float] = time.monotonic,
        _owns_client: bool = False,
    ) -> None:
        resolved: Codec[Any] = JsonCodec() if codec is None else get_codec(codec)
        self._default_ttl = _check_ttl(default_ttl, "default_ttl")
        if isinstance(local_cache_size, bool) or not isinstance(local_cache_size, int) or local_cache_size < 0:
            raise ConfigurationError(f"local_cache_size must be an int >= 0, not {local_cache_size!r}")
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ConfigurationError(f"max_in_flight must be a positive int, not {max_in_flight!r}")
        lease = _check_ttl(lock_lease, "lock_lease")
        if lease is None or lease <= 0:
            raise ConfigurationError(f"lock_lease must be a positive number of seconds, not {lock_lease!r}")
        if lock_timeout is not None:
            timeout = _check_ttl(lock_timeout, "lock_timeout")
            if timeout is None or timeout <= 0:
                raise ConfigurationError(f"lock_timeout must be positive seconds or None, not {lock_timeout!r}")
        cache: LocalCache[V] | None = LocalCache(maxsize=local_cache_size, clock=clock) if local_cache_size else None
        self._store: NamespaceStore[V] = NamespaceStore(
            client, namespace, resolved, cache=cache, index=index, clock=clock
        )
        self._prefix = self._store._prefix[:-1]  # the namespace, checked and encoded by NamespaceStore
        self._lock_lease = lease
        self._lock_timeout = lock_timeout
        self._max_in_flight = max_in_flight
        self._clock = clock
        self._stats = _Stats()
        self._flights: dict[str, asyncio.Future[Any]] = {}
        self._mutexes: dict[str, _Mutex] = {}
        self._open_lock = asyncio.Lock()
        self._opened = False
        self._closed = False
        self._owns_client = _owns_client

    @classmethod
    async def connect(
        cls,
        host: str = "127.0.0.1",
        port: int = 1883,
        *,
        namespace: str = "cache",
        codec: Codec[Any] | str | None = None,
        default_ttl: float | timedelta | None = DEFAULT_TTL,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        tls: TlsSettings | None = None,
        local_cache_size: int = 0,
    ) -> StateStoreCache[Any]:
        """Connect a client of its own (closed with the cache) and open the cache."""
        client = AsyncStateStoreClient(host, port, client_id=client_id, username=username, password=password, tls=tls)
        await client.connect()
        try:
            cache: StateStoreCache[Any] = cls(
                client,
                namespace=namespace,
                codec=codec,
                default_ttl=default_ttl,
                local_cache_size=local_cache_size,
                _owns_client=True,
            )
            await cache.open()
        except BaseException:
            await client.close()
            raise
        return cache

    # -- properties -----------------------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        return self._store.namespace

    @property
    def client(self) -> AsyncStateStoreClient:
        return self._store.client

    @property
    def codec(self) -> Codec[V]:
        return self._store.codec

    @property
    def default_ttl(self) -> float | None:
        """Seconds (``0.0``: every default write expires at once), or ``None`` for never."""
        return self._default_ttl

    @property
    def local_cache(self) -> LocalCache[V] | None:
        return self._store.cache

    def __repr__(self) -> str:
        return f"<StateStoreCache namespace={self.namespace!r} codec={self.codec!r} default_ttl={self._default_ttl}>"

    def stats(self) -> StateStoreCacheStats:
        """A consistent snapshot of the counters and latencies."""
        cache = self._store.cache
        return self._stats.snapshot(cache.stats() if cache is not None else None)

    # -- lifecycle ------------------------------------------------------------------------------------

    async def open(self) -> StateStoreCache[V]:
        """Start watching the namespace index and the connection (done by ``async with``, :meth:`connect`
        and, lazily, by the first operation)."""
        await self._ready()
        return self

    async def _ready(self) -> None:
        if self._closed:
            raise ClientStateError("this cache was closed")
        if self._opened:
            return
        async with self._open_lock:
            if not self._opened:
                await self._store.start()
                self._opened = True

    async def close(self) -> None:
        """Stop the watches; close the client too if this cache created it. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        await self._store.close()
        if self._owns_client:
            await self._store.client.close()

    async def __aenter__(self) -> StateStoreCache[V]:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- helpers --------------------------------------------------------------------------------------

    def _ttl(self, ttl: object) -> float | None:
        return self._default_ttl if ttl is UNSET else _check_ttl(ttl)

    @contextlib.contextmanager
    def _timed(self, op: str) -> Iterator[None]:
        started = self._clock()
        try:
            yield
        finally:
            self._stats.observe(op, self._clock() - started)

    def _lock_name(self, kind: str, key: str) -> bytes:
        # never a data key (those are ``ns/<key>``) nor the index (``ns#index``): namespaces hold no '#'/'/'
        return self._prefix + f"#{kind}/".encode() + key.encode("utf-8")

    async def _gather(self, coros: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
        """Run concurrently (pipelined on the one connection), at most ``max_in_flight`` at a time; the
        first failure cancels the rest and is raised as itself."""
        gate = asyncio.Semaphore(self._max_in_flight)

        async def gated(coro: Coroutine[Any, Any, T]) -> T:
            async with gate:
                return await coro

        pending = list(coros)
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(gated(c)) for c in pending]
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0]  # noqa: B904 - the group only wraps it
        return [t.result() for t in tasks]

    @contextlib.asynccontextmanager
    async def _mutex(self, key: str) -> AsyncIterator[None]:
        """One task per key and process contends for the key's store lock (the others queue here), so a
        release does not wake a herd of local waiters that would all retry the same SET NEX."""
        mutex = self._mutexes.get(key)
        if mutex is None:
            mutex = self._mutexes[key] = _Mutex()
        mutex.users += 1
        try:
            async with mutex.lock:
                yield
        finally:
            mutex.users -= 1
            if mutex.users == 0 and self._mutexes.get(key) is mutex:
                del self._mutexes[key]

    @contextlib.asynccontextmanager
    async def _key_lock(self, key: str) -> AsyncIterator[AsyncLeasedLock]:
        """Hold the key's write lock (``ns#lock/<key>``): the lock of ``incr`` and of fenced writes."""
        async with self._mutex(key):
            lock = AsyncLeasedLock(self._store.client, self._lock_name("lock", key), lease=self._lock_lease)
            await lock.acquire(timeout=self._lock_timeout)
            try:
                yield lock
            finally:
                await self._release(lock)

    @staticmethod
    async def _release(lock: AsyncLeasedLock) -> None:
        try:
            await lock.release()
        except StateStoreError as exc:  # the lease lapses on its own; the operation itself is done
            log.warning("could not release lock %r (its lease will run out): %s", lock.name, exc)

    async def _fenced(self, key: str, op: Callable[[HybridLogicalClock | None], Awaitable[T]]) -> T:
        """Run a write; if the key is fenced (an ``incr`` left its lock's token on it), run it again under
        the key's lock with that lock's token."""
        try:
            return await op(None)
        except FencingTokenRequiredError:
            pass
        async with self._key_lock(key) as lock:
            return await op(lock.fencing_token)

    async def _write(
        self, key: str, value: V, seconds: float | None, *, condition: SetCondition | None = None, listed: bool = True
    ) -> SetResult:
        async def op(token: HybridLogicalClock | None) -> SetResult:
            return await self._store.write(
                key, value, ttl=seconds, condition=condition, fencing_token=token, listed=listed and token is None
            )

        if condition is SetCondition.NX:
            try:
                return await op(None)
            except FencingTokenRequiredError:  # only an existing key is fenced: NX would skip anyway
                return SetResult(False, None)
        return await self._fenced(key, op)

    async def _delete_data(self, key: str) -> bool:
        """DEL the data key (fenced if need be) and forget it locally; the index is the caller's business."""
        data_key = self._store.data_key(key)

        async def op(token: HybridLogicalClock | None) -> bool:
            return await self._store.client.delete(data_key, fencing_token=token)

        try:
            return await self._fenced(key, op)
        finally:
            if self._store.cache is not None:
                self._store.cache.invalidate(data_key)

    async def _unlist(self, keys: list[str]) -> None:
        """Remove deleted keys from the index; a failure leaves dangling entries, which readers tolerate and
        ``clear`` removes, so it does not fail a delete that happened."""
        if self._store.index is None or not keys:
            return
        try:
            await self._store.index.remove(keys)
        except StateStoreError as exc:
            log.warning("deleted %d key(s) of %r but could not unlist them: %s", len(keys), self.namespace, exc)

    async def _delete_key(self, key: str) -> bool:
        deleted = await self._delete_data(key)
        await self._unlist([key])
        if deleted:
            self._stats.count(deletes=1)
        return deleted

    # -- reads ----------------------------------------------------------------------------------------

    @overload
    async def get(self, key: str) -> V | None: ...

    @overload
    async def get(self, key: str, default: D) -> V | D: ...

    async def get(self, key: str, default: Any = None) -> Any:
        """The value, or ``default`` if the key is absent (a stored ``None`` is a value, not a miss).

        A network failure raises a :class:`~sskv_mapping.TransportError`; it is never mistaken for a miss.
        """
        key = _check_key(key)
        await self._ready()
        with self._timed("get"):
            entry = await self._store.read(key)
        if entry.value is ABSENT:
            self._stats.count(misses=1)
            return default
        self._stats.count(hits=1)
        return entry.value

    async def exists(self, key: str) -> bool:
        """Whether the key is in the cache now."""
        key = _check_key(key)
        await self._ready()
        with self._timed("exists"):
            return (await self._store.read(key)).value is not ABSENT

    async def get_many(self, keys: Iterable[str]) -> dict[str, V]:
        """``{key: value}`` for the keys found (absent ones are left out); the GETs run concurrently."""
        wanted = _check_keys(keys)
        await self._ready()
        with self._timed("get_many"):
            entries = await self._gather(self._store.read(k) for k in wanted)
        found: dict[str, V] = {}
        for key, entry in zip(wanted, entries, strict=True):
            if entry.value is not ABSENT:
                found[key] = entry.value
        self._stats.count(hits=len(found), misses=len(wanted) - len(found))
        return found

    # -- writes ---------------------------------------------------------------------------------------

    async def set(self, key: str, value: V, ttl: TtlArg = UNSET) -> None:
        """Store ``value``; ``ttl`` as in the module docstring (zero or negative deletes the key)."""
        key = _check_key(key)
        seconds = self._ttl(ttl)
        self._store.encode(key, value)  # an EncodeError before anything is sent
        await self._ready()
        with self._timed("set"):
            if _expire_now(seconds):
                await self._delete_key(key)
                return
            await self._write(key, value, seconds)
        self._stats.count(sets=1)

    async def add(self, key: str, value: V, ttl: TtlArg = UNSET) -> bool:
        """Store ``value`` only if the key is absent (``SET NX``, atomic across processes); ``True`` if it did.

        With an expire-now ``ttl`` nothing stays stored, but the result still says whether the key was
        absent (the value is added, then deleted if still ours: Django's behaviour).
        """
        key = _check_key(key)
        seconds = self._ttl(ttl)
        raw = self._store.encode(key, value)
        await self._ready()
        with self._timed("add"):
            if not _expire_now(seconds):
                added = (await self._write(key, value, seconds, condition=SetCondition.NX)).applied
                if added:
                    self._stats.count(sets=1)
                return added
            # a short PX as a safety net: if the VDEL below never happens, the value still goes soon
            added = (await self._write(key, value, 1.0, condition=SetCondition.NX, listed=False)).applied
            if added:

                async def vdel(token: HybridLogicalClock | None) -> VDeleteResult:
                    return await self._store.delete_if(key, raw, fencing_token=token)

                await self._fenced(key, vdel)
            return added

    async def set_many(self, mapping: Mapping[str, V], ttl: TtlArg = UNSET) -> list[str]:
        """Store every pair concurrently; returns the keys that could not be stored (the service refused
        them, e.g. the key quota is full, or the connection failed before they were acknowledged).

        Every key and value is checked (and encoded) before anything is sent.
        """
        if not isinstance(mapping, Mapping):
            raise ConfigurationError(f"set_many takes a mapping of key -> value, not {type(mapping).__name__}")
        pairs = [(_check_key(k), v) for k, v in mapping.items()]
        seconds = self._ttl(ttl)
        for k, v in pairs:
            self._store.encode(k, v)
        await self._ready()
        with self._timed("set_many"):
            if _expire_now(seconds):
                await self._delete_many([k for k, _ in pairs])
                return []
            if self._store.index is not None and pairs:
                await self._store.index.add(k for k, _ in pairs)  # one index rewrite for the batch

            async def one(key: str, value: V) -> StateStoreError | None:
                try:
                    await self._write(key, value, seconds, listed=False)
                except StateStoreError as exc:
                    log.warning("set_many could not store %r: %s", key, exc)
                    return exc
                return None

            outcomes = await self._gather(one(k, v) for k, v in pairs)
        failed = [k for (k, _), err in zip(pairs, outcomes, strict=True) if err is not None]
        self._stats.count(sets=len(pairs) - len(failed))
        return failed

    # -- deletes --------------------------------------------------------------------------------------

    async def delete(self, key: str) -> bool:
        """Delete the key; ``True`` if it existed."""
        key = _check_key(key)
        await self._ready()
        with self._timed("delete"):
            return await self._delete_key(key)

    async def delete_many(self, keys: Iterable[str]) -> int:
        """Delete the keys concurrently; returns how many existed."""
        wanted = _check_keys(keys)
        await self._ready()
        with self._timed("delete_many"):
            return await self._delete_many(wanted)

    async def _delete_many(self, keys: list[str]) -> int:
        results = await self._gather(self._delete_data(k) for k in keys)
        await self._unlist(keys)
        deleted = sum(results)
        self._stats.count(deletes=deleted)
        return deleted

    async def clear(self) -> int:
        """Delete every key of this namespace (and nothing else); returns how many existed.

        Works from the key index: a key another process is adding while ``clear`` runs may survive it.
        """
        index = self._store.index
        if index is None:
            raise ConfigurationError("clear() needs the namespace key index (this cache has index=False)")
        await self._ready()
        with self._timed("clear"):
            keys = await self._store.listed_keys(refresh=True)
            results = await self._gather(self._delete_data(k) for k in keys)
            if keys:
                await index.remove(keys)
        deleted = sum(results)
        self._stats.count(deletes=deleted)
        return deleted

    # -- expiry ---------------------------------------------------------------------------------------

    async def touch(self, key: str, ttl: TtlArg = UNSET) -> bool:
        """Restart the key's expiry at ``ttl`` (default: ``default_ttl``) without changing its value.

        ``False`` if the key is absent or its value changed while we renewed it (the newer value is left
        alone). An expire-now ``ttl`` deletes the key if its value is still the one read.
        """
        key = _check_key(key)
        seconds = self._ttl(ttl)
        await self._ready()
        with self._timed("touch"):
            return await self._renew(key, seconds)

    async def expire(self, key: str, ttl: float | timedelta | None) -> bool:
        """Like :meth:`touch` with an explicit ``ttl`` (``None``: never expires; ``<= 0``: delete now)."""
        key = _check_key(key)
        seconds = _check_ttl(ttl)
        await self._ready()
        with self._timed("expire"):
            return await self._renew(key, seconds)

    async def _renew(self, key: str, seconds: float | None) -> bool:
        store = self._store
        data_key = store.data_key(key)

        async def vdel(raw: bytes) -> bool:
            async def op(token: HybridLogicalClock | None) -> VDeleteResult:
                return await store.delete_if(key, raw, fencing_token=token)

            return await self._fenced(key, op) is VDeleteResult.DELETED

        if _expire_now(seconds):
            entry = await store.read(key, fresh=True)
            if entry.raw is None:
                return False
            deleted = await vdel(entry.raw)
            if deleted:
                self._stats.count(deletes=1)
            return deleted

        # Watch first, then read: every change after the GET is notified, so after our SET NEX we can tell
        # whether a DELETE came in between (the NEX then re-created the key instead of renewing it).
        events: list[KeyEvent] = []
        caught_up = asyncio.Event()
        ours: list[HybridLogicalClock] = []

        def on_event(event: KeyEvent) -> None:
            events.append(event)
            if ours and (event.synthetic or event.version is None or event.version >= ours[0]):
                caught_up.set()

        sub = await store.client.subscribe_key(data_key, on_event)
        try:
            entry = await store.read(key, fresh=True)
            if entry.raw is None:
                return False
            raw: bytes = entry.raw

            async def nex(token: HybridLogicalClock | None) -> SetResult:
                return await store.client.set(
                    data_key, raw, condition=SetCondition.NEX, ttl=seconds, fencing_token=token
                )

            result = await self._fenced(key, nex)
            if store.cache is not None:
                store.cache.invalidate(data_key)  # the next read learns the new version (and expiry)
            if not result.applied:
                return False  # the value changed under us: leave the newer value alone
            if result.version is None or not await self._caught_up(result.version, ours, events, caught_up):
                await vdel(raw)  # cannot tell whether we re-created a deleted key: take it back (a cache may)
                return False
            if self._recreated(events, entry.version, result.version):
                await vdel(raw)
                return False
            return True
        finally:
            await sub.close()

    async def _caught_up(
        self, version: HybridLogicalClock, ours: list[HybridLogicalClock], events: list[KeyEvent], evt: asyncio.Event
    ) -> bool:
        """Wait for the notification of our own write (the writer is notified too), which comes after every
        notification of an earlier change of the key."""
        ours.append(version)
        if any(e.synthetic or e.version is None or e.version >= version for e in events):
            return True
        try:
            async with asyncio.timeout(self._store.client.timeout or 10.0):
                await evt.wait()
        except TimeoutError:
            log.warning("no notification of our own renewal of a key arrived; undoing the renewal")
            return False
        return True

    @staticmethod
    def _recreated(events: list[KeyEvent], read: HybridLogicalClock | None, written: HybridLogicalClock) -> bool:
        """Whether the last change between our read and our write was a DELETE (or cannot be known)."""
        between: list[KeyEvent] = []
        for e in events:
            if e.synthetic or e.version is None:
                return True  # a reconnect happened meanwhile: changes may have been lost
            if (read is None or e.version > read) and e.version < written:
                between.append(e)
        if not between:
            return False
        last = max(between, key=lambda e: cast(HybridLogicalClock, e.version))
        return last.op is KeyOperation.DELETE

    # -- counters -------------------------------------------------------------------------------------

    async def incr(self, key: str, delta: int = 1) -> int | float:
        """Add ``delta`` to a stored number and return the new value, exact under any concurrency.

        Raises ``ValueError`` if the key is absent (as Django does) and ``TypeError`` if its value is not a
        number. The store cannot report a key's remaining TTL, so the counter's expiry restarts at
        ``default_ttl`` (as Django's ``BaseCache.incr`` does). Writes of the key by ``set`` etc. keep working
        (they take the same lock once the key is fenced); a plain ``set`` racing with an ``incr`` is
        ordered by the lock only once the key has been incremented.
        """
        key = _check_key(key)
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise ConfigurationError(f"delta must be an int, not {type(delta).__name__}")
        seconds = self._default_ttl
        await self._ready()
        with self._timed("incr"):
            async with self._key_lock(key) as lock:
                entry = await self._store.read(key, fresh=True)
                if entry.value is ABSENT:
                    raise ValueError(f"Key {key!r} not found")
                current: object = entry.value
                if isinstance(current, bool) or not isinstance(current, int | float):
                    raise TypeError(f"the value of {key!r} is a {type(current).__name__}, not a number")
                new = current + delta
                if _expire_now(seconds):  # a default_ttl of 0: nothing stays cached
                    await self._store.delete(key, fencing_token=lock.fencing_token)
                else:
                    await self._store.write(
                        key, cast(V, new), ttl=seconds, fencing_token=lock.fencing_token, listed=False
                    )
        self._stats.count(sets=1)
        return new

    async def decr(self, key: str, delta: int = 1) -> int | float:
        """``incr(key, -delta)``."""
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise ConfigurationError(f"delta must be an int, not {type(delta).__name__}")
        return await self.incr(key, -delta)

    # -- get_or_set -----------------------------------------------------------------------------------

    async def get_or_set(self, key: str, default_or_callable: Any, ttl: TtlArg = UNSET) -> Any:
        """The cached value; if absent, compute it once (across processes), store it, and return it.

        ``default_or_callable`` is a value, or a callable (sync or async) computing it; it runs only when
        the key is absent, in at most one caller at a time per key across every process using the
        namespace. Others wait for it (in this process on a shared future; in others on the key's lock) and
        return what it stored. If it raises, the waiters in this process get the same exception and the next
        caller tries again. The value is stored with ``NX``: a value someone else stored meanwhile is kept.
        """
        key = _check_key(key)
        seconds = self._ttl(ttl)
        await self._ready()
        with self._timed("get_or_set"):
            outcome = await self._gos_begin(key)
            if isinstance(outcome, _Found):
                return outcome.value
            try:
                value = default_or_callable() if callable(default_or_callable) else default_or_callable
                if inspect.isawaitable(value):
                    value = await value
            except BaseException as exc:
                await self._gos_abort(outcome, exc)
                raise
            await self._gos_finish(outcome, value, seconds)
            return value

    async def _gos_begin(self, key: str) -> _Found | _Lead:
        """Either the value (found, or computed by another caller) or the lead: the caller must compute and
        then call :meth:`_gos_finish` or :meth:`_gos_abort`."""
        first = True
        while True:
            flight = self._flights.get(key)
            if flight is None:
                entry = await self._store.read(key)
                if entry.value is not ABSENT:
                    if first:
                        self._stats.count(hits=1)
                    return _Found(entry.value)
                if first:
                    self._stats.count(misses=1)
                    first = False
                flight = self._flights.get(key)  # one may have started while we read
                if flight is None:
                    break
            elif first:
                self._stats.count(misses=1)
                first = False
            try:
                return _Found(await asyncio.shield(flight))
            except asyncio.CancelledError:
                if flight.cancelled() and not _being_cancelled():
                    continue  # the leader was cancelled, not us: try again (maybe as the leader)
                raise
        flight = asyncio.get_running_loop().create_future()
        self._flights[key] = flight
        try:
            lock = AsyncLeasedLock(
                self._store.client, self._lock_name("gos-lock", key), lease=self._lock_lease, auto_renew=True
            )
            await lock.acquire(timeout=self._lock_timeout)
            try:
                entry = await self._store.read(key, fresh=True)  # another process may have stored it meanwhile
            except BaseException:
                await self._release(lock)
                raise
            if entry.value is not ABSENT:
                await self._release(lock)
                self._settle(key, flight, value=entry.value)
                return _Found(entry.value)
            return _Lead(key, lock, flight)
        except BaseException as exc:
            self._settle(key, flight, error=exc)
            raise

    async def _gos_finish(self, lead: _Lead, value: Any, seconds: float | None) -> None:
        # the waiters get the value even if storing it fails; the leader's caller sees that failure
        self._settle(lead.key, lead.flight, value=value)
        try:
            if not _expire_now(seconds):
                added = await self._write(lead.key, value, seconds, condition=SetCondition.NX)
                if added.applied:
                    self._stats.count(sets=1)
        finally:
            await self._release(lead.lock)

    async def _gos_abort(self, lead: _Lead, error: BaseException) -> None:
        self._settle(lead.key, lead.flight, error=error)
        await self._release(lead.lock)

    def _settle(
        self, key: str, flight: asyncio.Future[Any], *, value: Any = None, error: BaseException | None = None
    ) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if flight.done():
            return
        if isinstance(error, asyncio.CancelledError):
            flight.cancel()
        elif error is not None:
            flight.set_exception(error)
            flight.exception()  # retrieved: no "never retrieved" warning when nobody waited
        else:
            flight.set_result(value)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


class SyncStateStoreCache(Generic[V]):
    """The blocking twin of :class:`StateStoreCache`, for Django, Flask and other threaded code.

    Example:
        >>> with SyncStateStoreCache.connect("127.0.0.1", 1883, namespace="web") as cache:  # doctest: +SKIP
        ...     cache.set("greeting", "hello", ttl=60)
        ...     cache.get_or_set("report", build_report)   # build_report runs in this thread, once
        ...     cache.add("hits", 0, ttl=None)                 # create the counter once
        ...     cache.incr("hits")

    The async cache runs on the background event-loop thread (``_sync.get_loop_thread()``). With a local
    cache, a ``get`` that hits is answered in the calling thread without touching that loop. The callable of
    :meth:`get_or_set` runs in the calling thread (where a Django request's database connection lives), not
    on the loop. Takes the arguments of :class:`StateStoreCache`, with a :class:`StateStoreClient`.
    """

    def __init__(
        self,
        client: StateStoreClient,
        *,
        namespace: str = "cache",
        codec: Codec[V] | str | None = None,
        default_ttl: float | timedelta | None = DEFAULT_TTL,
        local_cache_size: int = 0,
        index: bool = True,
        lock_lease: float = 10.0,
        lock_timeout: float | None = 30.0,
        max_in_flight: int = 256,
        clock: Callable[[], float] = time.monotonic,
        _owns_client: bool = False,
    ) -> None:
        self._client = client
        self._portal = get_loop_thread()
        self._async: StateStoreCache[V] = StateStoreCache(
            client.async_client,
            namespace=namespace,
            codec=codec,
            default_ttl=default_ttl,
            local_cache_size=local_cache_size,
            index=index,
            lock_lease=lock_lease,
            lock_timeout=lock_timeout,
            max_in_flight=max_in_flight,
            clock=clock,
        )
        self._owns_client = _owns_client
        self._clock = clock
        self._run(self._async.open())

    @classmethod
    def connect(
        cls,
        host: str = "127.0.0.1",
        port: int = 1883,
        *,
        namespace: str = "cache",
        codec: Codec[Any] | str | None = None,
        default_ttl: float | timedelta | None = DEFAULT_TTL,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        tls: TlsSettings | None = None,
        local_cache_size: int = 0,
    ) -> SyncStateStoreCache[Any]:
        """Connect a client of its own (closed with the cache) and open the cache."""
        client = StateStoreClient(host, port, client_id=client_id, username=username, password=password, tls=tls)
        client.connect()
        try:
            return cls(
                client,
                namespace=namespace,
                codec=codec,
                default_ttl=default_ttl,
                local_cache_size=local_cache_size,
                _owns_client=True,
            )
        except BaseException:
            client.close()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._portal.run(coro)

    @property
    def async_cache(self) -> StateStoreCache[V]:
        """The async cache this facade drives (it lives on the background loop thread)."""
        return self._async

    @property
    def client(self) -> StateStoreClient:
        return self._client

    @property
    def namespace(self) -> str:
        return self._async.namespace

    @property
    def default_ttl(self) -> float | None:
        return self._async.default_ttl

    @property
    def local_cache(self) -> LocalCache[V] | None:
        return self._async.local_cache

    def __repr__(self) -> str:
        return repr(self._async).replace("StateStoreCache", "SyncStateStoreCache", 1)

    def stats(self) -> StateStoreCacheStats:
        return self._async.stats()

    # -- lifecycle ------------------------------------------------------------------------------------

    def open(self) -> SyncStateStoreCache[V]:
        """Open the cache (the constructor already did; safe to call again)."""
        self._run(self._async.open())
        return self

    def close(self) -> None:
        self._run(self._async.close())
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> SyncStateStoreCache[V]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the cache-hit fast path, in the calling thread --------------------------------------------------

    def _local_hit(self, key: str) -> CachedEntry[V] | None:
        store = self._async._store
        if store.cache is None:
            return None
        return store.cached(store.data_key(key))

    # -- reads ----------------------------------------------------------------------------------------

    @overload
    def get(self, key: str) -> V | None: ...

    @overload
    def get(self, key: str, default: D) -> V | D: ...

    def get(self, key: str, default: Any = None) -> Any:
        key = _check_key(key)
        started = self._clock()
        hit = self._local_hit(key)
        if hit is None:
            return self._run(self._async.get(key, default))
        stats = self._async._stats
        stats.observe("get", self._clock() - started)
        if hit.value is ABSENT:
            stats.count(misses=1)
            return default
        stats.count(hits=1)
        return hit.value

    def exists(self, key: str) -> bool:
        key = _check_key(key)
        started = self._clock()
        hit = self._local_hit(key)
        if hit is None:
            return self._run(self._async.exists(key))
        self._async._stats.observe("exists", self._clock() - started)
        return hit.value is not ABSENT

    def get_many(self, keys: Iterable[str]) -> dict[str, V]:
        return self._run(self._async.get_many(keys))

    # -- writes ---------------------------------------------------------------------------------------

    def set(self, key: str, value: V, ttl: TtlArg = UNSET) -> None:
        self._run(self._async.set(key, value, ttl))

    def add(self, key: str, value: V, ttl: TtlArg = UNSET) -> bool:
        return self._run(self._async.add(key, value, ttl))

    def set_many(self, mapping: Mapping[str, V], ttl: TtlArg = UNSET) -> list[str]:
        return self._run(self._async.set_many(mapping, ttl))

    def delete(self, key: str) -> bool:
        return self._run(self._async.delete(key))

    def delete_many(self, keys: Iterable[str]) -> int:
        return self._run(self._async.delete_many(keys))

    def clear(self) -> int:
        return self._run(self._async.clear())

    def touch(self, key: str, ttl: TtlArg = UNSET) -> bool:
        return self._run(self._async.touch(key, ttl))

    def expire(self, key: str, ttl: float | timedelta | None) -> bool:
        return self._run(self._async.expire(key, ttl))

    def incr(self, key: str, delta: int = 1) -> int | float:
        return self._run(self._async.incr(key, delta))

    def decr(self, key: str, delta: int = 1) -> int | float:
        return self._run(self._async.decr(key, delta))

    def get_or_set(self, key: str, default_or_callable: Any, ttl: TtlArg = UNSET) -> Any:
        """Like the async twin; a callable runs in the calling thread (an async one on the loop thread)."""
        key = _check_key(key)
        seconds = self._async._ttl(ttl)
        started = self._clock()
        try:
            hit = self._local_hit(key)
            if hit is not None and hit.value is not ABSENT:
                self._async._stats.count(hits=1)
                return hit.value
            outcome = self._run(self._start_get_or_set(key))
            if isinstance(outcome, _Found):
                return outcome.value
            try:
                value = default_or_callable() if callable(default_or_callable) else default_or_callable
                if inspect.isawaitable(value):
                    value = self._run(_awaited(value))
            except BaseException as exc:
                self._run(self._async._gos_abort(outcome, exc))
                raise
            self._run(self._async._gos_finish(outcome, value, seconds))
            return value
        finally:
            self._async._stats.observe("get_or_set", self._clock() - started)

    async def _start_get_or_set(self, key: str) -> _Found | _Lead:
        await self._async._ready()
        return await self._async._gos_begin(key)
