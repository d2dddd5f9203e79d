"""Per-key leased locks of a cache namespace, the fenced-write retry built on them, and :class:`OwnedLock`.

Design: docs/design/namespaces.md, "The namespace store and its parts".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from .._protocol.hlc import HybridLogicalClock
from ..client._client import AsyncStateStoreClient
from ..client._in_flight import foreground
from ..errors import FencingTokenRequiredError, LockError, StateStoreError, TransportError
from ..lock import AsyncLeasedLock
from .fanout import gather_bounded
from .key_layout import KeyLayout, LockKind

__all__ = ["KeyLocks", "OwnedLock", "drain_owned", "owned_lock", "release_quietly"]

log = logging.getLogger("sskv_mapping.cache")

T = TypeVar("T")

_DRAIN_FAN_OUT = 16

#: A write that takes the fencing token to send (``None``: none).
FencedOp = Callable[[HybridLogicalClock | None], Awaitable[T]]


async def release_quietly(lock: AsyncLeasedLock) -> None:
    """Release ``lock``; a failure is logged, not raised (its lease lapses on its own; the work is done)."""
    try:
        await lock.release()
    except StateStoreError as exc:
        log.warning("could not release lock %r (its lease will run out): %s", lock.name, exc)


# client -> lock name -> its record; a record leaves once nobody uses it and its lock is released
_owned: weakref.WeakKeyDictionary[AsyncStateStoreClient, dict[bytes, OwnedLock]] = weakref.WeakKeyDictionary()
_process_ids: weakref.WeakKeyDictionary[AsyncStateStoreClient, str] = weakref.WeakKeyDictionary()


def owned_lock(client: AsyncStateStoreClient, name: bytes, *, lease: float, keep: float = 0.0) -> OwnedLock:
    """The record of lock ``name`` for ``client`` (made on first use; ``lease``/``keep`` of the first caller)."""
    records = _owned.setdefault(client, {})
    record = records.get(name)
    if record is None:
        ident = _process_ids.get(client)
        if ident is None:
            ident = _process_ids[client] = f"{client.client_id}/{secrets.token_hex(6)}"
        record = records[name] = OwnedLock(client, name, ident, lease=lease, keep=keep)
    return record


async def drain_owned(client: AsyncStateStoreClient, names: set[bytes] | None = None) -> None:
    """Release the kept locks among ``names`` (default: all of the client's) and wait for their releases."""
    records = [r for n, r in list(_owned.get(client, {}).items()) if names is None or n in names]
    # one release per kept lock at most (a namespace holds one per index shard it wrote lately): a few at a time
    await gather_bounded((r.drain() for r in records), _DRAIN_FAN_OUT)


class OwnedLock:
    """One store lock as this client holds it for its tasks, one at a time (docs/design/namespaces.md, "The
    namespace store and its parts").

    ``tenure`` counts fresh acquisitions: while it stays the same between two holds, nobody else held the lock
    in between (a caller may trust what it read or wrote under the lock then).
    """

    def __init__(self, client: AsyncStateStoreClient, name: bytes, ident: str, *, lease: float, keep: float) -> None:
        self.client = client
        self.name = name
        self._ident = ident
        self._lease = lease
        self.keep = keep
        self._mutex = asyncio.Lock()
        self._users = 0
        self._serial = 0
        self.tenure = 0
        self._lock = self._new_lock()
        self._taken = False  # True from a SET NEX sent (its reply may be lost) until a release is confirmed
        self._continuous = False  # held without a gap since the last hold ended cleanly
        self._idle: asyncio.TimerHandle | None = None
        self._releasing: set[asyncio.Task[None]] = set()

    def _new_lock(self) -> AsyncLeasedLock:
        self._serial += 1
        return AsyncLeasedLock(self.client, self.name, holder=f"{self._ident}.{self._serial}", lease=self._lease)

    @contextlib.asynccontextmanager
    async def hold(self, timeout: float | None) -> AsyncIterator[AsyncLeasedLock]:
        """Hold the lock (waiting up to ``timeout`` for this process's other holders and for the store lock)."""
        self._users += 1
        try:
            async with asyncio.timeout(timeout):
                await self._mutex.acquire()
        except TimeoutError:
            self._users -= 1
            self._forget_if_idle()
            raise LockError(f"timed out after {timeout} s waiting for lock {self.name!r}") from None
        outcome: BaseException | None = None
        try:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            lock = self._lock
            # reuse a kept lock while at least half its lease is left (by our clock); else (re-)take it: SET NEX
            # with the same holder value renews our own lock at once, even one whose grant or release reply a
            # dropped connection lost
            kept = self._taken and lock.held and lock.lease_deadline - time.monotonic() >= lock.lease_ms / 2000
            if not kept:
                continuous = self._continuous and lock.held
                self._continuous = False
                self._taken = True
                try:
                    await lock.acquire(timeout=timeout)
                except LockError:
                    self._taken = False  # someone else held it all along: nothing of ours to release
                    raise
                if not continuous:
                    self.tenure += 1
            self._continuous = False
            yield lock
        except BaseException as exc:
            outcome = exc
            raise
        finally:
            self._users -= 1
            self._after_hold(outcome)
            self._mutex.release()

    def _after_hold(self, outcome: BaseException | None) -> None:
        if not self._taken:
            self._forget_if_idle()
        elif outcome is None:
            self._continuous = True
            if self._users > 0:
                return  # handed to the next holder of this process as it is
            if self.keep > 0:
                self._idle = asyncio.get_running_loop().call_later(self.keep, self._release_soon)
            else:
                self._release_soon()
        elif isinstance(outcome, TransportError):
            # maybe still ours: the next holder here re-takes it at once; if none comes, release it once the
            # connection is back
            self._spawn(self._release_after_reconnect(self._lock))
        else:
            self._release_soon()

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            await work

        task = asyncio.get_running_loop().create_task(run(), name=f"sskv-release-{self.name!r}")
        self._releasing.add(task)
        task.add_done_callback(self._released)

    def _release_soon(self) -> None:
        """Release in the background. The next holder takes the lock under a new holder value meanwhile, so a
        late VDEL of this one cannot delete its lock (it waits for the DELETE instead)."""
        self._idle = None
        if self._users > 0 or not self._taken:
            return  # a holder of this process is about to use it (or there is nothing to release)
        lock, self._lock, self._taken, self._continuous = self._lock, self._new_lock(), False, False
        self._spawn(self._release(lock))

    async def _release_after_reconnect(self, lock: AsyncLeasedLock) -> None:
        with contextlib.suppress(StateStoreError):
            await self.client.wait_connected(lock.lease_ms / 1000)
        if self._lock is lock and self._users == 0 and self._idle is None and not self._continuous:
            self._release_soon()

    @staticmethod
    async def _release(lock: AsyncLeasedLock) -> None:
        # a release lost to a dropped connection is sent again (the request waits for the reconnect) until the
        # lease is surely over: a waiter watches the lock for the DELETE it makes
        deadline = time.monotonic() + lock.lease_ms / 1000
        while True:
            try:
                await lock.client.vdelete(lock.name, lock.holder, timeout=max(deadline - time.monotonic(), 0.5))
                return
            except TransportError as exc:
                if time.monotonic() >= deadline:
                    log.warning("could not release lock %r (its lease ran out meanwhile): %s", lock.name, exc)
                    return
            except StateStoreError as exc:
                log.warning("could not release lock %r (its lease will run out): %s", lock.name, exc)
                return

    def _released(self, task: asyncio.Task[None]) -> None:
        self._releasing.discard(task)
        self._forget_if_idle()

    def _forget_if_idle(self) -> None:
        if self._users == 0 and not self._taken and not self._releasing and self._idle is None:
            records = _owned.get(self.client)
            if records is not None and records.get(self.name) is self:
                del records[self.name]

    async def drain(self) -> None:
        """Release a kept lock now and wait for the releases under way (a namespace's close)."""
        if self._idle is not None:
            self._idle.cancel()
            self._release_soon()
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)


