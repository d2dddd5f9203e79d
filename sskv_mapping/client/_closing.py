"""Every wait ends: the one way a wait of the layers above (a lock's, an election's, ``get_or_set``'s, a watch's)
ends when its client closes.

A wait for a notification (an ``asyncio.Event`` that only KEYNOTIFY sets, a flight another caller settles) would
wait forever once the client is closed: nothing will ever set it. :func:`unless_closed` races the wait against the
client's ``closed`` event and raises :class:`ClientStateError` as soon as the client closes -- whatever timeout the
wait had, so a closed client never reads as "timed out".

Must not import aiomqtt/paho, nor the layers above the client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from ..errors import ClientStateError

__all__ = ["closed_error", "unless_closed"]

T = TypeVar("T")


def closed_error(what: str) -> ClientStateError:
    """The error a wait ends with when its client closed."""
    return ClientStateError(f"the client was closed while {what}")


async def unless_closed(closed: asyncio.Event, waited: Awaitable[T], what: str) -> T:
    """Await ``waited``; :class:`ClientStateError` at once if ``closed`` is (or becomes) set first.

    ``waited`` is cancelled when the client closes first (a future shared with others is the caller's to
    ``asyncio.shield``). ``what`` ends the message: "the client was closed while <what>".
    """
    if closed.is_set():
        if asyncio.iscoroutine(waited):
            waited.close()  # never started: no "never awaited" warning
        raise closed_error(what)
    work = asyncio.ensure_future(waited)
    closing = asyncio.ensure_future(closed.wait())
    try:
        await asyncio.wait((work, closing), return_when=asyncio.FIRST_COMPLETED)
        finished = work.done()
    finally:
        closing.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
    if finished:
        return work.result()  # its value, or its exception (CancelledError for a cancelled shared future)
    raise closed_error(what)
