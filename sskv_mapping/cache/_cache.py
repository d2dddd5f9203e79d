""":class:`AsyncStateStoreCache` and its blocking twin :class:`StateStoreCache`, what the adapters sit on.

What a ``ttl`` means: docs/guide/cache.md, "TTLs"; each operation costs its own round trips (docs/design/namespaces.md).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Final, Generic, TypeVar, overload

from .._blocking import BlockingTwin, SharesCore
from .._keys import text_key, text_keys
from .._namespace.fanout import gather_bounded
from .._namespace.key_layout import KeyLayout
from .._namespace.key_locks import KeyLocks
from .._namespace.store import Encoded, NamespaceStore
from .._protocol.commands import SetCondition
from .._telemetry import watch_cache
from .._ttl import TtlArg, TtlConvention, check_ttl, expire_now, translate_ttl
from ..client._client import (
    DEFAULT_BROKER_URL,
    UNSET,
    AsyncStateStoreClient,
    Broker,
    Connecting,
    StateStoreClient,
    connect_blocking_face,
)
from ..codecs import Codec, JsonCodec, get_codec
from ..errors import ClientStateError, ConfigurationError, StateStoreError
from ..local_cache import ABSENT, DEFAULT_MAX_STALENESS, CachedEntry, LocalCache
from ._counter import increment
from ._generation import NamespaceGeneration, PersistentLedger
from ._single_flight import Found, SingleFlight
from ._stats import LATENCY_BUCKETS, CacheCounters, OpLatency, StateStoreCacheStats
from ._writes import EntryWriter, Sweeper

__all__ = [
    "DEFAULT_TTL",
    "LATENCY_BUCKETS",
    "AsyncStateStoreCache",
    "OpLatency",
    "StateStoreCache",
    "StateStoreCacheStats",
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

# -- keys -------------------------------------------------------------------------------------------------


def _local_cache(size: int, monotonic: Callable[[], float], max_staleness: float | None) -> LocalCache[Any] | None:
    return LocalCache(maxsize=size, monotonic=monotonic, max_staleness=max_staleness) if size else None


def _check_options(local_cache_size: object, max_fanout: object, lock_lease: object, lock_timeout: object) -> float:
    """The cache's numeric options checked before anything is built; returns the lock lease in seconds (Django's
    adapter checks its OPTIONS here with the constructor's defaults)."""
    if isinstance(local_cache_size, bool) or not isinstance(local_cache_size, int) or local_cache_size < 0:
        raise ConfigurationError(f"local_cache_size must be an int >= 0, not {local_cache_size!r}")
    if isinstance(max_fanout, bool) or not isinstance(max_fanout, int) or max_fanout < 1:
        raise ConfigurationError(f"max_fanout must be a positive int, not {max_fanout!r}")
    lease = check_ttl(lock_lease, "lock_lease")
    if lease is None or lease <= 0:
        raise ConfigurationError(f"lock_lease must be a positive number of seconds, not {lock_lease!r}")
    if lock_timeout is not None:
        timeout = check_ttl(lock_timeout, "lock_timeout")
        if timeout is None or timeout <= 0:
            raise ConfigurationError(f"lock_timeout must be positive seconds or None, not {lock_timeout!r}")
    return lease


