"""``StateStoreDict``, a ``MutableMapping`` over one namespace, and its async twin ``AsyncStateStoreDict``.

A network failure raises a ``TransportError``, never ``KeyError`` (docs/guide/dict.md).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import AsyncIterator, Callable, ItemsView, Iterator, Mapping, MutableMapping, ValuesView
from functools import partial
from typing import Any, Generic, TypeVar, overload

from .._blocking import BlockingTwin, SharesCore
from .._keys import is_text_key, text_key
from .._namespace.fanout import gather_bounded
from .._namespace.key_index import KeyIndex
from .._namespace.key_layout import KeyLayout
from .._namespace.store import Encoded, NamespaceStore, StoreEntry
from .._protocol.commands import SetCondition, VDeleteResult
from .._protocol.hlc import HybridLogicalClock
from ..client._client import (
    DEFAULT_BROKER_URL,
    AsyncStateStoreClient,
    Broker,
    Connecting,
    StateStoreClient,
    connect_blocking_face,
)
from ..codecs import Codec, JsonCodec, get_codec
from ..errors import StateStoreError
from ..local_cache import ABSENT, DEFAULT_MAX_STALENESS, CachedEntry, LocalCache
from ..lock import AsyncLeasedLock, LeasedLock
from ._changes import (
    DEFAULT_CHANGES_MAXSIZE,
    DEFAULT_SCAN_INTERVAL,
    AsyncChangeStream,
    Callback,
    ChangeStream,
    feed_of,
    stop_feed,
)
from ._listing import ListingMode, NamespaceListing, check_listing

__all__ = ["AsyncStateStoreDict", "StateStoreDict"]

V = TypeVar("V")
D = TypeVar("D")
T = TypeVar("T")

#: The most requests one fan-out (``update``, ``clear``) keeps in flight: a key costs up to two requests
#: (KEYNOTIFY, then SET) and one notification (see :mod:`sskv_mapping._namespace.fanout`).
_MAX_FAN_OUT = 64


_NO_DEFAULT: Any = object()


class _LiveItems(ItemsView[str, V]):
    """``d.items()``: each iteration lists the namespace once and yields the pairs that still exist (a key deleted by
    anyone between the listing and its read is skipped, as ``copy()`` does). The ``MutableMapping`` view read each
    listed key with ``d[key]`` and raised ``KeyError`` for one gone meanwhile."""

    def __init__(self, mapping: StateStoreDict[V], pairs: Callable[[], list[tuple[str, V]]]) -> None:
        super().__init__(mapping)
        self._pairs = pairs

    def __iter__(self) -> Iterator[tuple[str, V]]:
        return iter(self._pairs())


class _LiveValues(ValuesView[V]):
    """``d.values()``: like :class:`_LiveItems`, the values of the pairs that still exist."""

    def __init__(self, mapping: StateStoreDict[V], pairs: Callable[[], list[tuple[str, V]]]) -> None:
        super().__init__(mapping)
        self._pairs = pairs

    def __iter__(self) -> Iterator[V]:
        return iter([v for _, v in self._pairs()])

    def __contains__(self, value: object) -> bool:
        # the ValuesView's own reads d[key] for each listed key: a key deleted meanwhile would raise KeyError
        return any(v is value or v == value for v in self)


def _no_cache(key: object) -> None:
    return None


def _pairs(other: Any, kwargs: Mapping[str, T]) -> list[tuple[str, T]]:
    """``dict.update``'s arguments as a list of pairs."""
    pairs: list[tuple[str, T]] = []
    if isinstance(other, Mapping):
        pairs.extend((k, other[k]) for k in other)
    elif hasattr(other, "keys"):
        pairs.extend((k, other[k]) for k in other.keys())  # noqa: SIM118 - a duck-typed mapping
    else:
        for item in other:
            k, v = item
            pairs.append((k, v))
    pairs.extend(kwargs.items())
    return pairs


