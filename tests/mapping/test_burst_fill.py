"""A dict whose small local cache is filled far past its watch limit by 64 concurrent writers, each reading back
what it wrote (a read watches the key; a write alone does not), on a mosquitto with its default queue limits: no
error and nothing dropped by the broker.

Before: crossing the watch limit (2 x local_cache_size) released every idle watch at once, a KEYNOTIFY STOP task
per watch; with the writers' own requests that burst overflowed the broker's per-session queue (1,000), requests
and replies were dropped, lock releases among them, and writers failed after their timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib

from sskv_mapping import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import AsyncStateStoreDict
from tests._support import watches_of
from tests._support.broker_stats import FAST_SYS, dropped_messages, log_reports_drops
from tests._support.procs import start_emulator

CACHE_SIZE = 500  # watch limit 1,000: each crossing releases about five hundred idle watches
KEYS = 1600
WRITERS = 64


async def test_64_writers_fill_a_small_cached_dict_past_its_watch_limit_with_nothing_dropped() -> None:
    with MosquittoBroker(extra_config=[FAST_SYS]) as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            async with AsyncStateStoreClient(broker.host, broker.port) as client:  # the default 10 s timeout
                d: AsyncStateStoreDict[int] = AsyncStateStoreDict(
                    client, namespace="burst", local_cache_size=CACHE_SIZE
                )
                await d.open()
                queue: asyncio.Queue[int] = asyncio.Queue()
                for i in range(KEYS):
                    queue.put_nowait(i)

                async def writer() -> None:
                    while not queue.empty():
                        i = queue.get_nowait()
                        await d.set(f"k{i}", i)
                        assert await d.get(f"k{i}") == i  # the read watches the key (a write alone does not)

                await asyncio.gather(*(writer() for _ in range(WRITERS)))  # any error fails the test
                store = d._store
                assert watches_of(store).released >= KEYS - 2 * CACHE_SIZE  # the limit was crossed, again and again
                assert len(await d.keys()) == KEYS
                await d.close()
            assert await dropped_messages(broker) == 0
            assert not log_reports_drops(broker)
        finally:
            with contextlib.suppress(Exception):
                emulator.stop()
