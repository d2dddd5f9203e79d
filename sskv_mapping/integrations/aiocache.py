"""An aiocache backend over the state store, for ``Cache(...)``, ``caches.set_config`` and ``@cached``.

Settings and how aiocache's primitives map onto the cache: docs/integrations/aiocache.md.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from .._transport.settings import CONNECTION_OPTIONS, DEFAULT_URL, settings_from_options
from ._common import import_extra, shared_client
from ._common import request_timeout as _request_timeout

import_extra("aiocache", "aiocache", "aiocache")

from aiocache.base import BaseCache  # noqa: E402
from aiocache.serializers import JsonSerializer  # noqa: E402

from .._blocking import get_loop_thread  # noqa: E402
from .._keys import check_namespace  # noqa: E402
from .._protocol.commands import VDeleteResult  # noqa: E402
from .._transport.settings import ConnectionSettings  # noqa: E402
from ..cache import AsyncStateStoreCache, translate_ttl  # noqa: E402
from ..client import UNSET, StateStoreClient  # noqa: E402
from ..errors import ConfigurationError, StateStoreError  # noqa: E402
from ..local_cache import DEFAULT_MAX_STALENESS  # noqa: E402
from ..mapping import AsyncStateStoreDict  # noqa: E402

__all__ = ["DEFAULT_URL", "StateStoreCache"]

T = TypeVar("T")

_CONNECTION_OPTIONS = CONNECTION_OPTIONS
# aiocache 1.0 (its main branch) calls ``key_builder(key, namespace)`` with the namespace resolved, through the
# ``_str_build_key`` helper it adds; 0.12 calls it as ``build_key`` itself
_KEY_BUILDER_RESOLVED = hasattr(BaseCache, "_str_build_key")
_RAW_COMMANDS = frozenset({"get", "set", "delete", "vdelete"})
_MAX_INT_TEXT = 40  # longer digit strings stay bytes (and int() of huge ones is refused by Python anyway)


class _ValueCodec:
    """The bytes aiocache's serializer produced, stored as they are; canonical decimal integers are read back
    as ``int`` so that the cache's ``incr`` can count on them (``_get`` turns them back into the same text)."""

    name = "aiocache"

    def dumps(self, value: Any, /) -> bytes:
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value).encode("ascii")
        raise TypeError(
            f"aiocache handed the backend a {type(value).__name__}: use a serializer that produces str or bytes "
            "(JsonSerializer, the default; StringSerializer; PickleSerializer), not NullSerializer"
        )

    def loads(self, data: bytes, /) -> Any:
        if 0 < len(data) <= _MAX_INT_TEXT and data.lstrip(b"-").isdigit():
            number = int(data)
            if str(number).encode("ascii") == data:  # "007" or "-0" would not come back the same: keep bytes
                return number
        return data


def _text(value: Any, encoding: str | None) -> Any:
    """A stored value as aiocache's serializer wants it: ``str`` with an encoding, else ``bytes``."""
    if value is None:
        return None
    if isinstance(value, int):
        value = str(value).encode("ascii")
    return value.decode(encoding) if encoding else value


class _ScopedKey(str):
    """``namespace:key`` as aiocache shows it, remembering which aiocache namespace and key it was built from."""

    __slots__ = ("inner", "scope")
    scope: str
    inner: str

    def __new__(cls, text: str, scope: str, inner: str) -> _ScopedKey:
        self = super().__new__(cls, text)
        self.scope = scope
        self.inner = inner
        return self


def _split(key: Any) -> tuple[str, Any]:
    """(aiocache namespace or ``""``, the key within it)."""
    if isinstance(key, _ScopedKey):
        return key.scope, key.inner
    return "", key


