"""Leased locks whose grant is a fencing token (docs/design/protocol.md §6); a lock never fails open.

How to use them: docs/guide/locks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import weakref
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType

from ._blocking import BlockingTwin
from ._keys import store_key
from ._protocol.commands import SetCondition, VDeleteResult
from ._protocol.hlc import HybridLogicalClock
from ._protocol.notifications import KeyEvent, KeyOperation
from ._ttl import TtlLike, ttl_to_ms
from .client._client import (
    AsyncStateStoreClient,
    KeyLike,
    KeySubscription,
    SetResult,
    StateStoreClient,
)
from .client._closing import unless_closed
from .errors import (
    ConfigurationError,
    ConnectionLostError,
    LockError,
    RequestTimeoutError,
    StateStoreError,
    TransportError,
)

__all__ = ["AsyncLeasedLock", "LeasedLock"]

log = logging.getLogger("sskv_mapping.lock")

#: the lock objects of this process that hold a lock now, by (broker, lock name, holder value): a second object of
#: another client asking for the same lock under the same holder value is refused (both would believe they hold it)
_holding: weakref.WeakValueDictionary[tuple[str, bytes, bytes], AsyncLeasedLock] = weakref.WeakValueDictionary()


class AsyncLeasedLock:
    """A leased lock in the state store.

    Example:
        >>> async def main(client: AsyncStateStoreClient) -> None:  # doctest: +SKIP
        ...     lock = AsyncLeasedLock(client, "orders-lock", lease=10)
        ...     async with lock:                          # waits for the lock, releases at the end
        ...         await lock.set("orders", b"...")      # written with the fencing token
        ...     token = await lock.try_acquire()          # None if someone else holds it

    Args:
        client: a connected :class:`AsyncStateStoreClient`.
        name: the lock key.
        holder: this holder's value in the lock key (default: client id + a random suffix, so two locks
            in one process never mistake each other for themselves). The value *is* the holder's identity: lock
            objects given the same value share one lease (``SET NEX``: how a lost grant is re-taken, and how the
            .NET and Go SDKs behave), so give each holder its own. Two clients of one process asking for the
            same lock under the same value get a :class:`LockError` (docs/guide/locks.md).
        lease: lease length in seconds; the key expires after it unless renewed.
        auto_renew: renew in the background every ``lease * renew_fraction`` while held.
        monotonic: the monotonic clock (seconds) that tells when our own lease has surely run out; inject a fake one
            in tests.
    """

    def __init__(
        self,
        client: AsyncStateStoreClient,
        name: KeyLike,
        *,
        holder: KeyLike | None = None,
        lease: float | timedelta = 10.0,
        auto_renew: bool = False,
        renew_fraction: float = 0.5,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.name = store_key(name)
        if holder is None:
            holder = f"{client.client_id}/{uuid.uuid4().hex[:12]}"
        self.holder = store_key(holder)
        lease_ms = ttl_to_ms(lease)
        if lease_ms is None:
            raise ConfigurationError("a lease must have a length")
        self.lease_ms = lease_ms
        if not 0 < renew_fraction < 1:
            raise ConfigurationError("renew_fraction must be between 0 and 1")
        self._renew_fraction = renew_fraction
        self._auto_renew = auto_renew
        self._clock = monotonic
        self._token: HybridLogicalClock | None = None
        self._lease_deadline = 0.0
        self._renew_task: asyncio.Task[None] | None = None
        self._lost: str | None = None

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<AsyncLeasedLock {self.name!r} holder={self.holder!r} {state}>"

    # -- state --------------------------------------------------------------------------------------------

    @property
    def held(self) -> bool:
        """True while we hold a lease that has not run out by our own clock."""
        return self._token is not None and self._lost is None and self._clock() < self._lease_deadline

    @property
    def fencing_token(self) -> HybridLogicalClock:
        """The current fencing token; :class:`LockError` if the lock is not (surely) held."""
        if self._token is None:
            raise LockError(f"lock {self.name!r} is not held")
        if self._lost is not None:
            raise LockError(f"lock {self.name!r} was lost: {self._lost}")
        if self._clock() >= self._lease_deadline:
            raise LockError(f"the lease on {self.name!r} ran out before it was renewed")
        return self._token

    @property
    def lease_deadline(self) -> float:
        """When (by this lock's clock) the current lease surely ends unless renewed; ``-inf`` if not held."""
        return self._lease_deadline if self._token is not None else float("-inf")

    # -- acquire / renew / release ------------------------------------------------------------------------

    def _check_holder_unique(self) -> None:
        """Refuse (:class:`LockError`, nothing sent) while a lock object of another client of this process holds
        this lock under the same holder value: both would take the lease and believe they hold it alone."""
        other = _holding.get(self._holding_key)
        if other is not None and other is not self and other.client is not self.client and other.held:
            raise LockError(
                f"lock {self.name!r} is held under the same holder value {self.holder!r} by another client's lock "
                "object in this process: give each holder its own value (leave holder= out for a unique one)"
            )

    @property
    def _holding_key(self) -> tuple[str, bytes, bytes]:
        return (self.client.settings.url, self.name, self.holder)

    async def _set_nex(self) -> SetResult:
        self._check_holder_unique()
        started = self._clock()
        lease = timedelta(milliseconds=self.lease_ms)  # exact: no ms -> s -> ms round trip
        result = await self.client.set(self.name, self.holder, condition=SetCondition.NEX, ttl=lease)
        if result.applied:
            if result.version is None:
                # never fail open: without the response __ts we have no fencing token
                raise LockError(f"the service granted {self.name!r} without a fencing token (__ts)")
            self._token = result.version
            self._lost = None
            # the lease started no later than our request did
            self._lease_deadline = started + self.lease_ms / 1000
            _holding[self._holding_key] = self
        return result

    async def try_acquire(self) -> HybridLogicalClock | None:
        """One attempt: the fencing token if we now hold the lock, ``None`` if someone else does."""
        result = await self._set_nex()
        if not result.applied:
            return None
        self._start_renewing()
        return result.version

    async def acquire(self, timeout: float | None = None) -> HybridLogicalClock:
        """Wait for the lock (KEYNOTIFY on the lock key, retry on each DELETE); returns the fencing token.

        Raises :class:`LockError` when ``timeout`` seconds pass without getting it; a request of ours that got
        no answer in its own timeout raises :class:`RequestTimeoutError` (naming the verb) instead; a client
        that is closed, or closes while we wait, ends the wait at once with :class:`ClientStateError` (with or
        without a timeout).
        """
        changed = asyncio.Event()

        def on_event(event: KeyEvent) -> None:
            # a release or expiry; or a synthetic event after a reconnect (we may have missed a DELETE)
            if event.op is KeyOperation.DELETE or event.synthetic:
                changed.set()

        # An uncontended lock costs one round trip: try before watching. If that fails, watch first, then try
        # again: a release between that try and the watch cannot be missed.
        sub: KeySubscription | None = None
        try:
            async with asyncio.timeout(timeout):
                token = await self.try_acquire()
                if token is not None:
                    return token
                sub = await self.client.subscribe_key(self.name, on_event)
                while True:
                    changed.clear()
                    try:
                        token = await self.try_acquire()
                    except ConnectionLostError:
                        # the connection dropped under our SET NEX, which may have been granted with the reply lost:
                        # the next one, with the same holder value, re-takes it at once once the connection is back
                        # (a request that got no answer on a live connection is a RequestTimeoutError: raised)
                        await self.client.wait_connected()
                        continue
                    if token is not None:
                        return token
                    # only a notification sets `changed`: a closed client ends the wait at once instead
                    await unless_closed(self.client, changed.wait(), f"waiting for lock {self.name!r}")
        except RequestTimeoutError:
            # a request that got no answer (lost by a broker, say) is that, not a lock held too long by another
            raise
        except TimeoutError:
            raise LockError(f"timed out after {timeout} s waiting for lock {self.name!r}") from None
        finally:
            if sub is not None:
                await sub.close()

    async def renew(self) -> HybridLogicalClock:
        """Extend the lease; returns the new fencing token or raises :class:`LockError`.

        The lock key is read first: a key that is gone (deleted by anyone, a dict's ``clear()`` of a namespace the
        name is in, or expired) or holds another value means the lock was lost, and it is not taken again by the
        renewal (``SET NEX`` alone would re-create a deleted key): :attr:`held` turns false."""
        if self._token is None:
            raise LockError(f"cannot renew {self.name!r}: not held")
        if self._lost is not None:
            raise LockError(f"cannot renew {self.name!r}: it was lost ({self._lost})")
        try:
            current = await self.client.get(self.name)
            if current is None:
                self._lost = "the lock key was deleted (by someone else, or its lease ran out)"
                raise LockError(f"lock {self.name!r} was lost: {self._lost}")
            if current.value != self.holder:
                self._lost = "another holder has the lock"
                raise LockError(f"lock {self.name!r} is held by someone else now")
            result = await self._set_nex()
        except LockError:
            raise
        except StateStoreError as exc:
            raise LockError(f"could not renew {self.name!r}: {exc}") from exc
        if not result.applied:
            self._lost = "another holder has the lock"
            raise LockError(f"lock {self.name!r} is held by someone else now")
        assert result.version is not None
        return result.version

    async def release(self) -> bool:
        """Release (VDEL with our holder value); ``True`` if we still held it."""
        await self._stop_renewing()
        self._token = None
        if _holding.get(self._holding_key) is self:
            del _holding[self._holding_key]
        result = await self.client.vdelete(self.name, self.holder)
        return result is VDeleteResult.DELETED

    async def holder_of(self) -> bytes | None:
        """Who holds the lock now (the lock key's value), or ``None``."""
        entry = await self.client.get(self.name)
        return None if entry is None else entry.value

    # -- fenced writes ------------------------------------------------------------------------------------

    async def set(
        self, key: KeyLike, value: bytes, *, ttl: TtlLike = None, condition: SetCondition | None = None
    ) -> SetResult:
        """Write a protected key with the current fencing token."""
        return await self.client.set(key, value, ttl=ttl, condition=condition, fencing_token=self.fencing_token)

    async def delete(self, key: KeyLike) -> bool:
        """Delete a protected key with the current fencing token."""
        return await self.client.delete(key, fencing_token=self.fencing_token)

    async def update(
        self,
        key: KeyLike,
        change: Callable[[bytes | None], bytes | None],
        *,
        ttl: TtlLike = None,
        timeout: float | None = None,
    ) -> bytes | None:
        """Read ``key``, write ``change(old)`` fenced with this lock's token (``None``: delete the key); returns
        what was written. Acquires the lock first (waiting up to ``timeout``) and releases it after, unless it is
        held already (the Rust SDK's ``acquire_lock_and_update_value``)."""
        acquired_here = not self.held
        if acquired_here:
            await self.acquire(timeout=timeout)
        try:
            entry = await self.client.get(key)
            new = change(None if entry is None else entry.value)
            if new is None:
                if entry is not None:
                    await self.delete(key)
            else:
                await self.set(key, new, ttl=ttl)
            return new
        finally:
            if acquired_here:
                await self.release()

    # -- auto renew ---------------------------------------------------------------------------------------

    def _start_renewing(self) -> None:
        if self._auto_renew and (self._renew_task is None or self._renew_task.done()):
            self._renew_task = asyncio.get_running_loop().create_task(
                self._renew_loop(), name=f"sskv-lock-renew-{self.name!r}"
            )

    async def _renew_loop(self) -> None:
        interval = self.lease_ms / 1000 * self._renew_fraction
        while True:
            await asyncio.sleep(interval)
            while True:
                try:
                    await self.renew()
                    break
                except LockError as exc:
                    if isinstance(exc.__cause__, TransportError) and self._clock() < self._lease_deadline:
                        # the connection dropped: the lock is still ours until its lease ends, so renew it (the
                        # same SET NEX re-takes it) as soon as the connection is back, not after the lease
                        await self._wait_connected()
                        continue
                    self._lost = self._lost or str(exc)
                    log.warning("lost lock %r: %s", self.name, exc)
                    return

    async def _wait_connected(self) -> None:
        left = self._lease_deadline - self._clock()
        with contextlib.suppress(StateStoreError):
            await self.client.wait_connected(max(left, 0.001))

    async def _stop_renewing(self) -> None:
        task, self._renew_task = self._renew_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> AsyncLeasedLock:
        await self.acquire()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.release()


class LeasedLock(BlockingTwin):
    """Blocking twin of :class:`AsyncLeasedLock`, on a :class:`StateStoreClient`."""

    def __init__(
        self,
        client: StateStoreClient,
        name: KeyLike,
        *,
        holder: KeyLike | None = None,
        lease: float | timedelta = 10.0,
        auto_renew: bool = False,
        renew_fraction: float = 0.5,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        super().__init__()
        self._async = AsyncLeasedLock(
            client.async_client,
            name,
            holder=holder,
            lease=lease,
            auto_renew=auto_renew,
            renew_fraction=renew_fraction,
            monotonic=monotonic,
        )

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncLeasedLock", "LeasedLock", 1)

    @property
    def async_lock(self) -> AsyncLeasedLock:
        """The async lock this facade drives (it lives on the background loop thread)."""
        return self._async

    @property
    def name(self) -> bytes:
        """The lock's key in the store."""
        return self._async.name

    @property
    def holder(self) -> bytes:
        """This holder's value: what the key holds while the lock is ours."""
        return self._async.holder

    @property
    def held(self) -> bool:
        return self._async.held

    @property
    def fencing_token(self) -> HybridLogicalClock:
        return self._async.fencing_token

    def try_acquire(self) -> HybridLogicalClock | None:
        return self._run(self._async.try_acquire())

    def acquire(self, timeout: float | None = None) -> HybridLogicalClock:
        return self._run(self._async.acquire(timeout))

    def renew(self) -> HybridLogicalClock:
        return self._run(self._async.renew())

    def release(self) -> bool:
        return self._run(self._async.release())

    def holder_of(self) -> bytes | None:
        return self._run(self._async.holder_of())

    def set(
        self, key: KeyLike, value: bytes, *, ttl: TtlLike = None, condition: SetCondition | None = None
    ) -> SetResult:
        return self._run(self._async.set(key, value, ttl=ttl, condition=condition))

    def update(
        self,
        key: KeyLike,
        change: Callable[[bytes | None], bytes | None],
        *,
        ttl: TtlLike = None,
        timeout: float | None = None,
    ) -> bytes | None:
        """Like the async twin; ``change`` runs on the library's loop thread and must not block."""
        return self._run(self._async.update(key, change, ttl=ttl, timeout=timeout))

    def delete(self, key: KeyLike) -> bool:
        return self._run(self._async.delete(key))

    def __enter__(self) -> LeasedLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
