"""How the cache writes and deletes an entry, and the sweep that empties the generations a ``clear`` retired.

Design: docs/design/namespaces.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .._keys import escape_glob
from .._namespace.fanout import gather_bounded
from .._namespace.key_locks import KeyLocks
from .._namespace.store import Encoded, NamespaceStore
from .._protocol.commands import SetCondition, VDeleteResult
from .._protocol.hlc import HybridLogicalClock
from ..client._client import SetResult
from ..errors import ClientStateError, FencingTokenRequiredError, StateStoreError, UnsupportedCommandError
from ._generation import NamespaceGeneration, PersistentLedger, sweep_retired
from ._renewal import renew_expiry

__all__ = ["EntryWriter", "Sweeper"]

log = logging.getLogger("sskv_mapping.cache")

V = TypeVar("V")


class EntryWriter(Generic[V]):
    """The cache's SETs and DELs of one namespace; ``prefix_of(gen)`` is a generation's key prefix."""

    def __init__(
        self,
        store: NamespaceStore[V],
        ledger: PersistentLedger,
        locks: KeyLocks,
        prefix_of: Callable[[str], bytes],
    ) -> None:
        self._store = store
        self._ledger = ledger
        self._locks = locks
        self.prefix_of = prefix_of

    async def put(
        self,
        key: str,
        value: V | Encoded[V],
        seconds: float | None,
        token: HybridLogicalClock | None,
        condition: SetCondition | None = None,
    ) -> SetResult:
        """One SET; an entry without a TTL is listed in the generation's ledger first."""
        if seconds is not None:
            return await self._store.write(
                key, value, ttl=seconds, condition=condition, fencing_token=token, listed=False
            )
        if await self.scan_answers():
            # a sweep finds it by SCAN: one SET, no ledger (see _generation)
            generation = self._ledger.generation
            gen = await generation.ensure_current()
            prefix = self.prefix_of(gen)
            result = await self._store.write(
                key, value, ttl=None, condition=condition, fencing_token=token, listed=False, prefix=prefix
            )
            if result.applied and await generation.ensure_current() != gen:
                await self.delete(key, prefix)  # cleared meanwhile: its sweep may have missed this entry
            return result
        async with self._ledger.listing(key) as gen:
            return await self._store.write(
                key,
                value,
                ttl=None,
                condition=condition,
                fencing_token=token,
                listed=False,
                prefix=self.prefix_of(gen),
            )

    async def scan_answers(self) -> bool:
        """Does the service answer SCAN (asked once per connection, with one page of this namespace)?"""
        client = self._store.client
        known = client.supports_scan
        if known is not None:
            return known
        try:
            async for _ in client.scan_pages(escape_glob(self._store.prefix) + b"*"):
                break
        except UnsupportedCommandError:
            return False
        return True

    async def sweep_by_scan(self, gen: str) -> int:
        """Delete every entry of the retired generation ``gen`` that a SCAN of its prefix finds."""
        if not await self.scan_answers():
            return 0
        prefix = self.prefix_of(gen)
        found = [k[len(prefix) :] async for k in self._store.client.scan(escape_glob(prefix) + b"*")]
        keys: list[str] = []
        for raw in found:
            try:
                keys.append(raw.decode("utf-8"))
            except UnicodeDecodeError:  # not written by a cache (whose keys are text): deleted as it is
                await self._store.client.delete(prefix + raw)
        await gather_bounded((self.delete(k, prefix) for k in keys), 64)
        return len(keys)

    async def write(
        self, key: str, value: V | Encoded[V], seconds: float | None, *, condition: SetCondition | None = None
    ) -> SetResult:
        """A SET of the key, under its fencing token when the key is fenced."""

        async def op(token: HybridLogicalClock | None) -> SetResult:
            return await self.put(key, value, seconds, token, condition)

        if condition is SetCondition.NX:
            try:
                return await op(None)
            except FencingTokenRequiredError:  # only an existing key is fenced: NX would skip anyway
                return SetResult(False, None)
        return await self._locks.fenced(key, op)

    async def store_nx(self, key: str, value: V | Encoded[V], seconds: float | None) -> bool:
        return (await self.write(key, value, seconds, condition=SetCondition.NX)).applied

    async def fenced_write(
        self, key: str, value: V | Encoded[V], seconds: float | None, token: HybridLogicalClock
    ) -> None:
        await self.put(key, value, seconds, token)

    async def add_expired(self, key: str, value: V | Encoded[V], raw: bytes) -> bool:
        """``add`` with an expire-now TTL: whether the key was absent. The value is added with a short PX as a
        safety net, then deleted if it is still ours (Django's behaviour: nothing stays stored)."""
        added = (await self.write(key, value, 1.0, condition=SetCondition.NX)).applied
        if added:

            async def vdel(token: HybridLogicalClock | None) -> VDeleteResult:
                return await self._store.delete_if(key, raw, fencing_token=token)

            await self._locks.fenced(key, vdel)
        return added

    async def renew(self, key: str, seconds: float | None) -> bool:
        """Restart the key's expiry (see :func:`~sskv_mapping.cache._renewal.renew_expiry`); an entry that will have no
        TTL is listed in the ledger first, as every such write."""
        if seconds is None and not await self.scan_answers():
            async with self._ledger.listing(key):
                return await renew_expiry(self._store, key, seconds, self._locks.fenced)
        return await renew_expiry(self._store, key, seconds, self._locks.fenced)

    async def delete(self, key: str, prefix: bytes | None = None) -> bool:
        """DEL the data key (fenced if need be) and forget it locally."""
        data_key = self._store.data_key(key, prefix)

        async def op(token: HybridLogicalClock | None) -> bool:
            return await self._store.client.delete(data_key, fencing_token=token)

        try:
            return await self._locks.fenced(key, op)
        finally:
            if self._store.cache is not None:
                self._store.cache.invalidate(data_key)


