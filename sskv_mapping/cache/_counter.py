"""``incr``/``decr``: read-modify-write of a number under the key's leased lock, the write fenced."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .._namespace.key_locks import KeyLocks
from .._namespace.store import NamespaceStore
from .._protocol.hlc import HybridLogicalClock
from .._ttl import expire_now
from ..local_cache import ABSENT

__all__ = ["increment"]

#: ``write(key, value, seconds, token)``: store a value fenced with ``token``.
FencedWrite = Callable[[str, Any, "float | None", HybridLogicalClock], Awaitable[object]]


async def increment(
    store: NamespaceStore[Any], locks: KeyLocks, key: str, delta: int, seconds: float | None, write: FencedWrite
) -> int | float:
    """Add ``delta`` to the number stored at ``key``; the new value.

    ``ValueError`` if the key is absent (Django's rule), ``TypeError`` if its value is not a number. The store
    cannot report a key's remaining TTL, so the expiry restarts at ``seconds`` (an expire-now ``seconds``
    deletes the key).
    """
    async with locks.hold(key) as lock:
        entry = await store.read(key, fresh=True)
        if entry.value is ABSENT:
            raise ValueError(f"Key {key!r} not found")
        current: object = entry.value
        if isinstance(current, bool) or not isinstance(current, int | float):
            raise TypeError(f"the value of {key!r} is a {type(current).__name__}, not a number")
        new = current + delta
        if expire_now(seconds):  # a default_ttl of 0: nothing stays cached
            await store.delete(key, fencing_token=lock.fencing_token)
        else:
            await write(key, new, seconds, lock.fencing_token)
    return new
