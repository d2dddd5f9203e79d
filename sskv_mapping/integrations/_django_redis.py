"""django-redis's extras on the Django backend: keys by pattern, expiry, locks, IGNORE_EXCEPTIONS, compression.

A mixin of :class:`sskv_mapping.integrations.django.StateStoreCache`; what the store cannot honour exactly is said
on docs/integrations/django.md ("Coming from django-redis"). Imports no Django.
"""

from __future__ import annotations

import bz2
import functools
import inspect
import logging
import lzma
import math
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from cachetools import LRUCache

from .._blocking import get_loop_thread
from .._keys import escape_glob
from .._namespace.key_layout import KeyLayout
from ..client import AsyncStateStoreClient
from ..codecs import Codec
from ..errors import ClientStateError, ConfigurationError, DecodeError, LockError, TransportError
from ..lock import AsyncLeasedLock, LeasedLock

if TYPE_CHECKING:
    from .. import cache as core

__all__ = [
    "REDIS_OPTIONS",
    "AsyncStateStoreLock",
    "CompressedCodec",
    "DjangoRedisExtras",
    "StateStoreLock",
    "guard_outages",
    "redis_options",
]

log = logging.getLogger("sskv_mapping.integrations.django")

T = TypeVar("T")

#: the django-redis OPTIONS this backend reads
REDIS_OPTIONS: Final = frozenset({"IGNORE_EXCEPTIONS", "COMPRESSOR", "COMPRESS_MIN_LENGTH"})
#: what a process remembers of the expiries it wrote (``ttl()``), most recent first
TTL_MEMORY: Final = 10_000
#: ``delete_pattern``'s default batch (keys deleted per step; the cache's ``max_fanout`` bounds those in flight)
DEFAULT_ITERSIZE: Final = 1_000
#: redis-py's ``lock(timeout=None)`` never expires; ours is a lease renewed while held
UNTIMED_LOCK_LEASE: Final = 30.0


# -- compression (OPTIONS["COMPRESSOR"]) ---------------------------------------------------------------------

_COMPRESSORS: Final[dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes, int], bytes]]]] = {}