class StateStoreCache(BaseCache):  # type: ignore[misc]  # aiocache is untyped
    """aiocache backend on the state store (default serializer: JSON, as for aiocache's Redis backend).

    Args:
        url: the broker, ``mqtt://[user[:password]@]host[:port]``, ``mqtts://...``,
            ``"env:"`` (the ``AIO_*`` environment variables) or an AIO connection string.
        endpoint, port: the broker's host and port instead of ``url`` (as ``Cache.from_url`` passes them).
        sskv_namespace: the state store namespace holding the entries (no ``/`` or ``#``).
        local_cache_size: keep up to this many hot entries in process, kept current by notifications.
        max_staleness: serve a local entry only within this many seconds of its last confirmation (a lost
            notification leaves a value stale at most that long); ``None``: trust notifications forever.
        client: a connected :class:`~sskv_mapping.StateStoreClient` instead of the process-wide shared one.
        request_timeout: seconds to wait for each request to the store (``None``: forever); aiocache's own
            ``timeout`` still bounds each aiocache call.
        serializer, plugins, namespace, key_builder, timeout, ttl: aiocache's own options.
        client_id, username, password, tls, sat_token_file, keepalive, connect_timeout: connection options.
    """

    NAME = "sskv"

    def __init__(
        self,
        url: str | None = None,
        *,
        endpoint: str | None = None,
        port: int | str | None = None,
        sskv_namespace: str = "aiocache",
        local_cache_size: int = 0,
        max_staleness: float | None = DEFAULT_MAX_STALENESS,
        client: StateStoreClient | None = None,
        serializer: Any = None,
        request_timeout: float | None = 10.0,
        key_builder: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> None:
        connection = {k: kwargs.pop(k) for k in _CONNECTION_OPTIONS if k in kwargs}
        super().__init__(serializer=serializer or JsonSerializer(), **kwargs)
        # aiocache 0.12 pins ``build_key`` on each instance (to its own ``_build_key`` layout); 1.0 declares it
        # abstract. Without the pinned one, this class's method is the key layout on both (``key_builder``
        # is kept here, not handed to aiocache)
        self.__dict__.pop("build_key", None)
        self._key_builder = key_builder
        if endpoint is not None or port is not None:
            if url is not None:
                raise ConfigurationError("give either url or endpoint/port, not both")
            url = f"mqtt://{endpoint or '127.0.0.1'}:{int(port or 1883)}"
        self._settings: ConnectionSettings | None = (
            None if client is not None else settings_from_options(url or DEFAULT_URL, connection)
        )
        self._client = client
        self._request_timeout = _request_timeout(request_timeout)
        self._sskv_namespace = sskv_namespace
        self._local_cache_size = local_cache_size
        self._max_staleness = max_staleness
        # what the cache's incr restarts a counter's expiry at (the other calls get aiocache's resolved ttl)
        self._default_ttl = translate_ttl(UNSET, "aiocache", self.ttl)
        self._codec = _ValueCodec()
        check_namespace(sskv_namespace)  # refused now rather than on the first call
        self._cores: dict[str, AsyncStateStoreCache[Any]] = {}  # aiocache namespace ("" for none) -> its cache
        self._open_lock = threading.Lock()
        self._portal = get_loop_thread()

    def __repr__(self) -> str:
        where = self._settings.url if self._settings is not None else "a given client"
        return f"StateStoreCache ({where}, sskv_namespace={self._sskv_namespace!r})"

    @classmethod
    def parse_uri_path(cls, path: str) -> dict[str, Any]:
        """``Cache.from_url`` support (after ``AIOCACHE_CACHES["sskv"] = StateStoreCache``): the path is the
        state store namespace, e.g. ``sskv://127.0.0.1:1883/web``."""
        namespace = path.strip("/")
        return {"sskv_namespace": namespace} if namespace else {}

    def build_key(self, key: Any, namespace: str | None = None) -> Any:
        """The key as stored: :meth:`_layout`, or a ``key_builder`` given to the cache, called as the installed
        aiocache calls it (0.12 passes the ``namespace`` argument as given, as a keyword; 1.0 the key, an
        enum's value, and the resolved namespace)."""
        if self._key_builder is not None:
            if _KEY_BUILDER_RESOLVED:
                resolved = self.namespace if namespace is None else namespace
                return self._key_builder(key.value if isinstance(key, enum.Enum) else key, resolved)
            return self._key_builder(key, namespace=namespace)
        return self._layout(key, namespace)

    def _layout(self, key: Any, namespace: str | None = None) -> Any:
        """aiocache's Redis layout ``namespace:key`` (what users see), carrying the namespace along so that the
        key goes to that namespace's own cache, which ``clear(namespace)`` empties in O(1)."""
        if isinstance(key, enum.Enum):
            key = key.value
        ns = namespace if namespace is not None else self.namespace
        if not ns:
            return key
        return _ScopedKey(f"{ns}:{key}", ns, str(key))

    # aiocache 0.12's name for a backend's default layout (its own tests call it); 1.0 puts the key_builder
    # there on each instance, which this class never calls
    _build_key = _layout

    # -- the connection, on the background loop ----------------------------------------------------------

    def _namespace_of(self, scope: str) -> str:
        return f"{self._sskv_namespace}~{scope.encode('utf-8').hex()}" if scope else self._sskv_namespace

    def _open_blocking(self, scope: str) -> AsyncStateStoreCache[Any]:
        with self._open_lock:
            core = self._cores.get(scope)
            if core is None:
                client = self._client
                if client is None:
                    assert self._settings is not None
                    client = shared_client(self._settings, timeout=self._request_timeout)
                core = AsyncStateStoreCache(
                    client.async_client,
                    namespace=self._namespace_of(scope),
                    codec=self._codec,
                    default_ttl=self._default_ttl,
                    local_cache_size=self._local_cache_size,
                    max_staleness=self._max_staleness,
                )
                self._portal.run(core.open())
                if scope:
                    self._portal.run(self._register(core, scope))
                self._cores[scope] = core
            return core

    async def _register(self, core: AsyncStateStoreCache[Any], scope: str) -> None:
        """List ``scope`` in the namespace's registry of aiocache namespaces, which ``clear()`` goes through."""
        registry: AsyncStateStoreDict[bool] = AsyncStateStoreDict(
            core.client, namespace=f"{self._sskv_namespace}!scopes", local_cache_size=0
        )
        async with registry:
            await registry.setdefault(scope, True)

    async def _cache(self, scope: str = "") -> AsyncStateStoreCache[Any]:
        core = self._cores.get(scope)
        if core is None:  # connecting blocks: do it in a worker thread, not on the caller's loop
            core = await asyncio.to_thread(self._open_blocking, scope)
        return core

    async def _for(self, key: Any) -> tuple[AsyncStateStoreCache[Any], Any]:
        scope, inner = _split(key)
        return await self._cache(scope), inner

    async def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return await self._portal.run_async(coro)

    @property
    def sskv_cache(self) -> AsyncStateStoreCache[Any] | None:
        """The :class:`sskv_mapping.cache.AsyncStateStoreCache` of keys without an aiocache namespace, once opened."""
        return self._cores.get("")

    async def store_key(self, key: Any, namespace: str | None = None) -> str:
        """The full state store key holding ``key`` now (what :meth:`raw` takes), e.g. to watch it."""
        core, inner = await self._for(self.build_key(key, namespace))
        data_key = await self._run(core.data_key(inner))
        return data_key.decode("utf-8")

    # -- aiocache's primitives ------------------------------------------------------------------------------

    async def _get(self, key: str, encoding: str | None = "utf-8", _conn: Any = None) -> Any:
        core, inner = await self._for(key)
        return _text(await self._run(core.get(inner)), encoding)

    async def _gets(self, key: str, encoding: str | None = "utf-8", _conn: Any = None) -> Any:
        return await self._get(key, encoding=encoding, _conn=_conn)

    def _by_scope(self, keys: Iterable[Any]) -> dict[str, list[tuple[Any, Any]]]:
        groups: dict[str, list[tuple[Any, Any]]] = {}
        for key in keys:
            scope, inner = _split(key)
            groups.setdefault(scope, []).append((key, inner))
        return groups

    async def _multi_get(self, keys: Iterable[str], encoding: str | None = "utf-8", _conn: Any = None) -> list[Any]:
        wanted = list(keys)
        values: dict[Any, Any] = {}
        for scope, pairs in self._by_scope(wanted).items():
            core = await self._cache(scope)
            found = await self._run(core.get_many(inner for _, inner in pairs))
            values.update((key, found.get(inner)) for key, inner in pairs)
        return [_text(values.get(k), encoding) for k in wanted]

    async def _set(self, key: str, value: Any, ttl: Any = None, _cas_token: Any = None, _conn: Any = None) -> bool:
        seconds = translate_ttl(ttl, "aiocache")
        core, inner = await self._for(key)
        if _cas_token is not None:
            return await self._run(self._cas(core, inner, value, _cas_token, seconds))
        await self._run(core.set(inner, value, seconds))
        return True

    async def _cas(
        self, core: AsyncStateStoreCache[Any], key: str, value: Any, token: Any, seconds: float | None
    ) -> bool:
        expected = self._codec.dumps(token)
        outcome = await core.client.vdelete(await core.data_key(key), expected)
        if outcome is not VDeleteResult.DELETED:
            return False
        # If another writer stores the key between the VDEL and this NX, its value is newer than ours: keep it.
        await core.add(key, value, seconds)
        return True

    async def _multi_set(self, pairs: Iterable[tuple[str, Any]], ttl: Any = None, _conn: Any = None) -> bool:
        seconds = translate_ttl(ttl, "aiocache")
        given = dict(pairs)
        failed: list[str] = []
        for scope, keys in self._by_scope(given).items():
            core = await self._cache(scope)
            failed += await self._run(core.set_many({inner: given[key] for key, inner in keys}, seconds))
        if failed:
            raise StateStoreError(f"multi_set could not store {len(failed)} key(s): {failed[:10]!r}")
        return True

    async def _add(self, key: str, value: Any, ttl: Any = None, _conn: Any = None) -> bool:
        seconds = translate_ttl(ttl, "aiocache")
        core, inner = await self._for(key)
        if not await self._run(core.add(inner, value, seconds)):
            raise ValueError(f"Key {key} already exists, use .set to update the value")
        return True

    async def _exists(self, key: str, _conn: Any = None) -> bool:
        core, inner = await self._for(key)
        return await self._run(core.exists(inner))

    async def _increment(self, key: str, delta: int, _conn: Any = None) -> int | float:
        core, inner = await self._for(key)
        return await self._run(self._incr(core, inner, delta))

    @staticmethod
    async def _incr(core: AsyncStateStoreCache[Any], key: str, delta: int) -> int | float:
        while True:
            try:
                return await core.incr(key, delta)
            except ValueError as exc:
                if isinstance(exc, StateStoreError):  # a bad key or delta, not "absent"
                    raise
            if await core.add(key, delta):  # absent: create it, unless another writer just did
                return delta

    async def _expire(self, key: str, ttl: Any, _conn: Any = None) -> bool:
        seconds = translate_ttl(ttl, "aiocache")
        core, inner = await self._for(key)
        return await self._run(core.expire(inner, seconds))

    async def _delete(self, key: str, _conn: Any = None) -> int:
        core, inner = await self._for(key)
        return int(await self._run(core.delete(inner)))

    async def _clear(self, namespace: str | None = None, _conn: Any = None) -> bool:
        if namespace:
            core = await self._cache(namespace)
            await self._run(core.clear())
            return True
        core = await self._cache()
        await self._run(self._clear_all(core))
        return True

    async def _clear_all(self, core: AsyncStateStoreCache[Any]) -> None:
        registry: AsyncStateStoreDict[bool] = AsyncStateStoreDict(
            core.client, namespace=f"{self._sskv_namespace}!scopes", local_cache_size=0
        )
        async with registry:
            scopes = await registry.keys()
        await core.clear()
        for scope in scopes:
            scoped = AsyncStateStoreCache(core.client, namespace=self._namespace_of(scope), codec=self._codec)
            async with scoped:
                await scoped.clear()

    async def _raw(
        self, command: str, *args: Any, encoding: str | None = "utf-8", _conn: Any = None, **kwargs: Any
    ) -> Any:
        if command not in _RAW_COMMANDS:
            raise ConfigurationError(f"raw commands are the client verbs {sorted(_RAW_COMMANDS)}, not {command!r}")
        core = await self._cache()
        result = await self._run(getattr(core.client, command)(*args, **kwargs))
        if command == "get":
            return None if result is None else _text(result.value, encoding)
        return result

    async def _redlock_release(self, key: str, value: Any) -> int:
        core, inner = await self._for(key)
        outcome = await self._run(self._vdel(core, inner, self._codec.dumps(value)))
        return 1 if outcome is VDeleteResult.DELETED else 0

    @staticmethod
    async def _vdel(core: AsyncStateStoreCache[Any], key: str, raw: bytes) -> VDeleteResult:
        return await core.client.vdelete(await core.data_key(key), raw)

    async def _close(self, *args: Any, _conn: Any = None, **kwargs: Any) -> None:
        """Stop this backend's watches; the shared connection stays open. The next call reopens."""
        with self._open_lock:
            cores, self._cores = list(self._cores.values()), {}
        for core in cores:
            await self._run(core.close())