class _DictCore(Generic[V]):
    """What both twins of one dict (or of one fenced view) share (httpx's ``BaseClient`` idea): the store, the local
    cache's one-call reader, the fencing token of a fenced view, and the writes. A value may arrive encoded already
    (the blocking twin encodes it in its caller's thread: :meth:`encoded`), so every write takes ``V | Encoded[V]``.
    """

    def __init__(self, store: NamespaceStore[V], fence: Callable[[], HybridLogicalClock] | None = None) -> None:
        self.store = store
        cache = store.cache
        #: ``d[key]`` from the local cache alone: its entry (``value`` is ``ABSENT`` for a key known absent), or
        #: ``None`` when the cache cannot answer. Thread-safe, not async, never a round trip: one call into the
        #: local cache (a dict's key prefix never changes), how the blocking twin serves a hit in its caller's thread.
        self.hit: Callable[[object], CachedEntry[V] | None] = _no_cache if cache is None else cache.reader(store.prefix)
        self._fence = fence

    def fenced(self, fence: Callable[[], HybridLogicalClock]) -> _DictCore[V]:
        """This core with every write carrying ``fence()``'s token."""
        return _DictCore(self.store, fence)

    def token(self) -> HybridLogicalClock | None:
        return self._fence() if self._fence is not None else None

    def encoded(self, key: str, value: V) -> Encoded[V]:
        """``value`` encoded now, in the calling thread; raises like the write would."""
        text_key(key)
        return self.store.encoded(key, value)

    async def set(self, key: str, value: V | Encoded[V], ttl: float | None) -> HybridLogicalClock | None:
        text_key(key)
        result = await self.store.write(key, value, ttl=ttl, fencing_token=self.token())
        return result.version

    async def setdefault(self, key: str, default: V | Encoded[V]) -> V:
        text_key(key)
        while True:
            result = await self.store.write(key, default, condition=SetCondition.NX, fencing_token=self.token())
            if result.applied:
                return default.value if isinstance(default, Encoded) else default
            entry = await self.store.read(key, fresh=True)
            if entry.value is not ABSENT:
                value: V = entry.value
                return value
            # it was deleted between our NX and our read: try again

    async def update(self, pairs: list[tuple[str, V | Encoded[V]]]) -> None:
        store = self.store
        for k, v in pairs:  # check everything before sending anything: all of it is written or none
            text_key(k)
            store.check_size(k, v.raw if isinstance(v, Encoded) else store.encode(k, v))
        if store.index is not None:
            await store.index.add((k, None) for k, _ in pairs)
        await gather_bounded((self.set(k, v, None) for k, v in pairs), _MAX_FAN_OUT)