class Sweeper:
    """Deletes the TTL-less entries the ledgers of retired generations list; one sweep at a time per cache."""

    def __init__(
        self, generation: NamespaceGeneration, ledger: PersistentLedger, writer: EntryWriter[Any], name: str
    ) -> None:
        self._generation = generation
        self._ledger = ledger
        self._writer = writer
        self._name = name
        self._task: asyncio.Task[int] | None = None

    def start(self) -> None:
        """Start a background sweep unless one runs (it sweeps every retired generation before it ends)."""
        if self._task is not None and not self._task.done():
            return
        task = asyncio.get_running_loop().create_task(self._sweep(), name=f"sskv-sweep-{self._name}")
        task.add_done_callback(_log_sweep_failure)
        self._task = task

    async def _delete(self, gen: str, key: str) -> bool:
        return await self._writer.delete(key, self._writer.prefix_of(gen))

    async def _sweep(self) -> int:
        total = 0
        while True:  # a clear during the sweep retires another generation: go round again
            state = self._generation.state
            if state is None or not state.retired:
                return total
            total += await sweep_retired(self._generation, self._ledger, self._delete, self._writer.sweep_by_scan)
            await self._generation.refresh()

    async def sweep(self) -> int:
        """Wait for a background sweep, then sweep whatever is still retired; how many entries were listed."""
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(StateStoreError):  # retried below
                await asyncio.shield(task)
        return await self._sweep()

    async def wait(self) -> None:
        """Let a sweep in progress end (a failure was logged; the next open of the namespace resumes it)."""
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(StateStoreError, asyncio.CancelledError):
                await task


def _log_sweep_failure(task: asyncio.Task[int]) -> None:
    exc = None if task.cancelled() else task.exception()
    if exc is not None:
        # the client closed under a sweep (a process that clears and exits): expected, and resumed at the next open
        level = logging.DEBUG if isinstance(exc, ClientStateError) else logging.WARNING
        log.log(level, "a background sweep failed (the next open or clear resumes it): %s", exc)
