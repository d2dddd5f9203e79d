"""FastAPI / Starlette helpers: one client per app, opened in its lifespan, and dependencies for dicts and caches.

Usage: docs/integrations/fastapi.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from .._transport.settings import DEFAULT_URL, settings_from_options
from ._common import import_extra

import_extra("fastapi", "fastapi", "fastapi")

from starlette.requests import HTTPConnection  # noqa: E402

from ..cache import AsyncStateStoreCache  # noqa: E402
from ..client import AsyncStateStoreClient  # noqa: E402
from ..errors import ClientStateError  # noqa: E402
from ..mapping import AsyncStateStoreDict  # noqa: E402

__all__ = [
    "DEFAULT_URL",
    "STATE_NAME",
    "AppStateStore",
    "get_statestore",
    "get_statestore_cache",
    "get_statestore_dict",
    "statestore_lifespan",
]

#: The attribute of ``app.state`` (and the key of the lifespan state) holding the :class:`AppStateStore`.
STATE_NAME = "statestore"

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


class AppStateStore:
    """One app's state store: its client and the dicts and caches it opened, one per namespace.

    Args:
        client: the app's connected client.
        namespace: the namespace used when a dependency names none.
        dict_options: keyword arguments for every :class:`~sskv_mapping.AsyncStateStoreDict` (``codec``,
            ``local_cache_size``...).
        cache_options: keyword arguments for every :class:`~sskv_mapping.cache.AsyncStateStoreCache` (``codec``,
            ``default_ttl``, ``local_cache_size``...).
    """

    def __init__(
        self,
        client: AsyncStateStoreClient,
        *,
        namespace: str = "fastapi",
        dict_options: Mapping[str, Any] | None = None,
        cache_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self._dict_options = dict(dict_options or {})
        self._cache_options = dict(cache_options or {})
        self._dicts: dict[str, AsyncStateStoreDict[Any]] = {}
        self._caches: dict[str, AsyncStateStoreCache[Any]] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"<AppStateStore {self.client!r} namespace={self.namespace!r}>"

    async def dict(self, namespace: str | None = None) -> AsyncStateStoreDict[Any]:
        """The app's dict over ``namespace`` (default: the app's namespace), opened on first use."""
        name = namespace or self.namespace
        found = self._dicts.get(name)
        if found is not None:
            return found
        async with self._lock:
            self._check_open()
            found = self._dicts.get(name)
            if found is None:
                made: AsyncStateStoreDict[Any] = AsyncStateStoreDict(self.client, namespace=name, **self._dict_options)
                await made.open()
                self._dicts[name] = found = made
            return found

    async def cache(self, namespace: str | None = None) -> AsyncStateStoreCache[Any]:
        """The app's cache over ``namespace`` (default: ``<app namespace>-cache``), opened on first use."""
        name = namespace or f"{self.namespace}-cache"
        found = self._caches.get(name)
        if found is not None:
            return found
        async with self._lock:
            self._check_open()
            found = self._caches.get(name)
            if found is None:
                made: AsyncStateStoreCache[Any] = AsyncStateStoreCache(
                    self.client, namespace=name, **self._cache_options
                )
                await made.open()
                self._caches[name] = found = made
            return found

    def _check_open(self) -> None:
        if self._closed:
            raise ClientStateError("the app's state store was closed (the app has shut down)")

    async def aclose(self) -> None:
        """Close every dict and cache opened here (the client belongs to whoever connected it)."""
        async with self._lock:
            self._closed = True
            dicts, self._dicts = list(self._dicts.values()), {}
            caches, self._caches = list(self._caches.values()), {}
        for d in dicts:
            await d.close()
        for c in caches:
            await c.close()


def statestore_lifespan(
    url: str | None = None,
    *,
    namespace: str = "fastapi",
    client: AsyncStateStoreClient | None = None,
    lifespan: Lifespan | None = None,
    dict_options: Mapping[str, Any] | None = None,
    cache_options: Mapping[str, Any] | None = None,
    timeout: float | None = 10.0,
    **connection: Any,
) -> Lifespan:
    """A lifespan for ``FastAPI(lifespan=...)`` / ``Starlette(lifespan=...)`` that opens the app's state store.

    Args:
        url: the broker, ``mqtt://[user[:password]@]host[:port]``, ``mqtts://...``,
            ``"env:"`` (the ``AIO_*`` environment variables) or an AIO connection string.
        namespace: the default namespace of the dependencies.
        client: a client to use (not closed here) instead of connecting one on the app's loop.
        lifespan: the app's own lifespan, run inside this one (its lifespan state, if any, is passed on); it
            finds the state store already in ``app.state.statestore``.
        dict_options, cache_options: see :class:`AppStateStore`.
        timeout: the client's default per-call timeout.
        connection: ``client_id``, ``username``, ``password``, ``tls``, ``sat_token_file``, ``keepalive``,
            ``connect_timeout``.
    """
    settings = None if client is not None else settings_from_options(url or DEFAULT_URL, connection)

    @asynccontextmanager
    async def statestore(app: Any) -> AsyncIterator[Any]:
        own = client is None
        conn = client if client is not None else AsyncStateStoreClient(settings=settings, timeout=timeout)
        if own:
            await conn.connect()
        store = AppStateStore(conn, namespace=namespace, dict_options=dict_options, cache_options=cache_options)
        setattr(app.state, STATE_NAME, store)
        try:
            if lifespan is None:
                yield None
            else:
                async with lifespan(app) as inner:
                    yield inner
        finally:
            try:
                await store.aclose()
            finally:
                if getattr(app.state, STATE_NAME, None) is store:
                    delattr(app.state, STATE_NAME)
                if own:
                    await conn.close()

    return statestore


def get_statestore(connection: HTTPConnection) -> AppStateStore:
    """Dependency: the app's :class:`AppStateStore` (``ClientStateError`` if the lifespan is not installed)."""
    store = getattr(connection.app.state, STATE_NAME, None)
    if not isinstance(store, AppStateStore):
        raise ClientStateError(
            "this app has no state store: create it with FastAPI(lifespan=statestore_lifespan(url=...))"
        )
    return store


def get_statestore_dict(
    namespace: str | None = None,
) -> Callable[[HTTPConnection], Awaitable[AsyncStateStoreDict[Any]]]:
    """Dependency factory: ``Depends(get_statestore_dict("config"))`` gives the app's dict over ``config``."""

    async def statestore_dict(connection: HTTPConnection) -> AsyncStateStoreDict[Any]:
        return await get_statestore(connection).dict(namespace)

    return statestore_dict


def get_statestore_cache(
    namespace: str | None = None,
) -> Callable[[HTTPConnection], Awaitable[AsyncStateStoreCache[Any]]]:
    """Dependency factory: ``Depends(get_statestore_cache("pages"))`` gives the app's cache over ``pages``."""

    async def statestore_cache(connection: HTTPConnection) -> AsyncStateStoreCache[Any]:
        return await get_statestore(connection).cache(namespace)

    return statestore_cache
