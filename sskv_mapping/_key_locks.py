"""Layer 4: per-key leased locks of a cache namespace, and the fenced-write retry built on them.

``incr`` leaves its lock's fencing token on the key it writes (protocol.md §6): from then on the service
refuses an unfenced SET/DEL/VDEL of that key with "a fencing token is required". :meth:`KeyLocks.fenced` runs a
write as is and, only if the key turns out to be fenced, again under the key's lock with that lock's token, so
callers never see the fencing.

One task per key and process contends for the key's store lock (the others queue on an in-process mutex), so a
release does not wake a herd of local waiters that would all retry the same ``SET NEX``.

Must not import aiomqtt/paho, the emulator or the mapping/cache modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from ._protocol.hlc import HybridLogicalClock
from .client import AsyncStateStoreClient
from .errors import FencingTokenRequiredError, StateStoreError
from .lock import AsyncLeasedLock

__all__ = ["KeyLocks", "release_quietly"]

log = logging.getLogger("sskv_mapping.cache")

T = TypeVar("T")

#: A write that takes the fencing token to send (``None``: none).
FencedOp = Callable[[HybridLogicalClock | None], Awaitable[T]]


async def release_quietly(lock: AsyncLeasedLock) -> None:
    """Release ``lock``; a failure is logged, not raised (its lease lapses on its own; the work is done)."""
    try:
        await lock.release()
    except StateStoreError as exc:
        log.warning("could not release lock %r (its lease will run out): %s", lock.name, exc)


class _Mutex:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class KeyLocks:
    """The store locks ``<prefix>#<kind>/<key>`` of one namespace, and the in-process queue in front of them."""

    def __init__(self, client: AsyncStateStoreClient, prefix: bytes, *, lease: float, timeout: float | None) -> None:
        self.client = client
        self._prefix = prefix
        self.lease = lease
        self.timeout = timeout
        self._mutexes: dict[str, _Mutex] = {}

    def name(self, kind: str, key: str) -> bytes:
        # never a data key (``ns/<key>``, ``ns#g.<gen>/<key>``) nor an index key: namespaces hold no '#'/'/'
        return self._prefix + f"#{kind}/".encode() + key.encode("utf-8")

    def lock(self, kind: str, key: str, *, auto_renew: bool = False) -> AsyncLeasedLock:
        return AsyncLeasedLock(self.client, self.name(kind, key), lease=self.lease, auto_renew=auto_renew)

    @contextlib.asynccontextmanager
    async def _queued(self, key: str) -> AsyncIterator[None]:
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
    async def hold(self, key: str) -> AsyncIterator[AsyncLeasedLock]:
        """Hold the key's write lock (``#lock/<key>``): the lock of ``incr`` and of fenced writes."""
        async with self._queued(key):
            lock = self.lock("lock", key)
            await lock.acquire(timeout=self.timeout)
            try:
                yield lock
            finally:
                await release_quietly(lock)

    async def fenced(self, key: str, op: FencedOp[T]) -> T:
        """Run ``op(None)``; if the key is fenced, run ``op(token)`` under the key's lock instead."""
        try:
            return await op(None)
        except FencingTokenRequiredError:
            pass
        async with self.hold(key) as lock:
            return await op(lock.fencing_token)