class AsyncStateStoreDict(SharesCore[_DictCore[V]]):
    """The async twin of :class:`StateStoreDict`: the same operations as coroutines.

    Example:
        >>> async def main() -> None:  # doctest: +SKIP
        ...     async with await AsyncStateStoreDict.connect("mqtt://127.0.0.1:1883", namespace="config") as d:
        ...         await d.set("feature.x", True)
        ...         print(await d.get("feature.x"), await d.len())
    """

    def __init__(
        self,
        client: AsyncStateStoreClient,
        *,
        namespace: str = "default",
        codec: Codec[V] | str | None = None,
        local_cache_size: int = 10_000,
        cache_ttl: float | None = None,
        stale_while_disconnected: bool = False,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        listing: ListingMode = "auto",
        monotonic: Callable[[], float] = time.monotonic,
        _owns_client: bool = False,
    ) -> None:
        mode = check_listing(listing)
        resolved: Codec[Any] = JsonCodec() if codec is None else get_codec(codec)
        cache: LocalCache[V] | None = None
        if local_cache_size > 0:
            cache = LocalCache(
                maxsize=local_cache_size,
                ttl=cache_ttl,
                monotonic=monotonic,
                stale_while_disconnected=stale_while_disconnected,
                max_staleness=max_staleness,
            )

        def index(store: NamespaceStore[V]) -> KeyIndex:
            return NamespaceListing(client, KeyLayout(namespace), store.data_key, mode=mode)

        self._store: NamespaceStore[V] = NamespaceStore(
            client, namespace, resolved, cache=cache, index=index, clock=monotonic
        )
        self._core = _DictCore(self._store)
        self._owns_client = _owns_client

    @classmethod
    def connect(
        cls,
        broker: Broker = DEFAULT_BROKER_URL,
        *,
        namespace: str = "default",
        codec: Codec[Any] | str | None = None,
        local_cache_size: int = 10_000,
        stale_while_disconnected: bool = False,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        listing: ListingMode = "auto",
        **client_options: Any,
    ) -> Connecting[AsyncStateStoreDict[Any]]:
        """Connect a client of its own and open the namespace (closed with the dict).

        ``async with AsyncStateStoreDict.connect(url, ...) as d:`` (closed at the block's end), or
        ``d = await AsyncStateStoreDict.connect(url, ...)`` (then ``await d.close()``).

        Args:
            broker: where to connect: a broker URL (``mqtt://host:port``, ``mqtts://`` for TLS), an Azure IoT
                Operations connection string, ``"env:"`` (the ``AIO_*`` variables), or a
                :class:`ConnectionSettings`.
            client_options: the client's arguments (``timeout``: seconds per request, ``None`` forever;
                ``client_id``, ``username``, ``password``, ``tls``, ``sat_token_file``, ``reconnect``,
                ``max_in_flight``...): see :class:`AsyncStateStoreClient`. Connection options override what
                ``broker`` says.

        The other arguments are the dict's own, as in the constructor.
        """
        return Connecting(
            cls,
            broker,
            client_options,
            dict(
                namespace=namespace,
                codec=codec,
                local_cache_size=local_cache_size,
                stale_while_disconnected=stale_while_disconnected,
                max_staleness=max_staleness,
                listing=listing,
            ),
        )

    @property
    def namespace(self) -> str:
        """The store namespace: keys are stored as ``<namespace>/<key>``."""
        return self._store.namespace

    @property
    def client(self) -> AsyncStateStoreClient:
        """The client the dict sends its requests through."""
        return self._store.client

    @property
    def codec(self) -> Codec[V]:
        """The codec values go through."""
        return self._store.codec

    @property
    def local_cache(self) -> LocalCache[V] | None:
        """The in-process cache kept current by KEYNOTIFY; ``None`` when ``local_cache_size=0``."""
        return self._store.cache

    async def open(self) -> AsyncStateStoreDict[V]:
        """Start watching the namespace index (done by ``async with`` and :meth:`connect`)."""
        await self._store.start()
        return self

    async def close(self) -> None:
        """Stop the watches; close the client too if this dict created it."""
        await stop_feed(self._store)
        await self._store.close()
        if self._owns_client:
            await self._store.client.close()

    async def __aenter__(self) -> AsyncStateStoreDict[V]:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncStateStoreDict namespace={self.namespace!r} codec={self.codec!r}>"

    # -- reads --------------------------------------------------------------------------------------------

    async def getitem(self, key: str) -> V:
        """``d[key]``: the value, or ``KeyError``."""
        if not is_text_key(key):
            raise KeyError(key)
        store = self._store
        value = await store.value_of(store.prefix + key.encode())
        if value is ABSENT:
            raise KeyError(key)
        return value

    @overload
    async def get(self, key: str) -> V | None: ...

    @overload
    async def get(self, key: str, default: D) -> V | D: ...

    async def get(self, key: str, default: Any = None) -> Any:
        """``d.get(key, default)``; a network failure raises instead of returning the default."""
        # getitem's work in this coroutine (one per read), an absent key without a KeyError raised and caught
        if (type(key) is not str or not key.isascii() or not key) and not is_text_key(key):
            return default
        store = self._store
        value = await store.value_of(store.prefix + key.encode())  # a checked key encodes as UTF-8
        return default if value is ABSENT else value

    async def contains(self, key: object) -> bool:
        """``key in d``."""
        if not is_text_key(key):
            return False
        assert isinstance(key, str)
        return (await self._store.read(key)).value is not ABSENT

    async def entry(self, key: str) -> StoreEntry[V]:
        """Value, version and the fencing token we wrote it with (if any); ``KeyError`` if absent."""
        if not is_text_key(key):
            raise KeyError(key)
        e = await self._store.read(key)
        if e.value is ABSENT:
            raise KeyError(key)
        return StoreEntry(key, e.value, e.version, e.fence)

    async def keys(self) -> list[str]:
        """The keys that exist now, oldest first, from the key index (no read of the values)."""
        return await self._store.live_keys()

    async def values(self) -> list[V]:
        """Every value of the namespace (a listing, then each value; local-cache hits need no request)."""
        return [v for _, v in await self.items()]

    async def items(self) -> list[tuple[str, V]]:
        """Every ``(key, value)`` pair of the namespace (a listing, then each value)."""
        pairs: list[tuple[str, V]] = []
        for k, e in await self._store.live_items():
            if e.value is not ABSENT:  # live_items filtered absences already; this narrows the type
                pairs.append((k, e.value))
        return pairs

    async def len(self) -> int:
        """``len(d)``: the number of keys that exist now, from the key index (no read of the values)."""
        return len(await self._store.live_keys())

    async def copy(self) -> dict[str, V]:
        """A plain ``dict`` snapshot."""
        return dict(await self.items())

    async def equals(self, other: object) -> bool:
        """``d == other`` for a mapping ``other``."""
        if isinstance(other, AsyncStateStoreDict):
            other = await other.copy()
        if not isinstance(other, Mapping):
            return False
        return await self.copy() == dict(other)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[str]:
        for key in await self.keys():
            yield key

    # -- writes -------------------------------------------------------------------------------------------

    async def set(self, key: str, value: V, *, ttl: float | None = None) -> HybridLogicalClock | None:
        """``d[key] = value`` (optionally expiring after ``ttl`` seconds); returns the new version."""
        return await self._core.set(key, value, ttl)

    async def delitem(self, key: str) -> None:
        """``del d[key]``: ``KeyError`` if absent."""
        if not is_text_key(key) or not await self._store.delete(key, fencing_token=self._core.token()):
            raise KeyError(key)

    async def setdefault(self, key: str, default: V = None) -> V:  # type: ignore[assignment]
        """Atomic across processes: ``SET NX``; returns the value now stored."""
        return await self._core.setdefault(key, default)

    async def pop(self, key: str, default: Any = _NO_DEFAULT) -> Any:
        """Remove and return; uses VDEL so a value another process just wrote is never deleted."""
        if not is_text_key(key):
            if default is _NO_DEFAULT:
                raise KeyError(key)
            return default
        while True:
            entry = await self._store.read(key, fresh=True)
            if entry.value is ABSENT:
                if default is _NO_DEFAULT:
                    raise KeyError(key)
                return default
            assert entry.raw is not None
            result = await self._store.delete_if(key, entry.raw, fencing_token=self._core.token())
            if result is VDeleteResult.DELETED:
                return entry.value
            # changed (or deleted) under us: read again and decide on the new state

    async def popitem(self) -> tuple[str, V]:
        """Remove and return a pair (the most recently listed of one index shard); ``KeyError`` if empty.

        The key comes from what this process knows of the listing already (no full re-read): its cost does not
        grow with the namespace. A key another process popped first is skipped, and the next one tried."""
        index = self._store.index
        if index is None:
            raise KeyError("popitem(): this namespace keeps no listing")
        tried: list[str] = []
        while True:
            key = await index.candidate(tried)
            if key is None:
                if tried:
                    await index.prune(tried)  # entries left dangling by a crash, once past the grace period
                raise KeyError("popitem(): dictionary is empty")
            value = await self.pop(key, ABSENT)
            if value is not ABSENT:
                return key, value
            tried.append(key)

    async def update(self, other: Any = (), /, **kwargs: V) -> None:
        """``d.update(mapping | iterable of pairs, **kwargs)``; the writes run concurrently.

        Every key and value is encoded and checked against the size limits first: one over its limit raises
        :class:`~sskv_mapping.errors.ValueTooLargeError` and nothing is written."""
        await self._core.update(list(_pairs(other, kwargs)))

    async def clear(self) -> None:
        """Delete every key of the namespace."""
        keys = await self._store.listed_keys(refresh=True)
        token = self._core.token()
        delete = partial(self._store.client.delete, fencing_token=token)
        await gather_bounded((delete(self._store.data_key(k)) for k in keys), _MAX_FAN_OUT)
        if self._store.cache is not None:
            for k in keys:
                self._store.cache.invalidate(self._store.data_key(k))
        if self._store.index is not None:
            await self._store.index.remove(keys)

    # -- changes ------------------------------------------------------------------------------------------

    def changes(
        self, *, maxsize: int = DEFAULT_CHANGES_MAXSIZE, scan_interval: float = DEFAULT_SCAN_INTERVAL
    ) -> AsyncChangeStream[V]:
        """The namespace's changes, decoded: ``async with d.changes() as changes: async for change in changes:``.

        Every key is watched: those listed when the stream starts and those added later (told by the index's
        notifications, or found by a SCAN every ``scan_interval`` seconds where SCAN is the listing). Per key in
        version order, each change at most once, the latest value after every reconnect; past ``maxsize`` waiting
        changes the stream keeps each key's latest only and counts what it skipped (:class:`AsyncChangeStream`)."""
        return AsyncChangeStream(feed_of(self._store), maxsize=maxsize, scan_interval=scan_interval)

    async def on_change(
        self,
        fn: Callback,
        *,
        maxsize: int = DEFAULT_CHANGES_MAXSIZE,
        scan_interval: float = DEFAULT_SCAN_INTERVAL,
    ) -> AsyncChangeStream[V]:
        """Call ``fn(change)`` (a function or a coroutine function, on this loop) for each change, one at a time, as
        :meth:`changes` yields them; returns the started stream, whose ``aclose()`` stops it."""
        stream: AsyncChangeStream[V] = AsyncChangeStream(
            feed_of(self._store), maxsize=maxsize, scan_interval=scan_interval, callback=fn
        )
        return await stream.start()

    def fenced(self, lock: AsyncLeasedLock) -> AsyncStateStoreDict[V]:
        """A view whose every write carries ``lock``'s current fencing token (``LockError`` if not held)."""
        view: AsyncStateStoreDict[V] = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._owns_client = False
        view._core = self._core.fenced(lambda: lock.fencing_token)
        return view


