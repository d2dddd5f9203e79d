"""Every wait ends: how a wait of the layers above ends when its client can no longer end it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from ..errors import ClientStateError, ConnectionLostError, StateStoreError
from ._keeper import ConnectionState

__all__ = ["closed_error", "unless_closed"]

T = TypeVar("T")


class Closable(Protocol):
    """What :func:`unless_closed` needs of a client (``AsyncStateStoreClient`` has it)."""

    @property
    def closed(self) -> asyncio.Event: ...

    @property
    def state(self) -> ConnectionState: ...

    def add_state_listener(self, listener: Callable[[ConnectionState], None]) -> Callable[[], None]: ...


def closed_error(what: str) -> ClientStateError:
    """The error a wait ends with when its client closed."""
    return ClientStateError(f"the client was closed while {what}")


def _ended(client: Closable, what: str) -> StateStoreError | None:
    if client.closed.is_set() or client.state is ConnectionState.CLOSED:
        return closed_error(what)
    if client.state is ConnectionState.DISCONNECTED:
        # after connect(), DISCONNECTED is final: the connection dropped and reconnect is off
        return ConnectionLostError(f"the connection was lost for good (reconnect is off) while {what}")
    return None


async def unless_closed(client: Closable, waited: Awaitable[T], what: str) -> T:
    """Await ``waited``; end at once if the client is (or becomes) closed -- :class:`ClientStateError` -- or
    disconnected for good -- :class:`ConnectionLostError`.

    ``waited`` is cancelled when the client ends it first (a future shared with others is the caller's to
    ``asyncio.shield``). ``what`` ends the message: "the client was closed while <what>".
    """
    ended = _ended(client, what)
    if ended is not None:
        if asyncio.iscoroutine(waited):
            waited.close()  # never started: no "never awaited" warning
        raise ended
    gone = asyncio.Event()
    remove = client.add_state_listener(
        lambda state: gone.set() if state in (ConnectionState.CLOSED, ConnectionState.DISCONNECTED) else None
    )
    work = asyncio.ensure_future(waited)
    watchers = [asyncio.ensure_future(client.closed.wait()), asyncio.ensure_future(gone.wait())]
    try:
        await asyncio.wait((work, *watchers), return_when=asyncio.FIRST_COMPLETED)
        finished = work.done()
    finally:
        remove()
        for watcher in watchers:
            watcher.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
    if finished:
        return work.result()  # its value, or its exception (CancelledError for a cancelled shared future)
    raise _ended(client, what) or closed_error(what)
