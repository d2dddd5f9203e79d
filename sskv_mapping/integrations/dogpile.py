"""A dogpile.cache backend over the state store: ``region.configure("sskv", arguments={...})``.

Arguments, codecs and the cross-process mutex: docs/integrations/dogpile.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._transport.settings import CONNECTION_OPTIONS, DEFAULT_URL, settings_from_options
from .._ttl import check_ttl
from ._common import import_extra, request_timeout, shared_client, shared_object

import_extra("dogpile.cache", "dogpile", "dogpile")

from dogpile.cache.api import (  # noqa: E402
    NO_VALUE,
    BytesBackend,
    CacheMutex,
    CantDeserializeException,
    KeyType,
    SerializedReturnType,
)

from .. import cache as core  # noqa: E402
from .._namespace.key_layout import KeyLayout  # noqa: E402
from ..client import StateStoreClient  # noqa: E402
from ..codecs import Codec, JsonCodec, PickleCodec, get_codec  # noqa: E402
from ..errors import ConfigurationError, DecodeError, LockError, StateStoreError  # noqa: E402
from ..lock import LeasedLock  # noqa: E402

__all__ = ["DEFAULT_URL", "StateStoreBackend", "StateStoreMutex"]

log = logging.getLogger("sskv_mapping.integrations.dogpile")

#: the backend's own arguments (the connection's are :data:`CONNECTION_OPTIONS`)
_OWN_ARGUMENTS = frozenset(
    {
        "url",
        "namespace",
        "expiration_time",
        "codec",
        "pickle_key",
        "lock_lease",
        "lock_timeout",
        "local_cache_size",
        "request_timeout",
        "client",
    }
)


def _codec(arguments: Mapping[str, Any]) -> Codec[Any]:
    codec, key = arguments.get("codec"), arguments.get("pickle_key")
    if codec is not None and key is not None:
        raise ConfigurationError("give the dogpile backend a codec or a pickle_key, not both")
    if key is not None:
        if isinstance(key, str):
            key = key.encode("utf-8")
        return PickleCodec(key=key)
    return JsonCodec() if codec is None else get_codec(codec)


def _positive(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"{what} must be positive seconds, not {value!r}")
    return float(value)


class StateStoreMutex(CacheMutex):
    """dogpile's per-key creation mutex, across processes: a :class:`~sskv_mapping.LeasedLock` on
    ``<namespace>/dogpile-lock/<key>`` whose lease is renewed while it is held.

    Not reentrant (as dogpile expects): a second ``acquire`` on a held mutex waits, or answers ``False`` with
    ``wait=False``, in this process as in any other. ``locked()`` asks the store (any holder counts).
    """

    def __init__(self, lock: LeasedLock, timeout: float | None) -> None:
        self._lock = lock
        self._timeout = timeout
        # dogpile shares one mutex object per key between the threads of a process; they share our holder value
        # too (SET NEX would let the second in), so they queue here first
        self._local = threading.Lock()

    @property
    def lock(self) -> LeasedLock:
        """The leased lock behind this mutex (its ``fencing_token`` while held)."""
        return self._lock

    def acquire(self, wait: bool = True) -> bool:
        """Take the lock; with ``wait`` block until it is ours (:class:`LockError` after ``lock_timeout``),
        without it answer at once whether it was taken."""
        taken = (
            self._local.acquire(timeout=-1 if self._timeout is None else self._timeout)
            if wait
            else (self._local.acquire(blocking=False))
        )
        if not taken:
            if wait:
                raise LockError(f"timed out after {self._timeout} s waiting for {self._lock.name!r} in this process")
            return False
        try:
            if wait:
                self._lock.acquire(self._timeout)
                return True
            if self._lock.try_acquire() is not None:
                return True
        except BaseException:
            self._local.release()
            raise
        self._local.release()
        return False

    def release(self) -> None:
        """Give the lock up (VDEL with our holder value)."""
        try:
            self._lock.release()
        finally:
            self._local.release()

    def locked(self) -> bool:
        """Whether anyone (this process or another) holds the lock now."""
        return self._lock.holder_of() is not None


class StateStoreBackend(BytesBackend):
    """dogpile.cache backend: ``make_region().configure("sskv", arguments={"url": ..., "namespace": ...})``.

    Registered under the ``dogpile.cache`` entry point as ``sskv``. dogpile hands this backend bytes: its own
    metadata (creation time, version) and the value, which the backend's ``serializer``/``deserializer``
    (from ``codec`` or ``pickle_key``) turn into bytes and back; a region's own ``serializer`` wins over them.
    A value the codec cannot read (a wrong signature, another format) is a miss, logged, as dogpile expects.

    Arguments (dogpile's ``arguments`` dict; unknown names are logged and ignored, as dogpile's backends do):
        url: the broker URL, ``"env:"`` or a connection string (ignored when ``client`` is given).
        namespace: the state store namespace holding the entries (``"dogpile"``).
        expiration_time: seconds after which the store itself drops an entry (``None``: never). dogpile's
            region ``expiration_time`` decides freshness; keep this longer so a stale value can still be
            served while one process regenerates it.
        codec: a :class:`~sskv_mapping.codecs.Codec` or its name (default ``"json"``).
        pickle_key: a secret (at least 16 bytes) for signed pickle instead of ``codec``: any picklable value.
        lock_lease: the lease of ``get_mutex``'s locks, renewed while held (10 s).
        lock_timeout: how long ``acquire()`` waits before :class:`~sskv_mapping.LockError` (``None``: forever).
        local_cache_size: hot entries kept in process, kept current by notifications (0).
        request_timeout: seconds to wait for each request to the store (10; ``None``: forever).
        client: a connected :class:`StateStoreClient` instead of the process-wide shared one.
        connection options: ``username``, ``password``, ``tls``, ``client_id``... (see the docs page).

    Example:
        >>> from dogpile.cache import make_region  # doctest: +SKIP
        >>> region = make_region().configure(  # doctest: +SKIP
        ...     "sskv", expiration_time=300, arguments={"url": "mqtt://127.0.0.1:1883", "namespace": "reports"}
        ... )
    """

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        unknown = set(arguments) - _OWN_ARGUMENTS - set(CONNECTION_OPTIONS)
        if unknown:
            log.warning("dogpile backend 'sskv': ignored unknown argument(s) %s", ", ".join(sorted(unknown)))
        codec = _codec(arguments)
        self.serializer = codec.dumps
        self.deserializer = self._loads_with(codec)
        self._ttl = check_ttl(arguments.get("expiration_time"), "expiration_time")
        if self._ttl == 0:
            raise ConfigurationError("expiration_time must be positive seconds or None (never)")
        self._lock_lease = _positive(arguments.get("lock_lease", 10.0), "lock_lease")
        timeout = arguments.get("lock_timeout")
        self._lock_timeout = None if timeout is None else _positive(timeout, "lock_timeout")
        local_cache_size = arguments.get("local_cache_size", 0)
        namespace = arguments.get("namespace", "dogpile")
        client = arguments.get("client")
        if client is None:
            connection = {k: v for k, v in arguments.items() if k in CONNECTION_OPTIONS}
            settings = settings_from_options(arguments.get("url") or DEFAULT_URL, connection)
            client = shared_client(settings, timeout=request_timeout(arguments.get("request_timeout", 10.0)))
        elif not isinstance(client, StateStoreClient):
            raise ConfigurationError(f"client must be a StateStoreClient, not {type(client).__name__}")
        self._client: StateStoreClient = client
        ttl = self._ttl

        def build() -> core.StateStoreCache[bytes]:
            return core.StateStoreCache(
                client, namespace=namespace, codec="raw", default_ttl=ttl, local_cache_size=local_cache_size
            )

        # every backend object of a namespace shares one cache (dogpile builds one per region, tests many)
        self._cache = shared_object(client, ("dogpile", namespace, ttl, local_cache_size), build)

    @staticmethod
    def _loads_with(codec: Codec[Any]) -> Any:
        def loads(data: bytes) -> Any:
            try:
                return codec.loads(data)
            except (DecodeError, ValueError, TypeError) as exc:
                log.warning("dogpile backend 'sskv': an entry the codec %r cannot read is a miss: %s", codec, exc)
                raise CantDeserializeException() from exc

        return loads

    @property
    def sskv_cache(self) -> core.StateStoreCache[bytes]:
        """The :class:`~sskv_mapping.cache.StateStoreCache` behind this backend (stats, ``clear``)."""
        return self._cache

    @property
    def client(self) -> StateStoreClient:
        """The connection this backend uses."""
        return self._client

    @property
    def namespace(self) -> str:
        """The state store namespace of this backend."""
        return self._cache.namespace

    def get_mutex(self, key: KeyType) -> StateStoreMutex:
        """dogpile's creation lock for ``key``: held by one process (and thread) at a time, anywhere."""
        name = KeyLayout(self.namespace).adapter_lock("dogpile", str(key))
        lock = LeasedLock(self._client, name, lease=self._lock_lease, auto_renew=True)
        return StateStoreMutex(lock, self._lock_timeout)

    def has_lock_timeout(self) -> bool:
        """``False``: a held mutex's lease is renewed until it is released (lost only with the connection)."""
        return False

    def get_serialized(self, key: KeyType) -> SerializedReturnType:
        """The stored bytes, or ``NO_VALUE``; a store that cannot be reached raises (it is not a miss)."""
        value = self._cache.get(key)
        return NO_VALUE if value is None else value

    def get_serialized_multi(self, keys: Iterable[KeyType]) -> Sequence[SerializedReturnType]:
        """The stored bytes of each key, ``NO_VALUE`` for an absent one, in order (concurrent GETs)."""
        wanted = list(keys)
        found = self._cache.get_many(wanted)
        return [found.get(k, NO_VALUE) for k in wanted]

    def set_serialized(self, key: KeyType, value: bytes) -> None:
        """Store ``value`` (with ``expiration_time``, if set)."""
        self._cache.set(key, value)

    def set_serialized_multi(self, mapping: Mapping[KeyType, bytes]) -> None:
        """Store every pair concurrently; :class:`StateStoreError` naming the keys the store refused."""
        failed = self._cache.set_many(mapping)
        if failed:
            raise StateStoreError(f"the state store did not store {len(failed)} key(s): {sorted(failed)[:10]}")

    def delete(self, key: KeyType) -> None:
        """Delete the key (an absent key is fine)."""
        self._cache.delete(key)

    def delete_multi(self, keys: Iterable[KeyType]) -> None:
        """Delete the keys concurrently."""
        self._cache.delete_many(keys)
