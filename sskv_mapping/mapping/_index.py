"""The dict's stored key index, in small shards: what makes ``len``, iteration and ``clear`` possible without SCAN.

Design: docs/design/namespaces.md, "The stored index, key by key".
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from .._namespace.fanout import SharedLoads, gather_bounded
from .._namespace.key_index import IndexEntry
from .._namespace.key_layout import KeyLayout
from .._namespace.key_locks import OwnedLock, drain_owned, owned_lock
from .._protocol.commands import SetCondition
from .._protocol.hlc import HybridLogicalClock, system_clock_ms
from .._protocol.notifications import KeyEvent, KeyOperation
from ..client._client import AsyncStateStoreClient, KeySubscription
from ..errors import ProtocolError
from ..lock import AsyncLeasedLock
from ._index_format import decode_shard as _decode
from ._index_format import decode_used as _decode_used
from ._index_format import encode_shard as _encode
from ._index_format import encode_used as _encode_used
from ._index_format import shard_of

__all__ = ["DEFAULT_SHARDS", "StoredKeyIndex"]

log = logging.getLogger("sskv_mapping.index")

#: Shards of a new namespace's index. At 100,000 keys a shard holds ~100 entries (~3 KB): what one insert
#: rewrites and one notification carries; a fresh listing of such a namespace reads 1,024 small keys. Only the
#: shards in use are read and watched, so a small namespace costs a few. The count is stored with the namespace
#: (its meta key): the shards of an existing namespace are what it says.
DEFAULT_SHARDS = 1024
_FORMAT_VERSION = 2
_FAN_OUT = 64


@dataclass
class _Shard:
    entries: dict[str, IndexEntry] = field(default_factory=dict)
    version: HybridLogicalClock | None = None
    sub: KeySubscription | None = None
    loaded: bool = False
    # One rewrite at a time per shard and process: the leased lock's holder value is ours for every task here,
    # so it cannot tell our own tasks apart. Waiting tasks' keys ride along in the next batch.
    mutex: asyncio.Lock = field(default_factory=asyncio.Lock)
    # the shard lock's tenure in which ``entries`` was last read or written under the lock: while the lock has been
    # ours since, nobody else wrote the shard, and a rewrite needs no read first
    synced_tenure: int = -1
    pending_add: dict[str, IndexEntry] = field(default_factory=dict)
    pending_remove: set[str] = field(default_factory=set)

    def adopt(self, entries: dict[str, IndexEntry], version: HybridLogicalClock | None) -> None:
        # versions come from one service clock: an older copy (a late notification) never wins
        if version is not None and self.version is not None and version < self.version:
            return
        self.entries = entries
        if version is not None:
            self.version = version


def _same_kind(a: int | None, b: int | None) -> bool:
    return (a is None) == (b is None)


class _Locking(NamedTuple):
    """How an index takes its shard locks: ``lease`` (s), ``keep`` (s: a lock kept after a write, so that the next
    write into the shard -- a loop of inserts, popitem after popitem -- is one SET; short, because another process
    wanting the shard waits it out) and ``timeout`` (s to wait for one; ``None``: for ever)."""

    lease: float
    keep: float
    timeout: float | None


_LOCKING = _Locking(lease=5.0, keep=0.02, timeout=30.0)
#: How old (ms) an entry whose data is missing must be before a reader unlists it: an insert lists the key first.
_GRACE_MS = 60_000


class _UsedShards:
    """Which shards of an index hold (or held) entries: ``ns#index-used``, watched once needed and written under its
    own lock, once per new shard, so that a listing of a small namespace reads a few shards, not all of them."""

    def __init__(
        self, client: AsyncStateStoreClient, keys: KeyLayout, locking: _Locking, notified: Callable[[], None]
    ) -> None:
        self.client = client
        self._notified = notified  # called after a notification changed what is known
        self.key = keys.index_used()
        self._lock_key = keys.index_used_lock()
        self._locking = locking
        self.shard = _Shard()  # its entries: str(shard number) -> IndexEntry(0)
        self.numbers: set[int] = set()  # the same, as shard numbers
        self._pending: set[int] = set()
        self._mutex = asyncio.Lock()

    def _on_event(self, event: KeyEvent) -> None:
        try:
            used = {} if event.op is KeyOperation.DELETE else _decode_used(event.value)
        except ProtocolError as exc:
            log.warning("ignoring a malformed used-shards notification: %s", exc)
            return
        self._adopt(used, event.version)
        self._notified()

    def _adopt(self, used: dict[str, IndexEntry], version: HybridLogicalClock | None) -> None:
        self.shard.adopt(used, version)
        self.numbers = {int(k) for k in self.shard.entries}

    async def _refresh(self) -> None:
        entry = await self.client.get(self.key)
        self._adopt(_decode_used(entry.value if entry else None), entry.version if entry else None)

    async def load(self, *, refresh: bool = False) -> set[int]:
        """The shard numbers in use (watched, and read once, or again with ``refresh``)."""
        shard = self.shard
        if shard.loaded and not refresh:
            return self.numbers
        if shard.sub is None:
            shard.sub = await self.client.subscribe_key(self.key, self._on_event)
        await self._refresh()
        shard.loaded = True
        return self.numbers

    async def mark(self, shards: Iterable[int]) -> None:
        """List ``shards`` (before anything is added to them), once per namespace. Shards asked for by tasks waiting
        here ride along in the next write."""
        await self.load()
        new = set(shards) - self.numbers
        if not new:
            return
        self._pending |= new
        async with self._mutex:
            if not new - self.numbers:
                return  # an earlier batch carried them
            batch, self._pending = self._pending, set()
            locking = self._locking
            used_lock = owned_lock(self.client, self._lock_key, lease=locking.lease, keep=locking.keep)
            try:
                async with used_lock.hold(locking.timeout) as lock:
                    await self._refresh()
                    merged = dict(self.shard.entries)
                    merged.update({str(i): IndexEntry(0) for i in batch})
                    if merged != self.shard.entries:
                        result = await lock.set(self.key, _encode_used(merged))
                        self._adopt(merged, result.version)
            except BaseException:
                self._pending |= batch - self.numbers
                raise


class StoredKeyIndex:
    """A namespace's key index, kept in the store in shards (docs/design/namespaces.md, "The stored index, key by
    key")."""

    def __init__(
        self,
        client: AsyncStateStoreClient,
        keys: KeyLayout,
        data_key: Callable[[str], bytes],
    ) -> None:
        self.client = client
        self._keys = keys
        self._data_key = data_key
        self.shards = 0  # known once started: what the namespace's meta key says
        self.meta_key = keys.index_meta()
        self._locking = _LOCKING
        self._shards: list[_Shard] = []
        self._loading: SharedLoads[int] = SharedLoads()  # shards being watched and read for the first time
        self._started = False
        self._start_lock = asyncio.Lock()
        # which shards hold (or held) entries, so that a listing of a small namespace reads a few shards, not S
        self._used = _UsedShards(client, keys, self._locking, self._used_notified)

    # -- keys -------------------------------------------------------------------------------------------

    def shard_key(self, i: int) -> bytes:
        return self._keys.index_shard(i)

    def _lock(self, i: int) -> OwnedLock:
        locking = self._locking
        return owned_lock(self.client, self._keys.index_shard_lock(i), lease=locking.lease, keep=locking.keep)

    # -- lifecycle --------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            shards = await self._read_meta()
            if shards is None:
                shards = await self._create()
            self.shards = shards
            self._shards = [_Shard() for _ in range(shards)]
            self._started = True

    async def _read_meta(self) -> int | None:
        meta = await self.client.get(self.meta_key)
        if meta is None:
            return None
        try:
            data = json.loads(meta.value)
            shards = data["shards"] if isinstance(data, dict) and data.get("version") == _FORMAT_VERSION else None
        except (UnicodeDecodeError, ValueError):
            shards = None
        if not isinstance(shards, int) or not 1 <= shards <= 0xFFFF:
            raise ProtocolError(f"the index meta key of {self._keys.namespace!r} is not {{'version': 2, 'shards': n}}")
        return shards

    async def _create(self) -> int:
        """Write the meta key unless another process did first (SET NX); returns the agreed shard count."""
        meta = json.dumps({"version": _FORMAT_VERSION, "shards": DEFAULT_SHARDS}).encode()
        await self.client.set(self.meta_key, meta, condition=SetCondition.NX)
        return (await self._read_meta()) or DEFAULT_SHARDS

    async def close(self) -> None:
        # shard locks kept, and releases still under way
        names = {self._keys.index_shard_lock(i) for i in range(self.shards)}
        await drain_owned(self.client, names | {self._keys.index_used_lock()})
        subs = [s.sub for s in [*self._shards, self._used.shard] if s.sub is not None]
        for shard in [*self._shards, self._used.shard]:
            shard.sub = None
            shard.loaded = False
        for sub in subs:
            await sub.close()
        self._started = False

    def watched_keys(self) -> set[bytes]:
        """The index keys this process watches (the shards it has needed so far, and the used-shards key)."""
        keys = {self.shard_key(i) for i, s in enumerate(self._shards) if s.sub is not None}
        return keys | ({self._used.key} if self._used.shard.sub is not None else set())

    # -- shards -----------------------------------------------------------------------------------------

    async def _get(self, i: int) -> bytes | None:
        entry = await self.client.get(self.shard_key(i))
        return None if entry is None else entry.value

    def _on_event(self, i: int, event: KeyEvent) -> None:
        try:
            entries = {} if event.op is KeyOperation.DELETE else _decode(event.value)
        except ProtocolError as exc:
            log.warning("ignoring a malformed index shard notification: %s", exc)
            return
        self._shards[i].adopt(entries, event.version)

    async def _load(self, i: int) -> _Shard:
        """Watch shard ``i`` and read it once (watch first, then read: a change between is reported)."""
        await self.start()
        shard = self._shards[i]
        if not shard.loaded:
            await self._loading.run(i, self._load_shard)
        return shard

    async def _load_shard(self, i: int) -> None:
        await self._watch(i)
        await self._refresh_shard(i)
        self._shards[i].loaded = True

    def _used_notified(self) -> None:
        """The shards in use changed, told by a notification (a subclass's hook)."""

    async def _load_used(self, *, refresh: bool = False) -> set[int]:
        return {i for i in await self._used.load(refresh=refresh) if i < self.shards}

    async def _mark_used(self, shards: Iterable[int]) -> None:
        await self._used.mark(shards)

    async def _refresh_shard(self, i: int) -> dict[str, IndexEntry]:
        entry = await self.client.get(self.shard_key(i))
        entries = _decode(entry.value if entry else None)
        self._shards[i].adopt(entries, entry.version if entry else None)
        return entries

    @contextlib.asynccontextmanager
    async def _locked(self, i: int) -> AsyncIterator[AsyncLeasedLock]:
        async with self._lock(i).hold(self._locking.timeout) as lock:
            yield lock

    async def _watch(self, i: int) -> None:
        shard = self._shards[i]
        if shard.sub is None:
            sub = await self.client.subscribe_key(self.shard_key(i), functools.partial(self._on_event, i))
            if shard.sub is None:
                shard.sub = sub
            else:
                await sub.close()

    async def _rewrite(self, i: int, change: Callable[[dict[str, IndexEntry]], bool]) -> None:
        """Read-modify-write shard ``i`` under its lock, the write fenced by the lock's token.

        The read is skipped when the lock stayed ours since our last read or write of the shard (kept between
        writes): nobody else can have written it. A shard not watched yet is watched meanwhile (the KEYNOTIFY
        runs beside the lock's SET NEX), and the read under the lock loads it."""
        shard = self._shards[i]
        owned = self._lock(i)
        watching = None if shard.sub is not None else asyncio.ensure_future(self._watch(i))
        try:
            async with owned.hold(self._locking.timeout) as lock:
                if watching is not None:
                    await watching
                try:
                    if shard.synced_tenure == owned.tenure and shard.loaded:
                        current = dict(shard.entries)
                    else:
                        current = dict(await self._refresh_shard(i))
                        shard.loaded = shard.loaded or shard.sub is not None
                    if change(current):
                        # an empty shard is written as ``{}``, not deleted: every state of it has a version
                        result = await lock.set(self.shard_key(i), _encode(current))
                        shard.adopt(current, result.version)
                    shard.synced_tenure = owned.tenure
                except BaseException:
                    shard.synced_tenure = -1
                    raise
        finally:
            if watching is not None and not watching.done():
                watching.cancel()
                with contextlib.suppress(BaseException):
                    await watching

    # -- the KeyIndex API -------------------------------------------------------------------------------

    async def listing(self, *, refresh: bool = False) -> dict[str, IndexEntry]:
        await self.start()
        used = await self._load_used(refresh=refresh)
        if refresh:  # loaded shards are read again; the others are loaded (watched, then read) for the first time
            await gather_bounded(
                (self._refresh_shard(i) if self._shards[i].loaded else self._load(i) for i in used), _FAN_OUT
            )
        else:
            await gather_bounded((self._load(i) for i in used if not self._shards[i].loaded), _FAN_OUT)
        merged: dict[str, IndexEntry] = {}
        for shard in self._shards:
            merged.update(shard.entries)
        return merged

    async def add(self, keys: Iterable[tuple[str, int | None]]) -> None:
        await self.start()
        now = system_clock_ms()
        by_shard: dict[int, list[tuple[str, int | None]]] = {}
        for key, expires in keys:
            by_shard.setdefault(shard_of(key, self.shards), []).append((key, expires))
        await self._mark_used(by_shard)  # one write for the batch, before any entry exists (usually a no-op)
        await gather_bounded((self._add_to(i, items, now) for i, items in by_shard.items()), _FAN_OUT)

    async def _add_to(self, i: int, items: list[tuple[str, int | None]], now: int) -> None:
        shard = self._shards[i]

        def needed(key: str, expires: int | None) -> bool:
            if not shard.loaded:
                return True  # not known here yet: the read under the lock decides
            listed = shard.entries.get(key)
            return listed is None or not _same_kind(listed.expires_ms, expires)

        new = [(k, e) for k, e in items if needed(k, e)]
        if not new:
            return
        await self._mark_used([i])  # before the entry exists: a listing that can see it reads this shard
        for k, e in new:
            shard.pending_remove.discard(k)
            listed = shard.entries.get(k)
            shard.pending_add[k] = IndexEntry(listed.added_ms if listed else now, e)
        # Group commit: the keys of every task that queued on the mutex meanwhile ride in one rewrite.
        async with shard.mutex:
            if not any(k in shard.pending_add for k, _ in new):
                return  # an earlier batch wrote them (a failed batch puts its keys back)
            batch, shard.pending_add = shard.pending_add, {}

            def change(entries: dict[str, IndexEntry]) -> bool:
                changed = False
                for k, e in batch.items():
                    listed = entries.get(k)
                    if listed is None or not _same_kind(listed.expires_ms, e.expires_ms):
                        entries[k] = IndexEntry(listed.added_ms if listed else e.added_ms, e.expires_ms)
                        changed = True
                return changed

            try:
                await self._rewrite(i, change)
            except BaseException:
                for k, listed in batch.items():  # let a later call retry them
                    shard.pending_add.setdefault(k, listed)
                raise

    async def candidate(self, skip: Iterable[str] = ()) -> str | None:
        """A listed key not in ``skip`` -- the newest of one shard -- from what this process knows already
        (the shards it watches), loading one more shard only when those hold none; ``None`` only once every
        shard in use was read again and holds nothing else (the namespace is empty). What ``popitem`` pops:
        its cost does not grow with the namespace."""
        await self.start()
        skipped = set(skip)

        def newest(i: int) -> str | None:
            entries = self._shards[i].entries
            keys = [k for k in entries if k not in skipped] if skipped else list(entries)
            return max(keys, key=lambda k: (entries[k].added_ms, k)) if keys else None

        for refresh in (False, True):
            used = sorted(await self._load_used(refresh=refresh), reverse=True)
            for i in used:  # known first: no round trip
                if self._shards[i].loaded and (key := newest(i)) is not None:
                    return key
            for i in used:  # then one shard at a time, read (and watched) now
                shard = self._shards[i]
                if not shard.loaded or refresh:
                    if shard.loaded:
                        await self._refresh_shard(i)
                    else:
                        await self._load(i)
                    if (key := newest(i)) is not None:
                        return key
        return None

    async def remove(self, keys: Iterable[str]) -> None:
        await self.start()
        by_shard: dict[int, list[str]] = {}
        for key in keys:
            by_shard.setdefault(shard_of(key, self.shards), []).append(key)
        await gather_bounded((self._remove_from(i, ks) for i, ks in by_shard.items()), _FAN_OUT)

    async def _remove_from(self, i: int, keys: list[str]) -> None:
        shard = self._shards[i] if self._shards[i].loaded else await self._load(i)
        gone = [k for k in keys if k in shard.entries or k in shard.pending_add]
        if not gone:
            return
        for k in gone:
            shard.pending_add.pop(k, None)
            shard.pending_remove.add(k)
        async with shard.mutex:
            if not any(k in shard.entries for k in gone):
                return
            batch, shard.pending_remove = shard.pending_remove, set()

            def change(entries: dict[str, IndexEntry]) -> bool:
                present = [k for k in batch if k in entries]
                for k in present:
                    del entries[k]
                return bool(present)

            try:
                await self._rewrite(i, change)
            except BaseException:
                shard.pending_remove |= batch
                raise

    async def prune(self, missing: Iterable[str]) -> int:
        """Unlist entries whose data was seen missing, if they are older than the grace period or expired.

        Each candidate is checked again under its shard's lock (an insert may have completed meanwhile).
        """
        await self.start()
        now = system_clock_ms()
        cutoff = now - _GRACE_MS
        by_shard: dict[int, list[str]] = {}
        for key in missing:
            by_shard.setdefault(shard_of(key, self.shards), []).append(key)

        def stale(entry: IndexEntry | None) -> bool:
            return entry is not None and (
                entry.added_ms <= cutoff or (entry.expires_ms is not None and entry.expires_ms <= now)
            )

        async def one(i: int, candidates: list[str]) -> int:
            if not any(stale(self._shards[i].entries.get(k)) for k in candidates):
                return 0
            removed: list[str] = []
            async with self._shards[i].mutex, self._locked(i) as lock:
                self._shards[i].synced_tenure = -1  # the next rewrite reads the shard again
                current = dict(await self._refresh_shard(i))
                checks = [k for k in candidates if stale(current.get(k))]
                found = await gather_bounded((self.client.get(self._data_key(k)) for k in checks), _FAN_OUT)
                for key, entry in zip(checks, found, strict=True):
                    if entry is None:
                        del current[key]
                        removed.append(key)
                if removed:
                    result = await lock.set(self.shard_key(i), _encode(current))
                    self._shards[i].adopt(current, result.version)
            return len(removed)

        counts = await gather_bounded((one(i, ks) for i, ks in by_shard.items()), _FAN_OUT)
        return sum(counts)
