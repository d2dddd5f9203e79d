"""Namespace generations (``clear`` in O(1)) and the ledger of the entries without a TTL a clear must delete.

Design: docs/design/namespaces.md, "Generations and the ledger, key by key".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import secrets
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from .._namespace.fanout import gather_bounded
from .._namespace.key_layout import KeyLayout
from .._namespace.key_locks import OwnedLock, owned_lock
from .._protocol.hlc import HybridLogicalClock
from .._protocol.notifications import KeyEvent, KeyOperation
from ..client._client import AsyncStateStoreClient, KeySubscription
from ..client._in_flight import background, foreground
from ..errors import ProtocolError, StateStoreError
from ..lock import AsyncLeasedLock

__all__ = ["LEDGER_SHARDS", "GenerationState", "NamespaceGeneration", "PersistentLedger"]

log = logging.getLogger("sskv_mapping.cache")

#: Shards of a generation's ledger of TTL-less entries (a sweep reads all of them under their locks).
LEDGER_SHARDS = 16


# Every NamespaceGeneration of a client, by namespace: a clear in this process reaches the other caches of the
# same namespace on the same client at once, not one notification later.
_peers: weakref.WeakKeyDictionary[AsyncStateStoreClient, dict[str, weakref.WeakSet[NamespaceGeneration]]] = (
    weakref.WeakKeyDictionary()
)


def new_generation() -> str:
    return secrets.token_hex(6)


@dataclass(frozen=True, slots=True)
class GenerationState:
    """The value of ``ns#gen``: the current generation and those retired but not yet swept."""

    gen: str
    retired: tuple[str, ...] = ()

    def encode(self) -> bytes:
        return json.dumps({"gen": self.gen, "retired": list(self.retired)}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> GenerationState:
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError(f"the namespace generation key is not valid JSON: {exc}") from exc
        gen = data.get("gen") if isinstance(data, dict) else None
        retired = data.get("retired", []) if isinstance(data, dict) else None
        if (
            not isinstance(gen, str)
            or not _is_gen(gen)
            or not isinstance(retired, list)
            or not all(isinstance(g, str) and _is_gen(g) for g in retired)
        ):
            raise ProtocolError("the namespace generation key is not {'gen': str, 'retired': [str]}")
        return cls(gen, tuple(retired))


def _is_gen(text: str) -> bool:
    return 0 < len(text) <= 32 and all(c in "0123456789abcdef" for c in text)


class NamespaceGeneration:
    """The current generation of one namespace, kept current by KEYNOTIFY.

    Args:
        client: the namespace's client.
        namespace: the encoded namespace (``ns``).
        on_change: called (on the loop) with the new generation whenever it changes, before any operation
            can use it.
    """

    def __init__(
        self,
        client: AsyncStateStoreClient,
        keys: KeyLayout,
        *,
        on_change: Callable[[str], None],
        lease: float = 10.0,
        lock_timeout: float | None = 30.0,
    ) -> None:
        self.client = client
        self.key = keys.generation()
        self._lock_key = keys.generation_lock()
        self._on_change = on_change
        self._lease = lease
        self._lock_timeout = lock_timeout
        self.state: GenerationState | None = None
        self._version: HybridLogicalClock | None = None
        self._sub: KeySubscription | None = None
        self._namespace = keys.namespace
        _peers.setdefault(client, {}).setdefault(keys.namespace, weakref.WeakSet()).add(self)

    @property
    def current(self) -> str | None:
        return None if self.state is None else self.state.gen

    def adopt(self, state: GenerationState | None, version: HybridLogicalClock | None) -> None:
        """Take ``state`` (read or written at ``version``) as the current one: a peer on this client wrote it, or
        it was read. Versions come from one service clock: an older copy (a late notification) never wins."""
        if version is not None and self._version is not None and version < self._version:
            return
        old = self.current
        self.state = state
        if version is not None:
            self._version = version
        if state is not None and state.gen != old:
            self._on_change(state.gen)

    def _on_event(self, event: KeyEvent) -> None:
        if event.op is KeyOperation.DELETE or event.value is None:
            # someone deleted the generation key: nothing is known until it is read (and re-created) again
            self.state = None
            self._version = event.version
            return
        try:
            state = GenerationState.decode(event.value)
        except ProtocolError as exc:
            log.warning("ignoring a malformed generation notification: %s", exc)
            return
        self.adopt(state, event.version)

    async def start(self) -> GenerationState:
        if self._sub is None:
            # watch first, then read: a change between the two is reported by the watch
            self._sub = await self.client.subscribe_key(self.key, self._on_event)
        return await self.refresh()

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.close()

    async def refresh(self) -> GenerationState:
        """Read ``ns#gen`` now (creating it if absent) and adopt it."""
        entry = await self.client.get(self.key)
        if entry is not None:
            state = GenerationState.decode(entry.value)
            self.adopt(state, entry.version)
            return state
        return await self._change(lambda state: state or GenerationState(new_generation()))

    def live(self) -> bool:
        """Whether the watched copy may be used now without a round trip (its watch is live)."""
        sub = self._sub
        return sub is not None and sub.active and self.state is not None

    async def ensure_current(self) -> str:
        """The generation to use now: the watched copy while its watch is live, else read from the store."""
        sub = self._sub
        state = self.state
        if sub is not None and sub.active and state is not None:
            return state.gen
        return (await self.refresh()).gen

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[AsyncLeasedLock]:
        # held as this process's lock: re-taken at once after a reconnect, never waited out (see _key_locks).
        # Never as background work, even for a sweep's swept(): a clear() waiting for this lock would wait behind
        # the background share (bench_scale: clear() 2-4 ms -> 12 ms when the sweep's lock yielded).
        with foreground():
            async with owned_lock(self.client, self._lock_key, lease=self._lease).hold(self._lock_timeout) as lock:
                yield lock

    async def _change(self, change: Callable[[GenerationState | None], GenerationState]) -> GenerationState:
        async with self._locked() as lock:
            entry = await self.client.get(self.key)
            before = None if entry is None else GenerationState.decode(entry.value)
            after = change(before)
            if after == before:
                self.adopt(after, entry.version if entry else None)
                return after
            result = await lock.set(self.key, after.encode())
            for peer in list(_peers.get(self.client, {}).get(self._namespace, ())):
                peer.adopt(after, result.version)
            return after

    async def bump(self) -> GenerationState:
        """Replace the generation (the old one is retired, for a sweep to empty); returns the new state."""

        def change(state: GenerationState | None) -> GenerationState:
            if state is None:
                return GenerationState(new_generation())
            return GenerationState(new_generation(), (*state.retired, state.gen))

        return await self._change(change)

    async def swept(self, gen: str) -> None:
        """Drop ``gen`` from the retired list (its sweep is done)."""

        def change(state: GenerationState | None) -> GenerationState:
            if state is None:
                return GenerationState(new_generation())
            return GenerationState(state.gen, tuple(g for g in state.retired if g != gen))

        await self._change(change)


def _shard_of(key: str) -> int:
    return hashlib.blake2b(key.encode("utf-8"), digest_size=2).digest()[0] % LEDGER_SHARDS


class PersistentLedger:
    """Per generation, the keys that were written without a TTL (so that a sweep can delete them)."""

    def __init__(
        self,
        client: AsyncStateStoreClient,
        keys: KeyLayout,
        generation: NamespaceGeneration,
        *,
        lease: float = 10.0,
        lock_timeout: float | None = 30.0,
    ) -> None:
        self.client = client
        self._keys = keys
        self._generation = generation
        self._lease = lease
        self._lock_timeout = lock_timeout

    @property
    def generation(self) -> NamespaceGeneration:
        return self._generation

    def _shard_key(self, gen: str, shard: int) -> bytes:
        return self._keys.ledger_shard(gen, shard)

    def _lock(self, gen: str, shard: int) -> OwnedLock:
        # this process's lock: after a reconnect a writer re-takes what it held at once (SET NEX with its own
        # holder value), instead of waiting out the lease of a lock its own process held
        return owned_lock(self.client, self._keys.ledger_lock(gen, shard), lease=self._lease)

    async def _read(self, gen: str, shard: int) -> list[str]:
        entry = await self.client.get(self._shard_key(gen, shard))
        if entry is None:
            return []
        try:
            keys = json.loads(entry.value)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError(f"a ledger shard is not valid JSON: {exc}") from exc
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ProtocolError("a ledger shard is not a JSON list of keys")
        return keys

    @contextlib.asynccontextmanager
    async def listing(self, key: str) -> AsyncIterator[str]:
        """List ``key`` in the current generation's ledger and hold its shard while the caller writes the entry
        in the generation yielded (which is current: docs/design/namespaces.md, "Generations and the ledger, key
        by key")."""
        shard = _shard_of(key)
        while True:
            gen = await self._generation.ensure_current()
            async with self._lock(gen, shard).hold(self._lock_timeout) as lock:
                if (await self._generation.refresh()).gen != gen:
                    continue  # cleared meanwhile: list it in the new generation instead
                keys = await self._read(gen, shard)
                if key not in keys:
                    keys.append(key)
                    await lock.set(self._shard_key(gen, shard), json.dumps(keys, ensure_ascii=False).encode())
                yield gen
                return

    async def sweep(self, gen: str, delete: Callable[[str], Coroutine[Any, Any, object]]) -> int:
        """Delete every entry the ledger of the retired generation ``gen`` lists (``delete(key)``), then the
        ledger itself; returns how many keys it listed."""

        async def one(shard: int) -> int:
            with foreground():  # a held lock's requests and lease renewals are never background work
                async with self._lock(gen, shard).hold(self._lock_timeout):
                    keys = await self._read(gen, shard)
            # nothing can be added to this shard now: every writer re-reads the generation under the lock
            await gather_bounded((delete(k) for k in keys), 64)
            if keys:
                with foreground():
                    async with self._lock(gen, shard).hold(self._lock_timeout) as lock:
                        await lock.delete(self._shard_key(gen, shard))
            return len(keys)

        counts = await gather_bounded((one(s) for s in range(LEDGER_SHARDS)), LEDGER_SHARDS)
        return sum(counts)


async def sweep_retired(
    generation: NamespaceGeneration,
    ledger: PersistentLedger,
    delete: Callable[[str, str], Coroutine[Any, Any, object]],
    scan: Callable[[str], Coroutine[Any, Any, int]] | None = None,
) -> int:
    """Sweep every retired generation of ``generation.state`` (``delete(gen, key)`` deletes one entry); ``scan(gen)``,
    where the service answers SCAN, deletes the entries written without a ledger (found by their key prefix).
    Its requests are background work: they yield to the client's calls (``client/_in_flight.py``)."""
    state = generation.state
    total = 0
    with background():
        for gen in state.retired if state is not None else ():

            async def delete_in(key: str, gen: str = gen) -> object:
                return await delete(gen, key)

            try:
                total += await ledger.sweep(gen, delete_in)
                if scan is not None:
                    total += await scan(gen)
                await generation.swept(gen)
            except StateStoreError as exc:
                log.warning("could not sweep the retired generation %s (the next open or clear resumes): %s", gen, exc)
                raise
    return total
