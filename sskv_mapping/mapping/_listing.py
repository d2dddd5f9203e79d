"""How a dict namespace lists its keys: by SCAN where the service answers it, else by its stored index.

Design: docs/design/namespaces.md, "Listing a dict namespace".
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Literal

from .._keys import escape_glob
from .._namespace.key_index import IndexEntry
from .._namespace.key_layout import KeyLayout
from .._protocol.notifications import KeyEvent
from ..client._client import AsyncStateStoreClient
from ..errors import ConfigurationError, UnsupportedCommandError
from ._index import StoredKeyIndex

__all__ = ["LISTING_MODES", "ListingMode", "NamespaceListing"]

log = logging.getLogger("sskv_mapping.index")

ListingMode = Literal["scan", "index", "auto"]
LISTING_MODES: tuple[str, ...] = ("scan", "index", "auto")


def check_listing(mode: object) -> ListingMode:
    if mode not in LISTING_MODES:
        raise ConfigurationError(f"listing must be one of {', '.join(LISTING_MODES)}, not {mode!r}")
    return mode  # type: ignore[return-value]


Listener = Callable[[Iterable[str] | None], None]


class _TellingIndex(StoredKeyIndex):
    """The stored index, telling its listeners of each notification: a shard's keys, or ``None`` when the shards in
    use change (a listing then loads the new ones)."""

    listeners: list[Listener]

    def _on_event(self, i: int, event: KeyEvent) -> None:
        super()._on_event(i, event)
        _tell(self.listeners, self._shards[i].entries)

    def _used_notified(self) -> None:
        _tell(self.listeners, None)


def _tell(listeners: list[Listener], keys: Iterable[str] | None) -> None:
    for listener in list(listeners):
        try:
            listener(keys)
        except Exception:
            log.exception("a listing listener failed")


class NamespaceListing:
    """The :class:`~sskv_mapping._namespace.key_index.KeyIndex` a dict uses: SCAN or the stored index, per ``mode``."""

    def __init__(
        self,
        client: AsyncStateStoreClient,
        keys: KeyLayout,
        data_key: Callable[[str], bytes],
        *,
        mode: ListingMode = "auto",
    ) -> None:
        self.client = client
        self.requested = check_listing(mode)
        self.stored = _TellingIndex(client, keys, data_key)
        #: told of keys about to be written here, and (index mode) of the index's notifications: see :meth:`listen`
        self.listeners: list[Listener] = []
        self.stored.listeners = self.listeners
        self._prefix = keys.data_prefix()
        self.pattern = escape_glob(self._prefix) + b"*"
        #: ``"scan"`` or ``"index"`` once started
        self.mode: Literal["scan", "index"] | None = None
        self._keep_index = False  # scan mode on a namespace that has a stored index: writes keep it current

    # -- what the index mode exposes (tests, benchmarks) ---------------------------------------------------

    @property
    def shards(self) -> int:
        return self.stored.shards

    def shard_key(self, i: int) -> bytes:
        return self.stored.shard_key(i)

    def watched_keys(self) -> set[bytes]:
        return self.stored.watched_keys() if self._indexed else set()

    @property
    def _indexed(self) -> bool:
        return self.mode == "index" or self._keep_index

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.mode is not None:
            return
        if self.requested == "index":
            await self._refuse_unindexed_keys()
            await self.stored.start()
            self.mode = "index"
            return
        if self.requested == "auto" and not await self._scan_answers():
            await self.stored.start()
            self.mode = "index"
            return
        if await self.client.get(self.stored.meta_key) is not None:
            await self.stored.start()  # an indexed namespace: keep its index current for its index readers
            self._keep_index = True
        self.mode = "scan"

    async def _refuse_unindexed_keys(self) -> None:
        """``listing="index"`` on a namespace that has keys but no stored index (written in SCAN mode): its index
        would list none of them, so ``len()`` would say 0 and ``clear()`` leave them. Refused (``ConfigurationError``,
        nothing written) where SCAN can tell; a namespace with an index, or none and no keys, opens as before."""
        if await self.client.get(self.stored.meta_key) is not None or not await self._scan_answers():
            return
        async for page in self.client.scan_pages(self.pattern):
            if page:
                name = self._prefix[:-1].decode("utf-8", "replace")
                raise ConfigurationError(
                    f"namespace {name!r} holds keys but no stored index (it was written with listing='scan'): "
                    "listing='index' would not see them (len() 0, clear() leaving them). Open it with "
                    "listing='scan' or 'auto' (docs/design/namespaces.md)"
                )

    async def _scan_answers(self) -> bool:
        known = self.client.supports_scan
        if known is not None:
            return known
        try:
            async for _ in self.client.scan_pages(self.pattern):
                break  # one page tells
        except UnsupportedCommandError:
            return False
        return True

    async def close(self) -> None:
        if self._indexed:
            await self.stored.close()
        self.mode = None
        self._keep_index = False

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Tell ``listener`` of the keys this process is about to write, and in index mode of the index's
        notifications (a shard's keys; ``None`` when the shards in use change); returns the function that stops it.
        In SCAN mode nothing tells of a key another process adds."""
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener) if listener in self.listeners else None

    # -- the KeyIndex API -----------------------------------------------------------------------------------

    async def _keys(self) -> AsyncIterator[str]:
        cut = len(self._prefix)
        async for key in self.client.scan(self.pattern):
            try:
                yield key[cut:].decode("utf-8")
            except UnicodeDecodeError:  # not written through a dict (whose keys are text): not one of its keys
                continue

    async def listing(self, *, refresh: bool = False) -> dict[str, IndexEntry]:
        await self.start()
        if self.mode == "index":
            return await self.stored.listing(refresh=refresh)
        listed = IndexEntry(0)
        return {key: listed async for key in self._keys()}

    async def add(self, keys: Iterable[tuple[str, int | None]]) -> None:
        if self.listeners:
            keys = list(keys)
            _tell(self.listeners, [k for k, _ in keys])
        await self.start()
        if self._indexed:
            await self.stored.add(keys)

    async def remove(self, keys: Iterable[str]) -> None:
        await self.start()
        if self._indexed:
            await self.stored.remove(keys)

    async def prune(self, missing: Iterable[str]) -> int:
        await self.start()
        return await self.stored.prune(missing) if self._indexed else 0

    async def candidate(self, skip: Iterable[str] = ()) -> str | None:
        await self.start()
        if self.mode == "index":
            return await self.stored.candidate(skip)
        skipped = set(skip)
        async for key in self._keys():  # the first page usually holds one
            if key not in skipped:
                return key
        return None
