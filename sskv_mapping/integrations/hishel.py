"""hishel 2 storages on the state store: one HTTP response cache shared by every process and worker.

Layout, TTL/TTI and what is simplified: docs/integrations/hishel.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

from ._common import import_extra

import_extra("hishel", "hishel", "hishel")

from hishel import AsyncBaseStorage, BaseStorage, Entry, Headers, Request, Response  # noqa: E402

from .._blocking import get_loop_thread  # noqa: E402
from .._namespace.key_layout import KeyLayout  # noqa: E402
from ..client import AsyncStateStoreClient, StateStoreClient  # noqa: E402
from ..errors import ConfigurationError, StateStoreError  # noqa: E402

__all__ = ["AsyncStateStoreStorage", "StateStoreStorage"]

log = logging.getLogger("sskv_mapping.integrations.hishel")

#: bytes of body per stored chunk (well under the store's value limit)
CHUNK_SIZE = 64 * 1024
#: how long an entry's keys outlive its expiry, so that a reader already streaming it can finish (seconds)
GRACE = 60.0


def _headers(headers: Headers) -> dict[str, list[str]]:
    return {name: headers.get_list(name) or [] for name in headers}


def _meta(
    request: Request, response: Response, key: str, ttl_deadline: float | None, tti: float | None
) -> dict[str, Any]:
    return {
        "request": {"method": request.method, "url": request.url, "headers": _headers(request.headers)},
        "response": {"status_code": response.status_code, "headers": _headers(response.headers)},
        "key": key,
        "chunks": 0,
        "ttl_deadline": ttl_deadline,
        "tti": tti,
        "expires_at": None,
        "touched_at": None,
    }


def _entry(id_: uuid.UUID, meta: dict[str, Any], stream: Any) -> Entry:
    req, resp = meta["request"], meta["response"]
    return Entry(
        id=id_,
        request=Request(method=req["method"], url=req["url"], headers=Headers(req["headers"])),
        response=Response(status_code=resp["status_code"], headers=Headers(resp["headers"]), stream=stream),
    )


class _Core:
    """What both storages do, on an :class:`AsyncStateStoreClient` (run on the loop the client lives on)."""

    def __init__(
        self,
        client: AsyncStateStoreClient,
        namespace: str,
        storage: AsyncBaseStorage | BaseStorage,
        chunk_size: int,
        clock: Callable[[], float],
    ) -> None:
        keys = KeyLayout(namespace)
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ConfigurationError(f"chunk_size must be an int >= 1, not {chunk_size!r}")
        self.client = client
        self.ns = namespace
        self.keys = keys
        self.storage = storage  # its default_ttl, default_tti, max_stream_size
        self.chunk_size = chunk_size
        self.clock = clock

    def limits(self, ttl: float | None, tti: float | None) -> tuple[float | None, float | None]:
        """The TTL deadline and the TTI of an entry created now (hishel's defaults apply)."""
        ttl = ttl if ttl is not None else self.storage.default_ttl
        tti = tti if tti is not None else self.storage.default_tti
        return (None if ttl is None else self.clock() + ttl), tti

    def too_big(self, size: int) -> bool:
        limit = self.storage.max_stream_size
        return limit is not None and size > limit

    async def flush(self, buffer: bytearray, id_: uuid.UUID, meta: dict[str, Any], *, final: bool) -> bool:
        """Store the buffer's whole chunks (and the rest when ``final``); whether caching goes on."""
        try:
            while len(buffer) >= self.chunk_size or (final and buffer):
                await self.write_chunk(id_, meta["chunks"], bytes(buffer[: self.chunk_size]), meta)
                del buffer[: self.chunk_size]
                meta["chunks"] += 1
        except StateStoreError as exc:
            log.warning("hishel: stopped caching a response, the store failed: %s", exc)
            buffer.clear()
            return False
        return True

    # keys: the cache key's index (the newest entry's id), an entry's metadata, its body chunks
    def idx(self, key: str) -> bytes:
        return self.keys.hishel_index(hashlib.sha256(key.encode("utf-8")).hexdigest())

    def meta_key(self, id_: uuid.UUID) -> bytes:
        return self.keys.hishel_meta(id_.hex)

    def chunk_key(self, id_: uuid.UUID, n: int) -> bytes:
        return self.keys.hishel_chunk(id_.hex, n)

    def px(self, expires_at: float | None, now: float) -> timedelta | None:
        return None if expires_at is None else timedelta(seconds=max(expires_at - now, 0) + GRACE)

    def first_expiry(self, ttl_deadline: float | None, tti: float | None, now: float) -> float | None:
        """When an entry returned (or stored) at ``now`` expires: the earlier of its TTL and its TTI."""
        limits = [t for t in (ttl_deadline, None if tti is None else now + tti) if t is not None]
        return min(limits, default=None)

    async def write_chunk(self, id_: uuid.UUID, n: int, data: bytes, meta: dict[str, Any]) -> None:
        now = self.clock()
        await self.client.set(
            self.chunk_key(id_, n), data, ttl=self.px(self.first_expiry(meta["ttl_deadline"], meta["tti"], now), now)
        )

    async def publish(self, id_: uuid.UUID, meta: dict[str, Any]) -> None:
        now = self.clock()
        meta["expires_at"] = self.first_expiry(meta["ttl_deadline"], meta["tti"], now)
        meta["touched_at"] = now
        px = self.px(meta["expires_at"], now)
        await self.client.set(self.meta_key(id_), json.dumps(meta).encode(), ttl=px)
        await self.client.set(self.idx(meta["key"]), id_.hex.encode(), ttl=px)  # visible from now on

    async def discard(self, id_: uuid.UUID, chunks: int) -> None:
        for n in range(chunks):
            await self.client.delete(self.chunk_key(id_, n))
        await self.client.delete(self.meta_key(id_))

    async def read_meta(self, id_: uuid.UUID) -> dict[str, Any] | None:
        got = await self.client.get(self.meta_key(id_))
        return None if got is None else dict(json.loads(got.value))

    async def lookup(self, key: str) -> tuple[uuid.UUID, dict[str, Any]] | None:
        got = await self.client.get(self.idx(key))
        if got is None:
            return None
        id_ = uuid.UUID(hex=got.value.decode())
        meta = await self.read_meta(id_)
        now = self.clock()
        if meta is None or (meta["expires_at"] is not None and meta["expires_at"] <= now):
            return None
        tti = meta["tti"]
        if tti is not None and now - meta["touched_at"] >= tti / 2:
            await self.touch(id_, meta, now)  # TTI restarts; batched to every half TTI, as hishel allows
        return id_, meta

    async def touch(self, id_: uuid.UUID, meta: dict[str, Any], now: float) -> None:
        meta["expires_at"] = self.first_expiry(meta["ttl_deadline"], meta["tti"], now)
        meta["touched_at"] = now
        px = self.px(meta["expires_at"], now)
        # the store has no EXPIRE: each key is written again with the new expiry (chunks first: never outlived)
        for n in range(meta["chunks"]):
            chunk = await self.client.get(self.chunk_key(id_, n))
            if chunk is not None:
                await self.client.set(self.chunk_key(id_, n), chunk.value, ttl=px)
        await self.client.set(self.meta_key(id_), json.dumps(meta).encode(), ttl=px)
        await self.client.set(self.idx(meta["key"]), id_.hex.encode(), ttl=px)

    async def chunk(self, id_: uuid.UUID, n: int) -> bytes:
        got = await self.client.get(self.chunk_key(id_, n))
        if got is None:
            raise RuntimeError(f"the cached body of {id_} lost chunk {n} while it was read (expired or removed)")
        return got.value

    async def update_headers(self, id_: uuid.UUID, headers: Headers) -> None:
        meta = await self.read_meta(id_)
        if meta is None:
            return
        meta["response"]["headers"] = _headers(headers)
        now = self.clock()
        await self.client.set(self.meta_key(id_), json.dumps(meta).encode(), ttl=self.px(meta["expires_at"], now))

    async def remove(self, id_: uuid.UUID) -> None:
        meta = await self.read_meta(id_)
        if meta is None:
            return
        await self.client.vdelete(self.idx(meta["key"]), id_.hex.encode())  # only if it still names this entry
        await self.discard(id_, meta["chunks"])


class AsyncStateStoreStorage(AsyncBaseStorage):
    """hishel's :class:`~hishel.AsyncBaseStorage` on the state store (for ``AsyncCacheClient`` and
    ``hishel.asgi.ASGICacheMiddleware``): entries with their TTL and TTI, bodies stored in chunks of
    ``chunk_size`` bytes; a storage error is logged and never raised into the request.

    Args:
        client: a connected :class:`~sskv_mapping.AsyncStateStoreClient`, used on the loop it lives on.
        namespace: the state store namespace of the entries (``"hishel"``).
        default_ttl, default_tti, max_stream_size: hishel's (3600 s, none, 10 MiB).
        chunk_size: bytes of body per stored value (64 KiB).
        clock: the wall clock (seconds since the epoch) of the expiries.
    """

    def __init__(
        self,
        client: AsyncStateStoreClient,
        *,
        namespace: str = "hishel",
        default_ttl: float | None = 3600,
        default_tti: float | None = None,
        max_stream_size: int | None = 10 * 1024 * 1024,
        chunk_size: int = CHUNK_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(default_ttl=default_ttl, default_tti=default_tti, max_stream_size=max_stream_size)
        self._core = _Core(client, namespace, self, chunk_size, clock)

    async def create_entry(
        self, request: Request, response: Response, key: str, *, ttl: float | None = None, tti: float | None = None
    ) -> Entry:
        """The entry, whose stream stores the body as it is read; it is found once the body is complete."""
        body = _aiter_of(b"") if response.stream is None else response.stream
        if not isinstance(body, AsyncIterator):
            raise TypeError("AsyncStateStoreStorage needs an async response stream")
        id_ = uuid.uuid4()
        meta = _meta(request, response, key, *self._core.limits(ttl, tti))
        return Entry(id=id_, request=request, response=replace(response, stream=self._save(body, id_, meta)))

    async def _save(self, body: AsyncIterator[bytes], id_: uuid.UUID, meta: dict[str, Any]) -> AsyncIterator[bytes]:
        core, size, saving, done = self._core, 0, True, False
        buffer = bytearray()
        try:
            async for piece in body:
                if saving:
                    size += len(piece)
                    if core.too_big(size):
                        saving = False  # too big to cache: the consumer still gets all of it
                    else:
                        buffer += piece
                        saving = await core.flush(buffer, id_, meta, final=False)
                yield piece
            if saving and await core.flush(buffer, id_, meta, final=True):
                await core.publish(id_, meta)
                done = True
        except StateStoreError as exc:
            log.warning("hishel: the response is served uncached, the store failed: %s", exc)
        finally:
            if not done:
                try:
                    await core.discard(id_, meta["chunks"])
                except StateStoreError as exc:
                    log.warning("hishel: an unfinished entry is left to expire: %s", exc)

    async def get_entries(self, key: str) -> list[Entry]:
        """The newest complete, unexpired entry of ``key`` (or none); a store failure is a miss, logged."""
        try:
            found = await self._core.lookup(key)
        except (StateStoreError, ValueError, KeyError) as exc:
            log.warning("hishel: the cache could not be read, a miss: %s", exc)
            return []
        if found is None:
            return []
        id_, meta = found
        return [_entry(id_, meta, self._stream(id_, meta["chunks"]))]

    async def _stream(self, id_: uuid.UUID, chunks: int) -> AsyncIterator[bytes]:
        for n in range(chunks):
            yield await self._core.chunk(id_, n)

    async def update_headers(self, id: uuid.UUID, headers: Headers) -> None:
        """Replace the stored response headers (nothing if the entry is gone; a store failure is logged)."""
        try:
            await self._core.update_headers(id, headers)
        except (StateStoreError, ValueError) as exc:
            log.warning("hishel: headers not updated: %s", exc)

    async def remove_entry(self, id: uuid.UUID) -> None:
        """Remove the entry (nothing if it is gone; a store failure is logged)."""
        try:
            await self._core.remove(id)
        except (StateStoreError, ValueError) as exc:
            log.warning("hishel: entry not removed: %s", exc)


async def _aiter_of(data: bytes) -> AsyncIterator[bytes]:
    if data:
        yield data


class StateStoreStorage(BaseStorage):
    """hishel's :class:`~hishel.BaseStorage` (for the sync ``CacheClient``): :class:`AsyncStateStoreStorage`'s
    behaviour, on a :class:`~sskv_mapping.StateStoreClient` (run on the library's loop thread). Its arguments
    are those of :class:`AsyncStateStoreStorage`, with a blocking client."""

    def __init__(
        self,
        client: StateStoreClient,
        *,
        namespace: str = "hishel",
        default_ttl: float | None = 3600,
        default_tti: float | None = None,
        max_stream_size: int | None = 10 * 1024 * 1024,
        chunk_size: int = CHUNK_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(default_ttl=default_ttl, default_tti=default_tti, max_stream_size=max_stream_size)
        self._async = AsyncStateStoreStorage(
            client.async_client,
            namespace=namespace,
            default_ttl=default_ttl,
            default_tti=default_tti,
            max_stream_size=max_stream_size,
            chunk_size=chunk_size,
            clock=clock,
        )
        self._core = _Core(client.async_client, namespace, self, chunk_size, clock)

    def create_entry(
        self, request: Request, response: Response, key: str, *, ttl: float | None = None, tti: float | None = None
    ) -> Entry:
        """Like :meth:`AsyncStateStoreStorage.create_entry`, with a sync stream (read in the caller's thread)."""
        body = iter(()) if response.stream is None else response.stream
        if not isinstance(body, Iterator):
            raise TypeError("StateStoreStorage needs a sync response stream")
        id_ = uuid.uuid4()
        meta = _meta(request, response, key, *self._core.limits(ttl, tti))
        return Entry(id=id_, request=request, response=replace(response, stream=self._save(body, id_, meta)))

    def _save(self, body: Iterator[bytes], id_: uuid.UUID, meta: dict[str, Any]) -> Iterator[bytes]:
        run, core = get_loop_thread().run, self._core
        done, size, saving = False, 0, True
        buffer = bytearray()
        try:
            for piece in body:
                if saving:
                    size += len(piece)
                    if core.too_big(size):
                        saving = False
                    else:
                        buffer += piece
                        saving = run(core.flush(buffer, id_, meta, final=False))
                yield piece
            if saving and run(core.flush(buffer, id_, meta, final=True)):
                run(core.publish(id_, meta))
                done = True
        except StateStoreError as exc:
            log.warning("hishel: the response is served uncached, the store failed: %s", exc)
        finally:
            if not done:
                try:
                    run(core.discard(id_, meta["chunks"]))
                except StateStoreError as exc:
                    log.warning("hishel: an unfinished entry is left to expire: %s", exc)

    def get_entries(self, key: str) -> list[Entry]:
        """Like :meth:`AsyncStateStoreStorage.get_entries`, with a sync stream."""
        found = get_loop_thread().run(self._async.get_entries(key))
        return [replace(e, response=replace(e.response, stream=self._stream(e.id, e))) for e in found]

    def _stream(self, id_: uuid.UUID, entry: Entry) -> Iterator[bytes]:
        stream = entry.response.stream
        assert stream is not None and hasattr(stream, "__anext__")
        run = get_loop_thread().run

        async def next_chunk() -> bytes | None:
            try:
                return await stream.__anext__()
            except StopAsyncIteration:
                return None

        while (chunk := run(next_chunk())) is not None:
            yield chunk

    def update_headers(self, id: uuid.UUID, headers: Headers) -> None:
        """Like :meth:`AsyncStateStoreStorage.update_headers`."""
        get_loop_thread().run(self._async.update_headers(id, headers))

    def remove_entry(self, id: uuid.UUID) -> None:
        """Like :meth:`AsyncStateStoreStorage.remove_entry`."""
        get_loop_thread().run(self._async.remove_entry(id))
