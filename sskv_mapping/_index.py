"""Layer 4: the namespace key index that makes ``len``, iteration and ``clear`` possible.

The state store has no key listing (SCAN is coming, protocol.md §8). A namespace therefore keeps an index
of its keys *in the store itself*: one key holding a JSON object ``{key: added_at_ms}``, rewritten under a
leased lock (fenced with the lock's token, so a writer that lost its lease cannot clobber the index), and
watched with KEYNOTIFY so every reader's copy follows the index as others change it (a SET notification
carries the whole new value).

Invariants the mapping keeps with it:

* insert: add to the index first, then write the data key — a crash in between leaves an index entry
  without data, which readers filter out, never data that iteration cannot find;
* delete: delete the data key first, then remove it from the index;
* dangling entries (expired keys, crashed inserts) are filtered at read time, and removed by
  :meth:`StoredKeyIndex.prune` only when older than ``grace_ms`` (so an insert still between its two steps is
  never pruned).

:class:`KeyIndex` is the seam where SCAN can replace the stored index once the real service answers it.

Must not import aiomqtt/paho, the emulator, or the mapping/cache modules.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from ._protocol.errors import ProtocolError
from ._protocol.hlc import HybridLogicalClock
from ._protocol.notifications import KeyEvent, KeyOperation
from .client import AsyncStateStoreClient, KeySubscription
from .lock import AsyncLeasedLock

__all__ = ["KeyIndex", "StoredKeyIndex"]

log = logging.getLogger("sskv_mapping.index")


class KeyIndex(Protocol):
    """What the mapping needs from a key listing. ``StoredKeyIndex`` today; a SCAN-backed one later."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def snapshot(self) -> dict[str, int]:
        """The locally known keys (kept current by notifications) -> when each was added (ms)."""
        ...

    async def refresh(self) -> dict[str, int]:
        """Read the index from the store now."""
        ...

    async def add(self, keys: Iterable[str]) -> None: ...

    async def remove(self, keys: Iterable[str]) -> None: ...

    async def prune(self, missing: Iterable[str]) -> int: ...


def _decode(raw: bytes | None) -> dict[str, int]:
    if raw is None or raw == b"":
        return {}
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"the namespace index is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, int) for v in data.values()):
        raise ProtocolError("the namespace index is not a JSON object of key -> int")
    return data


