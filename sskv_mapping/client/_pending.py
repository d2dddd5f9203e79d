"""The correlation-data -> Future table of in-flight requests.

What it does and why: docs/design/architecture.md, "The client's parts", `client/_pending.py`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager

from .._transport.base import InboundMessage

__all__ = ["PendingCalls"]


class PendingCalls:
    """Futures of in-flight requests keyed by their 16-byte correlation data."""

    def __init__(self) -> None:
        self._pending: dict[bytes, asyncio.Future[InboundMessage]] = {}
        #: responses that matched no pending call (late after a timeout, duplicates, foreign)
        self.unmatched = 0

    def __len__(self) -> int:
        return len(self._pending)

    def open(self, loop: asyncio.AbstractEventLoop) -> tuple[bytes, asyncio.Future[InboundMessage]]:
        """Register a call: ``(correlation_data, future)``. Its owner calls :meth:`close` in a ``finally``."""
        # 16 random bytes, as a uuid4 without the UUID object: a response whose correlation data was damaged
        # (a flipped bit, a truncation) matches no other call in flight, as a counter's neighbour would
        corr = os.urandom(16)
        fut: asyncio.Future[InboundMessage] = loop.create_future()
        self._pending[corr] = fut
        return corr, fut

    def close(self, corr: bytes, fut: asyncio.Future[InboundMessage]) -> None:
        """Unregister a call (answered, failed, timed out or cancelled)."""
        self._pending.pop(corr, None)
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
        fut = self._pending.get(corr) if corr is not None else None
        if fut is None or fut.done():
            self.unmatched += 1
            return False
        fut.set_result(message)
        return True

    def fail_all(self, exc: BaseException) -> int:
        """Fail every in-flight call (the connection dropped); returns how many there were."""
        n = 0
        for fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(exc)
                n += 1
        return n
