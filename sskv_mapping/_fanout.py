"""Layer 4: bounded fan-out -- many requests pipelined on one connection, a bounded number in flight.

A broker holds only so many in-flight messages per client (mosquitto: 20 in flight + 1,000 queued) and drops
the rest, so thousands of requests gathered at once lose replies and time out. Everything that fans out
(``get_many``, ``set_many``, ``delete_many``, sweeps) goes through :func:`gather_bounded`.

Must not import aiomqtt/paho or the emulator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

__all__ = ["gather_bounded"]

T = TypeVar("T")


async def gather_bounded(coros: Iterable[Awaitable[T]], limit: int) -> list[T]:
    """Run ``coros`` concurrently, at most ``limit`` at a time, results in order.

    The first failure cancels the rest and is raised as itself (not wrapped in an ExceptionGroup).
    """
    gate = asyncio.Semaphore(limit)

    async def gated(coro: Awaitable[T]) -> T:
        async with gate:
            return await coro

    pending = list(coros)
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(gated(c)) for c in pending]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0]  # noqa: B904 - the group only wraps it
    return [t.result() for t in tasks]
