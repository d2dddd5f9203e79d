"""Waiting in async tests: on a condition with no event to wait on, a key's notifications, a client's states."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from sskv_mapping._protocol.notifications import KeyEvent, KeyOperation
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState


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


class Notified:
    """Waits for a key's notifications (``client.subscribe_key``), e.g. the DELETE of an expiry."""

    def __init__(self) -> None:
        self.events: list[KeyEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: KeyEvent) -> None:
        self.events.append(event)
        self._changed.set()

    async def wait_for(self, op: KeyOperation, timeout: float = 5.0) -> KeyEvent:
        async with asyncio.timeout(timeout):
            while True:
                for event in self.events:
                    if event.op is op:
                        return event
                self._changed.clear()
                await self._changed.wait()


class StateWatcher:
    """Records state changes of a client and lets a test wait for one."""

    def __init__(self, client: AsyncStateStoreClient) -> None:
        self.seen: list[ConnectionState] = []
        self._changed = asyncio.Event()
        client.add_state_listener(self._on)

    def _on(self, state: ConnectionState) -> None:
        self.seen.append(state)
        self._changed.set()

    async def wait_for(self, state: ConnectionState, count: int = 1, timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            while self.seen.count(state) < count:
                self._changed.clear()
                await self._changed.wait()
