"""Waiting on a condition in async tests, for state that offers no event to wait on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.005) -> None:
    """Wait until ``predicate()`` holds, checking every ``interval`` s; ``TimeoutError`` after ``timeout``.

    Prefer an ``asyncio.Event`` where the code under test offers one; this is for counters and flags.
    """
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - there is no event to wait on for these conditions
            await asyncio.sleep(interval)


def eventually_sync(predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.005) -> None:
    """:func:`eventually` for blocking tests (the library's loop runs in its own thread meanwhile)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition still false after {timeout} s")
        time.sleep(interval)