class _CacheCore(Generic[V]):
    """What both twins of one cache share (httpx's ``BaseClient`` idea): the store, the default TTL, the counters,
    ``get_or_set``'s flights, and the writes. A value may arrive encoded already (the blocking twin encodes it in
    its caller's thread: :meth:`encoded`), so every write takes ``V | Encoded[V]``.

    ``ready`` is awaited before each operation (the cache opens itself, or follows a new generation)."""

    def __init__(
        self,
        store: NamespaceStore[V],
        writer: EntryWriter[V],
        counters: CacheCounters,
        flight: SingleFlight,
        *,
        default_ttl: float | None,
        max_fanout: int,
        ready: Callable[[], Awaitable[None]],
    ) -> None:
        self.store = store
        self.writer = writer
        self.counters = counters
        self.flight = flight
        self.default_ttl = default_ttl
        self.max_fanout = max_fanout
        self.ready = ready

    # -- the blocking twin's steps in its caller's thread: not async, never a round trip ---------------------

    def peek(self, key: str) -> CachedEntry[V] | None:
        """``get(key)`` from the local cache alone (``value`` is ``ABSENT`` for a key known absent), or ``None``
        when it cannot answer. Thread-safe; never counted (the caller counts what it serves)."""
        return self.store.peek(key)

    def encoded(self, key: str, value: V) -> Encoded[V]:
        """``value`` encoded now, in the calling thread (framework code that may only run in the request's thread,
        e.g. a lazy Django QuerySet, is pickled there); raises like the write would."""
        return self.store.encoded(text_key(key, "cache key"), value)

    def resolve_ttl(self, ttl: TtlArg) -> float | None:
        """``ttl`` as seconds (``UNSET``: ``default_ttl``; ``None``: never; ``<= 0``: expire now)."""
        return self.default_ttl if ttl is UNSET else check_ttl(ttl)

    def raw(self, key: str, value: V | Encoded[V]) -> bytes:
        """The bytes stored for ``value`` (an encoded one's own)."""
        return value.raw if isinstance(value, Encoded) else self.store.encode(key, value)

    # -- writes -----------------------------------------------------------------------------------------------

    async def set(self, key: str, value: V | Encoded[V], ttl: TtlArg) -> None:
        key = text_key(key, "cache key")
        seconds = self.resolve_ttl(ttl)
        self.raw(key, value)  # an EncodeError before anything is sent
        await self.ready()
        with self.counters.timed("set"):
            if expire_now(seconds):
                await self.delete_key(key)
                return
            await self.writer.write(key, value, seconds)
        self.counters.count(sets=1)

    async def add(self, key: str, value: V | Encoded[V], ttl: TtlArg) -> bool:
        key = text_key(key, "cache key")
        seconds = self.resolve_ttl(ttl)
        raw = self.raw(key, value)
        await self.ready()
        with self.counters.timed("add"):
            if not expire_now(seconds):
                added = (await self.writer.write(key, value, seconds, condition=SetCondition.NX)).applied
                if added:
                    self.counters.count(sets=1)
                return added
            return await self.writer.add_expired(key, value, raw)

    async def set_many(self, mapping: Mapping[str, V | Encoded[V]], ttl: TtlArg) -> list[str]:
        if not isinstance(mapping, Mapping):
            raise ConfigurationError(f"set_many takes a mapping of key -> value, not {type(mapping).__name__}")
        pairs = [(text_key(k, "cache key"), v) for k, v in mapping.items()]
        seconds = self.resolve_ttl(ttl)
        for k, v in pairs:  # one item over a size limit: ValueTooLargeError, nothing written
            self.store.check_size(k, self.raw(k, v), None if seconds is None or expire_now(seconds) else seconds)
        await self.ready()
        with self.counters.timed("set_many"):
            if expire_now(seconds):
                await self.delete_many([k for k, _ in pairs])
                return []

            async def one(key: str, value: V | Encoded[V]) -> StateStoreError | None:
                try:
                    await self.writer.write(key, value, seconds)
                except StateStoreError as exc:
                    log.warning("set_many could not store %r: %s", key, exc)
                    return exc
                return None

            outcomes = await gather_bounded((one(k, v) for k, v in pairs), self.max_fanout)
        failed = [k for (k, _), err in zip(pairs, outcomes, strict=True) if err is not None]
        self.counters.count(sets=len(pairs) - len(failed))
        return failed

    async def delete_key(self, key: str) -> bool:
        deleted = await self.writer.delete(key)
        self.counters.count(deletes=int(deleted))  # counting nothing is a no-op
        return deleted

    async def delete_many(self, keys: list[str]) -> int:
        results = await gather_bounded((self.writer.delete(k) for k in keys), self.max_fanout)
        deleted = sum(results)
        self.counters.count(deletes=deleted)
        return deleted


