"""Renew a key's expiry without changing its value: ``SET NEX`` of the stored bytes, undone by ``VDEL`` if need be.

Why that is safe: docs/design/namespaces.md, "The namespace store and its parts".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from .._namespace.store import NamespaceStore
from .._protocol.commands import SetCondition, VDeleteResult
from .._protocol.hlc import HybridLogicalClock
from .._protocol.notifications import KeyEvent, KeyOperation
from .._ttl import expire_now
from ..client._client import SetResult

__all__ = ["renew_expiry"]

log = logging.getLogger("sskv_mapping.cache")

T = TypeVar("T")
Fenced = Callable[[str, Callable[[HybridLogicalClock | None], Awaitable[T]]], Awaitable[T]]


async def renew_expiry(store: NamespaceStore[Any], key: str, seconds: float | None, fenced: Fenced[Any]) -> bool:
    """Restart ``key``'s expiry at ``seconds`` (``None``: never; ``<= 0``: delete it if unchanged).

    ``False`` if the key is absent or its value changed meanwhile (the newer value is left alone).
    ``fenced(key, op)`` runs a write, under the key's lock if the key is fenced.
    """
    data_key = store.data_key(key)

    async def vdel(raw: bytes) -> bool:
        async def op(token: HybridLogicalClock | None) -> VDeleteResult:
            return await store.delete_if(key, raw, fencing_token=token)

        return cast(VDeleteResult, await fenced(key, op)) is VDeleteResult.DELETED

    if expire_now(seconds):
        entry = await store.read(key, fresh=True)
        if entry.raw is None:
            return False
        return await vdel(entry.raw)

    events: list[KeyEvent] = []
    caught_up = asyncio.Event()
    ours: list[HybridLogicalClock] = []

    def on_event(event: KeyEvent) -> None:
        events.append(event)
        if ours and (event.synthetic or event.version is None or event.version >= ours[0]):
            caught_up.set()

    sub = await store.client.subscribe_key(data_key, on_event)
    try:
        entry = await store.read(key, fresh=True)
        if entry.raw is None:
            return False
        raw: bytes = entry.raw

        async def nex(token: HybridLogicalClock | None) -> SetResult:
            return await store.client.set(data_key, raw, condition=SetCondition.NEX, ttl=seconds, fencing_token=token)

        result = cast(SetResult, await fenced(key, nex))
        if store.cache is not None:
            store.cache.invalidate(data_key)  # the next read learns the new version (and expiry)
        if not result.applied:
            return False  # the value changed under us: leave the newer value alone
        timeout = store.client.timeout or 10.0
        if result.version is None or not await _caught_up(result.version, ours, events, caught_up, timeout):
            await vdel(raw)  # cannot tell whether we re-created a deleted key: take it back (a cache may)
            return False
        if _recreated(events, entry.version, result.version):
            await vdel(raw)
            return False
        return True
    finally:
        await sub.close()


async def _caught_up(
    version: HybridLogicalClock,
    ours: list[HybridLogicalClock],
    events: list[KeyEvent],
    evt: asyncio.Event,
    timeout: float,
) -> bool:
    """Wait for the notification of our own write (the writer is notified too), which comes after every
    notification of an earlier change of the key."""
    ours.append(version)
    if any(e.synthetic or e.version is None or e.version >= version for e in events):
        return True
    try:
        async with asyncio.timeout(timeout):
            await evt.wait()
    except TimeoutError:
        log.warning("no notification of our own renewal of a key arrived; undoing the renewal")
        return False
    return True


def _recreated(events: list[KeyEvent], read: HybridLogicalClock | None, written: HybridLogicalClock) -> bool:
    """Whether the last change between our read and our write was a DELETE (or cannot be known)."""
    between: list[KeyEvent] = []
    for e in events:
        if e.synthetic or e.version is None:
            return True  # a reconnect happened meanwhile: changes may have been lost
        if (read is None or e.version > read) and e.version < written:
            between.append(e)
    if not between:
        return False
    last = max(between, key=lambda e: cast(HybridLogicalClock, e.version))
    return last.op is KeyOperation.DELETE