class KeyLocks:
    """The store locks ``<ns>#<kind>/<key>`` of one namespace."""

    def __init__(self, client: AsyncStateStoreClient, keys: KeyLayout, *, lease: float, timeout: float | None) -> None:
        self.client = client
        self._keys = keys
        self.lease = lease
        self.timeout = timeout

    def name(self, kind: LockKind, key: str) -> bytes:
        return self._keys.key_lock(kind, key)

    def lock(self, kind: LockKind, key: str, *, auto_renew: bool = False) -> AsyncLeasedLock:
        return AsyncLeasedLock(self.client, self.name(kind, key), lease=self.lease, auto_renew=auto_renew)

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[AsyncLeasedLock]:
        """Hold the key's write lock (``#lock/<key>``): the lock of ``incr`` and of fenced writes."""
        # one task per key and process at a time (the record's mutex); re-taken at once after a reconnect
        async with owned_lock(self.client, self.name("lock", key), lease=self.lease).hold(self.timeout) as lock:
            yield lock

    async def fenced(self, key: str, op: FencedOp[T]) -> T:
        """Run ``op(None)``; if the key is fenced, run ``op(token)`` under the key's lock instead."""
        try:
            return await op(None)
        except FencingTokenRequiredError:
            pass
        # a lock's requests, its lease renewals and its release never wait behind background work, even for a sweep
        with foreground():
            async with self.hold(key) as lock:
                return await op(lock.fencing_token)
