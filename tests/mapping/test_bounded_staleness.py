"""A notification lost anyway (a reader's loop stalls, the broker's queue for it overflows and drops the rest)
leaves a cached value stale for at most ``max_staleness``: entries are served only within it of their last
confirmation, and re-read in the background before they age out.

Real processes: a private mosquitto with its default queue limits, the emulator, and a writer process.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time

from sskv_mapping import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import AsyncStateStoreDict
from tests._support import watches_of
from tests._support.broker_stats import FAST_SYS, dropped_messages
from tests._support.procs import start_emulator
from tests._support.waiting import eventually

KEYS = 1500  # more notifications than the broker queues for a stalled session (20 + 1,000)
MAX_STALENESS = 5.0

WRITER = """
import sys
from sskv_mapping.mapping import StateStoreDict
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with StateStoreDict.connect(f"mqtt://{host}:{port}", namespace="stale", local_cache_size=0) as d:
    d.update({f"k{i}": f"new-{i}" for i in range(n)})
"""


async def test_a_reader_whose_loop_stalled_serves_current_values_within_max_staleness() -> None:
    with MosquittoBroker(extra_config=[FAST_SYS]) as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            async with AsyncStateStoreClient(broker.host, broker.port, timeout=5) as client:
                d: AsyncStateStoreDict[str] = AsyncStateStoreDict(
                    client, namespace="stale", local_cache_size=KEYS + 100, max_staleness=MAX_STALENESS
                )
                await d.open()
                await d.update({f"k{i}": f"old-{i}" for i in range(KEYS)})
                hit = d._core.hit
                for i in range(KEYS):  # cached and watched, each confirmed by a read
                    await d.get(f"k{i}")

                # The fault: this loop is blocked (a synchronous call on it) while another process rewrites every
                # key. Its socket fills, the broker queues 20 + 1,000 notifications for it and drops the rest.
                subprocess.run(  # noqa: ASYNC221 - blocking this loop is the fault under test
                    [sys.executable, "-c", WRITER, broker.host, str(broker.port), str(KEYS)],
                    check=True,
                    timeout=120,
                )
                written = time.monotonic()
                await asyncio.sleep(0)  # the loop runs again: what the broker kept arrives

                def served_current() -> bool:
                    """Every key is served from the local cache, with its new value."""
                    return all((e := hit(f"k{i}")) is not None and e.value == f"new-{i}" for i in range(KEYS))

                def nothing_stale_served() -> bool:
                    return all((e := hit(f"k{i}")) is None or e.value == f"new-{i}" for i in range(KEYS))

                # Entries whose notification was lost stop being served once max_staleness has passed since their
                # last confirmation, and the background revalidation re-reads them: all served again, all new.
                # (A reply lost in the broker's overflowing queue times out after the client's 5 s and is retried
                # in the revalidator's next round, hence the generous deadline.)
                violations: list[float] = []

                def check() -> bool:
                    late = time.monotonic() - written
                    if late > MAX_STALENESS and not nothing_stale_served():
                        violations.append(late)  # a stale value served longer than max_staleness
                    return served_current()

                await eventually(check, timeout=MAX_STALENESS + 60, interval=0.05)
                waited = time.monotonic() - written
                assert violations == []
                assert nothing_stale_served()
                assert [await d.get(f"k{i}") for i in range(KEYS)] == [f"new-{i}" for i in range(KEYS)]
                assert watches_of(d._store).revalidations > 0
                print(f"every value served current {waited:.2f} s after the writer finished")
                await d.close()
            assert await dropped_messages(broker) > 0  # the fault happened: notifications were lost
        finally:
            with contextlib.suppress(Exception):
                emulator.stop()


async def test_the_background_revalidation_keeps_entries_served_past_max_staleness(
    broker_address: tuple[str, int],
) -> None:
    """Entries read once stay hits although each must be confirmed every second: re-read in the background
    before they age out, one re-read per entry per round, not a miss for the reader."""
    async with AsyncStateStoreClient(*broker_address) as client:
        d: AsyncStateStoreDict[int] = AsyncStateStoreDict(client, namespace="revalidate", max_staleness=1.0)
        await d.open()
        await d.update({f"k{i}": i for i in range(20)})
        for i in range(20):
            assert await d.get(f"k{i}") == i
        store = d._store
        await eventually(lambda: watches_of(store).revalidations >= 60, timeout=30)  # three rounds of 20, at least
        hit = d._core.hit
        # served from the cache, many max_staleness periods after they were read (no timing asserted: a shared
        # CPU may delay a round, and an entry is then a miss until its re-read lands)
        await eventually(lambda: all((e := hit(f"k{i}")) is not None and e.value == i for i in range(20)), timeout=30)
        await d.close()


async def test_many_readers_of_an_aged_or_uncached_key_make_one_read(broker_address: tuple[str, int]) -> None:
    """No stampede: concurrent misses of one key (never read, or past max_staleness) share one GET."""
    now = [1000.0]
    async with AsyncStateStoreClient(*broker_address) as client, AsyncStateStoreClient(*broker_address) as other:
        d: AsyncStateStoreDict[str] = AsyncStateStoreDict(
            client, namespace="stampede", max_staleness=1000, monotonic=lambda: now[0]
        )
        await d.open()
        await other.set(d._store.data_key("k"), b'"one"')
        before = client.requests_sent
        assert await asyncio.gather(*(d.get("k") for _ in range(50))) == ["one"] * 50
        assert client.requests_sent - before == 2  # its KEYNOTIFY and one GET
        now[0] += 1001  # the entry is past max_staleness: not served until re-read
        assert d._core.hit("k") is None
        await other.set(d._store.data_key("k"), b'"two"')  # (its notification may land first: either way, fresh)
        before = client.requests_sent
        assert await asyncio.gather(*(d.get("k") for _ in range(50))) == ["two"] * 50
        assert client.requests_sent - before <= 1  # one re-read at most (none if the notification confirmed it)
        await d.close()
