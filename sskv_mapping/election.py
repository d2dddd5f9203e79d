"""Leader election over a leased lock: one of several replicas acts, the others wait and watch.

The same keys and values as the .NET ``LeaderElectionClient`` (docs/guide/locks.md, docs/design/protocol.md §6).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType

from ._blocking import BlockingTwin
from ._keys import store_key
from ._protocol.hlc import HybridLogicalClock
from ._protocol.notifications import KeyEvent, KeyOperation
from .client._client import AsyncStateStoreClient, KeyLike, StateStoreClient
from .client._closing import unless_closed
from .errors import LockError, StateStoreError
from .lock import AsyncLeasedLock

__all__ = ["AsyncLeaderElection", "LeaderElection", "LeadershipChange"]

log = logging.getLogger("sskv_mapping.election")

_RETRY_S = 0.05  # pause between renewal attempts that failed for a transport reason


@dataclass(frozen=True, slots=True)
class LeadershipChange:
    """Who leads now (``None``: nobody), and the version of that change (the new leader's fencing token for a
    campaign won; ``None`` for the first reading of an empty position)."""

    leader: str | None
    version: HybridLogicalClock | None


class AsyncLeaderElection:
    """Campaign for, hold, renew and resign a leadership position.

    Example:
        >>> async def main(client: AsyncStateStoreClient) -> None:  # doctest: +SKIP
        ...     election = AsyncLeaderElection(client, "orders-worker", term=10)
        ...     async with election:                      # campaign, and resign on exit
        ...         token = election.fencing_token        # write shared keys with it
        ...         await client.set("orders/cursor", b"42", fencing_token=token)
        ...         await election.lost.wait()            # or keep working while election.is_leader

    Args:
        client: a connected :class:`AsyncStateStoreClient`.
        name: the leadership position (the state store key of the election).
        term: seconds a term lasts without renewal (the lease).
        candidate: this candidate's name, the value written while it leads (default: the client id).
        auto_renew: renew the term while leading (every ``term * renew_fraction`` seconds).
        renew_fraction: see ``auto_renew``.
        on_lost: called (on the client's loop) with the reason when a leadership ends other than by ``resign``.
        monotonic: the monotonic clock (seconds) that tells when a term surely ended; inject a fake one in tests.
    """

    def __init__(
        self,
        client: AsyncStateStoreClient,
        name: KeyLike,
        *,
        term: float | timedelta = 10.0,
        candidate: str | None = None,
        auto_renew: bool = True,
        renew_fraction: float = 0.5,
        on_lost: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.name = store_key(name)
        self.candidate = candidate if candidate is not None else client.client_id
        self._lock = AsyncLeasedLock(
            client, self.name, holder=self.candidate, lease=term, renew_fraction=renew_fraction, monotonic=monotonic
        )
        self._auto_renew = auto_renew
        self._interval = self._lock.lease_ms / 1000 * renew_fraction
        self._clock = monotonic
        self._on_lost: list[Callable[[str], None]] = [on_lost] if on_lost is not None else []
        self._renewer: asyncio.Task[None] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        #: set when a leadership ends other than by :meth:`resign` (cleared by the next campaign won)
        self.lost = asyncio.Event()
        self.lost_reason: str | None = None

    def __repr__(self) -> str:
        state = "leader" if self.is_leader else "follower"
        return f"<AsyncLeaderElection {self.name!r} candidate={self.candidate!r} {state}>"

    # -- state --------------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this candidate leads now: elected, not lost, and its term not over by its own clock."""
        return self._lock.held and self.lost_reason is None

    @property
    def fencing_token(self) -> HybridLogicalClock:
        """The leader's fencing token; :class:`LockError` if this candidate does not (surely) lead."""
        if self.lost_reason is not None:
            raise LockError(f"leadership of {self.name!r} was lost: {self.lost_reason}")
        return self._lock.fencing_token

    def add_lost_listener(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` (on the client's loop) whenever a leadership ends other than by resign."""
        self._on_lost.append(callback)

    # -- campaign / resign ----------------------------------------------------------------------------------

    async def try_campaign(self) -> HybridLogicalClock | None:
        """One attempt: the fencing token if this candidate leads now, ``None`` if another does."""
        token = await self._lock.try_acquire()
        if token is not None:
            self._elected()
        return token

    async def campaign(self, timeout: float | None = None) -> HybridLogicalClock:
        """Wait until elected (KEYNOTIFY on the position, never polling); returns the fencing token.

        :class:`LockError` when ``timeout`` seconds pass first; :class:`ClientStateError` at once when the client
        is closed, or closes while we wait (with or without a timeout).
        """
        token = await self._lock.acquire(timeout=timeout)
        self._elected()
        return token

    async def resign(self) -> bool:
        """Give the position up (``VDEL``); ``True`` if this candidate still held it."""
        await self._stop()
        if self._lock.lease_deadline == float("-inf"):
            return False
        return await self._lock.release()

    async def leader(self) -> str | None:
        """The current leader's name, or ``None``."""
        holder = await self._lock.holder_of()
        return None if holder is None else holder.decode("utf-8", "replace")

    async def update(
        self, key: KeyLike, change: Callable[[bytes | None], bytes | None], *, ttl: float | None = None
    ) -> bytes | None:
        """While leading: read ``key``, write ``change(old)`` with the fencing token (``None`` deletes it);
        :class:`LockError` if this candidate does not lead (it never campaigns by itself)."""
        self.fencing_token  # noqa: B018 - raises LockError unless leading
        return await self._lock.update(key, change, ttl=ttl)

    # -- renewal ----------------------------------------------------------------------------------------------

    def _elected(self) -> None:
        self.lost.clear()
        self.lost_reason = None
        self._arm_watchdog()
        if self._auto_renew and (self._renewer is None or self._renewer.done()):
            self._renewer = asyncio.get_running_loop().create_task(
                self._renew_loop(), name=f"sskv-election-renew-{self.name!r}"
            )

    def _arm_watchdog(self) -> None:
        """Declare the leadership lost when the term ends by our clock without a renewal."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, self._lock.lease_deadline - self._clock())
        self._watchdog = loop.call_later(delay, self._check_term)

    def _check_term(self) -> None:
        self._watchdog = None
        if self.lost_reason is None and not self._lock.held:
            self._lose("the term ended before it was renewed")

    def _lose(self, reason: str) -> None:
        if self.lost_reason is not None:
            return
        self.lost_reason = reason
        self.lost.set()
        log.warning("lost the leadership of %r: %s", self.name, reason)
        for callback in list(self._on_lost):
            try:
                callback(reason)
            except Exception:  # a listener's bug must not stop the others
                log.exception("an on_lost callback of %r failed", self.name)

    async def _renew_loop(self) -> None:
        while self.lost_reason is None:
            await asyncio.sleep(self._interval)
            while self.lost_reason is None:
                try:
                    await self._lock.renew()
                    self._arm_watchdog()
                    break
                except LockError as exc:
                    if isinstance(exc.__cause__, StateStoreError) and self._lock.held:
                        await asyncio.sleep(_RETRY_S)  # a transport hiccup: try again while the term lasts
                        continue
                    self._lose(str(exc))
                    return

    async def _stop(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        task, self._renewer = self._renewer, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- observing ----------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def observe(self) -> AsyncIterator[AsyncIterator[LeadershipChange]]:
        """``async with election.observe() as changes: async for change in changes``: the current leader first,
        then every change of leadership (a new leader, or nobody after a resign or an expiry)."""
        events: asyncio.Queue[KeyEvent] = asyncio.Queue()
        sub = await self.client.subscribe_key(self.name, events.put_nowait)  # watch first, then read
        try:
            first = await self.client.get(self.name)

            async def changes() -> AsyncIterator[LeadershipChange]:
                last = None if first is None else first.value
                yield LeadershipChange(_name(last), None if first is None else first.version)
                while True:
                    event = await unless_closed(self.client, events.get(), f"observing {self.name!r}")
                    now = event.value if event.op is KeyOperation.SET else None
                    if now != last:  # a renewal rewrites the same holder: not a change
                        last = now
                        yield LeadershipChange(_name(now), event.version)

            yield changes()
        finally:
            await sub.close()

    async def __aenter__(self) -> AsyncLeaderElection:
        await self.campaign()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.resign()


def _name(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


class LeaderElection(BlockingTwin):
    """The blocking twin of :class:`AsyncLeaderElection` (same parameters, with a :class:`StateStoreClient`).

    Example:
        >>> with LeaderElection(client, "orders-worker", term=10) as election:  # doctest: +SKIP
        ...     while election.is_leader:
        ...         do_one_batch(election.fencing_token)
    """

    def __init__(
        self,
        client: StateStoreClient,
        name: KeyLike,
        *,
        term: float | timedelta = 10.0,
        candidate: str | None = None,
        auto_renew: bool = True,
        renew_fraction: float = 0.5,
        on_lost: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        super().__init__()
        self._lost = threading.Event()

        def lost(reason: str) -> None:
            self._lost.set()
            if on_lost is not None:
                on_lost(reason)

        self._async = AsyncLeaderElection(
            client.async_client,
            name,
            term=term,
            candidate=candidate,
            auto_renew=auto_renew,
            renew_fraction=renew_fraction,
            on_lost=lost,
            monotonic=monotonic,
        )

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncLeaderElection", "LeaderElection", 1)

    @property
    def name(self) -> bytes:
        """The position's key in the store."""
        return self._async.name

    @property
    def candidate(self) -> str:
        """This candidate's value: what the key holds while it leads."""
        return self._async.candidate

    @property
    def is_leader(self) -> bool:
        return self._async.is_leader

    @property
    def fencing_token(self) -> HybridLogicalClock:
        return self._async.fencing_token

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until a leadership ends other than by resign (``True``), or ``timeout`` passes (``False``)."""
        return self._lost.wait(timeout)

    def try_campaign(self) -> HybridLogicalClock | None:
        result: HybridLogicalClock | None = self._run(self._async.try_campaign())
        if result is not None:
            self._lost.clear()
        return result

    def campaign(self, timeout: float | None = None) -> HybridLogicalClock:
        result: HybridLogicalClock = self._run(self._async.campaign(timeout))
        self._lost.clear()
        return result

    def resign(self) -> bool:
        return self._run(self._async.resign())

    def leader(self) -> str | None:
        return self._run(self._async.leader())

    def update(
        self, key: KeyLike, change: Callable[[bytes | None], bytes | None], *, ttl: float | None = None
    ) -> bytes | None:
        """Like the async twin; ``change`` runs on the library's loop thread and must not block."""
        return self._run(self._async.update(key, change, ttl=ttl))

    @contextlib.contextmanager
    def observe(self) -> Iterator[Iterator[LeadershipChange]]:
        """``with election.observe() as changes: for change in changes``: the blocking form of the async one."""
        out: queue.Queue[LeadershipChange | BaseException] = queue.Queue()
        started = threading.Event()
        stop: asyncio.Event | None = None

        async def pump() -> None:
            nonlocal stop
            stop = asyncio.Event()
            try:
                async with self._async.observe() as changes:
                    started.set()
                    iterator = changes.__aiter__()
                    while True:
                        nxt = asyncio.ensure_future(iterator.__anext__())
                        halt = asyncio.ensure_future(stop.wait())
                        done, _ = await asyncio.wait({nxt, halt}, return_when=asyncio.FIRST_COMPLETED)
                        if halt in done:
                            nxt.cancel()
                            return
                        halt.cancel()
                        out.put(nxt.result())
            except BaseException as exc:
                out.put(exc)  # the reader ends with it (a closed client: ClientStateError), never waits forever
                started.set()
                raise

        future = asyncio.run_coroutine_threadsafe(pump(), self._portal.loop)
        started.wait(30)

        def changes() -> Iterator[LeadershipChange]:
            while True:
                item = out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item

        try:
            yield changes()
        finally:
            if stop is not None:
                self._portal.loop.call_soon_threadsafe(stop.set)
            with contextlib.suppress(Exception):
                future.result(10)

    def __enter__(self) -> LeaderElection:
        self.campaign()
        return self

    def __exit__(self, *exc: object) -> None:
        self.resign()
