"""A Litestar ``Store`` over the state store: ``StoreRegistry``, sessions, the response cache, the rate limiter.

Usage: docs/integrations/litestar.md; its layout and expiry envelope: docs/design/architecture.md, "The adapters".
"""

from __future__ import annotations

import asyncio
import math
import re
import struct
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import timedelta
from types import TracebackType
from typing import Any, Self, TypeVar, cast

from .._transport.settings import CONNECTION_OPTIONS, DEFAULT_URL, settings_from_options
from ._common import import_extra, request_timeout

import_extra("litestar", "litestar", "litestar")

from litestar.stores.base import NamespacedStore  # noqa: E402

from .._transport.settings import ConnectionSettings  # noqa: E402
from ..cache import AsyncStateStoreCache, translate_ttl  # noqa: E402
from ..cache._cache import _check_options as check_cache_options  # noqa: E402
from ..client import AsyncStateStoreClient  # noqa: E402
from ..errors import ClientStateError, ConfigurationError, DecodeError  # noqa: E402
from ..local_cache import DEFAULT_MAX_STALENESS  # noqa: E402
from ..mapping import AsyncStateStoreDict  # noqa: E402

__all__ = ["DEFAULT_URL", "StateStoreStore"]

_NAME = re.compile(r"[A-Za-z0-9_-]+")
_HEADER = struct.Struct(">Bq")
_VERSION = 1
_CONNECTION_OPTIONS = (*CONNECTION_OPTIONS, "request_timeout")
T = TypeVar("T")


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(f"{what} must be letters, digits, '_' or '-' (got {name!r})")
    return name


def _pack(data: bytes, expires_at_ms: int | None) -> bytes:
    return _HEADER.pack(_VERSION, expires_at_ms or 0) + data


def _unpack(raw: bytes, key: str) -> tuple[bytes, int | None]:
    if len(raw) < _HEADER.size or raw[0] != _VERSION:
        raise DecodeError(f"the value of {key!r} is not a Litestar store entry (written by something else?)")
    _, expires_at_ms = _HEADER.unpack_from(raw)
    return raw[_HEADER.size :], expires_at_ms or None


