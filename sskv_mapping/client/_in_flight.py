"""The bound on a client's requests awaiting an answer (``AsyncStateStoreClient(max_in_flight=...)``).

Why a bound: docs/design/architecture.md, "The client's parts".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

from ..errors import ConfigurationError, RequestTimeoutError

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "InFlightGate"]

#: Default bound on a client's requests awaiting an answer: well under what mosquitto's defaults queue per session
#: (20 in flight + 1,000 queued), so that one client's burst never fills the service's queue on its own, and far
#: above what a round trip needs to keep a loopback or LAN link busy (bench_rpc saturates at 64 in flight).
DEFAULT_MAX_IN_FLIGHT = 256


class InFlightGate:
    """At most ``limit`` holders at a time; the others wait in arrival order.

    Example:
        >>> gate = InFlightGate(1)
        >>> gate.try_enter(), gate.try_enter()
        (True, False)
        >>> gate.leave()
        >>> gate.in_flight
        0
    """

    __slots__ = ("_waiters", "in_flight", "limit", "waited")

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigurationError(f"max_in_flight must be a positive int, not {limit!r}")
        self.limit = limit
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        #: how many callers had to wait for a slot
        self.waited = 0

    @property
    def waiting(self) -> int:
        """Callers waiting for a slot now."""
        return len(self._waiters)

    def try_enter(self) -> bool:
        """Take a slot if one is free and nobody waits for one (no barging past the queue)."""
        if self.in_flight < self.limit and not self._waiters:
            self.in_flight += 1
            return True
        return False

    async def enter(self, deadline: float | None) -> bool:
        """Wait for a slot until ``deadline`` (loop time; ``None``: no limit). ``False`` if the deadline passed
        first (no slot is held then). A cancelled waiter holds no slot either."""
        if self.try_enter():
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        self.waited += 1
        timer = None if deadline is None else loop.call_at(deadline, _give_up, fut)
        try:
            await fut
            return True
        except _SlotTimeout:
            self._forget(fut)
            return False
        except BaseException:
            self._forget(fut)
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.leave()  # the slot was handed over just as we were cancelled: pass it on
            raise
        finally:
            if timer is not None:
                timer.cancel()

    async def wait(self, deadline: float | None, what: Callable[[], str]) -> None:
        """:meth:`enter`, or :class:`RequestTimeoutError` (``what()``, then the load) when the deadline passes."""
        if not await self.enter(deadline):
            raise RequestTimeoutError(
                f"{what()}: {self.in_flight} requests in flight (max_in_flight={self.limit}); nothing was sent"
            )

    def _forget(self, fut: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):  # not there: already handed a slot (popped by leave)
            self._waiters.remove(fut)

    def leave(self) -> None:
        """Give a slot back: handed straight to the first waiter still waiting, else freed."""
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes to it: in_flight stays as it is
                return
        self.in_flight -= 1


class _SlotTimeout(Exception):
    """The deadline passed while waiting for a slot."""


def _give_up(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(_SlotTimeout())
