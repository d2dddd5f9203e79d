"""A client belongs to the event loop it connected on: a call from another loop fails at once, ``close()`` works.

Its replies are delivered on that loop only; docs/reliability.md ("Which event loop") says what to do instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from ..errors import ClientStateError

__all__ = ["close_from_elsewhere", "not_home"]


def not_home(client_id: str, home: asyncio.AbstractEventLoop | None) -> ClientStateError | None:
    """Why a request on the running loop, which is not ``home`` (where the client connected), cannot be sent;
    ``None`` when the client has no home yet (not connected: the request path says so itself)."""
    if home is None:
        return None
    where = (
        "an earlier event loop, now closed (an earlier asyncio.run()?)"
        if home.is_closed()
        else ("another event loop (another thread's?)")
    )
    return ClientStateError(
        f"this AsyncStateStoreClient ({client_id}) connected on {where}, and its replies arrive only there: create "
        "the client in the event loop that uses it (one per loop or thread), or use the blocking StateStoreClient, "
        "which any thread may call"
    )


async def close_from_elsewhere(
    home: asyncio.AbstractEventLoop, close: Callable[[], Coroutine[Any, Any, None]], abandon: Callable[[], None]
) -> None:
    """``close()`` called on another loop than ``home``: run there while it runs; when it is gone (closed or
    stopped), ``abandon()`` gives up the connection without a word (nothing can write on a dead loop)."""
    if home.is_running() and not home.is_closed():
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: abandon below
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(close(), home))
            return
    abandon()