class StateStoreDict(BlockingTwin, SharesCore[_DictCore[V]], MutableMapping[str, V]):
    """A ``dict`` backed by the state store: one namespace, shared by every process that opens it.

    Example:
        >>> with StateStoreDict.connect("mqtt://127.0.0.1:1883", namespace="config") as config:  # doctest: +SKIP
        ...     config["feature.x"] = True
        ...     config.setdefault("retries", 3)      # atomic across processes
        ...     print(dict(config), config.entry("retries").version)

    Reads come from a local cache that the store's notifications keep current, so another process's
    change is seen within milliseconds and a hit costs about a microsecond. Values go through ``codec``
    (JSON by default). Values returned from the cache are shared objects: treat them as read-only.
    """

    def __init__(
        self,
        client: StateStoreClient,
        *,
        namespace: str = "default",
        codec: Codec[V] | str | None = None,
        local_cache_size: int = 10_000,
        cache_ttl: float | None = None,
        stale_while_disconnected: bool = False,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        listing: ListingMode = "auto",
        monotonic: Callable[[], float] = time.monotonic,
        _owns_client: bool = False,
    ) -> None:
        self._client = client
        super().__init__()
        self._async: AsyncStateStoreDict[V] = AsyncStateStoreDict(
            client.async_client,
            namespace=namespace,
            codec=codec,
            local_cache_size=local_cache_size,
            cache_ttl=cache_ttl,
            stale_while_disconnected=stale_while_disconnected,
            max_staleness=max_staleness,
            listing=listing,
            monotonic=monotonic,
        )
        self._share_core(self._async)
        self._owns_client = _owns_client
        # the hit path of every d[key], bound once: the local cache's one-call reader (no cache: nothing to peek)
        self._peek = self._core.hit
        self._run(self._async.open())

    @classmethod
    def connect(
        cls,
        broker: Broker = DEFAULT_BROKER_URL,
        *,
        namespace: str = "default",
        codec: Codec[Any] | str | None = None,
        local_cache_size: int = 10_000,
        stale_while_disconnected: bool = False,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        listing: ListingMode = "auto",
        **client_options: Any,
    ) -> StateStoreDict[Any]:
        """The blocking :meth:`AsyncStateStoreDict.connect` (same arguments): the dict, open, on a client of its own
        (closed with the dict)."""
        return connect_blocking_face(
            cls,
            broker,
            client_options,
            namespace=namespace,
            codec=codec,
            local_cache_size=local_cache_size,
            stale_while_disconnected=stale_while_disconnected,
            max_staleness=max_staleness,
            listing=listing,
        )

    @property
    def namespace(self) -> str:
        """The store namespace: keys are stored as ``<namespace>/<key>``."""
        return self._async.namespace

    @property
    def client(self) -> StateStoreClient:
        """The blocking client the dict sends its requests through."""
        return self._client

    @property
    def async_dict(self) -> AsyncStateStoreDict[V]:
        """The async dict this facade drives (it lives on the background loop thread)."""
        return self._async

    @property
    def local_cache(self) -> LocalCache[V] | None:
        """The in-process cache kept current by KEYNOTIFY; ``None`` when ``local_cache_size=0``."""
        return self._async.local_cache

    def open(self) -> StateStoreDict[V]:
        """Start watching the namespace index (the constructor already did; safe to call again)."""
        self._run(self._async.open())
        return self

    def close(self) -> None:
        self._run(self._async.close())
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> StateStoreDict[V]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads: the cache-hit fast path runs in the calling thread ---------------------------------------

    def __getitem__(self, key: str) -> V:
        hit = self._peek(key)
        if hit is not None:
            value = hit.value
            if value is ABSENT:
                raise KeyError(key)
            return value
        return self._run(self._async.getitem(key))

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        # a snapshot: unlike a dict, other processes may change the namespace while we iterate
        return iter(self._run(self._async.keys()))

    def items(self) -> ItemsView[str, V]:
        """A view of the pairs; each iteration reads the namespace afresh and skips keys deleted meanwhile."""
        return _LiveItems(self, self._live_pairs)

    def values(self) -> ValuesView[V]:
        """A view of the values; each iteration reads the namespace afresh and skips keys deleted meanwhile."""
        return _LiveValues(self, self._live_pairs)

    def _live_pairs(self) -> list[tuple[str, V]]:
        # One listing; local-cache hits in this thread (as d[key]: a hit costs no trip to the loop), the misses
        # read together on the loop (bounded); a key absent by then -- deleted meanwhile -- is skipped.
        keys = self._run(self._async.keys())
        peek = self._peek
        pairs: list[tuple[str, Any]] = []
        missed: list[str] = []
        for key in keys:
            hit = peek(key)
            if hit is None:
                missed.append(key)
                pairs.append((key, _NO_DEFAULT))  # its place in the listing's order
            elif hit.value is not ABSENT:
                pairs.append((key, hit.value))
        if not missed:
            return pairs
        read = self._run(gather_bounded((self._async.get(k, _NO_DEFAULT) for k in missed), _MAX_FAN_OUT))
        values = dict(zip(missed, read, strict=True))
        return [
            (k, values[k] if v is _NO_DEFAULT else v)
            for k, v in pairs
            if v is not _NO_DEFAULT or values[k] is not _NO_DEFAULT
        ]

    def __len__(self) -> int:
        return self._run(self._async.len())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StateStoreDict):
            other = other.copy()
        if not isinstance(other, Mapping):
            return NotImplemented
        return self.copy() == dict(other)

    __hash__ = None  # type: ignore[assignment]  # like dict: mutable, unhashable

    def __repr__(self) -> str:
        try:
            return repr(self.copy())
        except StateStoreError as exc:
            return f"<StateStoreDict namespace={self.namespace!r} (unavailable: {type(exc).__name__})>"

    def entry(self, key: str) -> StoreEntry[V]:
        """Value, version (HLC) and the fencing token this client wrote it with, if any."""
        return self._run(self._async.entry(key))

    def copy(self) -> dict[str, V]:
        """A plain ``dict`` snapshot (like ``dict.copy``, the result is a ``dict``)."""
        return self._run(self._async.copy())

    # -- writes -------------------------------------------------------------------------------------------

    # Values are encoded here, in the calling thread; only bytes cross to the loop thread.

    def __setitem__(self, key: str, value: V) -> None:
        self._run(self._core.set(key, self._core.encoded(key, value), None))

    def set(self, key: str, value: V, *, ttl: float | None = None) -> HybridLogicalClock | None:
        """``d[key] = value`` with an optional ``ttl`` in seconds; returns the new version."""
        return self._run(self._core.set(key, self._core.encoded(key, value), ttl))

    def __delitem__(self, key: str) -> None:
        self._run(self._async.delitem(key))

    def setdefault(self, key: str, default: V = None) -> V:  # type: ignore[assignment]
        return self._run(self._core.setdefault(key, self._core.encoded(key, default)))

    def pop(self, key: str, default: Any = _NO_DEFAULT) -> Any:
        return self._run(self._async.pop(key, default))

    def popitem(self) -> tuple[str, V]:
        return self._run(self._async.popitem())

    def update(self, other: Any = (), /, **kwargs: V) -> None:
        core = self._core
        pairs = _pairs(other, kwargs)
        self._run(core.update([(k, core.encoded(k, v)) for k, v in pairs]))

    def clear(self) -> None:
        self._run(self._async.clear())

    # -- changes ------------------------------------------------------------------------------------------

    def changes(
        self, *, maxsize: int = DEFAULT_CHANGES_MAXSIZE, scan_interval: float = DEFAULT_SCAN_INTERVAL
    ) -> ChangeStream[V]:
        """The namespace's changes, decoded: ``with d.changes() as changes: for change in changes:`` (see
        :meth:`AsyncStateStoreDict.changes`)."""
        return ChangeStream(self._async.changes(maxsize=maxsize, scan_interval=scan_interval))

    def on_change(
        self,
        fn: Callback,
        *,
        maxsize: int = DEFAULT_CHANGES_MAXSIZE,
        scan_interval: float = DEFAULT_SCAN_INTERVAL,
    ) -> ChangeStream[V]:
        """Call ``fn(change)`` for each change, one at a time, on a thread of its own (so it may use this dict);
        returns the started stream, whose ``close()`` stops it."""
        executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sskv-on-change")
        stream: AsyncChangeStream[V] = AsyncChangeStream(
            feed_of(self._async._store),  # noqa: SLF001 - the twins' one store
            maxsize=maxsize,
            scan_interval=scan_interval,
            callback=fn,
            executor=executor,
        )
        return ChangeStream(stream).start()

    def fenced(self, lock: LeasedLock) -> StateStoreDict[V]:
        """A view whose every write carries ``lock``'s fencing token."""
        view: StateStoreDict[V] = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._owns_client = False
        view._async = self._async.fenced(lock.async_lock)
        view._share_core(view._async)
        view._peek = view._core.hit
        return view
