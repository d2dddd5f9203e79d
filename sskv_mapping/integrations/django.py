"""A Django cache backend over the state store (``pip install 'sskv-mapping[django]'``).

Settings: docs/integrations/django.md. Imports Django: nothing else in the package imports it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from .. import cache as core
from .._blocking import get_loop_thread
from .._keys import check_namespace
from .._transport.settings import CONNECTION_OPTIONS, DEFAULT_URL, ConnectionSettings, settings_from_options
from ..cache import translate_ttl
from ..cache._cache import _check_options as check_cache_options
from ..client import UNSET, ConnectionState, StateStoreClient
from ..codecs import Codec, PickleCodec, get_codec
from ..errors import ConfigurationError, StateStoreError
from ..mapping import StateStoreDict
from ._common import close_shared_objects, import_extra, request_timeout, shared_client, shared_object
from ._django_redis import REDIS_OPTIONS, CompressedCodec, DjangoRedisExtras, guard_outages, redis_options

import_extra("django", "django", "django")  # without Django: ImportError naming the pip install line
_base = import_extra("django.core.cache.backends.base", "django", "django")
_exceptions = import_extra("django.core.exceptions", "django", "django")

__all__ = ["DEFAULT_TIMEOUT", "StateStoreCache", "close_all", "shared_dict"]

T = TypeVar("T")

#: Django's "no timeout given" sentinel (the backend's ``TIMEOUT`` applies).
DEFAULT_TIMEOUT: Final[object] = _base.DEFAULT_TIMEOUT
_ImproperlyConfigured: type[Exception] = _exceptions.ImproperlyConfigured

if TYPE_CHECKING:

    class _BaseCache:
        """What this module uses of ``django.core.cache.backends.base.BaseCache`` (Django ships no types, and
        the package is type-checked without Django installed)."""

        default_timeout: int | None
        key_prefix: str
        version: int
        key_func: Callable[[str, str, int], str]
        _missing_key: object

        def __init__(self, params: dict[str, Any]) -> None: ...
        def make_key(self, key: str, version: int | None = None) -> str: ...
        def validate_key(self, key: str) -> None: ...
        def make_and_validate_key(self, key: str, version: int | None = None) -> str: ...
        def incr_version(self, key: str, delta: int = 1, version: int | None = None) -> int: ...
        def decr_version(self, key: str, delta: int = 1, version: int | None = None) -> int: ...
        async def aincr_version(self, key: str, delta: int = 1, version: int | None = None) -> int: ...
        async def adecr_version(self, key: str, delta: int = 1, version: int | None = None) -> int: ...
        def __contains__(self, key: str) -> bool: ...

else:
    _BaseCache = _base.BaseCache


# -- configuration ----------------------------------------------------------------------------------------

#: OPTIONS handed to :class:`sskv_mapping.cache.StateStoreCache` as they are: the core checks them (its
#: messages), and its defaults apply, except the namespace's.
_CORE_OPTIONS: Final = ("namespace", "local_cache_size", "max_staleness", "lock_lease", "lock_timeout", "max_fanout")
#: Django's own OPTIONS: how values are encoded (signed with a key from SECRET_KEY by default) and the
#: per-request timeout of the shared connection.
_DJANGO_OPTIONS: Final = frozenset({"codec", "allow_pickle", "pickle_key", "timeout"})
_IGNORED_OPTIONS: Final = frozenset({"MAX_ENTRIES", "CULL_FREQUENCY"})  # BaseCache reads them; no culling here
_KNOWN_OPTIONS: Final = (
    frozenset(CONNECTION_OPTIONS)
    | frozenset(_CORE_OPTIONS)
    | _DJANGO_OPTIONS
    | REDIS_OPTIONS  # django-redis's (_django_redis.py)
)

DEFAULT_NAMESPACE: Final = "django"
_CORE_DEFAULTS: Final[dict[str, Any]] = {
    **{name: inspect.signature(core.StateStoreCache).parameters[name].default for name in _CORE_OPTIONS},
    "namespace": DEFAULT_NAMESPACE,
}


@contextmanager
def _improperly_configured() -> Iterator[None]:
    """The one place where a configuration error becomes Django's ``ImproperlyConfigured``, keeping the
    message of whoever checked the setting (this module for Django's own, the core for the rest)."""
    try:
        yield
    except (ConfigurationError, TypeError) as exc:  # TypeError: e.g. an unknown field in OPTIONS["tls"]
        raise _ImproperlyConfigured(f"sskv_mapping StateStoreCache: {exc}") from exc


def _derived_key(secret: str | bytes) -> bytes:
    """The pickle-signing secret derived from one of Django's ``SECRET_KEY`` values (never the key itself)."""
    raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    return hmac.new(raw, b"sskv_mapping.integrations.django signed cache values", hashlib.sha256).digest()


def _default_codec() -> tuple[Codec[Any], tuple[Any, ...]]:
    """Django's own backends pickle anything: so do we, signed with a key derived from ``SECRET_KEY`` (older
    ``SECRET_KEY_FALLBACKS`` accepted for reading), the signature covering the store key."""
    from django.conf import settings

    secret = getattr(settings, "SECRET_KEY", None)
    if not secret:
        raise ConfigurationError(
            "the state store cache backend signs the values it pickles with a key derived from SECRET_KEY, and "
            'SECRET_KEY is empty: set it, or choose OPTIONS "codec": "json" (values JSON can carry only)'
        )
    fallbacks = [_derived_key(s) for s in getattr(settings, "SECRET_KEY_FALLBACKS", ()) or () if s]
    primary = _derived_key(secret)
    codec = PickleCodec(key=primary, fallback_keys=fallbacks, bind_key=True)
    ident = hashlib.sha256(primary + b"".join(fallbacks)).hexdigest()  # the registry key holds no secret
    return codec, ("pickle", "secret-key", ident)


def _codec_from_options(options: Mapping[str, Any]) -> tuple[Codec[Any], tuple[Any, ...]]:
    """The codec, and what identifies it among shared caches (an instance by identity, a name by name)."""
    spec = options.get("codec")
    if spec is None:
        return _default_codec()
    if isinstance(spec, str) and spec.strip().lower() == "pickle":
        key = options.get("pickle_key")
        if key is not None:
            raw = key.encode("utf-8") if isinstance(key, str) else key
            # the digest, not the secret, goes into the registry key
            signed = PickleCodec(key=raw, bind_key=True)
            return signed, ("pickle", "signed", hashlib.sha256(bytes(raw)).hexdigest())
        if options.get("allow_pickle") is True:
            return PickleCodec(allow_unsafe=True), ("pickle", "unsafe")
        raise ConfigurationError(
            'OPTIONS "codec": "pickle" runs code chosen by whoever can write to the store when a value is read; '
            'add "pickle_key": <secret of 16+ bytes> (signed pickles, recommended) or "allow_pickle": True '
            "(plain pickle, only for a store nobody untrusted can write to), or keep the default JSON codec"
        )
    codec = get_codec(spec)
    return codec, (("name", spec.strip().lower()) if isinstance(spec, str) else ("instance", id(spec)))


@dataclass(frozen=True)
class _Config:
    connection: ConnectionSettings
    request_timeout: float | None
    codec: Codec[Any]
    codec_id: tuple[Any, ...]
    default_ttl: float | None
    cache_options: tuple[tuple[str, Any], ...]  # every one of _CORE_OPTIONS, sorted: part of the registry key

    @property
    def namespace(self) -> str:
        return str(dict(self.cache_options)["namespace"])

    def build_cache(self, client: StateStoreClient) -> core.StateStoreCache[Any]:
        options = dict(self.cache_options)
        return core.StateStoreCache(client, codec=self.codec, default_ttl=self.default_ttl, **options)


def _parse(location: str | None, options: Mapping[str, Any], default_timeout: int | None) -> _Config:
    """Django's settings as the core takes them. Only Django's own names are read and checked here; the
    connection's and the cache's are checked by the core now (not at the first request)."""
    unknown = set(options) - _KNOWN_OPTIONS - _IGNORED_OPTIONS
    if unknown:
        raise ConfigurationError(f"unknown OPTIONS {sorted(unknown)}; known: {', '.join(sorted(_KNOWN_OPTIONS))}")
    if location is not None and not isinstance(location, str):
        raise ConfigurationError(
            "LOCATION must be a broker URL such as mqtt://127.0.0.1:1883, a connection string or 'env:', "
            f"not {location!r}"
        )
    connection = settings_from_options(
        location or DEFAULT_URL, {k: options[k] for k in CONNECTION_OPTIONS if k in options}
    )
    codec, codec_id = _codec_from_options(options)
    _, compressor, min_length = redis_options(options)  # django-redis's COMPRESSOR (_django_redis.py)
    if compressor is not None:
        codec, codec_id = CompressedCodec(codec, compressor, min_length=min_length), (*codec_id, compressor, min_length)
    cache_options = {**_CORE_DEFAULTS, **{k: options[k] for k in _CORE_OPTIONS if k in options}}
    check_namespace(cache_options["namespace"])
    check_cache_options(
        cache_options["local_cache_size"],
        cache_options["max_fanout"],
        cache_options["lock_lease"],
        cache_options["lock_timeout"],
    )
    return _Config(
        connection=connection,
        request_timeout=request_timeout(options.get("timeout", 10.0), "timeout"),
        codec=codec,
        codec_id=codec_id,
        default_ttl=translate_ttl(UNSET, "django", default_timeout),
        cache_options=tuple(sorted(cache_options.items())),
    )


# -- the process-wide caches and dicts (in _common's registry, on _common's shared connections) -----------


def _closed(client: StateStoreClient) -> bool:
    return client.state is ConnectionState.CLOSED


def _client_for(config: _Config) -> StateStoreClient:
    with _improperly_configured():
        return shared_client(config.connection, timeout=config.request_timeout)


def _shared_cache(config: _Config) -> core.StateStoreCache[Any]:
    client = _client_for(config)
    key = ("django cache", config.codec_id, config.default_ttl, config.cache_options)
    with _improperly_configured():
        return shared_object(client, key, lambda: config.build_cache(client), keep_alive=config.codec)


def close_all() -> None:
    """Close the caches and dicts this module shares, and their connections (process shutdown, tests).

    Not needed in a normal Django process: the connection is a daemon's and goes with the process. A backend
    used after this reconnects on its next operation. The connections are the process-wide shared ones
    (:func:`sskv_mapping.integrations._common.shared_client`): other integrations using the same broker in
    this process lose theirs too.
    """
    close_shared_objects()


# -- the backend ------------------------------------------------------------------------------------------


class StateStoreCache(DjangoRedisExtras, _BaseCache):
    """Django cache backend: ``"BACKEND": "sskv_mapping.integrations.django.StateStoreCache"``.

    Example::

        from django.core.cache import cache

        cache.set("greeting", "hello", timeout=60)
        cache.add("visits", 0, timeout=None)
        cache.incr("visits")                # exact across threads and processes (a leased lock per key)
        await cache.aget("greeting")        # native async: no thread hop

    Follows Django's cache contract: ``timeout`` omitted = ``TIMEOUT``; ``None`` = never expires; ``0`` or
    negative = not cached (``set`` deletes the key); ``incr``/``decr`` raise ``ValueError`` for a missing
    key; ``set_many`` returns the keys it could not store; keys are built with ``KEY_PREFIX``, ``VERSION``
    and ``KEY_FUNCTION`` and checked with ``validate_key`` (a ``CacheKeyWarning`` for keys memcached would
    refuse). ``incr`` restarts the key's expiry at ``TIMEOUT``, as Django's ``BaseCache.incr`` does.
    """

    def __init__(self, server: str | None, params: dict[str, Any]) -> None:
        super().__init__(params)
        options = params.get("OPTIONS") or {}
        if not isinstance(options, Mapping):
            raise _ImproperlyConfigured(f"CACHES OPTIONS must be a dict, not {type(options).__name__}")
        with _improperly_configured():
            self._config = _parse(server, options, self.default_timeout)
            self._init_redis_extras(options)  # django-redis's methods and OPTIONS (_django_redis.py)
        self._resolved: core.StateStoreCache[Any] | None = None

    # -- the shared cache behind this backend ---------------------------------------------------------

    def _cache(self) -> core.StateStoreCache[Any]:
        cache = self._resolved
        if cache is None or _closed(cache.client):
            cache = self._resolved = _shared_cache(self._config)
        return cache

    async def _acache(self) -> core.AsyncStateStoreCache[Any]:
        cache = self._resolved
        if cache is None or _closed(cache.client):
            # once per process (and after close_all): connecting blocks, so not on the caller's loop
            cache = await asyncio.to_thread(self._cache)
        return cache.async_cache

    async def _arun(self, op: Callable[[core.AsyncStateStoreCache[Any]], Coroutine[Any, Any, T]]) -> T:
        cache = await self._acache()
        return await get_loop_thread().run_async(op(cache))

    @property
    def state_store_cache(self) -> core.StateStoreCache[Any]:
        """The process-wide :class:`~sskv_mapping.cache.StateStoreCache` this backend uses (connects on
        first use); its ``async_cache`` serves the ``a*`` methods, its ``stats()`` counts for every thread."""
        return self._cache()

    @property
    def client(self) -> StateStoreClient:
        """The process-wide connection this backend uses."""
        return self._cache().client

    def connection(self) -> StateStoreClient:
        """The process-wide connection of this backend's settings, without opening its cache namespace."""
        return _client_for(self._config)

    @property
    def namespace(self) -> str:
        """The state store namespace of this backend; ``clear()`` empties only it."""
        return self._config.namespace

    def _ttl(self, timeout: object) -> float | None:
        return translate_ttl(UNSET if timeout is DEFAULT_TIMEOUT else timeout, "django", self.default_timeout)

    @staticmethod
    def _not_found(key: str, exc: ValueError) -> ValueError:
        if isinstance(exc, StateStoreError):  # a ConfigurationError / CodecError: not about absence
            return exc
        return ValueError(f"Key '{key}' not found")

    def _keys(self, keys: Iterable[str], version: int | None) -> dict[str, str]:
        return {self.make_and_validate_key(k, version=version): k for k in keys}

    # -- blocking API ---------------------------------------------------------------------------------

    def get(self, key: str, default: Any = None, version: int | None = None) -> Any:
        """The value, or ``default`` if absent (Django's ``cache.get``)."""
        made = self.make_and_validate_key(key, version=version)
        return self._cache().get(made, default)

    def set(self, key: str, value: Any, timeout: object = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        """Store ``value`` for ``timeout`` seconds (Django's rules: ``None`` never expires, ``0`` deletes)."""
        made = self.make_and_validate_key(key, version=version)
        self._cache().set(made, value, self._ttl(timeout))

    def add(self, key: str, value: Any, timeout: object = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        """Store ``value`` only if the key is absent (``SET NX``); whether it was stored."""
        made = self.make_and_validate_key(key, version=version)
        return self._cache().add(made, value, self._ttl(timeout))

    def touch(self, key: str, timeout: object = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        """Restart the key's expiry at ``timeout`` without changing its value; whether the key exists."""
        made = self.make_and_validate_key(key, version=version)
        return self._cache().touch(made, self._ttl(timeout))

    def delete(self, key: str, version: int | None = None) -> bool:
        """Delete the key; whether it existed."""
        made = self.make_and_validate_key(key, version=version)
        return self._cache().delete(made)

    def has_key(self, key: str, version: int | None = None) -> bool:
        """Whether the key is present."""
        made = self.make_and_validate_key(key, version=version)
        return self._cache().exists(made)

    def get_many(self, keys: Iterable[str], version: int | None = None) -> dict[str, Any]:
        """The values of the keys present, by key."""
        made = self._keys(keys, version)
        if not made:
            return {}
        found = self._cache().get_many(list(made))
        return {made[k]: v for k, v in found.items()}

    def set_many(
        self, data: Mapping[str, Any], timeout: object = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[str]:
        """Store every pair; returns the keys that could not be stored (Django's contract)."""
        made = {self.make_and_validate_key(k, version=version): (k, v) for k, v in data.items()}
        if not made:
            return []
        failed = self._cache().set_many({m: v for m, (_, v) in made.items()}, self._ttl(timeout))
        return [made[m][0] for m in failed]

    def delete_many(self, keys: Iterable[str], version: int | None = None) -> None:
        """Delete the keys."""
        made = self._keys(keys, version)
        if made:
            self._cache().delete_many(list(made))

    def clear(self) -> None:
        """Delete every key of this backend's namespace (other namespaces are untouched)."""
        self._cache().clear()

    def incr(self, key: str, delta: int = 1, version: int | None = None) -> Any:
        """Add ``delta`` and return the new value, exact across processes; ``ValueError`` if absent."""
        made = self.make_and_validate_key(key, version=version)
        try:
            return self._cache().incr(made, delta)
        except ValueError as exc:
            raise self._not_found(key, exc) from None

    def decr(self, key: str, delta: int = 1, version: int | None = None) -> Any:
        """Subtract ``delta`` and return the new value (see ``incr``)."""
        return self.incr(key, -delta, version=version)

    def get_or_set(self, key: str, default: Any, timeout: object = DEFAULT_TIMEOUT, version: int | None = None) -> Any:
        """The cached value; if absent, ``default`` (called if callable, in this thread) is stored with
        ``add`` semantics and returned. Across processes only one caller at a time computes a missing key."""
        made = self.make_and_validate_key(key, version=version)
        return self._cache().get_or_set(made, default, self._ttl(timeout))

    def close(self, **kwargs: Any) -> None:
        """Django calls this after every request: the shared connection stays open (see :func:`close_all`)."""

    # -- async API: served on the library's loop, awaited from the caller's ---------------------------

    async def aget(self, key: str, default: Any = None, version: int | None = None) -> Any:
        made = self.make_and_validate_key(key, version=version)
        return await self._arun(lambda c: c.get(made, default))

    async def aset(self, key: str, value: Any, timeout: object = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        made = self.make_and_validate_key(key, version=version)
        ttl = self._ttl(timeout)
        await self._arun(lambda c: c.set(made, value, ttl))

    async def aadd(self, key: str, value: Any, timeout: object = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        made = self.make_and_validate_key(key, version=version)
        ttl = self._ttl(timeout)
        return await self._arun(lambda c: c.add(made, value, ttl))

    async def atouch(self, key: str, timeout: object = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        made = self.make_and_validate_key(key, version=version)
        ttl = self._ttl(timeout)
        return await self._arun(lambda c: c.touch(made, ttl))

    async def adelete(self, key: str, version: int | None = None) -> bool:
        made = self.make_and_validate_key(key, version=version)
        return await self._arun(lambda c: c.delete(made))

    async def ahas_key(self, key: str, version: int | None = None) -> bool:
        made = self.make_and_validate_key(key, version=version)
        return await self._arun(lambda c: c.exists(made))

    async def aget_many(self, keys: Iterable[str], version: int | None = None) -> dict[str, Any]:
        made = self._keys(keys, version)
        if not made:
            return {}
        found = await self._arun(lambda c: c.get_many(list(made)))
        return {made[k]: v for k, v in found.items()}

    async def aset_many(
        self, data: Mapping[str, Any], timeout: object = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[str]:
        made = {self.make_and_validate_key(k, version=version): (k, v) for k, v in data.items()}
        if not made:
            return []
        ttl = self._ttl(timeout)
        failed = await self._arun(lambda c: c.set_many({m: v for m, (_, v) in made.items()}, ttl))
        return [made[m][0] for m in failed]

    async def adelete_many(self, keys: Iterable[str], version: int | None = None) -> None:
        made = self._keys(keys, version)
        if made:
            await self._arun(lambda c: c.delete_many(list(made)))

    async def aclear(self) -> None:
        await self._arun(lambda c: c.clear())

    async def aincr(self, key: str, delta: int = 1, version: int | None = None) -> Any:
        made = self.make_and_validate_key(key, version=version)
        try:
            return await self._arun(lambda c: c.incr(made, delta))
        except ValueError as exc:
            raise self._not_found(key, exc) from None

    async def adecr(self, key: str, delta: int = 1, version: int | None = None) -> Any:
        return await self.aincr(key, -delta, version=version)

    async def aget_or_set(
        self, key: str, default: Any, timeout: object = DEFAULT_TIMEOUT, version: int | None = None
    ) -> Any:
        """Like :meth:`get_or_set`; a callable ``default`` (sync or async) runs on the caller's event loop,
        where Django's own ``aget_or_set`` runs it, not on the library's loop thread."""
        made = self.make_and_validate_key(key, version=version)
        ttl = self._ttl(timeout)
        if not callable(default):
            return await self._arun(lambda c: c.get_or_set(made, default, ttl))
        caller = asyncio.get_running_loop()

        async def compute() -> Any:
            value = default()
            if inspect.isawaitable(value):
                value = await value
            return value

        def on_library_loop() -> asyncio.Future[Any]:
            # called by the cache (on its loop) only when this caller leads the computation of a missing key
            return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(compute(), caller))

        return await self._arun(lambda c: c.get_or_set(made, on_library_loop, ttl))

    async def aclose(self, **kwargs: Any) -> None:
        """Like :meth:`close`: the shared connection stays open."""


# django-redis's IGNORE_EXCEPTIONS, and the expiries ttl() reports, around the methods above (_django_redis.py)
guard_outages(StateStoreCache, DEFAULT_TIMEOUT)


# -- shared dicts on the cache's connection ----------------------------------------------------------------


def shared_dict(
    namespace: str, *, using: str = "default", codec: Codec[Any] | str | None = None, local_cache_size: int = 10_000
) -> StateStoreDict[Any]:
    """The process-wide :class:`~sskv_mapping.StateStoreDict` of ``namespace``, on the connection of the
    ``CACHES[using]`` state-store backend (no second connection, opened once per process).

    Example::

        config = shared_dict("config")
        config["feature.x"] = True      # every process sees it within milliseconds
    """
    caches = import_extra("django.core.cache", "django", "django").caches
    backend = caches[using]
    if not isinstance(backend, StateStoreCache):
        raise _ImproperlyConfigured(f"CACHES[{using!r}] is not a sskv_mapping StateStoreCache backend")
    client = backend.connection()
    codec_id = None if codec is None else (("name", codec) if isinstance(codec, str) else ("instance", id(codec)))

    def build() -> StateStoreDict[Any]:
        return StateStoreDict(client, namespace=namespace, codec=codec, local_cache_size=local_cache_size)

    with _improperly_configured():
        return shared_object(client, ("django dict", namespace, codec_id, local_cache_size), build, keep_alive=codec)
