"""The correlation-data -> Future table of in-flight requests, and their deadlines.

What it does and why: docs/design/architecture.md, "The client's parts", `client/_pending.py`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from heapq import heapify, heappop, heappush
from typing import Any

from .._transport.base import InboundMessage

__all__ = ["PendingCalls"]

#: the deadline heap is rebuilt without its answered calls once it holds this many more entries than calls in flight
_SLACK = 64


class PendingCalls:
    """Futures of in-flight requests keyed by their 16-byte correlation data; each may have a deadline.

    Deadlines share one loop timer, armed for the earliest: a request adds a tuple to a heap instead of making a
    timer of its own and cancelling it when answered (asyncio's timers are Python objects ordered by a Python
    ``__lt__``). An answered call's entry stays in the heap until its deadline or the next rebuild.
    """

    def __init__(self) -> None:
        #: the futures of the calls in flight, by correlation data (the request path opens and closes its entry
        #: itself, as open() and close() do, without their calls)
        self.calls: dict[bytes, asyncio.Future[InboundMessage]] = {}
        #: responses that matched no pending call (late after a timeout, duplicates, foreign)
        self.unmatched = 0
        self._deadlines: list[tuple[float, bytes, asyncio.Future[Any], Callable[[asyncio.Future[Any]], None]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        return len(self.calls)

    def open(self, loop: asyncio.AbstractEventLoop) -> tuple[bytes, asyncio.Future[InboundMessage]]:
        """Register a call: ``(correlation_data, future)``. Its owner calls :meth:`close` in a ``finally``."""
        # 16 random bytes, as a uuid4 without the UUID object: a response whose correlation data was damaged
        # (a flipped bit, a truncation) matches no other call in flight, as a counter's neighbour would
        corr = os.urandom(16)
        fut: asyncio.Future[InboundMessage] = loop.create_future()
        self.calls[corr] = fut
        return corr, fut

    def expire_at(
        self,
        loop: asyncio.AbstractEventLoop,
        when: float,
        corr: bytes,
        fut: asyncio.Future[Any],
        expire: Callable[[asyncio.Future[Any]], None],
    ) -> None:
        """Call ``expire(fut)`` at loop time ``when`` unless ``fut`` is done by then."""
        deadlines = self._deadlines
        heappush(deadlines, (when, corr, fut, expire))
        if when < self._timer_at or self._timer_loop is not loop:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(when, self._fire, loop)
            self._timer_at = when
            self._timer_loop = loop
        elif len(deadlines) > len(self.calls) + _SLACK:
            self._compact()

    def _compact(self) -> None:
        deadlines = [entry for entry in self._deadlines if not entry[2].done()]
        heapify(deadlines)
        self._deadlines = deadlines

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self._timer_at = float("inf")
        deadlines = self._deadlines
        now = loop.time()
        while deadlines and deadlines[0][0] <= now:
            _, _, fut, expire = heappop(deadlines)
            if not fut.done() and fut.get_loop() is loop:  # (a call left on a loop since closed: never woken)
                expire(fut)
        while deadlines and deadlines[0][2].done():  # answered: nothing to arm the timer for
            heappop(deadlines)
        if deadlines:
            self._timer_at = when = deadlines[0][0]
            self._timer = loop.call_at(when, self._fire, loop)

    def close(self, corr: bytes, fut: asyncio.Future[InboundMessage]) -> None:
        """Unregister a call (answered, failed, timed out or cancelled)."""
        self.calls.pop(corr, None)
        if not fut.done():
            fut.cancel()
        elif not fut.cancelled():
            fut.exception()  # retrieved: a failure nobody awaited is not worth a warning

    @contextmanager
    def call(self) -> Iterator[tuple[bytes, asyncio.Future[InboundMessage]]]:
        """:meth:`open` and :meth:`close` as a context manager."""
        corr, fut = self.open(asyncio.get_running_loop())
        try:
            yield corr, fut
        finally:
            self.close(corr, fut)

    def resolve(self, message: InboundMessage) -> bool:
        """Deliver a response to its call; returns False (and counts it) when nothing waits for it."""
        corr = message.correlation_data
        fut = self.calls.get(corr) if corr is not None else None
        if fut is None or fut.done():
            self.unmatched += 1
            return False
        fut.set_result(message)
        return True

    def fail_all(self, exc: BaseException) -> int:
        """Fail every in-flight call (the connection dropped); returns how many there were."""
        n = 0
        for fut in list(self.calls.values()):
            if not fut.done():
                fut.set_exception(exc)
                n += 1
        return n

    def stop(self) -> None:
        """Cancel the deadline timer (the client closed: every call has ended)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = float("inf")
        self._deadlines = []
