"""Bounded fan-out: many requests pipelined on one connection, a bounded number in flight; and one load per key.

Every ``*_many`` form and sweep goes through it (docs/design/namespaces.md, "The namespace store and its parts").
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from typing import Generic, TypeVar

from ..client._in_flight import background

__all__ = ["BoundedWork", "SharedLoads", "gather_bounded"]

log = logging.getLogger("sskv_mapping")

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


async def gather_bounded(coros: Iterable[Awaitable[T]], limit: int) -> list[T]:
    """Run ``coros`` concurrently, at most ``limit`` at a time, results in order.

    ``limit`` workers take the awaitables from ``coros`` one after the other (a generator is consumed lazily: an
    awaitable is made only when a worker is free for it), so a million items cost ``limit`` tasks, not a million.
    The first failure cancels the rest and is raised as itself (not wrapped in an ExceptionGroup); awaitables not
    started by then are closed unawaited.
    """
    if limit < 1:
        raise ValueError("limit must be >= 1")
    items = enumerate(coros)
    results: dict[int, T] = {}

    first = list(itertools.islice(items, limit))  # as many workers as there is work, up to ``limit``

    async def worker(i: int, coro: Awaitable[T]) -> None:
        results[i] = await coro
        for i, coro in items:  # one shared iterator: each item goes to exactly one worker
            results[i] = await coro

    try:
        async with asyncio.TaskGroup() as group:
            for i, coro in first:
                group.create_task(worker(i, coro))
    except BaseExceptionGroup as failed:
        for _, coro in items:  # what no worker started: close it, so it does not warn "never awaited"
            close = getattr(coro, "close", None)
            if close is not None:
                close()
        raise failed.exceptions[0]  # noqa: B904 - the group only wraps it
    return [results[i] for i in range(len(results))]


class BoundedWork(Generic[T]):
    """Background work over items that come in bursts: one task, at most ``limit`` items in progress.

    :meth:`submit` queues an item and starts the one drainer task if it is not running; the drainer runs
    ``run(item)`` for the queued items through :func:`gather_bounded` (items submitted meanwhile join the same
    drain) and ends when the queue is empty. A burst of 10,000 items is one task and ``limit`` requests in flight,
    never 10,000 tasks at once. ``run`` should handle its own errors; one it lets out is logged and the drain goes on.
    Its requests are background work: they yield to the client's calls (``client/_in_flight.py``).
    """

    def __init__(self, run: Callable[[T], Awaitable[None]], limit: int, *, name: str) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self._run = run
        self._limit = limit
        self._name = name
        self._items: deque[T] = deque()
        self._task: asyncio.Task[None] | None = None
        #: items whose work is done (or failed)
        self.done = 0

    @property
    def pending(self) -> int:
        """Items queued and not yet started."""
        return len(self._items)

    def submit(self, items: Iterable[T]) -> None:
        """Queue ``items``; runs on the event loop."""
        self._items.extend(items)
        if self._items and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain(), name=self._name)

    async def wait(self) -> None:
        """Return once everything submitted so far is done."""
        while self._task is not None:
            await asyncio.shield(self._task)

    def cancel(self) -> None:
        """Drop what is queued and stop the work in progress."""
        self._items.clear()
        if self._task is not None:
            self._task.cancel()

    def _take(self) -> Iterator[Awaitable[None]]:
        items = self._items
        while items:
            yield self._one(items.popleft())

    async def _one(self, item: T) -> None:
        try:
            await self._run(item)
        except Exception:
            log.exception("%s: background work on an item failed", self._name)
        finally:
            self.done += 1

    async def _drain(self) -> None:
        try:
            with background():
                while self._items:
                    await gather_bounded(self._take(), self._limit)
        finally:
            self._task = None


class SharedLoads(Generic[K]):
    """One load per key at a time: the first caller of :meth:`run` for a key runs the load, and callers that come
    while it runs wait for its end instead (a cached read, a key's KEYNOTIFY, an index shard's first read).

    The load's failure is raised to every waiter. A load that is cancelled hands its cancellation to nobody: the
    first of its waiters loads again, and the others wait for that one.
    """

    __slots__ = ("_running",)

    def __init__(self) -> None:
        self._running: dict[K, asyncio.Future[None]] = {}

    def __contains__(self, key: object) -> bool:
        """Whether a load of ``key`` runs now."""
        return key in self._running

    async def run(self, key: K, load: Callable[[K], Awaitable[T]]) -> T | None:
        """``load(key)``'s result if this call ran it, or ``None`` once the load another caller ran has ended."""
        running = self._running
        while (shared := running.get(key)) is not None:
            try:
                await asyncio.shield(shared)
            except asyncio.CancelledError:
                if shared.cancelled():
                    continue  # the load was cancelled, not this caller
                raise
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        running[key] = fut
        try:
            result = await load(key)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: nobody may be waiting
            raise
        finally:
            del running[key]
        fut.set_result(None)
        return result