def _zlib_decompress(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(data, limit + 1)
    if len(out) > limit or d.unconsumed_tail:
        raise DecodeError(f"a compressed value expands past {limit} bytes")
    return out


def _bounded(decompressor: Callable[[], Any]) -> Callable[[bytes, int], bytes]:
    def decompress(data: bytes, limit: int) -> bytes:
        d = decompressor()
        out: bytes = d.decompress(data, max_length=limit + 1)
        if len(out) > limit:
            raise DecodeError(f"a compressed value expands past {limit} bytes")
        return out

    return decompress


_COMPRESSORS.update(
    {
        "zlib": (zlib.compress, _zlib_decompress),
        "lzma": (lzma.compress, _bounded(lzma.LZMADecompressor)),
        "bz2": (bz2.compress, _bounded(bz2.BZ2Decompressor)),
    }
)
#: django-redis's compressor classes by dotted path -> ours
_DJANGO_REDIS_COMPRESSORS: Final = {
    "django_redis.compressors.zlib.ZlibCompressor": "zlib",
    "django_redis.compressors.lzma.LzmaCompressor": "lzma",
    "django_redis.compressors.identity.IdentityCompressor": None,
}
#: the most a stored value may expand to when decompressed (a compression bomb is refused, not inflated)
MAX_DECOMPRESSED: Final = 64 * 1024 * 1024


class CompressedCodec:
    """Another codec's bytes compressed when they are at least ``min_length`` long (a one-byte header says
    which); signing codecs keep signing (the signature is inside the compressed bytes). ``compressor`` and
    ``min_length`` as :func:`redis_options` checked them."""

    def __init__(self, inner: Codec[Any], compressor: str, *, min_length: int = 15) -> None:
        self.inner = inner
        self.compressor = compressor
        self.min_length = min_length
        self._compress, self._decompress = _COMPRESSORS[compressor]
        self.name = f"{getattr(inner, 'name', type(inner).__name__)}+{compressor}"
        self.pickles = bool(getattr(inner, "pickles", False))

    def _pack(self, data: bytes) -> bytes:
        if len(data) >= self.min_length:
            return b"\x01" + self._compress(data)
        return b"\x00" + data

    def _unpack(self, data: bytes) -> bytes:
        if data[:1] == b"\x01":
            return self._decompress(bytes(data[1:]), MAX_DECOMPRESSED)
        if data[:1] == b"\x00":
            return bytes(data[1:])
        raise DecodeError(f"not a {self.name} value (header {data[:1]!r})")

    def dumps(self, value: Any, /) -> bytes:
        """The inner codec's bytes, compressed."""
        return self._pack(self.inner.dumps(value))

    def loads(self, data: bytes, /) -> Any:
        """Decompressed (at most 64 MiB), then the inner codec's value."""
        return self.inner.loads(self._unpack(data))

    def dumps_bound(self, binding: bytes, value: Any, /) -> bytes:
        """Like :meth:`dumps`, signed for ``binding`` when the inner codec signs per key."""
        bound = getattr(self.inner, "dumps_bound", None)
        return self._pack(bound(binding, value) if bound is not None else self.inner.dumps(value))

    def loads_bound(self, binding: bytes, data: bytes, /) -> Any:
        """Like :meth:`loads`, checked for ``binding`` when the inner codec signs per key."""
        bound = getattr(self.inner, "loads_bound", None)
        raw = self._unpack(data)
        return bound(binding, raw) if bound is not None else self.inner.loads(raw)

    def __repr__(self) -> str:
        return f"CompressedCodec({self.inner!r}, {self.compressor!r})"


def redis_options(options: dict[str, Any] | Any) -> tuple[bool, str | None, int]:
    """``IGNORE_EXCEPTIONS``, the compressor's name (or ``None``) and ``COMPRESS_MIN_LENGTH`` from OPTIONS."""
    ignore = options.get("IGNORE_EXCEPTIONS", False)
    if not isinstance(ignore, bool):
        raise ConfigurationError(f"IGNORE_EXCEPTIONS must be True or False, not {ignore!r}")
    compressor = options.get("COMPRESSOR")
    if compressor is not None:
        if not isinstance(compressor, str):
            raise ConfigurationError(f"COMPRESSOR must be a name ({sorted(_COMPRESSORS)}), not {compressor!r}")
        compressor = _DJANGO_REDIS_COMPRESSORS.get(compressor, compressor)
        if compressor is not None and compressor not in _COMPRESSORS:
            raise ConfigurationError(
                f"COMPRESSOR must be one of {sorted(_COMPRESSORS)} or django-redis's zlib/lzma/identity class path, "
                f"not {options['COMPRESSOR']!r}"
            )
    min_length = options.get("COMPRESS_MIN_LENGTH", 15)
    if isinstance(min_length, bool) or not isinstance(min_length, int) or min_length < 0:
        raise ConfigurationError(f"COMPRESS_MIN_LENGTH must be an int >= 0, not {min_length!r}")
    return ignore, compressor, min_length


# -- locks --------------------------------------------------------------------------------------------------


def _lease(timeout: float | None) -> tuple[float, bool]:
    """redis-py's lock ``timeout`` as (lease, auto_renew): ``None`` never expires while we live."""
    if timeout is None:
        return UNTIMED_LOCK_LEASE, True
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigurationError(f"a lock timeout must be positive seconds or None, not {timeout!r}")
    return float(timeout), False


def _blocking_timeout(value: float | None) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
        raise ConfigurationError(f"blocking_timeout must be seconds >= 0 or None, not {value!r}")
    return None if value is None else float(value)


class StateStoreLock:
    """``cache.lock(name)``: redis-py's lock interface (``acquire``/``release``/``locked``/``owned``, a context
    manager) on a :class:`~sskv_mapping.LeasedLock`, with its ``fencing_token``. Not reentrant."""

    def __init__(self, lock: LeasedLock, *, blocking: bool, blocking_timeout: float | None) -> None:
        self.leased_lock = lock
        self.blocking = blocking
        self.blocking_timeout = _blocking_timeout(blocking_timeout)

    @property
    def name(self) -> bytes:
        """The lock's key in the store."""
        return self.leased_lock.name

    @property
    def fencing_token(self) -> Any:
        """The current grant's fencing token (:class:`~sskv_mapping.LockError` if not held)."""
        return self.leased_lock.fencing_token

    def acquire(self, blocking: bool | None = None, blocking_timeout: float | None = None) -> bool:
        """Take the lock: wait (up to ``blocking_timeout`` seconds, ``None``: forever) unless ``blocking`` is
        false; whether it is ours. A request that got no answer raises, never counts as "not acquired"."""
        wait = self.blocking if blocking is None else blocking
        if not wait:
            return self.leased_lock.try_acquire() is not None
        timeout = self.blocking_timeout if blocking_timeout is None else _blocking_timeout(blocking_timeout)
        try:
            self.leased_lock.acquire(timeout)
        except LockError:
            return False
        return True

    def release(self) -> None:
        """Give the lock up; :class:`~sskv_mapping.LockError` if it was not ours any more (redis-py's
        ``LockNotOwnedError``)."""
        if not self.leased_lock.release():
            raise LockError(f"cannot release {self.name!r}: not held by us (its lease ran out?)")

    def locked(self) -> bool:
        """Whether anyone holds the lock now."""
        return self.leased_lock.holder_of() is not None

    def owned(self) -> bool:
        """Whether we hold it (by our own clock: the lease has not run out)."""
        return self.leased_lock.held

    def __enter__(self) -> StateStoreLock:
        if not self.acquire():
            raise LockError(f"could not acquire {self.name!r} within {self.blocking_timeout} s")
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class AsyncStateStoreLock:
    """``cache.alock(name)``: :class:`StateStoreLock`'s interface awaited from any event loop (the lock runs on
    the library's loop, where its lease is renewed)."""

    def __init__(
        self,
        client: Callable[[], Coroutine[Any, Any, AsyncStateStoreClient]],
        name: str,
        *,
        lease: float,
        auto_renew: bool,
        blocking: bool,
        blocking_timeout: float | None,
    ) -> None:
        self._client = client
        self._name = name
        self._lease = lease
        self._auto_renew = auto_renew
        self._lock: AsyncLeasedLock | None = None
        self.blocking = blocking
        self.blocking_timeout = _blocking_timeout(blocking_timeout)

    async def _run(self, op: Callable[[AsyncLeasedLock], Coroutine[Any, Any, T]]) -> T:
        if self._lock is None:
            client = await self._client()
            self._lock = AsyncLeasedLock(client, self._name, lease=self._lease, auto_renew=self._auto_renew)
        return await get_loop_thread().run_async(op(self._lock))

    @property
    def fencing_token(self) -> Any:
        """The current grant's fencing token (:class:`~sskv_mapping.LockError` if not held)."""
        if self._lock is None:
            raise LockError(f"lock {self._name!r} is not held")
        return self._lock.fencing_token

    async def acquire(self, blocking: bool | None = None, blocking_timeout: float | None = None) -> bool:
        """Like :meth:`StateStoreLock.acquire`."""
        wait = self.blocking if blocking is None else blocking
        if not wait:
            return await self._run(lambda lock: lock.try_acquire()) is not None
        timeout = self.blocking_timeout if blocking_timeout is None else _blocking_timeout(blocking_timeout)
        try:
            await self._run(lambda lock: lock.acquire(timeout))
        except LockError:
            return False
        return True

    async def release(self) -> None:
        """Like :meth:`StateStoreLock.release`."""
        if not await self._run(lambda lock: lock.release()):
            raise LockError(f"cannot release {self._name!r}: not held by us (its lease ran out?)")

    async def locked(self) -> bool:
        """Whether anyone holds the lock now."""
        return await self._run(lambda lock: lock.holder_of()) is not None

    async def owned(self) -> bool:
        """Whether we hold it."""
        return self._lock is not None and self._lock.held

    async def __aenter__(self) -> AsyncStateStoreLock:
        if not await self.acquire():
            raise LockError(f"could not acquire {self._name!r} within {self.blocking_timeout} s")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.release()


# -- the mixin ------------------------------------------------------------------------------------------------


def _seconds_until(when: datetime | float | int) -> float:
    if isinstance(when, datetime):
        now = datetime.now(when.tzinfo) if when.tzinfo is not None else datetime.now()
        return (when - now).total_seconds()
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise ConfigurationError(f"expire_at takes a datetime or a Unix time, not {when!r}")
    return float(when) - time.time()


def _ms_to_seconds(when: datetime | float) -> datetime | float:
    if isinstance(when, datetime):
        return when
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise ConfigurationError(f"pexpire_at takes a datetime or a Unix time in milliseconds, not {when!r}")
    return when / 1000


def _default_timeout() -> Any:
    return _DEFAULT


def _as_seconds(timeout: float | timedelta) -> float:
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout):
        raise ConfigurationError(f"a timeout must be seconds or a timedelta, not {timeout!r}")
    return float(timeout)