class _Connection:
    """The client shared by a store and every store derived from it, and the caches opened on it."""

    def __init__(
        self,
        settings: ConnectionSettings | None,
        client: AsyncStateStoreClient | None,
        timeout: float | None,
        local_cache_size: int,
        max_staleness: float | None,
    ) -> None:
        self.settings = settings
        self.timeout = timeout
        self.local_cache_size = local_cache_size
        self.max_staleness = max_staleness
        self.given = client
        self.client: AsyncStateStoreClient | None = client
        self.generation = 0
        self.opened: list[AsyncStateStoreCache[Any] | AsyncStateStoreDict[Any]] = []
        self.users = 0
        #: the event loop the client lives on (the one the store was opened on): calls from another are sent there
        self.loop: asyncio.AbstractEventLoop | None = None

    async def open(self) -> None:
        self.users += 1
        if self.users > 1:
            return
        try:
            if self.given is None:
                assert self.settings is not None
                client = AsyncStateStoreClient(settings=self.settings, timeout=self.timeout)
                await client.connect()
                self.client = client
            self.generation += 1
            self.loop = asyncio.get_running_loop()
        except BaseException:
            self.users -= 1
            raise

    async def close(self) -> None:
        if self.users == 0:
            return
        self.users -= 1
        if self.users:
            return
        opened, self.opened = self.opened, []
        self.loop = None
        try:
            for cache in opened:
                await cache.close()
        finally:
            if self.given is None and self.client is not None:
                client, self.client = self.client, None
                await client.close()

    def require(self) -> AsyncStateStoreClient:
        if self.users == 0 or self.client is None:
            raise ClientStateError(
                "this StateStoreStore is not open: add store.lifespan to Litestar(lifespan=[...]) "
                "(or use 'async with store:')"
            )
        return self.client

    async def call(self, op: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``op()`` on the loop the client lives on: here when that is the caller's loop; else sent to it (a
        Litestar test client's app runs on a loop of its own thread) and awaited; a typed error at once when that
        loop no longer runs (never a wait for the request timeout)."""
        loop = self.loop
        if loop is None or loop is asyncio.get_running_loop():
            return await op()
        if loop.is_closed() or not loop.is_running():
            raise ClientStateError(
                "this StateStoreStore was opened on an event loop that is no longer running: open it (store.lifespan, "
                "'async with store:') on the loop that uses it"
            )
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(op(), loop))


class StateStoreStore(NamespacedStore):
    """A Litestar :class:`~litestar.stores.base.NamespacedStore` on the state store.

    Args:
        url: the broker, ``mqtt://[user[:password]@]host[:port]``, ``mqtts://...``,
            ``"env:"`` (the ``AIO_*`` environment variables) or an AIO connection string (ignored with ``client``).
        namespace: the root namespace (letters, digits, ``_``, ``-``); child namespaces are ``root.child``.
        client: an :class:`~sskv_mapping.AsyncStateStoreClient` to use (connected by its owner on the app's
            loop) instead of one the store connects in its lifespan.
        wall_clock: the wall clock (float seconds since the epoch, like :func:`time.time`) of the expiry written into
            each entry's envelope and read against it: an entry whose envelope expiry has passed by this clock is
            absent (as Litestar's memory store reads its own).
        local_cache_size: keep up to this many hot entries of each namespace in process, kept current by the
            store's notifications (0: none).
        max_staleness: serve a local entry only within this many seconds of its last confirmation (a lost
            notification leaves a value stale at most that long); ``None``: trust notifications forever.
        client_id, username, password, tls, sat_token_file, keepalive, connect_timeout: connection options.
        request_timeout: seconds to wait for each request to the store (``None``: forever; default 10).

    Example:
        >>> async with StateStoreStore("mqtt://127.0.0.1:1883", namespace="demo") as store:  # doctest: +SKIP
        ...     await store.set("greeting", "hello", expires_in=60)
        ...     await store.get("greeting", renew_for=60), await store.expires_in("greeting")
        (b'hello', 60)
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str = "litestar",
        client: AsyncStateStoreClient | None = None,
        wall_clock: Callable[[], float] = time.time,
        local_cache_size: int = 0,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        **connection: Any,
    ) -> None:
        unknown = set(connection) - set(_CONNECTION_OPTIONS)
        if unknown:
            raise TypeError(f"unexpected StateStoreStore option(s): {', '.join(sorted(unknown))}")
        timeout = request_timeout(connection.pop("request_timeout", 10.0))
        check_cache_options(local_cache_size, 1, 1.0, None)  # the local cache's size (the others: not ours)
        if max_staleness is not None and (
            isinstance(max_staleness, bool)
            or not isinstance(max_staleness, int | float)
            or not math.isfinite(max_staleness)
            or max_staleness <= 0
        ):
            raise ConfigurationError(f"max_staleness must be positive seconds or None, not {max_staleness!r}")
        settings = None if client is not None else settings_from_options(url or DEFAULT_URL, connection)
        conn = _Connection(settings, client, timeout, local_cache_size, max_staleness)
        self._setup(conn, _check_name(namespace, "namespace"), None, wall_clock)

    def _setup(
        self, conn: _Connection, namespace: str, parent: StateStoreStore | None, clock: Callable[[], float]
    ) -> None:
        self.namespace: str = namespace
        self._conn = conn
        self._parent = parent
        self._clock = clock
        self._children: dict[str, StateStoreStore] = {}
        self._generation = -1
        self._data: AsyncStateStoreCache[bytes] | None = None
        self._registry: AsyncStateStoreDict[Any] | None = None
        self._registered = False

    def __repr__(self) -> str:
        return f"<StateStoreStore namespace={self.namespace!r}>"

    # -- lifecycle ------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """``Litestar(lifespan=[store.lifespan])``: connect on the app's loop at startup, close at shutdown."""
        await self._conn.open()
        try:
            yield
        finally:
            await self._conn.close()

    async def __aenter__(self) -> None:
        await self._conn.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self._conn.close()

    @property
    def client(self) -> AsyncStateStoreClient:
        """The client the store uses now (:class:`ClientStateError` while the store is not open)."""
        return self._conn.require()

    def with_namespace(self, namespace: str) -> Self:
        """The store of the child namespace ``<this namespace>.<namespace>`` (the same object for the same name),
        on the same client; :meth:`delete_all` here also empties it."""
        name = _check_name(namespace, "a child namespace")
        child = self._children.get(name)
        if child is None:
            child = object.__new__(type(self))
            child._setup(self._conn, f"{self.namespace}.{name}", self, self._clock)
            self._children[name] = child
        return cast(Self, child)

    def _caches(self) -> tuple[AsyncStateStoreCache[bytes], AsyncStateStoreDict[Any]]:
        client = self._conn.require()
        if self._data is None or self._registry is None or self._generation != self._conn.generation:
            self._data = AsyncStateStoreCache(
                client,
                namespace=self.namespace,
                codec="raw",
                default_ttl=None,
                local_cache_size=self._conn.local_cache_size,
                max_staleness=self._conn.max_staleness,
            )
            # the children's names: a dict, which keeps a listing (the cache keeps none)
            self._registry = AsyncStateStoreDict(client, namespace=f"{self.namespace}!children", local_cache_size=0)
            self._conn.opened += [self._data, self._registry]
            self._generation = self._conn.generation
        return self._data, self._registry

    async def _register(self) -> None:
        """List this namespace in its parent's children (and the parent in its own, up to the root)."""
        if self._registered or self._parent is None:
            return
        parent: StateStoreStore = self._parent
        await parent._register()
        _, registry = parent._caches()
        await registry.open()  # idempotent: starts following the listing once
        await registry.setdefault(self.namespace.rsplit(".", 1)[1], True)
        self._registered = True  # the registry keeps its entries: once listed, listed for good

    def _now_ms(self) -> int:
        return math.floor(self._clock() * 1000)

    # -- the Store protocol ---------------------------------------------------------------------------------

    async def set(self, key: str, value: str | bytes, expires_in: int | timedelta | None = None) -> None:
        """Store ``value``; ``expires_in`` seconds or a timedelta (``None`` or ``0``: never expires)."""
        return await self._conn.call(lambda: self._set(key, value, expires_in))

    async def _set(self, key: str, value: str | bytes, expires_in: int | timedelta | None = None) -> None:
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        seconds = translate_ttl(expires_in, "litestar")
        cache, _ = self._caches()
        await self._register()
        await self._write(cache, key, data, seconds)

    async def _write(self, cache: AsyncStateStoreCache[bytes], key: str, data: bytes, seconds: float | None) -> None:
        expires_at = None if not seconds else self._now_ms() + math.ceil(seconds * 1000)
        await cache.set(key, _pack(data, expires_at), ttl=seconds)

    async def get(self, key: str, renew_for: int | timedelta | None = None) -> bytes | None:
        """The value, or ``None``. With ``renew_for``, an entry that has an expiry gets a new one, ``renew_for``
        from now (an entry without expiry is left alone, as Litestar specifies)."""
        return await self._conn.call(lambda: self._get(key, renew_for))

    async def _read(self, cache: AsyncStateStoreCache[bytes], key: str) -> tuple[bytes, int | None] | None:
        """The entry's data and envelope expiry (ms), or ``None`` when absent or expired by ``wall_clock`` (the
        store's own TTL ran on the service's clock; a wall clock moved forward, by a test's time travel or a
        host's skew, sees the entry expire at the envelope's time, as Litestar's memory store does)."""
        raw = await cache.get(key)
        if raw is None:
            return None
        data, expires_at = _unpack(raw, key)
        if expires_at is not None and self._now_ms() >= expires_at:
            return None
        return data, expires_at

    async def _get(self, key: str, renew_for: int | timedelta | None = None) -> bytes | None:
        cache, _ = self._caches()
        entry = await self._read(cache, key)
        if entry is None:
            return None
        data, expires_at = entry
        if renew_for and expires_at is not None:
            await self._write(cache, key, data, translate_ttl(renew_for, "litestar"))
        return data

    async def delete(self, key: str) -> None:
        """Delete the entry (nothing happens if it is absent)."""
        return await self._conn.call(lambda: self._delete(key))

    async def _delete(self, key: str) -> None:
        cache, _ = self._caches()
        await cache.delete(key)

    async def delete_all(self) -> None:
        """Delete every entry of this namespace and of all its descendants (never of its ancestors)."""
        return await self._conn.call(lambda: self._delete_all())

    async def _delete_all(self) -> None:
        cache, registry = self._caches()
        await registry.open()
        for name in await registry.keys():
            await self.with_namespace(name).delete_all()
        await cache.clear()

    async def exists(self, key: str) -> bool:
        """Whether the entry is present (and not expired)."""
        return await self._conn.call(lambda: self._exists(key))

    async def _exists(self, key: str) -> bool:
        cache, _ = self._caches()
        return await self._read(cache, key) is not None

    async def expires_in(self, key: str) -> int | None:
        """Seconds until the entry expires, rounded up (from its envelope; the state store itself cannot say);
        ``-1`` if it never expires; ``None`` if there is no such entry (or it has expired by ``wall_clock``)."""
        return await self._conn.call(lambda: self._expires_in(key))

    async def _expires_in(self, key: str) -> int | None:
        cache, _ = self._caches()
        entry = await self._read(cache, key)
        if entry is None:
            return None
        _, expires_at = entry
        if expires_at is None:
            return -1
        return math.ceil((expires_at - self._now_ms()) / 1000)  # >= 1: an expired entry was absent
