"""``get_or_set``: one computation per key across every process of a namespace.

Design: docs/design/namespaces.md, "The namespace store and its parts".
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .._namespace.key_locks import KeyLocks, release_quietly
from .._namespace.store import Encoded
from .._ttl import expire_now
from ..client._closing import unless_closed
from ..errors import ReentrantCallError
from ..local_cache import ABSENT, CachedEntry
from ..lock import AsyncLeasedLock
from ._stats import CacheCounters

__all__ = ["Found", "Lead", "SingleFlight"]


@dataclass(frozen=True, slots=True)
class Found:
    value: Any


@dataclass(slots=True)
class Lead:
    """This caller computes the value: it holds the key's get_or_set lock and owns the in-process flight."""

    key: str
    lock: AsyncLeasedLock
    flight: asyncio.Future[Any]


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class SingleFlight:
    """The in-process flights and cross-process locks of one cache's ``get_or_set``.

    Args:
        read: ``read(key, fresh=...)`` -> the key's entry (``fresh=True`` skips the local cache).
        store_nx: ``store_nx(key, value, seconds)`` -> whether the value was added (``SET NX``).
        locks: the namespace's key locks (kind ``gos-lock``).
        counters: hits/misses/sets are counted here.
        ready: awaited before each :meth:`begin` (the cache opens itself, or follows a new generation).
    """

    def __init__(
        self,
        read: Callable[..., Awaitable[CachedEntry[Any]]],
        store_nx: Callable[[str, Any, float | None], Awaitable[bool]],
        locks: KeyLocks,
        counters: CacheCounters,
        ready: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._ready = ready
        self._read = read
        self._store_nx = store_nx
        self._locks = locks
        self._counters = counters
        self._flights: dict[str, asyncio.Future[Any]] = {}
        #: key -> who leads its flight (a task, or the blocking facade's thread): a second call of theirs is a
        #: re-entrant get_or_set (the builder asking for its own key), which would wait for itself forever
        self._leaders: dict[str, object] = {}

    async def begin(self, key: str, *, caller: object = None) -> Found | Lead:
        """Either the value (found, or computed by another caller) or the lead.

        ``caller``: who asks (default: the current task; the blocking facade passes its thread). A caller that
        already leads ``key``'s flight gets :class:`ReentrantCallError` instead of waiting for itself.
        """
        if caller is None:
            caller = asyncio.current_task()
        if self._ready is not None:
            await self._ready()
        first = True
        while True:
            flight = self._flights.get(key)
            if flight is not None and self._leaders.get(key) is caller:
                raise ReentrantCallError(
                    f"get_or_set({key!r}) was called again while computing that key's value (its builder asks for"
                    " its own key): it would wait for itself forever"
                )
            if flight is None:
                entry = await self._read(key, fresh=False)
                if entry.value is not ABSENT:
                    if first:
                        self._counters.count(hits=1)
                    return Found(entry.value)
                if first:
                    self._counters.count(misses=1)
                    first = False
                flight = self._flights.get(key)  # one may have started while we read
                if flight is None:
                    break
            elif first:
                self._counters.count(misses=1)
                first = False
            try:
                waited = asyncio.shield(flight)
                return Found(await unless_closed(self._locks.client, waited, f"waiting for {key!r}'s value"))
            except asyncio.CancelledError:
                if flight.cancelled() and not _being_cancelled():
                    continue  # the leader was cancelled, not us: try again (maybe as the leader)
                raise
        flight = asyncio.get_running_loop().create_future()
        self._flights[key] = flight
        self._leaders[key] = caller
        try:
            lock = self._locks.lock("gos-lock", key, auto_renew=True)
            await lock.acquire(timeout=self._locks.timeout)
            try:
                entry = await self._read(key, fresh=True)  # another process may have stored it meanwhile
            except BaseException:
                await release_quietly(lock)
                raise
            if entry.value is not ABSENT:
                await release_quietly(lock)
                self._settle(key, flight, value=entry.value)
                return Found(entry.value)
            return Lead(key, lock, flight)
        except BaseException as exc:
            self._settle(key, flight, error=exc)
            raise

    async def run(self, key: str, default_or_callable: Any, seconds: float | None) -> Any:
        """The whole ``get_or_set`` on the loop: :meth:`begin`, compute if this caller leads (a value, or a sync
        or async callable), then :meth:`finish` or :meth:`abort`. The blocking twin takes the same steps with
        its computation in the caller's thread."""
        outcome = await self.begin(key)  # the caller: this task, in which a sync builder below runs too
        if isinstance(outcome, Found):
            return outcome.value
        try:
            value = default_or_callable() if callable(default_or_callable) else default_or_callable
            if inspect.isawaitable(value):
                value = await value
        except BaseException as exc:
            await self.abort(outcome, exc)
            raise
        await self.finish(outcome, value, seconds)
        return value

    async def finish(self, lead: Lead, value: Any, seconds: float | None) -> None:
        # the waiters get the value even if storing it fails; the leader's caller sees that failure (a value the
        # blocking facade encoded in its own thread arrives wrapped: the waiters get the value itself)
        self._settle(lead.key, lead.flight, value=value.value if isinstance(value, Encoded) else value)
        try:
            if not expire_now(seconds) and await self._store_nx(lead.key, value, seconds):
                self._counters.count(sets=1)
        finally:
            await release_quietly(lead.lock)

    async def abort(self, lead: Lead, error: BaseException) -> None:
        self._settle(lead.key, lead.flight, error=error)
        await release_quietly(lead.lock)

    def _settle(
        self, key: str, flight: asyncio.Future[Any], *, value: Any = None, error: BaseException | None = None
    ) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
            self._leaders.pop(key, None)
        if flight.done():
            return
        if isinstance(error, asyncio.CancelledError):
            flight.cancel()
        elif error is not None:
            flight.set_exception(error)
            flight.exception()  # retrieved: no "never retrieved" warning when nobody waited
        else:
            flight.set_result(value)
