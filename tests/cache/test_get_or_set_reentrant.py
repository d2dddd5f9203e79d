"""A ``get_or_set`` whose builder asks for its own key (issue 27, point 2) raises ``ReentrantCallError`` instead of
waiting for itself forever -- in the same task (async) or the same thread (blocking); other callers still wait
for the one computation as before, and a builder may read other keys.

Each runs on the loopback store and on a real mosquitto + the emulator process (the cache conftest).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sskv_mapping.cache import AsyncStateStoreCache, StateStoreCache
from sskv_mapping.errors import ClientStateError, ReentrantCallError

CacheFactory = Callable[..., Awaitable[AsyncStateStoreCache[Any]]]
SyncCacheFactory = Callable[..., StateStoreCache[Any]]

DEADLINE = 30.0  # the old behaviour hung forever: a deadline turns a hang into a failure


async def test_an_async_builder_asking_for_its_own_key_gets_a_clear_error(make_cache: CacheFactory) -> None:
    cache = await make_cache()
    seen: list[BaseException] = []

    async def build() -> str:
        try:
            await cache.get_or_set("report", lambda: "inner")
        except ReentrantCallError as exc:
            seen.append(exc)
            raise
        return "outer"

    async with asyncio.timeout(DEADLINE):
        with pytest.raises(ReentrantCallError, match="report"):
            await cache.get_or_set("report", build)
    assert len(seen) == 1 and isinstance(seen[0], ClientStateError)
    assert await cache.get("report") is None  # nothing stored
    # the key is usable afterwards: the failed flight and its lock are gone
    async with asyncio.timeout(DEADLINE):
        assert await cache.get_or_set("report", lambda: "fine") == "fine"


async def test_an_async_builder_may_read_other_keys_through_get_or_set(make_cache: CacheFactory) -> None:
    cache = await make_cache()

    async def build_total() -> int:
        return int(await cache.get_or_set("part", lambda: 20)) + 1

    async with asyncio.timeout(DEADLINE):
        assert await cache.get_or_set("total", build_total) == 21
    assert await cache.get("part") == 20


def test_a_blocking_builder_asking_for_its_own_key_gets_a_clear_error(make_sync_cache: SyncCacheFactory) -> None:
    cache = make_sync_cache()
    outcome: list[BaseException | str] = []

    def build() -> str:
        return str(cache.get_or_set("report", lambda: "inner"))

    def run() -> None:
        try:
            outcome.append(cache.get_or_set("report", build))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)  # a hang must not hang the test run
    worker.start()
    worker.join(DEADLINE)
    assert not worker.is_alive(), "get_or_set from its own builder still waits"
    assert len(outcome) == 1 and isinstance(outcome[0], ReentrantCallError), outcome
    assert cache.get("report") is None
    assert cache.get_or_set("report", lambda: "fine") == "fine"


def test_another_thread_still_waits_for_the_one_computation(make_sync_cache: SyncCacheFactory) -> None:
    """Not every second call of a key is re-entrant: another thread's call waits and gets the builder's value."""
    cache = make_sync_cache()
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []
    results: list[Any] = []

    def build() -> str:
        calls.append("built")
        started.set()
        assert release.wait(DEADLINE)
        return "value"

    first = threading.Thread(target=lambda: results.append(cache.get_or_set("k", build)), daemon=True)
    first.start()
    assert started.wait(DEADLINE)
    second = threading.Thread(target=lambda: results.append(cache.get_or_set("k", build)), daemon=True)
    second.start()
    release.set()
    first.join(DEADLINE)
    second.join(DEADLINE)
    assert results == ["value", "value"] and calls == ["built"]