class DjangoRedisExtras:
    """django-redis's methods beyond Django's ``BaseCache`` (see docs/integrations/django.md)."""

    if TYPE_CHECKING:
        # what the host class (the Django backend) provides
        @property
        def namespace(self) -> str: ...

        default_timeout: int | None

        def _cache(self) -> core.StateStoreCache[Any]: ...
        async def _acache(self) -> core.AsyncStateStoreCache[Any]: ...
        def make_key(self, key: str, version: int | None = None) -> str: ...
        def make_and_validate_key(self, key: str, version: int | None = None) -> str: ...
        def _ttl(self, timeout: object) -> float | None: ...

    _ignore_exceptions: bool = False
    _expiries: LRUCache[str, float | None]
    _expiries_lock: threading.Lock

    def _init_redis_extras(self, options: Any) -> None:
        self._ignore_exceptions, _, _ = redis_options(options)
        self._expiries = LRUCache(TTL_MEMORY)
        self._expiries_lock = threading.Lock()

    # -- what this process wrote: the expiries ttl() reports ------------------------------------------------

    def _remember(self, made: str, seconds: float | None) -> None:
        """Record that ``made`` now expires in ``seconds`` (``None``: never; ``<= 0``: gone)."""
        with self._expiries_lock:
            if seconds is not None and seconds <= 0:
                self._expiries.pop(made, None)
            else:
                self._expiries[made] = None if seconds is None else time.time() + seconds

    def _forget(self, made: str) -> None:
        with self._expiries_lock:
            self._expiries.pop(made, None)

    def _record_write(self, name: str, bound: inspect.BoundArguments, result: Any) -> None:
        """Note the expiry a successful write of the base class left (``name``: the method, sync or async)."""
        args = bound.arguments
        version = args.get("version")
        if name == "clear":
            with self._expiries_lock:
                self._expiries.clear()
        elif name in ("set", "add", "touch"):
            if result is not False:  # add: not stored; touch: absent
                self._remember(self.make_key(args["key"], version=version), self._ttl(args.get("timeout", _DEFAULT)))
        elif name == "set_many":
            seconds = self._ttl(args.get("timeout", _DEFAULT))
            failed = set(result or ())
            for key in args["data"]:
                if key not in failed:
                    self._remember(self.make_key(key, version=version), seconds)
        elif name in ("incr", "decr"):  # the core restarts a counter's expiry at TIMEOUT
            self._remember(self.make_key(args["key"], version=version), self._ttl(_DEFAULT))
        elif name == "delete":
            self._forget(self.make_key(args["key"], version=version))
        elif name == "delete_many":
            for key in args["keys"]:
                self._forget(self.make_key(key, version=version))

    def _remaining_ms(self, made: str, exists: bool) -> int | None:
        if not exists:
            self._forget(made)
            return 0
        with self._expiries_lock:
            if made not in self._expiries:
                return None  # written elsewhere (another process, another client's PX): not known here
            at = self._expiries[made]
        return None if at is None else max(0, round((at - time.time()) * 1000))

    # -- patterns -----------------------------------------------------------------------------------------------

    def make_pattern(self, pattern: str, version: int | None = None) -> tuple[bytes, bytes]:
        """The store glob matching ``pattern`` (a glob over this backend's keys: ``*``, ``?``, ``[...]``) with
        ``KEY_PREFIX``/``VERSION`` applied, and the literal part every match starts with."""
        head, tail = _around_key(self, pattern, version)
        prefix = self._cache().data_key("x")[:-1] + head
        return escape_glob(prefix) + pattern.encode("utf-8") + tail, prefix

    def _unmade(self, store_key: bytes, prefix: bytes, tail: int) -> str:
        return store_key[len(prefix) : len(store_key) - tail].decode("utf-8", "replace")

    def _tail(self, version: int | None) -> int:
        return len(self.make_key(_MARKER, version=version).partition(_MARKER)[2].encode("utf-8"))

    def iter_keys(self, search: str, itersize: int | None = None, version: int | None = None) -> Iterator[str]:
        """The keys matching the glob ``search``, lazily, one service page at a time (SCAN). ``itersize`` is
        accepted for django-redis's signature: the service chooses its page size."""
        glob, prefix = self.make_pattern(search, version)
        tail = self._tail(version)
        for page in self._cache().client.scan_pages(glob):
            for key in page:
                yield self._unmade(key, prefix, tail)

    def keys(self, search: str, version: int | None = None) -> list[str]:
        """Every key matching the glob ``search`` (``"user:*"``), without ``KEY_PREFIX``/``VERSION``."""
        return list(self.iter_keys(search, version=version))

    def delete_pattern(
        self,
        pattern: str,
        version: int | None = None,
        prefix: str | None = None,
        itersize: int | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Delete every key matching the glob ``pattern``; how many were deleted.

        One SCAN page at a time, each deleted in batches of ``itersize`` (1,000) with at most the cache's
        ``max_fanout`` deletes in flight: memory and requests stay bounded whatever the number of keys.
        ``progress(scanned, deleted)`` is called after each batch. ``prefix`` (django-redis's) is not supported:
        the backend's own ``KEY_PREFIX`` applies."""
        if prefix is not None:
            raise ConfigurationError("delete_pattern(prefix=) is not supported: the backend's KEY_PREFIX applies")
        batch = _itersize(itersize)
        glob, key_prefix = self.make_pattern(pattern, version)
        acache = self._cache().async_cache
        return get_loop_thread().run(_delete_matching(acache, glob, key_prefix, self._forget, batch, progress))

    # -- expiry ----------------------------------------------------------------------------------------------

    def ttl(self, key: str, version: int | None = None) -> int | None:
        """Seconds the key has left (rounded up): ``0`` if absent; ``None`` if it never expires, *or if this
        process did not write its expiry* (the store does not report a key's remaining TTL: only the expiry this
        backend wrote here is known; one written by another process or client cannot be)."""
        ms = self.pttl(key, version)
        return ms if ms is None else math.ceil(ms / 1000)

    def pttl(self, key: str, version: int | None = None) -> int | None:
        """Milliseconds the key has left; see :meth:`ttl` for what can and cannot be known."""
        made = self.make_and_validate_key(key, version=version)
        return self._remaining_ms(made, self._cache().exists(made))

    def _expiry_seconds(self, timeout: object, scale: float = 1.0) -> float | None:
        """``timeout`` (``scale`` of a second each) as seconds; Django's ``DEFAULT_TIMEOUT``: the backend's."""
        if timeout is _default_timeout():
            return self._ttl(timeout)
        return _as_seconds(timeout) * scale  # type: ignore[arg-type]

    def _expire(self, key: str, version: int | None, seconds: float | None) -> bool:
        made = self.make_and_validate_key(key, version=version)
        done = self._cache().expire(made, seconds)
        if done:
            self._remember(made, seconds)
        return done

    def expire(self, key: str, timeout: float | timedelta, version: int | None = None) -> bool:
        """Restart the key's expiry at ``timeout`` seconds (``<= 0``: delete it; ``DEFAULT_TIMEOUT``: the
        backend's ``TIMEOUT``); whether the key exists."""
        return self._expire(key, version, self._expiry_seconds(timeout))

    def pexpire(self, key: str, timeout: int, version: int | None = None) -> bool:
        """:meth:`expire` in milliseconds."""
        return self._expire(key, version, self._expiry_seconds(timeout, 1 / 1000))

    def expire_at(self, key: str, when: datetime | float, version: int | None = None) -> bool:
        """Make the key expire at ``when`` (a datetime, naive = local time, or a Unix time); in the past: delete."""
        return self.expire(key, _seconds_until(when), version=version)

    def pexpire_at(self, key: str, when: datetime | float, version: int | None = None) -> bool:
        """:meth:`expire_at` with a Unix time in milliseconds (a datetime is the same either way)."""
        return self.expire_at(key, _ms_to_seconds(when), version=version)

    def persist(self, key: str, version: int | None = None) -> bool:
        """Remove the key's expiry; whether the key exists."""
        return self._expire(key, version, None)

    # -- locks -----------------------------------------------------------------------------------------------

    def _lock_name(self, key: str, version: int | None) -> str:
        made = self.make_and_validate_key(key, version=version)
        return KeyLayout(self.namespace).adapter_lock("django", made).decode("utf-8")

    def lock(
        self,
        key: str,
        version: int | None = None,
        timeout: float | None = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        thread_local: bool = True,
    ) -> StateStoreLock:
        """A lock shared by every process (a :class:`~sskv_mapping.LeasedLock`): ``timeout`` is its lease (it
        expires after that long, as redis-py's); ``None``: held until released, the lease renewed meanwhile.
        ``sleep`` and ``thread_local`` are redis-py's and not needed here (waiting is on notifications)."""
        lease, renew = _lease(timeout)
        leased = LeasedLock(self._cache().client, self._lock_name(key, version), lease=lease, auto_renew=renew)
        return StateStoreLock(leased, blocking=blocking, blocking_timeout=blocking_timeout)

    # -- async twins ---------------------------------------------------------------------------------------

    async def _aclient(self) -> AsyncStateStoreClient:
        return (await self._acache()).client

    async def _aon_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        return await get_loop_thread().run_async(coro)

    async def aiter_keys(
        self, search: str, itersize: int | None = None, version: int | None = None
    ) -> AsyncIterator[str]:
        """Like :meth:`iter_keys`, from any event loop."""
        acache = await self._acache()
        glob, prefix = await self._aon_loop(_pattern_on_loop(acache, self, search, version))
        tail = self._tail(version)
        pages = acache.client.scan_pages(glob).__aiter__()

        async def next_page() -> list[bytes] | None:
            try:
                return await pages.__anext__()
            except StopAsyncIteration:
                return None

        while (page := await self._aon_loop(next_page())) is not None:
            for key in page:
                yield self._unmade(key, prefix, tail)

    async def akeys(self, search: str, version: int | None = None) -> list[str]:
        """Like :meth:`keys`."""
        return [k async for k in self.aiter_keys(search, version=version)]

    async def adelete_pattern(
        self,
        pattern: str,
        version: int | None = None,
        prefix: str | None = None,
        itersize: int | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Like :meth:`delete_pattern` (``progress`` is called on the library's loop thread)."""
        if prefix is not None:
            raise ConfigurationError("delete_pattern(prefix=) is not supported: the backend's KEY_PREFIX applies")
        batch = _itersize(itersize)
        acache = await self._acache()
        glob, key_prefix = await self._aon_loop(_pattern_on_loop(acache, self, pattern, version))
        return await self._aon_loop(_delete_matching(acache, glob, key_prefix, self._forget, batch, progress))

    async def attl(self, key: str, version: int | None = None) -> int | None:
        """Like :meth:`ttl`."""
        ms = await self.apttl(key, version)
        return ms if ms is None else math.ceil(ms / 1000)

    async def apttl(self, key: str, version: int | None = None) -> int | None:
        """Like :meth:`pttl`."""
        made = self.make_and_validate_key(key, version=version)
        acache = await self._acache()
        return self._remaining_ms(made, await self._aon_loop(acache.exists(made)))

    async def _aexpire(self, key: str, version: int | None, seconds: float | None) -> bool:
        made = self.make_and_validate_key(key, version=version)
        acache = await self._acache()
        done = await self._aon_loop(acache.expire(made, seconds))
        if done:
            self._remember(made, seconds)
        return done

    async def aexpire(self, key: str, timeout: float | timedelta, version: int | None = None) -> bool:
        """Like :meth:`expire`."""
        return await self._aexpire(key, version, self._expiry_seconds(timeout))

    async def apexpire(self, key: str, timeout: int, version: int | None = None) -> bool:
        """Like :meth:`pexpire`."""
        return await self._aexpire(key, version, self._expiry_seconds(timeout, 1 / 1000))

    async def aexpire_at(self, key: str, when: datetime | float, version: int | None = None) -> bool:
        """Like :meth:`expire_at`."""
        return await self.aexpire(key, _seconds_until(when), version=version)

    async def apexpire_at(self, key: str, when: datetime | float, version: int | None = None) -> bool:
        """Like :meth:`pexpire_at`."""
        return await self.aexpire_at(key, _ms_to_seconds(when), version=version)

    async def apersist(self, key: str, version: int | None = None) -> bool:
        """Like :meth:`persist`."""
        return await self._aexpire(key, version, None)

    def alock(
        self,
        key: str,
        version: int | None = None,
        timeout: float | None = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        thread_local: bool = True,
    ) -> AsyncStateStoreLock:
        """Like :meth:`lock`, for ``async with cache.alock("name"):`` (connects on its first use)."""
        lease, renew = _lease(timeout)
        return AsyncStateStoreLock(
            self._aclient,
            self._lock_name(key, version),
            lease=lease,
            auto_renew=renew,
            blocking=blocking,
            blocking_timeout=blocking_timeout,
        )


def _itersize(itersize: int | None) -> int:
    if itersize is None:
        return DEFAULT_ITERSIZE
    if isinstance(itersize, bool) or not isinstance(itersize, int) or itersize < 1:
        raise ConfigurationError(f"itersize must be an int >= 1, not {itersize!r}")
    return itersize


_MARKER = "\x00sskv-pattern\x00"


def _around_key(host: DjangoRedisExtras, pattern: str, version: int | None) -> tuple[bytes, bytes]:
    """What KEY_FUNCTION puts before a key (encoded) and after it (escaped for a glob); ``pattern`` checked first."""
    if not isinstance(pattern, str) or not pattern:
        raise ConfigurationError(f"a key pattern must be a non-empty str, not {pattern!r}")
    head, found, tail = host.make_key(_MARKER, version=version).partition(_MARKER)
    if not found:
        raise ConfigurationError("KEY_FUNCTION does not keep the key in the key it makes: no pattern can be built")
    return head.encode("utf-8"), escape_glob(tail.encode("utf-8"))


async def _pattern_on_loop(
    acache: core.AsyncStateStoreCache[Any], host: DjangoRedisExtras, pattern: str, version: int | None
) -> tuple[bytes, bytes]:
    head, tail = _around_key(host, pattern, version)
    prefix = (await acache.data_key("x"))[:-1] + head
    return escape_glob(prefix) + pattern.encode("utf-8") + tail, prefix


async def _delete_matching(
    acache: core.AsyncStateStoreCache[Any],
    glob: bytes,
    prefix: bytes,
    forget: Callable[[str], None],
    batch: int,
    progress: Callable[[int, int], None] | None,
) -> int:
    """SCAN page by page; each page's keys deleted ``batch`` at a time (the cache bounds those in flight)."""
    cache_prefix = (await acache.data_key("x"))[:-1]
    scanned = deleted = 0
    async for page in acache.client.scan_pages(glob):
        for start in range(0, len(page), batch):
            keys = [k[len(cache_prefix) :].decode("utf-8", "replace") for k in page[start : start + batch]]
            deleted += await acache.delete_many(keys)
            scanned += len(keys)
            for key in keys:
                forget(key)
            if progress is not None:
                progress(scanned, deleted)
    log.debug("delete_pattern %r: %d scanned, %d deleted", glob, scanned, deleted)
    return deleted


# -- IGNORE_EXCEPTIONS and the expiries the base methods write ----------------------------------------------

#: what a store outage is (a store that answers with an error about the request is not one)
OUTAGES: Final = (TransportError, ClientStateError)

_EMPTY: Final[dict[str, Callable[[inspect.BoundArguments], Any]]] = {
    "get": lambda a: a.arguments.get("default"),
    "get_many": lambda a: {},
    "set": lambda a: None,
    "add": lambda a: False,
    "touch": lambda a: False,
    "delete": lambda a: False,
    "has_key": lambda a: False,
    "set_many": lambda a: list(a.arguments.get("data") or {}),
    "delete_many": lambda a: None,
    "clear": lambda a: None,
    "incr": lambda a: None,
    "decr": lambda a: None,
    "get_or_set": lambda a: _called(a.arguments.get("default")),
    "keys": lambda a: [],
    "delete_pattern": lambda a: 0,
    "ttl": lambda a: None,
    "pttl": lambda a: None,
    "expire": lambda a: False,
    "expire_at": lambda a: False,
    "persist": lambda a: False,
}


def _called(default: Any) -> Any:
    return default() if callable(default) else default


_DEFAULT: Any = object()  # replaced by Django's DEFAULT_TIMEOUT in guard_outages
_RECORDED: Final = ("set", "add", "touch", "set_many", "delete", "delete_many", "incr", "decr", "clear")


def _guarded_sync(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(method)
    empty = _EMPTY.get(name)

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = method(self, *args, **kwargs)
        except OUTAGES as exc:
            if not self._ignore_exceptions or empty is None:
                raise
            log.warning("IGNORE_EXCEPTIONS: %s() answered its default: the store is unreachable: %s", name, exc)
            return empty(signature.bind(self, *args, **kwargs))
        if name in _RECORDED:
            self._record_write(name, signature.bind(self, *args, **kwargs), result)
        return result

    return guarded


def _guarded_async(name: str, method: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    signature = inspect.signature(method)
    empty = _EMPTY.get(name[1:])

    @functools.wraps(method)
    async def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = await method(self, *args, **kwargs)
        except OUTAGES as exc:
            if not self._ignore_exceptions or empty is None:
                raise
            log.warning("IGNORE_EXCEPTIONS: %s() answered its default: the store is unreachable: %s", name, exc)
            value = empty(signature.bind(self, *args, **kwargs))
            return await value if inspect.isawaitable(value) else value
        if name[1:] in _RECORDED:
            self._record_write(name[1:], signature.bind(self, *args, **kwargs), result)
        return result

    return guarded


def guard_outages(cls: type[T], default_timeout: object) -> type[T]:
    """Wrap the backend's methods: with ``IGNORE_EXCEPTIONS`` a store outage answers the method's "nothing"
    (``get``'s default, ``False``, ``[]``...) and is logged; each write records the expiry it set (:meth:`ttl`)."""
    global _DEFAULT
    _DEFAULT = default_timeout
    for name in [*_EMPTY, *_RECORDED]:
        for variant in (name, "a" + name):
            method = cls.__dict__.get(variant) or getattr(cls, variant, None)
            if method is None or getattr(method, "__sskv_guarded__", False):
                continue
            wrapped = (
                _guarded_async(variant, method) if inspect.iscoroutinefunction(method) else _guarded_sync(name, method)
            )
            wrapped.__sskv_guarded__ = True  # type: ignore[attr-defined]
            setattr(cls, variant, wrapped)
    return cls