class AsyncStateStoreCache(SharesCore[_CacheCore[V]]):
    """An async cache backend over one namespace of the state store, shared by every process that opens it.

    Example:
        >>> async def main(client: AsyncStateStoreClient) -> None:  # doctest: +SKIP
        ...     async with AsyncStateStoreCache(client, namespace="web", default_ttl=60) as cache:
        ...         await cache.set("page:/", "<html>…", ttl=30)
        ...         await cache.add("visits", 0, ttl=None)          # only if absent (SET NX)
        ...         await cache.incr("visits")                      # exact under concurrency
        ...         user = await cache.get_or_set("user:7", load_user, ttl=300)  # one load across processes
        ...         await cache.clear()                             # O(1): a new generation
        ...         print(cache.stats().hit_ratio)

    Args:
        client: a connected :class:`AsyncStateStoreClient` (not closed with the cache unless it made it).
        namespace: the cache's keys are ``namespace#g.<generation>/<key>``; ``clear`` empties only these.
        codec: a :class:`Codec` or its name (``"json"``, the default; ``"str"``, ``"raw"``, ``"msgpack"``).
        default_ttl: what ``ttl=UNSET`` means (seconds, a timedelta, or ``None`` for never).
        local_cache_size: keep up to this many decoded entries in process, kept current by KEYNOTIFY (a hit
            costs no round trip). Off (0) by default: each cached key then holds a KEYNOTIFY registration,
            which suits a small set of hot keys, not an open-ended key space.
        max_staleness: seconds a local entry is served after its last confirmation (:class:`LocalCache`); None: ever.
        lock_lease: lease (seconds) of the per-key locks of ``incr`` and ``get_or_set`` (the latter renews
            its lease while the value is computed), and of the generation and ledger locks.
        lock_timeout: how long to wait for such a lock before :class:`~sskv_mapping.LockError` (None: forever).
        max_fanout: the most requests ``get_many``/``set_many``/``delete_many`` keep in flight (a client's own
            ``max_in_flight=`` bounds all its requests).
        monotonic: the monotonic clock (seconds) of the latencies and the local cache; inject a fake one in tests.

    An entry without a TTL is one SET where the service answers SCAN (a ``clear`` finds it by a SCAN of the old
    generation); on a service without SCAN it is listed in the generation's ledger first (about six round trips).
    """

    def __init__(
        self,
        client: AsyncStateStoreClient,
        *,
        namespace: str = "cache",
        codec: Codec[V] | str | None = None,
        default_ttl: float | timedelta | None = DEFAULT_TTL,
        local_cache_size: int = 0,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        lock_lease: float = 10.0,
        lock_timeout: float | None = 30.0,
        max_fanout: int = 256,
        monotonic: Callable[[], float] = time.monotonic,
        _owns_client: bool = False,
    ) -> None:
        resolved: Codec[Any] = JsonCodec() if codec is None else get_codec(codec)
        default_seconds = check_ttl(default_ttl, "default_ttl")
        lease = _check_options(local_cache_size, max_fanout, lock_lease, lock_timeout)
        cache: LocalCache[V] | None = _local_cache(local_cache_size, monotonic, max_staleness)
        self._store: NamespaceStore[V] = NamespaceStore(
            client, namespace, resolved, cache=cache, index=None, clock=monotonic
        )
        keys = self._keys = KeyLayout(namespace)  # the namespace was checked by NamespaceStore
        self._generation = NamespaceGeneration(
            client, keys, on_change=self._on_generation, lease=lease, lock_timeout=lock_timeout
        )
        self._ledger = PersistentLedger(client, keys, self._generation, lease=lease, lock_timeout=lock_timeout)
        self._locks = KeyLocks(client, keys, lease=lease, timeout=lock_timeout)
        self._stats = watch_cache(self, CacheCounters(monotonic))  # OpenTelemetry reads them while the cache lives
        writer: EntryWriter[V] = EntryWriter(self._store, self._ledger, self._locks, self._prefix_of)
        self._sweeper = Sweeper(self._generation, self._ledger, writer, namespace)
        flight = SingleFlight(self._store.read, writer.store_nx, self._locks, self._stats, self._ready)
        self._core = _CacheCore(
            self._store,
            writer,
            self._stats,
            flight,
            default_ttl=default_seconds,
            max_fanout=max_fanout,
            ready=self._ready,
        )
        self._open_lock = asyncio.Lock()
        self._opened = False
        self._closed = False
        self._owns_client = _owns_client

    @classmethod
    def connect(
        cls,
        broker: Broker = DEFAULT_BROKER_URL,
        *,
        namespace: str = "cache",
        codec: Codec[Any] | str | None = None,
        default_ttl: float | timedelta | None = DEFAULT_TTL,
        local_cache_size: int = 0,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        **client_options: Any,
    ) -> Connecting[AsyncStateStoreCache[Any]]:
        """Connect a client of its own and open the cache (closed with the cache).

        ``async with AsyncStateStoreCache.connect(url, ...) as c:`` (closed at the block's end), or
        ``c = await AsyncStateStoreCache.connect(url, ...)`` (then ``await c.close()``).

        Args:
            broker: where to connect: a broker URL (``mqtt://host:port``, ``mqtts://`` for TLS), an Azure IoT
                Operations connection string, ``"env:"`` (the ``AIO_*`` variables), or a
                :class:`ConnectionSettings`.
            client_options: the client's arguments (``timeout``: seconds per request, ``None`` forever;
                ``client_id``, ``username``, ``password``, ``tls``, ``sat_token_file``, ``reconnect``,
                ``max_in_flight``...): see :class:`AsyncStateStoreClient`. Connection options override what
                ``broker`` says.

        The other arguments are the cache's own, as in the constructor.
        """
        return Connecting(
            cls,
            broker,
            client_options,
            dict(
                namespace=namespace,
                codec=codec,
                default_ttl=default_ttl,
                local_cache_size=local_cache_size,
                max_staleness=max_staleness,
            ),
        )

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
        return self._core.default_ttl

    @property
    def local_cache(self) -> LocalCache[V] | None:
        return self._store.cache

    @property
    def generation(self) -> str | None:
        """The namespace's current generation (``None`` before the cache is opened)."""
        return self._generation.current

    def __repr__(self) -> str:
        return (
            f"<AsyncStateStoreCache namespace={self.namespace!r} codec={self.codec!r} default_ttl={self.default_ttl}>"
        )

    def stats(self) -> StateStoreCacheStats:
        """A consistent snapshot of the counters and latencies."""
        return self._stats.snapshot(None if self._store.cache is None else self._store.cache.stats())

    async def data_key(self, key: str) -> bytes:
        """The store key that holds ``key`` now (in the namespace's current generation)."""
        key = text_key(key, "cache key")
        await self._ready()
        return self._store.data_key(key)

    # -- lifecycle ------------------------------------------------------------------------------------

    async def open(self) -> AsyncStateStoreCache[V]:
        """Start watching the namespace's generation and the connection (done by ``async with``,
        :meth:`connect` and, lazily, by the first operation). Resumes a sweep an earlier clear left unfinished."""
        await self._ready()
        return self

    def _on_generation(self, gen: str) -> None:
        self._store.switch_prefix(self._prefix_of(gen))

    def _prefix_of(self, gen: str) -> bytes:
        return self._keys.entry_prefix(gen)

    async def _ready(self) -> None:
        if self._closed:
            raise ClientStateError("this cache was closed")
        if not self._opened:
            async with self._open_lock:
                if not self._opened:
                    await self._store.start()
                    state = await self._generation.start()
                    self._opened = True
                    if state.retired:
                        self._sweeper.start()
                    return
        await self._generation.ensure_current()  # no round trip while its watch is live

    async def close(self) -> None:
        """Stop the watches (after a sweep in progress ends); close the client too if this cache created it.
        Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        await self._sweeper.wait()
        await self._generation.close()
        await self._store.close()
        if self._owns_client:
            await self._store.client.close()

    async def __aenter__(self) -> AsyncStateStoreCache[V]:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- reads ----------------------------------------------------------------------------------------

    @overload
    async def get(self, key: str) -> V | None: ...

    @overload
    async def get(self, key: str, default: D) -> V | D: ...

    async def get(self, key: str, default: Any = None) -> Any:
        """The value, or ``default`` if the key is absent (a stored ``None`` is a value, not a miss).

        A network failure raises a :class:`~sskv_mapping.TransportError`; it is never mistaken for a miss.
        """
        if type(key) is not str or not key.isascii() or not key:  # (an ASCII str is a text key: no call for it)
            key = text_key(key, "cache key")
        if not (self._opened and not self._closed and self._generation.live()):
            await self._ready()  # the usual case above costs no coroutine: get() is the face's hot path
        store, stats = self._store, self._stats
        started = stats.clock()  # timed as stats.timed() does, in this frame: get() is the face's hot path
        try:
            value = await store.value_of(store.prefix + key.encode())  # a checked key encodes as UTF-8
        except BaseException:
            stats.observe("get", stats.clock() - started)
            raise
        stats.looked_up("get", stats.clock() - started, value is not ABSENT)
        return default if value is ABSENT else value

    async def exists(self, key: str) -> bool:
        """Whether the key is in the cache now."""
        key = text_key(key, "cache key")
        await self._ready()
        with self._stats.timed("exists"):
            return (await self._store.read(key)).value is not ABSENT

    async def get_many(self, keys: Iterable[str]) -> dict[str, V]:
        """``{key: value}`` for the keys found (absent ones are left out); the GETs run concurrently."""
        wanted = text_keys(keys, "cache key")
        await self._ready()
        with self._stats.timed("get_many"):
            entries = await gather_bounded((self._store.read(k) for k in wanted), self._core.max_fanout)
        found: dict[str, V] = {}
        for key, entry in zip(wanted, entries, strict=True):
            if entry.value is not ABSENT:
                found[key] = entry.value
        self._stats.count(hits=len(found), misses=len(wanted) - len(found))
        return found

    # -- writes ---------------------------------------------------------------------------------------

    async def set(self, key: str, value: V, ttl: TtlArg = UNSET) -> None:
        """Store ``value``; ``ttl`` as in the module docstring (zero or negative deletes the key)."""
        await self._core.set(key, value, ttl)

    async def add(self, key: str, value: V, ttl: TtlArg = UNSET) -> bool:
        """Store ``value`` only if the key is absent (``SET NX``, atomic across processes); ``True`` if it did.

        With an expire-now ``ttl`` nothing stays stored, but the result still says whether the key was
        absent (the value is added, then deleted if still ours: Django's behaviour).
        """
        return await self._core.add(key, value, ttl)

    async def set_many(self, mapping: Mapping[str, V], ttl: TtlArg = UNSET) -> list[str]:
        """Store every pair concurrently; returns the keys that could not be stored (the service refused
        them, e.g. the key quota is full, or the connection failed before they were acknowledged).

        Every key and value is checked (and encoded) before anything is sent: a key or value over its size limit
        raises :class:`~sskv_mapping.errors.ValueTooLargeError` and nothing is written.
        """
        return await self._core.set_many(mapping, ttl)

    # -- deletes --------------------------------------------------------------------------------------

    async def delete(self, key: str) -> bool:
        """Delete the key; ``True`` if it existed."""
        key = text_key(key, "cache key")
        await self._ready()
        with self._stats.timed("delete"):
            return await self._core.delete_key(key)

    async def delete_many(self, keys: Iterable[str]) -> int:
        """Delete the keys concurrently; returns how many existed."""
        wanted = text_keys(keys, "cache key")
        await self._ready()
        with self._stats.timed("delete_many"):
            return await self._core.delete_many(wanted)

    async def clear(self) -> None:
        """Empty this namespace (and nothing else), in a constant number of round trips.

        The namespace gets a new generation: every entry written before is unreachable at once, here and (within
        milliseconds, by KEYNOTIFY) in every other process. Entries with a TTL age out by it; entries stored
        without one are deleted by a sweep this starts in the background (:meth:`sweep` waits for it).
        A write racing with ``clear`` in another process lands before or after it, never half-way.
        """
        await self._ready()
        with self._stats.timed("clear"):
            await self._generation.bump()
        self._sweeper.start()

    async def sweep(self) -> int:
        """Delete now what earlier clears left to sweep (entries without a TTL of retired generations); returns
        how many entries the ledgers listed. ``clear`` starts this in the background; call it to wait."""
        await self._ready()
        return await self._sweeper.sweep()

    # -- expiry ---------------------------------------------------------------------------------------

    async def touch(self, key: str, ttl: TtlArg = UNSET) -> bool:
        """Restart the key's expiry at ``ttl`` (default: ``default_ttl``) without changing its value.

        ``False`` if the key is absent or its value changed while we renewed it (the newer value is left
        alone). An expire-now ``ttl`` deletes the key if its value is still the one read.
        """
        key = text_key(key, "cache key")
        seconds = self._core.resolve_ttl(ttl)
        await self._ready()
        with self._stats.timed("touch"):
            return await self._renew(key, seconds)

    async def expire(self, key: str, ttl: float | timedelta | None) -> bool:
        """Like :meth:`touch` with an explicit ``ttl`` (``None``: never expires; ``<= 0``: delete now)."""
        key = text_key(key, "cache key")
        seconds = check_ttl(ttl)
        await self._ready()
        with self._stats.timed("expire"):
            return await self._renew(key, seconds)

    async def _renew(self, key: str, seconds: float | None) -> bool:
        renewed = await self._core.writer.renew(key, seconds)
        self._stats.count(deletes=int(renewed and expire_now(seconds)))  # a renewal to "expire now" deletes
        return renewed

    # -- counters -------------------------------------------------------------------------------------

    async def incr(self, key: str, delta: int = 1) -> int | float:
        """Add ``delta`` to a stored number and return the new value, exact under any concurrency.

        Raises ``ValueError`` if the key is absent (as Django does) and ``TypeError`` if its value is not a
        number. The store cannot report a key's remaining TTL, so the counter's expiry restarts at
        ``default_ttl`` (as Django's ``BaseCache.incr`` does). Writes of the key by ``set`` etc. keep working
        (they take the same lock once the key is fenced); a plain ``set`` racing with an ``incr`` is
        ordered by the lock only once the key has been incremented.
        """
        key = text_key(key, "cache key")
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise ConfigurationError(f"delta must be an int, not {type(delta).__name__}")
        await self._ready()
        with self._stats.timed("incr"):
            core = self._core
            new = await increment(self._store, self._locks, key, delta, core.default_ttl, core.writer.fenced_write)
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
        key = text_key(key, "cache key")
        seconds = self._core.resolve_ttl(ttl)
        with self._stats.timed("get_or_set"):
            return await self._core.flight.run(key, default_or_callable, seconds)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


class StateStoreCache(BlockingTwin, SharesCore[_CacheCore[V]]):
    """The blocking twin of :class:`AsyncStateStoreCache`, for Django, Flask and other threaded code.

    Example:
        >>> with StateStoreCache.connect("mqtt://127.0.0.1:1883", namespace="web") as cache:  # doctest: +SKIP
        ...     cache.set("greeting", "hello", ttl=60)
        ...     cache.get_or_set("report", build_report)   # build_report runs in this thread, once
        ...     cache.add("hits", 0, ttl=None)                 # create the counter once
        ...     cache.incr("hits")

    The async cache runs on the background event-loop thread (``_blocking.get_loop_thread()``). With a local
    cache, a ``get`` that hits is answered in the calling thread without touching that loop. The callable of
    :meth:`get_or_set` runs in the calling thread (where a Django request's database connection lives), not
    on the loop. Takes the arguments of :class:`AsyncStateStoreCache`, with a :class:`StateStoreClient`.
    """

    def __init__(
        self,
        client: StateStoreClient,
        *,
        namespace: str = "cache",
        codec: Codec[V] | str | None = None,
        default_ttl: float | timedelta | None = DEFAULT_TTL,
        local_cache_size: int = 0,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        lock_lease: float = 10.0,
        lock_timeout: float | None = 30.0,
        max_fanout: int = 256,
        monotonic: Callable[[], float] = time.monotonic,
        _owns_client: bool = False,
    ) -> None:
        super().__init__()
        self._client = client
        self._async: AsyncStateStoreCache[V] = AsyncStateStoreCache(
            client.async_client,
            namespace=namespace,
            codec=codec,
            default_ttl=default_ttl,
            local_cache_size=local_cache_size,
            max_staleness=max_staleness,
            lock_lease=lock_lease,
            lock_timeout=lock_timeout,
            max_fanout=max_fanout,
            monotonic=monotonic,
        )
        self._share_core(self._async)
        self._owns_client = _owns_client
        self._run(self._async.open())

    @classmethod
    def connect(
        cls,
        broker: Broker = DEFAULT_BROKER_URL,
        *,
        namespace: str = "cache",
        codec: Codec[Any] | str | None = None,
        default_ttl: float | timedelta | None = DEFAULT_TTL,
        local_cache_size: int = 0,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        **client_options: Any,
    ) -> StateStoreCache[Any]:
        """The blocking :meth:`AsyncStateStoreCache.connect` (same arguments): the cache, open, on a client of its own
        (closed with the cache)."""
        return connect_blocking_face(
            cls,
            broker,
            client_options,
            namespace=namespace,
            codec=codec,
            default_ttl=default_ttl,
            local_cache_size=local_cache_size,
            max_staleness=max_staleness,
        )

    @property
    def async_cache(self) -> AsyncStateStoreCache[V]:
        """The async cache this facade drives (it lives on the background loop thread)."""
        return self._async

    @property
    def client(self) -> StateStoreClient:
        """The blocking client the cache sends its requests through."""
        return self._client

    @property
    def namespace(self) -> str:
        """The store namespace; ``clear`` empties only its keys."""
        return self._async.namespace

    @property
    def default_ttl(self) -> float | None:
        return self._async.default_ttl

    @property
    def local_cache(self) -> LocalCache[V] | None:
        """The in-process cache kept current by KEYNOTIFY; ``None`` when ``local_cache_size=0``."""
        return self._async.local_cache

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncStateStoreCache", "StateStoreCache", 1)

    def stats(self) -> StateStoreCacheStats:
        return self._async.stats()

    def data_key(self, key: str) -> bytes:
        """The store key that holds ``key`` now (in the namespace's current generation)."""
        return self._run(self._async.data_key(key))

    # -- lifecycle ------------------------------------------------------------------------------------

    def open(self) -> StateStoreCache[V]:
        """Open the cache (the constructor already did; safe to call again)."""
        self._run(self._async.open())
        return self

    def close(self) -> None:
        self._run(self._async.close())
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> StateStoreCache[V]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads ----------------------------------------------------------------------------------------

    @overload
    def get(self, key: str) -> V | None: ...

    @overload
    def get(self, key: str, default: D) -> V | D: ...

    def get(self, key: str, default: Any = None) -> Any:
        key = text_key(key, "cache key")
        core = self._core
        stats = core.counters
        started = stats.clock()
        hit = core.peek(key)
        if hit is None:
            return self._run(self._async.get(key, default))
        stats.observe("get", stats.clock() - started)
        if hit.value is ABSENT:
            stats.count(misses=1)
            return default
        stats.count(hits=1)
        return hit.value

    def exists(self, key: str) -> bool:
        key = text_key(key, "cache key")
        stats = self._core.counters
        started = stats.clock()
        hit = self._core.peek(key)
        if hit is None:
            return self._run(self._async.exists(key))
        stats.observe("exists", stats.clock() - started)
        return hit.value is not ABSENT

    def get_many(self, keys: Iterable[str]) -> dict[str, V]:
        return self._run(self._async.get_many(keys))

    # -- writes ---------------------------------------------------------------------------------------

    # Values are encoded here, in the calling thread; only bytes cross to the loop thread.

    def set(self, key: str, value: V, ttl: TtlArg = UNSET) -> None:
        self._run(self._core.set(key, self._core.encoded(key, value), ttl))

    def add(self, key: str, value: V, ttl: TtlArg = UNSET) -> bool:
        return self._run(self._core.add(key, self._core.encoded(key, value), ttl))

    def set_many(self, mapping: Mapping[str, V], ttl: TtlArg = UNSET) -> list[str]:
        if not isinstance(mapping, Mapping):
            raise ConfigurationError(f"set_many takes a mapping of key -> value, not {type(mapping).__name__}")
        encoded = {k: self._core.encoded(k, v) for k, v in mapping.items()}
        return self._run(self._core.set_many(encoded, ttl))

    def delete(self, key: str) -> bool:
        return self._run(self._async.delete(key))

    def delete_many(self, keys: Iterable[str]) -> int:
        return self._run(self._async.delete_many(keys))

    def clear(self) -> None:
        self._run(self._async.clear())

    def sweep(self) -> int:
        return self._run(self._async.sweep())

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
        key = text_key(key, "cache key")
        core = self._core
        seconds = core.resolve_ttl(ttl)
        flight = core.flight
        started = core.counters.clock()
        try:
            hit = core.peek(key)
            if hit is not None and hit.value is not ABSENT:
                core.counters.count(hits=1)
                return hit.value
            outcome = self._run(flight.begin(key, caller=threading.current_thread()))
            if isinstance(outcome, Found):
                return outcome.value
            try:
                value = default_or_callable() if callable(default_or_callable) else default_or_callable
                if inspect.isawaitable(value):
                    value = self._run(_awaited(value))
            except BaseException as exc:
                self._run(flight.abort(outcome, exc))
                raise
            self._run(flight.finish(outcome, core.encoded(key, value), seconds))
            return value
        finally:
            core.counters.observe("get_or_set", core.counters.clock() - started)
