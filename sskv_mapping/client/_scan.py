"""Listing keys with SCAN (docs/design/protocol.md §8): the pager behind ``scan`` / ``scan_pages``.

A listing is bounded by time, never by a page count (docs/design/architecture.md, "The client's parts").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from .._protocol.commands import Scan
from .._transport.backoff import Backoff
from ..errors import ConnectionLostError, RequestTimeoutError, UnsupportedCommandError
from ._keeper import ConnectionKeeper, ConnectionState

__all__ = ["Request", "ScanSupport", "keys_of", "scan_pages"]

log = logging.getLogger("sskv_mapping.client")

#: The client's ``_request``: sends one command with ``timeout=`` (seconds, ``None``: none) and returns
#: ``(reply payload, response __ts)``.
Request = Callable[..., Awaitable[tuple[bytes, Any]]]

#: Page failures that leave the outcome "no answer" and are safe to ask again with the same token (a SCAN
#: changes nothing). A service error, a malformed reply or a refused publish is not retried.
_RETRYABLE = (RequestTimeoutError, ConnectionLostError)
_RETRY_INITIAL = 0.05
_RETRY_MAX = 1.0


class ScanSupport:
    """Whether the service on the current connection answers SCAN: ``None`` until a first page said so.

    ``epoch`` changes on every :meth:`forget`, so an answer to a request sent before a reconnect is not
    remembered for the new connection.
    """

    __slots__ = ("_keeper", "epoch", "page_retries", "supported")

    def __init__(self, keeper: ConnectionKeeper | None = None) -> None:
        self._keeper = keeper
        self.supported: bool | None = None
        self.epoch = 0
        #: pages asked again after a timeout or a dropped connection (all listings of this client)
        self.page_retries = 0

    def may_come_back(self) -> bool:
        """Can a lost connection still come back? Not for a client with ``reconnect=False`` that dropped (or a
        closed one): a page that lost its connection there is not asked again, the caller hears at once."""
        return self._keeper is None or self._keeper.state in (ConnectionState.CONNECTED, ConnectionState.RECONNECTING)

    def forget(self) -> None:
        self.supported = None
        self.epoch += 1

    def learn(self, epoch: int, supported: bool) -> None:
        if epoch == self.epoch:
            self.supported = supported


def _unsupported() -> UnsupportedCommandError:
    return UnsupportedCommandError(UnsupportedCommandError.TEXT)


async def scan_pages(
    request: Request,
    pattern: bytes,
    timeout: float | None,
    page_timeout: float | None,
    support: ScanSupport,
) -> AsyncGenerator[list[bytes], None]:
    """Every page of ``SCAN pattern``, in the service's order, empty pages included (docs/design/protocol.md §8)."""
    loop = asyncio.get_running_loop()
    spent = 0.0  # seconds this pager has waited so far (pages and retry pauses)
    token: bytes | None = None
    backoff: Backoff | None = None
    while True:
        if token is None and support.supported is False:
            raise _unsupported()
        budget = None if timeout is None else timeout - spent
        if budget is not None and budget <= 0:
            raise RequestTimeoutError(f"the SCAN of {pattern[:80]!r} did not finish within {timeout} s")
        wait = page_timeout if budget is None else budget if page_timeout is None else min(page_timeout, budget)
        cmd = Scan(pattern, token)
        epoch = support.epoch
        started = loop.time()
        try:
            payload, _ = await request(cmd, timeout=wait)
            page = cmd.decode(payload)
        except UnsupportedCommandError:
            support.learn(epoch, False)
            raise
        except _RETRYABLE as exc:
            spent += loop.time() - started
            if isinstance(exc, ConnectionLostError) and not support.may_come_back():
                raise
            if timeout is not None and spent >= timeout:
                raise RequestTimeoutError(
                    f"the SCAN of {pattern[:80]!r} did not finish within {timeout} s (last page: {exc})"
                ) from exc
            if backoff is None:
                backoff = Backoff(_RETRY_INITIAL, _RETRY_MAX)
            pause = backoff.next() if timeout is None else min(backoff.next(), timeout - spent)
            support.page_retries += 1
            log.debug("SCAN page failed (%s); asking again with the same token in %.3f s", exc, pause)
            await asyncio.sleep(pause)
            spent += pause
            continue
        spent += loop.time() - started
        backoff = None
        if token is None:
            support.learn(epoch, True)
        yield page.keys
        if page.token is None:
            return
        token = page.token


async def keys_of(pages: AsyncGenerator[list[bytes], None]) -> AsyncIterator[bytes]:
    """The keys of ``pages`` one by one; closing this closes the pager."""
    async with contextlib.aclosing(pages):
        async for page in pages:
            for key in page:
                yield key