def _encode(index: dict[str, int]) -> bytes:
    return json.dumps(index, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


class StoredKeyIndex:
    """A namespace's key index kept in the store under ``index_key``, guarded by ``lock_key``."""

    def __init__(
        self,
        client: AsyncStateStoreClient,
        index_key: bytes,
        lock_key: bytes,
        data_key: Callable[[str], bytes],
        *,
        lease: float = 5.0,
        grace_ms: int = 60_000,
        lock_timeout: float | None = 30.0,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.client = client
        self.index_key = index_key
        self._data_key = data_key
        self._lock = AsyncLeasedLock(client, lock_key, lease=lease)
        self._grace_ms = grace_ms
        self._lock_timeout = lock_timeout
        self._now_ms = now_ms
        self._local: dict[str, int] = {}
        self._version: HybridLogicalClock | None = None
        self._sub: KeySubscription | None = None
        self._started = False
        # One rewrite at a time per process: the leased lock's holder value is ours for every task here,
        # so it cannot tell our own tasks apart. Waiting tasks' keys ride along in the next batch.
        self._mutex = asyncio.Lock()
        self._pending_add: dict[str, int] = {}
        self._pending_remove: set[str] = set()

    def _adopt(self, index: dict[str, int], version: HybridLogicalClock | None) -> None:
        # versions come from one service clock: an older copy (a late notification) never wins
        if version is not None and self._version is not None and version < self._version:
            return
        self._local = index
        if version is not None:
            self._version = version

    def _on_event(self, event: KeyEvent) -> None:
        try:
            index = {} if event.op is KeyOperation.DELETE else _decode(event.value)
        except ProtocolError as exc:
            log.warning("ignoring a malformed index notification: %s", exc)
            return
        self._adopt(index, event.version)

    async def start(self) -> None:
        if self._started:
            return
        # watch first, then read: a change between the two is reported by the watch
        self._sub = await self.client.subscribe_key(self.index_key, self._on_event)
        await self.refresh()
        self._started = True

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.close()
        self._started = False

    def snapshot(self) -> dict[str, int]:
        return dict(self._local)

    async def refresh(self) -> dict[str, int]:
        entry = await self.client.get(self.index_key)
        index = _decode(entry.value if entry else None)
        self._adopt(index, entry.version if entry else None)
        return index

    async def _rewrite(self, change: Callable[[dict[str, int]], bool]) -> None:
        """Read-modify-write the index under the lock, the write fenced by the lock's token."""
        await self._lock.acquire(timeout=self._lock_timeout)
        try:
            current = await self.refresh()
            if change(current):
                await self._write(current)
        finally:
            await self._lock.release()

    async def _write(self, index: dict[str, int]) -> None:
        # an empty index is written as ``{}``, not deleted: every state of the index has a version
        result = await self._lock.set(self.index_key, _encode(index))
        self._adopt(index, result.version)

    async def add(self, keys: Iterable[str]) -> None:
        """Make sure ``keys`` are listed; returns once the index in the store has them."""
        new = [k for k in keys if k not in self._local]
        if not new:
            return
        now = self._now_ms()
        for k in new:
            self._pending_remove.discard(k)
            self._pending_add.setdefault(k, now)
        async with self._mutex:
            if all(k in self._local for k in new):
                return  # an earlier batch carried them
            batch, self._pending_add = self._pending_add, {}

            def change(index: dict[str, int]) -> bool:
                missing = {k: t for k, t in batch.items() if k not in index}
                index.update(missing)
                return bool(missing)

            try:
                await self._rewrite(change)
            except BaseException:
                for k, t in batch.items():  # let a later call retry them
                    self._pending_add.setdefault(k, t)
                raise

    async def remove(self, keys: Iterable[str]) -> None:
        """Make sure ``keys`` are no longer listed."""
        gone = [k for k in keys if k in self._local or k in self._pending_add]
        if not gone:
            return
        for k in gone:
            self._pending_add.pop(k, None)
            self._pending_remove.add(k)
        async with self._mutex:
            if not any(k in self._local for k in gone):
                return
            batch, self._pending_remove = self._pending_remove, set()

            def change(index: dict[str, int]) -> bool:
                present = [k for k in batch if k in index]
                for k in present:
                    del index[k]
                return bool(present)

            try:
                await self._rewrite(change)
            except BaseException:
                self._pending_remove |= batch
                raise

    async def prune(self, missing: Iterable[str]) -> int:
        """Remove entries whose data was seen missing, if they are older than the grace period.

        Each candidate is checked again under the lock (an insert may have completed meanwhile).
        """
        cutoff = self._now_ms() - self._grace_ms
        candidates = [k for k in missing if self._local.get(k, cutoff + 1) <= cutoff]
        if not candidates:
            return 0
        async with self._mutex:
            return await self._prune_locked(candidates, cutoff)

    async def _prune_locked(self, candidates: list[str], cutoff: int) -> int:
        removed: list[str] = []

        async def still_missing(key: str) -> bool:
            return await self.client.get(self._data_key(key)) is None

        await self._lock.acquire(timeout=self._lock_timeout)
        try:
            current = await self.refresh()
            checks = await asyncio.gather(*(still_missing(k) for k in candidates if k in current))
            for key, gone in zip([k for k in candidates if k in current], checks, strict=True):
                if gone and current.get(key, cutoff + 1) <= cutoff:
                    del current[key]
                    removed.append(key)
            if removed:
                await self._write(current)
        finally:
            await self._lock.release()
        return len(removed)
